"""A packed training step gives the per-token loss (and gradients) of the same documents unpacked.

A tiny transformer (token embedding + learned position embedding indexed by the packed positions,
two causal attention layers, a head), random weights: the packed batch is run with the
block-diagonal mask of ss.segment_mask, and with a variable-length attention over
ss.attention_inputs' cu_seq_lens (FlashAttention's contract, written with SDPA per segment), and
each document is run alone; the losses and the gradients agree.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import pytest

import slipstream as ss

torch = pytest.importorskip("torch")
nn, F = torch.nn, torch.nn.functional

VOCAB, LENGTH = 61, 24


class Block(nn.Module):
    def __init__(self, dim: int, heads: int) -> None:
        super().__init__()
        self.heads, self.norm1, self.norm2 = heads, nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.qkv, self.out = nn.Linear(dim, 3 * dim), nn.Linear(dim, dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x, attend: Callable):
        b, l, d = x.shape
        q, k, v = self.qkv(self.norm1(x)).view(b, l, 3, self.heads, d // self.heads).unbind(2)  # (B, L, H, Dh)
        x = x + self.out(attend(q, k, v).reshape(b, l, d))
        return x + self.mlp(self.norm2(x))


class TinyLM(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 2, layers: int = 2) -> None:
        super().__init__()
        self.tok, self.pos = nn.Embedding(VOCAB, dim), nn.Embedding(LENGTH, dim)
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(layers))
        self.norm, self.head = nn.LayerNorm(dim), nn.Linear(dim, VOCAB)

    def forward(self, tokens, positions, attend: Callable):
        x = self.tok(tokens) + self.pos(positions)
        for block in self.blocks:
            x = block(x, attend)
        return self.head(self.norm(x))


def causal(q, k, v):
    """One sequence per row, (B, L, H, Dh) in and out."""
    return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True).transpose(1, 2)


def masked(mask) -> Callable:
    def attend(q, k, v):
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask).transpose(1, 2)
    return attend


def varlen(cu_seqlens, max_seqlen: int) -> Callable:
    """flash_attn_varlen_func(q, k, v, cu, cu, max, max, causal=True) on the (B*L, H, Dh) tokens."""
    def attend(q, k, v):
        shape = q.shape
        q, k, v = (t.reshape(-1, *shape[2:]) for t in (q, k, v))
        bounds = cu_seqlens.tolist()
        assert bounds[0] == 0 and bounds[-1] == q.shape[0] and max(np.diff(bounds)) == max_seqlen
        pieces = [causal(q[a:b][None], k[a:b][None], v[a:b][None])[0] for a, b in itertools.pairwise(bounds)]
        return torch.cat(pieces).reshape(shape)
    return attend


def documents(seed: int, count: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(1, VOCAB, int(n)).astype(np.int32) for n in rng.integers(2, LENGTH + 1, count)]


def pack_by_hand(docs: list[np.ndarray]) -> list[dict]:
    """First-fit decreasing rows in ss.pack's item format (segments 1.., 0 = padding, positions per document)."""
    rows: list[list[np.ndarray]] = []
    for doc in sorted(docs, key=len, reverse=True):
        row = next((r for r in rows if sum(map(len, r)) + len(doc) <= LENGTH), None)
        rows.append([doc]) if row is None else row.append(doc)
    items = []
    for row in rows:
        item = {name: np.zeros(LENGTH, dtype=np.int32) for name in ("tokens", "segment_ids", "positions")}
        at = 0
        for segment, doc in enumerate(row, start=1):
            item["tokens"][at:at + len(doc)], item["segment_ids"][at:at + len(doc)] = doc, segment
            item["positions"][at:at + len(doc)] = np.arange(len(doc))
            at += len(doc)
        items.append(item)
    return items


def packed_batches(docs: list[np.ndarray], batch_size: int) -> list[dict]:
    """The loader's batches of the packed documents: through ss.pack when it exists, else packed by hand."""
    data = ss.pack(docs, LENGTH, method="best_fit") if hasattr(ss, "pack") else pack_by_hand(docs)
    return list(ss.DataLoader(data, batch_size, shuffle=True, seed=3))


def segments(batch: dict) -> list[tuple[int, int, int]]:
    """(row, start, stop) of every document in the batch, read from the segment ids."""
    out = []
    for r, row in enumerate(np.asarray(batch["segment_ids"])):
        for s in np.unique(row[row > 0]):
            where = np.flatnonzero(row == s)
            out.append((r, int(where[0]), int(where[-1]) + 1))
    return out


def unpacked_losses(model, doc: np.ndarray):
    tokens = torch.from_numpy(doc.astype(np.int64))[None]
    logits = model(tokens, torch.arange(len(doc))[None], causal)[0]
    return F.cross_entropy(logits[:-1], tokens[0, 1:], reduction="none")


