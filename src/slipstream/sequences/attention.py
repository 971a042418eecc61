"""What attention kernels and models take for a batch of packed rows.

A batch of packed items (``ss.pack``'s, collated by the loader) holds ``tokens`` (B, L) and
``segment_ids`` (B, L): ids 1, 2, ... per document piece within a row, 0 for padding. A *segment* is
a maximal run of equal segment ids within one row: a document piece, or a run of padding. Rows
never share a segment, so a document cut by a row boundary is two segments (the second one starts
at position 0, as the packed item's ``positions`` do). An id that comes back later in its row (1, 1,
2, 1) starts another segment: only adjacency counts, so ids need not be unique nor in order, and a
mask of equal ids (``ids[q] == ids[k]``, FlexAttention's document mask) reads the same segments
exactly when every id is one run per row, as in ``ss.pack``'s rows.

``attention_inputs`` turns such a batch into the keyword arguments of a Hugging Face
``transformers`` causal language model's ``forward`` (padding-free packing: FlashAttention's
variable-length boundaries and the ``position_ids`` convention), which also serve a hand-written
model calling ``flash_attn_varlen_func`` directly; ``segment_mask`` gives the block-diagonal
causal mask for ``torch.nn.functional.scaled_dot_product_attention`` (or a hand-written softmax:
``scores.masked_fill(~mask, float("-inf"))``) in models without a variable-length kernel.

Both work on NumPy arrays and on torch tensors (results on the input's device, vectorized: no
Python loop per row or per segment; the only host synchronization is one read of three integers,
the segment count and the longest segment, which ``cu_seqlens``' size and ``max_length`` need, and
the lowest segment id).
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

__all__ = ["attention_inputs", "segment_mask"]

IGNORE_INDEX = -100
"""The label of a token no loss is taken at (PyTorch's ``cross_entropy`` default ignore index)."""

MAX_TOKENS = 2**31 - 1
"""The most tokens a batch may hold: ``cu_seqlens`` (and ``seq_idx``) are int32, as FlashAttention takes them."""


def attention_inputs(batch: Mapping[str, Any], *, field: str = "tokens", flatten: bool = False) -> dict[str, Any]:
    """The attention inputs of a batch of packed rows, named as Hugging Face models take them.

    ``batch`` is a mapping with ``batch[field]`` (B, L) token ids and ``batch["segment_ids"]``
    (B, L), both integer NumPy arrays or both torch tensors on one device; a negative segment id
    is a ``ValueError`` (0 is padding: another padding id would be trained on as a document), and
    so is a batch of more than ``MAX_TOKENS`` (2**31 - 1) tokens. Returns a dict of the same kind
    (NumPy arrays, or tensors on that device):

    - ``input_ids`` (int64): the tokens, (B, L), or (1, B*L) when ``flatten`` (the shape of
      ``transformers``' ``DataCollatorWithFlattening``).
    - ``position_ids`` (int64, same shape): 0, 1, ... within each segment; equal to the packed
      item's ``positions`` at every non-padding token, and restarting at 0 at each padding run, so
      every boundary reads the same from them as from ``cu_seq_lens_q`` (``transformers``' flash
      path starts a sequence at each 0; its sdpa and eager masks start one wherever a position is
      not its predecessor + 1).
    - ``labels`` (int64, same shape), ``transformers``' unshifted convention: the token itself,
      ``IGNORE_INDEX`` (-100) at padding and at the first token of every segment (the model shifts:
      the token before it belongs to another document, or to another row).
    - ``shift_labels`` (int64, same shape): the target of each token for next-token loss, the
      next token of its segment, ``IGNORE_INDEX`` at padding and at each segment's last token (so no
      token is trained to predict across documents, nor across a row cut); ``labels`` shifted left
      by one over the flattened batch. ``F.cross_entropy(logits.flatten(0, -2),
      shift_labels.flatten())`` is the loss; ``transformers``' causal-LM loss takes it as is.
    - ``cu_seq_lens_q`` and ``cu_seq_lens_k`` (int32, (n + 1,), one array): the cumulative lengths
      of the n segments over the B*L flattened tokens, padding runs included as segments of their
      own, so ``cu_seq_lens_q[-1] == B*L`` and the unchanged (B*L, heads, dim) tensors go to
      ``flash_attn_varlen_func(q, k, v, cu_seq_lens_q, cu_seq_lens_k, max_length_q,
      max_length_k, causal=True)`` (padding attends only within its own run; its outputs are
      never scored).
    - ``max_length_q`` and ``max_length_k`` (int): the longest segment (FlashAttention's
      ``max_seqlen``).
    - ``seq_idx`` (int32, the shape of ``input_ids``): the segment of every token, 0 .. n-1 over
      the flattened batch (what ``transformers``' Mamba-2 style layers take to keep their state
      within documents).

    ``model(**attention_inputs(batch), use_cache=False)`` keeps attention within documents for a
    ``transformers`` model with ``attn_implementation`` "flash_attention_2" (through the
    ``cu_seq_lens`` arguments, either shape, cache or not; without them only the (1, B*L) shape),
    "sdpa" or "eager" (through ``position_ids``; these two see packing only with no
    ``attention_mask`` and no cache: with ``use_cache`` left at the config's default, True even in
    training mode unless gradient checkpointing is on, a cache is made and documents attend across
    each other, silently).
    """
    if not isinstance(batch, Mapping):
        raise TypeError(f"attention_inputs: expected a batch mapping with {field!r} and 'segment_ids', found {type(batch).__name__}")
    for name in (field, "segment_ids"):
        if name not in batch:
            raise KeyError(f"attention_inputs: the batch has no {name!r} field (its fields: {sorted(map(str, batch))})")
    tokens, seg = batch[field], batch["segment_ids"]
    torch = _torch_of(seg)
    if (torch is None) != (_torch_of(tokens) is None):
        raise TypeError(f"attention_inputs: {field!r} and 'segment_ids' must both be NumPy arrays or both torch tensors, found {type(tokens).__name__} and {type(seg).__name__}")
    _check_ids(seg, "segment_ids", torch)
    _check_ids(tokens, field, torch)
    if tuple(tokens.shape) != tuple(seg.shape):
        raise ValueError(f"attention_inputs: {field!r} has shape {tuple(tokens.shape)} but 'segment_ids' has {tuple(seg.shape)}; expected the same (batch, length)")
    if torch is not None and tokens.device != seg.device:
        raise ValueError(f"attention_inputs: {field!r} is on {tokens.device} but 'segment_ids' on {seg.device}; expected one device")
    rows, length = (int(n) for n in seg.shape)
    if rows * length > MAX_TOKENS:
        raise ValueError(f"attention_inputs: the batch holds {rows * length} tokens ({rows} x {length}); cu_seqlens are int32, so at most {MAX_TOKENS}")
    out = _torch_inputs(torch, tokens, seg) if torch is not None else _numpy_inputs(tokens, seg)
    if out["lowest"] < 0:
        where = seg < 0
        r, c = (int(i) for i in (where.nonzero()[0] if torch is not None else np.argwhere(where)[0]))
        raise ValueError(f"attention_inputs: 'segment_ids' must be 0 for padding and positive for document pieces, found {int(seg[r, c])} at row {r}, column {c}")
    shape = (1, rows * length) if flatten else (rows, length)
    result = {name: out[name].reshape(shape) for name in ("input_ids", "position_ids", "labels", "shift_labels", "seq_idx")}
    result["cu_seq_lens_q"] = result["cu_seq_lens_k"] = out["cu_seqlens"]
    result["max_length_q"] = result["max_length_k"] = out["max_seqlen"]
    return result


def segment_mask(segment_ids: Any, *, causal: bool = True) -> Any:
    """The boolean (B, 1, L, L) attention mask of packed rows: True where query i may attend key j.

    ``segment_ids`` (B, L) integer, a NumPy array or a torch tensor (the mask is of the same kind,
    on the same device). i attends j when both are in the same segment (a maximal run of equal ids
    within the row, padding runs included, the segments of ``attention_inputs``) and, when
    ``causal``, j <= i. Every row of the mask has a True (its diagonal), so a padding query never
    makes ``scaled_dot_product_attention`` return NaN. It is the ``attn_mask`` of
    ``torch.nn.functional.scaled_dot_product_attention`` (broadcast over heads) and a 4-D
    ``attention_mask`` a ``transformers`` model with ``attn_implementation="sdpa"`` uses as given
    (not "eager", which adds a mask to the scores: give it ``attention_inputs`` instead).
    Memory is ``B * L * L`` bytes: for long rows prefer a variable-length kernel.
    """
    torch = _torch_of(segment_ids)
    _check_ids(segment_ids, "segment_ids", torch)
    rows, length = (int(n) for n in segment_ids.shape)
    if torch is not None:
        run = torch.cumsum(_torch_starts(torch, segment_ids).reshape(rows, length), dim=1)
        mask = run[:, :, None] == run[:, None, :]
        if causal:
            mask &= torch.ones(length, length, dtype=torch.bool, device=segment_ids.device).tril()
        return mask[:, None]
    run = np.cumsum(_numpy_starts(segment_ids).reshape(rows, length), axis=1)
    mask = run[:, :, None] == run[:, None, :]
    if causal:
        mask &= np.tri(length, dtype=bool)
    return mask[:, None]


def _torch_of(x: Any) -> Any:
    """The torch module when ``x`` is a torch tensor, else None (torch is never imported here)."""
    torch = sys.modules.get("torch")
    return torch if torch is not None and isinstance(x, torch.Tensor) else None


def _check_ids(x: Any, name: str, torch: Any) -> None:
    if torch is not None:
        ok = not x.is_floating_point() and not x.is_complex() and x.dtype != torch.bool
        kind = str(x.dtype)
    else:
        if not isinstance(x, np.ndarray):
            raise TypeError(f"{name!r}: expected a NumPy array or a torch tensor of integer ids, found {type(x).__name__}")
        ok, kind = x.dtype.kind in "iu", str(x.dtype)
    if not ok:
        raise TypeError(f"{name!r}: expected integer ids, found dtype {kind}")
    if x.ndim != 2:
        raise ValueError(f"{name!r}: expected a (batch, length) batch of packed rows, found shape {tuple(x.shape)}")


def _numpy_starts(seg: np.ndarray) -> np.ndarray:
    """Flattened bool: True at the first token of every segment (every row start included)."""
    flat = seg.reshape(-1)
    starts = np.ones(flat.shape[0], dtype=bool)
    np.not_equal(flat[1:], flat[:-1], out=starts[1:])
    if seg.shape[1]:
        starts.reshape(seg.shape)[:, 0] = True
    return starts


def _torch_starts(torch: Any, seg: Any) -> Any:
    flat = seg.reshape(-1)
    starts = torch.ones(flat.shape[0], dtype=torch.bool, device=seg.device)
    starts[1:] = flat[1:] != flat[:-1]
    if seg.shape[1]:
        starts.view(seg.shape)[:, 0] = True
    return starts


def _numpy_inputs(tokens: np.ndarray, seg: np.ndarray) -> dict[str, Any]:
    starts = _numpy_starts(seg)
    first = np.flatnonzero(starts)
    cu = np.empty(first.shape[0] + 1, dtype=np.int32)
    cu[:-1], cu[-1] = first, starts.shape[0]
    lengths = np.diff(cu)
    positions = np.arange(starts.shape[0], dtype=np.int64) - np.repeat(first.astype(np.int64), lengths)
    ids = tokens.reshape(-1).astype(np.int64)
    labels = ids.copy()
    labels[starts | (seg.reshape(-1) == 0)] = IGNORE_INDEX
    shift = np.full_like(labels, IGNORE_INDEX)
    shift[:-1] = labels[1:]
    max_seqlen = int(lengths.max()) if lengths.size else 0
    run = (np.cumsum(starts, dtype=np.int32) - 1).astype(np.int32)
    lowest = int(seg.min()) if seg.size and seg.dtype.kind == "i" else 0
    return {"input_ids": ids, "position_ids": positions, "labels": labels, "shift_labels": shift, "seq_idx": run, "cu_seqlens": cu, "max_seqlen": max_seqlen,
            "lowest": lowest}


def _torch_inputs(torch: Any, tokens: Any, seg: Any) -> dict[str, Any]:
    device = seg.device
    starts = _torch_starts(torch, seg)
    total = starts.shape[0]
    index = torch.arange(total, dtype=torch.int64, device=device)
    zero = torch.zeros((), dtype=torch.int64, device=device)
    first = torch.where(starts, index, zero).cummax(0).values if total else index
    positions = index - first
    run = torch.cumsum(starts, 0) - 1  # the segment of every token
    lowest = seg.min().to(torch.int64) if total and seg.dtype.is_signed else zero
    count, longest, lowest = (torch.stack([starts.sum(), positions.max() + 1, lowest]).tolist() if total else (0, 0, 0))  # the one host read
    sizes = torch.zeros(count, dtype=torch.int64, device=device).scatter_add_(0, run, torch.ones_like(run))
    cu = torch.zeros(count + 1, dtype=torch.int32, device=device)
    cu[1:] = torch.cumsum(sizes, 0)
    ids = tokens.reshape(-1).to(torch.int64)
    labels = ids.masked_fill(starts | (seg.reshape(-1) == 0), IGNORE_INDEX)
    shift = torch.full_like(labels, IGNORE_INDEX)
    shift[:-1] = labels[1:]
    return {"input_ids": ids, "position_ids": positions, "labels": labels, "shift_labels": shift, "seq_idx": run.to(torch.int32),
            "cu_seqlens": cu, "max_seqlen": int(longest), "lowest": int(lowest)}
