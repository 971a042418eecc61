"""A Hugging Face transformers model on ss.attention_inputs of packed rows: what keeps documents apart.

A tiny randomly initialized Llama (no download). With ``use_cache=False`` and no
``attention_mask``, "sdpa" and "eager" find the documents from ``position_ids`` (B, L) or
flattened (1, B*L); an attention function that reads ``cu_seq_lens_q`` / ``max_length_q`` (the
flash path's arguments) gets them; ss.segment_mask as a 4-D mask works for "sdpa" only. With the
default ``use_cache=True`` a cache is made, packing is not detected and documents attend across
each other. transformers' own flash-attention path (its mask and its choice of kernel, with the
two FlashAttention kernels emulated on CPU) takes the cu_seq_lens in either shape, cache or not.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest

import slipstream as ss

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
F = torch.nn.functional

LENGTH = 12
DOC_LENGTHS = [12, 5, 3, 7, 2, 4, 6, 1, 9]  # the first fills a row: the next row starts with the same segment id


def varlen_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """What flash_attn_varlen_func computes, written with SDPA per segment: (B, H, L, D) in, (B, L, H, D) out."""
    cu, longest = kwargs["cu_seq_lens_q"], kwargs["max_length_q"]
    assert kwargs["cu_seq_lens_k"] is cu and cu.dtype == torch.int32 and isinstance(longest, int)
    b, h, l, d = query.shape
    groups = h // key.shape[1]
    q, k, v = (t.transpose(1, 2).reshape(b * l, t.shape[1], d) for t in (query, key, value))
    k, v = k.repeat_interleave(groups, 1), v.repeat_interleave(groups, 1)
    bounds = cu.tolist()
    assert max(np.diff(bounds)) == longest
    pieces = [F.scaled_dot_product_attention(q[s:e].transpose(0, 1), k[s:e].transpose(0, 1), v[s:e].transpose(0, 1),
                                             is_causal=True, scale=scaling).transpose(0, 1) for s, e in itertools.pairwise(bounds)]
    return torch.cat(pieces).reshape(b, l, h, d), None


transformers.AttentionInterface.register("slipstream_test_varlen", varlen_attention)


def model(attn: str):
    config = transformers.LlamaConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                                      intermediate_size=64, vocab_size=100, max_position_embeddings=64, attn_implementation=attn)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).eval()


def packed():
    """Documents first-fit into rows of LENGTH (ss.pack's item format), and where each one went."""
    rng = np.random.default_rng(0)
    docs = [rng.integers(1, 100, n) for n in DOC_LENGTHS]
    tokens, seg = np.zeros((0, LENGTH), np.int32), np.zeros((0, LENGTH), np.int32)
    where, fill = [], []
    for doc in docs:
        row = next((r for r, used in enumerate(fill) if used + len(doc) <= LENGTH), None)
        if row is None:
            row = len(fill)
            fill.append(0)
            tokens, seg = np.vstack([tokens, np.zeros(LENGTH, np.int32)]), np.vstack([seg, np.zeros(LENGTH, np.int32)])
        at = fill[row]
        tokens[row, at:at + len(doc)], seg[row, at:at + len(doc)] = doc, seg[row].max() + 1
        where.append((row, at))
        fill[row] += len(doc)
    assert (seg == 0).any() and len(fill) > 1
    return docs, {"tokens": torch.from_numpy(tokens), "segment_ids": torch.from_numpy(seg)}, where


def alone(m, docs):
    with torch.no_grad():
        return [m(input_ids=torch.from_numpy(d)[None]).logits[0] for d in docs]


def largest_error(logits, refs, where):
    """The largest difference between a document's logits in the packed rows and alone."""
    logits = logits.reshape(-1, LENGTH, logits.shape[-1])
    return max(float((logits[r, a:a + len(ref)] - ref).abs().max()) for (r, a), ref in zip(where, refs))


@pytest.mark.parametrize("attn", ["sdpa", "eager", "slipstream_test_varlen"])
@pytest.mark.parametrize("flatten", [False, True])
def test_packed_rows_give_each_document_its_unpacked_logits_and_loss(attn, flatten):
    docs, batch, where = packed()
    reference = model("sdpa")
    refs = alone(reference, docs)
    m = model(attn)
    m.load_state_dict(reference.state_dict())
    inputs = ss.attention_inputs(batch, flatten=flatten)
    with torch.no_grad():
        out = m(**inputs, use_cache=False)
        assert largest_error(out.logits, refs, where) < 1e-5
        scored = sum(len(d) - 1 for d in docs)
        expected = sum(F.cross_entropy(ref[:-1], torch.from_numpy(d[1:]), reduction="sum") for d, ref in zip(docs, refs)) / scored
        torch.testing.assert_close(out.loss, expected, rtol=1e-5, atol=1e-6)
        # labels alone (the model shifts them) score the same tokens
        without_shift = {k: v for k, v in inputs.items() if k != "shift_labels"}
        torch.testing.assert_close(m(**without_shift, use_cache=False).loss, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_with_the_default_cache_sdpa_and_eager_attend_across_documents(attn):
    """transformers makes a DynamicCache when use_cache is left on, and then ignores packed position_ids.

    If this starts to fail, transformers detects packing with a cache too and the README's
    ``use_cache=False`` note can be relaxed.
    """
    docs, batch, where = packed()
    m = model(attn)
    refs = alone(m, docs)
    with torch.no_grad():
        assert largest_error(m(**ss.attention_inputs(batch)).logits, refs, where) > 1e-3
        m.train()  # training mode alone does not turn the cache off (the model has no dropout)
        assert largest_error(m(**ss.attention_inputs(batch)).logits, refs, where) > 1e-3
    m.activation_checkpointing_enable()  # with gradients, checkpointing turns it off: documents apart again
    assert largest_error(m(**ss.attention_inputs(batch)).logits.detach(), refs, where) < 1e-5


def test_segment_mask_as_a_4d_mask_keeps_sdpa_within_documents_even_with_the_cache():
    docs, batch, where = packed()
    m = model("sdpa")
    refs = alone(m, docs)
    inputs = ss.attention_inputs(batch)
    with torch.no_grad():
        out = m(input_ids=inputs["input_ids"], position_ids=inputs["position_ids"], attention_mask=ss.segment_mask(batch["segment_ids"]))
    assert largest_error(out.logits, refs, where) < 1e-5


@pytest.mark.skipif(not torch.cuda.is_available(), reason="torch's varlen_attn (FlashAttention) needs CUDA")
def test_cu_seqlens_drive_torch_varlen_attn_on_the_gpu():
    from torch.nn.attention.varlen import varlen_attn

    _, batch, _ = packed()
    inputs = ss.attention_inputs({k: v.cuda() for k, v in batch.items()})
    total = batch["tokens"].numel()
    q, k, v = (torch.randn(total, 2, 16, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = varlen_attn(q, k, v, inputs["cu_seq_lens_q"], inputs["cu_seq_lens_k"], inputs["max_length_q"], inputs["max_length_k"], window_size=(-1, 0))
    bounds = inputs["cu_seq_lens_q"].tolist()
    for s, e in itertools.pairwise(bounds):
        ref = F.scaled_dot_product_attention(q[s:e].transpose(0, 1), k[s:e].transpose(0, 1), v[s:e].transpose(0, 1), is_causal=True).transpose(0, 1)
        torch.testing.assert_close(out[s:e], ref, rtol=2e-2, atol=2e-2)


def emulated_flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0, softmax_scale=None, causal=False):
    """flash_attn_varlen_func's contract, checked, computed with SDPA per sequence: (total, H, D) in and out."""
    for cu in (cu_seqlens_q, cu_seqlens_k):
        assert cu.dtype == torch.int32 and cu.is_contiguous() and cu.device == q.device and cu.ndim == 1
        assert int(cu[0]) == 0 and int(cu[-1]) == q.shape[0] and bool((torch.diff(cu) > 0).all())
    assert int(max_seqlen_q) == int(torch.diff(cu_seqlens_q).max())  # transformers' own are 0-d tensors; ours are ints
    k, v = (t.repeat_interleave(q.shape[1] // t.shape[1], 1) for t in (k, v))
    bounds = cu_seqlens_q.tolist()
    return torch.cat([F.scaled_dot_product_attention(q[s:e].transpose(0, 1), k[s:e].transpose(0, 1), v[s:e].transpose(0, 1),
                                                     is_causal=causal, scale=softmax_scale).transpose(0, 1) for s, e in itertools.pairwise(bounds)])


def emulated_flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False):
    """flash_attn_func: one sequence per row, (B, L, H, D) in and out."""
    k, v = (t.repeat_interleave(q.shape[2] // t.shape[2], 2) for t in (k, v))
    return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal, scale=softmax_scale).transpose(1, 2)


@pytest.fixture
def transformers_flash_path(monkeypatch):
    """transformers' own flash-attention path (its mask, its choice among varlen, position_ids and
    plain flash), on CPU: only the two kernels are emulated."""
    from transformers import masking_utils
    from transformers import modeling_flash_attention_utils as fa
    from transformers.integrations.flash_attention import flash_attention_forward

    calls: list[str] = []

    def counted(kernel):
        @functools.wraps(kernel)
        def call(*args, **kwargs):
            calls.append(kernel.__name__)
            return kernel(*args, **kwargs)
        return call

    varlen = counted(emulated_flash_attn_varlen_func)
    kernels = (counted(emulated_flash_attn_func), varlen, None, fa._pad_input, fa._unpad_input)
    processes = (fa._lazy_define_process_function(varlen), dict)
    monkeypatch.setattr(fa, "lazy_import_flash_attention", lambda *args, **kwargs: (kernels, processes))
    transformers.AttentionInterface.register("slipstream_test_fa", flash_attention_forward)
    masking_utils.AttentionMaskInterface.register("slipstream_test_fa", masking_utils.flash_attention_mask)
    return "slipstream_test_fa", calls


@pytest.mark.parametrize("flatten", [False, True])
@pytest.mark.parametrize("use_cache", [None, False])
def test_transformers_flash_path_keeps_documents_apart_through_cu_seq_lens_with_or_without_the_cache(transformers_flash_path, flatten, use_cache):
    name, calls = transformers_flash_path
    docs, batch, where = packed()
    reference = model("sdpa")
    refs = alone(reference, docs)
    m = model(name)
    m.load_state_dict(reference.state_dict())
    inputs = ss.attention_inputs(batch, flatten=flatten)
    with torch.no_grad():
        out = m(**inputs, **({} if use_cache is None else {"use_cache": use_cache}))
    assert calls == ["emulated_flash_attn_varlen_func"] * 2  # both layers, through the given cu_seq_lens
    assert largest_error(out.logits, refs, where) < 1e-5
    expected = sum(F.cross_entropy(ref[:-1], torch.from_numpy(d[1:]), reduction="sum") for d, ref in zip(docs, refs)) / sum(len(d) - 1 for d in docs)
    torch.testing.assert_close(out.loss, expected, rtol=1e-5, atol=1e-6)


def test_transformers_flash_path_without_cu_seq_lens_needs_the_flattened_shape(transformers_flash_path):
    """Without the cu_seq_lens arguments, transformers reads packing from position_ids only in the (1, B*L) shape."""
    name, calls = transformers_flash_path
    docs, batch, where = packed()
    m = model(name)
    refs = alone(m, docs)
    varlen = ("cu_seq_lens_q", "cu_seq_lens_k", "max_length_q", "max_length_k")
    with torch.no_grad():
        flat = {k: v for k, v in ss.attention_inputs(batch, flatten=True).items() if k not in varlen}
        assert largest_error(m(**flat).logits, refs, where) < 1e-5
        rows = {k: v for k, v in ss.attention_inputs(batch).items() if k not in varlen}
        del calls[:]
        assert largest_error(m(**rows).logits, refs, where) > 1e-3
    assert calls == ["emulated_flash_attn_func"] * 2  # one sequence per row: documents attend across each other