@pytest.mark.parametrize("attention", ["segment_mask", "cu_seqlens"])
def test_a_packed_step_gives_the_per_token_loss_and_gradients_of_the_documents_unpacked(attention):
    torch.manual_seed(0)
    model = TinyLM().double()
    docs = documents(seed=1, count=14)
    batches = packed_batches(docs, batch_size=4)
    seen = sorted(tuple(np.asarray(b["tokens"])[r, a:z]) for b in batches for r, a, z in segments(b))
    assert seen == sorted(tuple(d) for d in docs)  # every document once, whole: the same documents

    total_tokens = sum(len(d) - 1 for d in docs)
    packed_sum = 0.0
    for batch in batches:
        inputs = ss.attention_inputs({k: torch.from_numpy(np.asarray(v)) for k, v in batch.items()})
        real = np.asarray(batch["segment_ids"]) > 0
        assert (inputs["position_ids"].numpy()[real] == np.asarray(batch["positions"])[real]).all()
        attend = masked(ss.segment_mask(torch.from_numpy(np.asarray(batch["segment_ids"])))) if attention == "segment_mask" \
            else varlen(inputs["cu_seq_lens_q"], inputs["max_length_q"])
        logits = model(inputs["input_ids"], inputs["position_ids"], attend)
        per_token = F.cross_entropy(logits.flatten(0, 1), inputs["shift_labels"].flatten(), reduction="none").view(logits.shape[:2])
        for r, a, z in segments(batch):
            doc = np.asarray(batch["tokens"])[r, a:z]
            torch.testing.assert_close(per_token[r, a:z - 1], unpacked_losses(model, doc), rtol=1e-9, atol=1e-10)
            assert inputs["shift_labels"][r, z - 1] == -100  # a document's last token predicts nothing
        scored = inputs["shift_labels"] != -100
        assert int(scored.sum()) == sum(z - a - 1 for _, a, z in segments(batch))
        packed_sum = packed_sum + per_token[scored].sum()

    (packed_sum / total_tokens).backward()
    packed_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    (sum(unpacked_losses(model, d).sum() for d in docs) / total_tokens).backward()
    for (name, p), g in zip(model.named_parameters(), packed_grads):
        torch.testing.assert_close(g, p.grad, rtol=1e-8, atol=1e-12, msg=name)


def test_without_the_segments_documents_attend_across_each_other():
    """The check can fail: a plain causal mask over the packed row gives other losses."""
    torch.manual_seed(0)
    model = TinyLM().double()
    batch = packed_batches(documents(seed=2, count=6), batch_size=6)[0]
    inputs = ss.attention_inputs({k: torch.from_numpy(np.asarray(v)) for k, v in batch.items()})
    logits = model(inputs["input_ids"], inputs["position_ids"], causal)
    per_token = F.cross_entropy(logits.flatten(0, 1), inputs["shift_labels"].flatten(), reduction="none").view(logits.shape[:2])
    later = [(r, a, z) for r, a, z in segments(batch) if a > 0]
    assert later, "no row holds two documents"
    r, a, z = later[0]
    assert not torch.allclose(per_token[r, a:z - 1], unpacked_losses(model, np.asarray(batch["tokens"])[r, a:z]))


def concat_rows(docs: list[np.ndarray], source: str) -> dict:
    """The documents concatenated (stored order) and cut every LENGTH tokens: one batch of every row."""
    if source == "ss.pack":
        if not hasattr(ss, "pack"):
            pytest.skip("ss.pack is not built")
        data = ss.pack(docs, LENGTH, method="concat", seed=None)
        return {k: torch.from_numpy(np.asarray(v)) for k, v in next(iter(ss.DataLoader(data, len(data)))).items()}
    rows = len(np.concatenate(docs)) // LENGTH
    stream = np.concatenate(docs)[: rows * LENGTH].reshape(rows, LENGTH)
    doc_of = np.repeat(np.arange(len(docs)), [len(d) for d in docs])[: rows * LENGTH].reshape(rows, LENGTH)
    seg = np.stack([np.unique(row, return_inverse=True)[1] + 1 for row in doc_of]).astype(np.int32)
    return {"tokens": torch.from_numpy(stream), "segment_ids": torch.from_numpy(seg)}


@pytest.mark.parametrize("source", ["by_hand", "ss.pack"])
def test_a_document_cut_by_the_row_end_continues_as_a_segment_of_its_own(source):
    """Rows cut from one stream (the concat layout): every piece's losses are those of the piece alone."""
    torch.manual_seed(0)
    model = TinyLM().double()
    docs = documents(seed=3, count=8)
    batch = concat_rows(docs, source)
    rows = batch["tokens"].shape[0]
    inputs = ss.attention_inputs(batch, flatten=True)
    logits = model(inputs["input_ids"], inputs["position_ids"], varlen(inputs["cu_seq_lens_q"], inputs["max_length_q"]))
    per_token = F.cross_entropy(logits[0], inputs["shift_labels"][0], reduction="none").view(rows, LENGTH)
    assert (inputs["shift_labels"].view(rows, LENGTH)[:, -1] == -100).all()  # no target across the row cut
    pieces = segments(batch)
    stream = np.concatenate([batch["tokens"][r, a:z].numpy() for r, a, z in pieces])
    assert len(np.concatenate(docs)) - len(stream) < LENGTH and (stream == np.concatenate(docs)[: len(stream)]).all()  # in order
    assert any(a == 0 for _, a, _ in pieces[1:]) and len(pieces) > len(docs)  # some document is cut by a row end
    for r, a, z in pieces:
        piece = batch["tokens"][r, a:z].numpy()
        if source == "ss.pack":
            assert (batch["positions"][r, a:z].numpy() == np.arange(z - a)).all()
        torch.testing.assert_close(per_token[r, a:z - 1], unpacked_losses(model, piece), rtol=1e-9, atol=1e-10)
