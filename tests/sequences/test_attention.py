"""ss.attention_inputs and ss.segment_mask against a slow reference, NumPy and torch alike."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import slipstream as ss

torch = pytest.importorskip("torch")

IGNORE = -100


def reference(tokens: np.ndarray, seg: np.ndarray) -> dict:
    """One token at a time: segments are runs of equal ids within a row, padding runs included."""
    rows, length = seg.shape
    cu, positions, labels, shift = [0], [], [], []
    position = 0
    for r in range(rows):
        for i in range(length):
            start = i == 0 or seg[r, i] != seg[r, i - 1]
            if start and r * length + i > 0:
                cu.append(r * length + i)
            position = 0 if start else position + 1
            positions.append(position)
            labels.append(IGNORE if start or seg[r, i] == 0 else int(tokens[r, i]))
            same_next = i + 1 < length and seg[r, i + 1] == seg[r, i] and seg[r, i] != 0
            shift.append(int(tokens[r, i + 1]) if same_next else IGNORE)
    if rows * length:
        cu.append(rows * length)
    lengths = np.diff(cu)
    return {"position_ids": positions, "labels": labels, "shift_labels": shift, "cu_seqlens": cu,
            "max_seqlen": int(lengths.max()) if lengths.size else 0}


def reference_mask(seg: np.ndarray, causal: bool) -> np.ndarray:
    rows, length = seg.shape
    mask = np.zeros((rows, 1, length, length), dtype=bool)
    for r in range(rows):
        run = np.cumsum([i == 0 or seg[r, i] != seg[r, i - 1] for i in range(length)])
        for i in range(length):
            for j in range(length):
                mask[r, 0, i, j] = run[i] == run[j] and (j <= i or not causal)
    return mask


@st.composite
def packed_rows(draw, max_rows: int = 4, max_length: int = 12) -> tuple[np.ndarray, np.ndarray]:
    """Rows as ss.pack makes them (pieces 1..n then padding), or arbitrary ids (any runs at all)."""
    rows, length = draw(st.integers(0, max_rows)), draw(st.integers(0, max_length))
    if draw(st.booleans()):
        seg = np.array(draw(st.lists(st.lists(st.integers(0, 3), min_size=length, max_size=length), min_size=rows, max_size=rows)), dtype=np.int32).reshape(rows, length)
    else:
        seg = np.zeros((rows, length), dtype=np.int32)
        for r in range(rows):
            cuts = sorted(draw(st.lists(st.integers(1, length), max_size=4, unique=True))) if length else []
            for piece, (a, b) in enumerate(zip([0, *cuts], cuts), start=1):
                seg[r, a:b] = piece
    tokens = np.array(draw(st.lists(st.integers(0, 2**31 - 1), min_size=rows * length, max_size=rows * length)), dtype=np.int32).reshape(rows, length)
    return tokens, seg


def as_numpy(x):
    return x.numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


def check_against_reference(out: dict, tokens: np.ndarray, seg: np.ndarray, flatten: bool) -> None:
    ref = reference(tokens, seg)
    shape = (1, seg.size) if flatten else seg.shape
    assert as_numpy(out["input_ids"]).tolist() == tokens.astype(np.int64).reshape(shape).tolist()
    for name in ("input_ids", "position_ids", "labels", "shift_labels"):
        assert tuple(out[name].shape) == tuple(shape), name
        assert str(out[name].dtype).endswith("int64"), name
    for name in ("position_ids", "labels", "shift_labels"):
        assert as_numpy(out[name]).reshape(-1).tolist() == ref[name], name
    assert out["cu_seq_lens_q"] is out["cu_seq_lens_k"]
    assert str(out["cu_seq_lens_q"].dtype).endswith("int32")
    assert as_numpy(out["cu_seq_lens_q"]).tolist() == ref["cu_seqlens"]
    assert type(out["max_length_q"]) is int and out["max_length_q"] == out["max_length_k"] == ref["max_seqlen"]
    assert tuple(out["seq_idx"].shape) == tuple(shape) and str(out["seq_idx"].dtype).endswith("int32")
    assert as_numpy(out["seq_idx"]).reshape(-1).tolist() == np.repeat(np.arange(len(ref["cu_seqlens"]) - 1), np.diff(ref["cu_seqlens"])).tolist()


@settings(max_examples=150, deadline=None)
@given(packed_rows(), st.booleans())
def test_inputs_match_the_reference_for_numpy_and_torch(rows, flatten):
    tokens, seg = rows
    out = ss.attention_inputs({"tokens": tokens, "segment_ids": seg}, flatten=flatten)
    assert all(isinstance(out[k], np.ndarray) for k in ("input_ids", "labels", "cu_seq_lens_q"))
    check_against_reference(out, tokens, seg, flatten)
    tout = ss.attention_inputs({"tokens": torch.from_numpy(tokens), "segment_ids": torch.from_numpy(seg)}, flatten=flatten)
    assert all(isinstance(tout[k], torch.Tensor) for k in ("input_ids", "labels", "cu_seq_lens_q"))
    check_against_reference(tout, tokens, seg, flatten)


@settings(max_examples=60, deadline=None)
@given(packed_rows(max_rows=3, max_length=9), st.booleans())
def test_segment_mask_matches_the_reference_and_the_segments_of_cu_seqlens(rows, causal):
    tokens, seg = rows
    expected = reference_mask(seg, causal)
    mask = ss.segment_mask(seg, causal=causal)
    assert mask.dtype == np.bool_ and mask.shape == expected.shape
    assert (mask == expected).all()
    assert (ss.segment_mask(torch.from_numpy(seg), causal=causal).numpy() == expected).all()
    if seg.size:  # every query attends at least itself: no all-masked row, no NaN from SDPA
        assert mask[:, 0].any(axis=-1).all()
        cu = ss.attention_inputs({"tokens": tokens, "segment_ids": seg})["cu_seq_lens_q"]
        which = np.repeat(np.arange(cu.size - 1), np.diff(cu)).reshape(seg.shape)
        same = which[:, :, None] == which[:, None, :]
        assert ((same & np.tri(seg.shape[1], dtype=bool)) if causal else same).tolist() == mask[:, 0].tolist()


def test_position_ids_equal_the_packed_positions_and_every_convention_reads_the_same_boundaries():
    # Two rows of 8: documents of 3 and 4 then one pad; a document cut by the row end continues in row 2.
    seg = np.array([[1, 1, 1, 2, 2, 2, 2, 0], [1, 1, 2, 2, 2, 2, 2, 2]], dtype=np.int32)
    positions = np.array([[0, 1, 2, 0, 1, 2, 3, 0], [0, 1, 0, 1, 2, 3, 4, 5]], dtype=np.int32)
    tokens = np.arange(1, 17, dtype=np.int32).reshape(2, 8)
    out = ss.attention_inputs({"tokens": tokens, "segment_ids": seg, "positions": positions}, flatten=True)
    assert out["position_ids"].tolist() == [positions.reshape(-1).tolist()]
    assert out["cu_seq_lens_q"].tolist() == [0, 3, 7, 8, 10, 16]
    assert out["max_length_q"] == 6
    assert out["labels"].tolist() == [[-100, 2, 3, -100, 5, 6, 7, -100, -100, 10, -100, 12, 13, 14, 15, 16]]
    # no target across a document end, a padding run or the row cut (tokens 7, 8 and 16)
    assert out["shift_labels"].tolist() == [[2, 3, -100, 5, 6, 7, -100, -100, 10, -100, 12, 13, 14, 15, 16, -100]]


def test_the_torch_path_keeps_the_device_and_reads_the_host_once():
    seg = torch.tensor([[1, 1, 2, 0], [1, 2, 2, 2]], dtype=torch.int32)
    tokens = torch.tensor([[5, 6, 7, 0], [8, 9, 10, 11]], dtype=torch.int32)
    calls = []
    original = torch.Tensor.tolist

    def counting(self):
        calls.append(self.shape)
        return original(self)

    torch.Tensor.tolist = counting
    try:
        out = ss.attention_inputs({"tokens": tokens, "segment_ids": seg})
    finally:
        torch.Tensor.tolist = original
    assert len(calls) == 1  # the segment count and the longest segment, together
    assert {out[k].device for k in ("input_ids", "position_ids", "labels", "shift_labels", "cu_seq_lens_q")} == {seg.device}
    assert out["cu_seq_lens_q"].tolist() == [0, 2, 3, 4, 5, 8]


def test_matches_transformers_flattening_collator_and_its_boundary_readers():
    tf = pytest.importorskip("transformers")
    from transformers.masking_utils import find_packed_sequence_indices
    from transformers.modeling_flash_attention_utils import prepare_fa_kwargs_from_position_ids

    docs = [np.array([11, 12, 13]), np.array([21]), np.array([31, 32, 33, 34]), np.array([41, 42])]
    seg = np.concatenate([np.full(len(d), k + 1, dtype=np.int32) for k, d in enumerate(docs)])[None]
    tokens = np.concatenate(docs).astype(np.int32)[None]
    ours = ss.attention_inputs({"tokens": torch.from_numpy(tokens), "segment_ids": torch.from_numpy(seg)}, flatten=True)
    collate = tf.DataCollatorWithFlattening(return_flash_attn_kwargs=True, return_seq_idx=True)
    theirs = collate([{"input_ids": d.tolist()} for d in docs], return_tensors="pt")
    for name in ("input_ids", "position_ids", "labels", "seq_idx", "cu_seq_lens_q", "cu_seq_lens_k"):
        assert ours[name].dtype == theirs[name].dtype and ours[name].tolist() == theirs[name].tolist(), name
    assert ours["max_length_q"] == theirs["max_length_q"] == 4

    # With padding and several rows: transformers' readers of position_ids find our segments.
    seg = torch.tensor([[1, 1, 1, 2, 0, 0], [1, 2, 2, 2, 2, 2], [1, 1, 1, 1, 1, 1]], dtype=torch.int32)
    out = ss.attention_inputs({"tokens": seg * 7, "segment_ids": seg}, flatten=True)
    (cu_q, _), (max_q, _) = prepare_fa_kwargs_from_position_ids(out["position_ids"])
    assert cu_q.tolist() == out["cu_seq_lens_q"].tolist() and int(max_q) == out["max_length_q"]
    which = find_packed_sequence_indices(out["position_ids"])[0]
    assert torch.equal(torch.bincount(which), torch.diff(out["cu_seq_lens_q"]).long())


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_bad_batches_are_clear_errors(kind):
    conv = (lambda a: torch.from_numpy(np.asarray(a))) if kind == "torch" else np.asarray
    seg = conv(np.ones((2, 4), dtype=np.int32))
    with pytest.raises(KeyError, match="'segment_ids'"):
        ss.attention_inputs({"tokens": seg})
    with pytest.raises(KeyError, match="'ids'"):
        ss.attention_inputs({"tokens": seg, "segment_ids": seg}, field="ids")
    with pytest.raises(ValueError, match=r"'tokens' has shape \(2, 3\).*'segment_ids' has \(2, 4\)"):
        ss.attention_inputs({"tokens": conv(np.ones((2, 3), dtype=np.int32)), "segment_ids": seg})
    with pytest.raises(ValueError, match=r"'segment_ids'.*\(batch, length\).*\(4,\)"):
        ss.attention_inputs({"tokens": seg, "segment_ids": conv(np.ones(4, dtype=np.int32))})
    with pytest.raises(TypeError, match="'tokens'.*integer ids.*float32"):
        ss.attention_inputs({"tokens": conv(np.ones((2, 4), dtype=np.float32)), "segment_ids": seg})
    with pytest.raises(TypeError, match="'segment_ids'.*integer"):
        ss.segment_mask(conv(np.ones((2, 4), dtype=np.float64)))
    with pytest.raises(TypeError, match="both be NumPy arrays or both torch tensors, found ndarray and Tensor"):
        ss.attention_inputs({"tokens": np.ones((2, 4), dtype=np.int32), "segment_ids": torch.ones(2, 4, dtype=torch.int32)})
    with pytest.raises(TypeError, match="expected a batch mapping"):
        ss.attention_inputs([seg, seg])


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_negative_segment_ids_are_refused_not_trained_on(kind):
    """0 is padding; a -1 padding convention would otherwise make its tokens a scored document."""
    conv = (lambda a: torch.from_numpy(np.asarray(a))) if kind == "torch" else np.asarray
    seg = conv(np.array([[1, 1, 2, 2], [1, 1, -1, -1]], dtype=np.int32))
    with pytest.raises(ValueError, match=r"'segment_ids'.*0 for padding.*found -1 at row 1, column 2"):
        ss.attention_inputs({"tokens": conv(np.ones((2, 4), dtype=np.int32)), "segment_ids": seg})
    unsigned = conv(np.array([[1, 1, 2, 0]], dtype=np.uint8))  # unsigned ids need no check
    assert ss.attention_inputs({"tokens": unsigned, "segment_ids": unsigned})["cu_seq_lens_q"].tolist() == [0, 2, 3, 4]


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_a_batch_past_int32_cu_seqlens_is_refused_before_anything_is_allocated(kind, monkeypatch):
    from slipstream.sequences import attention

    monkeypatch.setattr(attention, "MAX_TOKENS", 7)  # the int32 limit of cu_seqlens, lowered to test it
    conv = (lambda a: torch.from_numpy(np.asarray(a))) if kind == "torch" else np.asarray
    seg = conv(np.ones((2, 4), dtype=np.int32))
    with pytest.raises(ValueError, match=r"8 tokens.*int32.*at most 7"):
        ss.attention_inputs({"tokens": seg, "segment_ids": seg})
    seg = conv(np.ones((1, 7), dtype=np.int32))
    assert ss.attention_inputs({"tokens": seg, "segment_ids": seg})["cu_seq_lens_q"].tolist() == [0, 7]


@pytest.mark.parametrize("kind", ["numpy", "torch"])
def test_an_id_that_comes_back_later_in_its_row_starts_another_segment(kind):
    conv = (lambda a: torch.from_numpy(np.asarray(a))) if kind == "torch" else np.asarray
    seg = conv(np.array([[1, 1, 2, 1], [3, 3, 3, 3]], dtype=np.int32))
    out = ss.attention_inputs({"tokens": seg + 10, "segment_ids": seg})
    assert out["cu_seq_lens_q"].tolist() == [0, 2, 3, 4, 8]
    assert out["position_ids"].tolist() == [[0, 1, 0, 0], [0, 1, 2, 3]]
    assert out["shift_labels"].tolist() == [[11, -100, -100, -100], [13, 13, 13, -100]]
    mask = ss.segment_mask(seg)
    assert mask[0, 0, 3].tolist() == [False, False, False, True]  # the second run of id 1 sees only itself
