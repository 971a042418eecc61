"""ss.pack's outputs: every dtype (int32, int64, uint16, uint32) with and without segments, the
compiled gather equal to the NumPy reference, segment ids and positions of the dtype that holds
the row length, batch_spec agreeing with the batches, the loader's batches, and bad combinations
refused by name."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
from helpers import assert_same, no_seqcore
from hypothesis import given, settings
from hypothesis import strategies as st

import slipstream as ss
from slipstream.sequences.packplan import kernels

kernel, why = kernels()
needs_kernel = pytest.mark.skipif(kernel is None, reason=f"slipstream.sequences._packing: {why}")
DTYPES = ["int32", "int64", "uint16", "uint32"]
METHODS = ["concat", "best_fit", "first_fit"]


def documents(lengths: list[int], stored: type, dtype: str, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    info, out = np.iinfo(stored), np.iinfo(dtype)
    low, high = max(info.min, out.min), min(info.max, out.max)
    return [rng.integers(low, high, n, endpoint=True).astype(stored) for n in lengths]


def every_row(packed) -> dict[str, np.ndarray]:
    return packed.getobs_batch_into({}, np.arange(len(packed)))


@needs_kernel
@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(0, 90), min_size=1, max_size=40).filter(lambda ls: sum(ls) > 0),
    st.integers(1, 40),
    st.sampled_from(METHODS),
    st.sampled_from([np.uint16, np.int32, np.uint32, np.int64, np.uint8]),
    st.sampled_from(DTYPES),
    st.booleans(),
)
def test_the_compiled_gather_gives_the_reference_rows_for_every_dtype(lengths, length, method, stored, dtype, segments):
    docs = documents(lengths, stored, dtype, seed=len(lengths))
    compiled = ss.pack(docs, length, method=method, dtype=dtype, segments=segments, pad_id=7)
    with no_seqcore():
        reference = ss.pack(docs, length, method=method, dtype=dtype, segments=segments, pad_id=7)
    assert compiled.kernel_status == "active" and reference.kernel_status.startswith("disabled")
    rows = every_row(compiled)
    assert_same(rows, every_row(reference))
    order = np.random.default_rng(1).permutation(len(compiled))
    assert_same(compiled.getobs_batch_into({}, order), reference.getobs_batch_into({}, order))
    assert set(rows) == ({"tokens", "segment_ids", "positions"} if segments else {"tokens"})
    assert rows["tokens"].dtype == np.dtype(dtype)
    if segments:
        assert rows["segment_ids"].dtype == rows["positions"].dtype == np.dtype(dtype)
    full = every_row(ss.pack(docs, length, method=method, dtype="int64", pad_id=7))
    np.testing.assert_array_equal(rows["tokens"].astype(np.int64), full["tokens"])  # the same ids as int64 gives


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("segments", [True, False])
@pytest.mark.parametrize("method", ["concat", "best_fit"])
def test_the_loader_batches_match_batch_spec_and_the_items(dtype, segments, method):
    docs = documents([5, 300, 17, 0, 64, 129, 3] * 6, np.uint16, dtype)
    packed = ss.pack(docs, 64, method=method, dtype=dtype, segments=segments)
    spec = packed.batch_spec()
    assert list(spec.tree) == list(packed.names)
    with ss.DataLoader(packed, 4, shuffle=True, seed=3, workers=1, timeout=60) as loader:
        batches = list(loader)
    assert sum(len(b["tokens"]) for b in batches) == len(packed)
    for batch in batches:
        assert set(batch) == set(packed.names)
        for name, leaf in spec.tree.items():
            assert np.asarray(batch[name]).dtype == leaf.dtype and np.asarray(batch[name]).shape[1:] == tuple(leaf.shape)
        for name in packed.names:
            assert np.asarray(batch[name]).dtype == (np.dtype(dtype) if name == "tokens" else packed.segment_dtype)
    item = packed[len(packed) - 1]
    assert set(item) == set(packed.names) and all(a.shape == (64,) for a in item.values())
    first = next(iter(ss.DataLoader(packed, len(packed), timeout=60)))
    np.testing.assert_array_equal(np.asarray(first["tokens"])[-1], item["tokens"])


def test_segments_false_gives_the_tokens_segments_true_gives():
    docs = documents([40, 7, 300, 2, 90], np.uint32, "uint32")
    for method in METHODS:
        full = every_row(ss.pack(docs, 50, method=method, dtype="uint32"))
        bare = every_row(ss.pack(docs, 50, method=method, dtype="uint32", segments=False))
        assert list(bare) == ["tokens"]
        np.testing.assert_array_equal(bare["tokens"], full["tokens"])


def test_rows_longer_than_uint16_holds_get_int32_segment_ids_and_positions():
    docs = [np.arange(70_000, dtype=np.uint16) % 1000]
    packed = ss.pack(docs, 70_000, dtype="uint16")
    assert packed.segment_dtype == np.dtype(np.int32)
    row = packed[0]
    assert row["tokens"].dtype == np.uint16 and row["positions"].dtype == np.int32
    np.testing.assert_array_equal(row["positions"], np.arange(70_000))
    assert ss.pack(docs, 65_535, dtype="uint16").segment_dtype == np.dtype(np.uint16)
    assert ss.pack(docs, 2048, dtype="uint32").segment_dtype == np.dtype(np.uint32)


@pytest.mark.parametrize("compiled", [True, False])
@pytest.mark.parametrize("segments", [True, False])
def test_a_token_that_does_not_fit_the_dtype_is_refused_naming_its_document(compiled, segments):
    if compiled and kernel is None:
        pytest.skip(why)
    docs = [np.arange(5, dtype=np.int64), np.asarray([1, 2, 70_000, 3], np.int64)]
    context = contextlib.nullcontext() if compiled else no_seqcore()
    with context:
        packed = ss.pack(docs, 4, seed=None, dtype="uint16", segments=segments)
        with pytest.raises(ValueError, match=r"document 1: token 2 is 70000, which does not fit dtype uint16"):
            every_row(packed)
        negative = ss.pack([np.asarray([4, -1], np.int32)], 4, dtype="uint32", segments=segments)
        with pytest.raises(ValueError, match=r"document 0: token 1 is -1, which does not fit dtype uint32"):
            every_row(negative)
        big = ss.pack([np.asarray([2**32], np.int64)], 4, dtype="uint32", segments=segments)
        with pytest.raises(ValueError, match=r"token 0 is 4294967296, which does not fit dtype uint32"):
            every_row(big)


@needs_kernel
def test_the_compiled_gather_refuses_mismatched_output_buffers():
    packed = ss.pack([np.arange(10, dtype=np.uint16)], 8, dtype="uint16", segments=False)
    assert packed.getobs_batch_into({}, np.asarray([0]))["tokens"].dtype == np.uint16
    gather = packed._gather
    with pytest.raises(ValueError, match="writes 1 outputs, got 3"):
        gather(np.asarray([0], np.int64), tuple(np.zeros((1, 8), np.uint16) for _ in range(3)))
    with pytest.raises(TypeError, match="tokens: expected an aligned contiguous array of 2-byte"):
        gather(np.asarray([0], np.int64), (np.zeros((1, 8), np.int32),))
    with pytest.raises(TypeError, match="tokens: expected an aligned contiguous array of 2-byte"):
        gather(np.asarray([0], np.int64), (np.zeros((1, 8), np.int16),))  # int16: not the unsigned format


def test_given_buffers_of_the_dtype_are_written_in_place_and_others_replaced():
    packed = ss.pack([np.arange(30, dtype=np.uint16)], 8, dtype="uint16")
    mine = {name: np.zeros((2, 8), np.uint16) for name in packed.names}
    mine["positions"] = np.zeros((2, 8), np.int32)  # the wrong dtype: a new array
    out = packed.getobs_batch_into(mine, np.asarray([1, -1]))  # a negative row counts from the end
    assert out["tokens"] is mine["tokens"] and out["segment_ids"] is mine["segment_ids"]
    assert out["positions"] is not mine["positions"] and out["positions"].dtype == np.uint16
    np.testing.assert_array_equal(out["tokens"][0], np.arange(8, 16))
    np.testing.assert_array_equal(out["tokens"][1], [24, 25, 26, 27, 28, 29, 0, 0])
    with pytest.raises(IndexError, match="sample index 4 is out of range for 4 samples"):
        packed.getobs_batch_into({}, np.asarray([0, 4]))


@pytest.mark.parametrize(
    "call, error, message",
    [
        (lambda: ss.pack([[1]], 4, dtype="int16"), TypeError, r"dtype must be one of int32, int64, uint16, uint32, got int16"),
        (lambda: ss.pack([[1]], 4, segments="no"), TypeError, r"segments must be True or False, got 'no'"),
        (lambda: ss.pack([[1]], 4, dtype="uint16", pad_id=70_000), ValueError, r"pad_id 70000 does not fit dtype uint16"),
        (lambda: ss.pack([[1]], 4, dtype="uint32", pad_id=-1), ValueError, r"pad_id -1 does not fit dtype uint32"),
    ],
)
def test_bad_output_settings_are_refused(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_segments_false_with_the_bin_packers_is_fine():
    docs = documents([3, 9, 4, 8, 1], np.uint16, "uint16")
    for method in ("best_fit", "first_fit"):
        rows = every_row(ss.pack(docs, 12, method=method, dtype="uint16", segments=False, pad_id=5))
        full = every_row(ss.pack(docs, 12, method=method, dtype="uint16", pad_id=5))
        assert list(rows) == ["tokens"]
        np.testing.assert_array_equal(rows["tokens"], full["tokens"])
        assert (full["segment_ids"] == 0).any() and np.all(rows["tokens"][full["segment_ids"] == 0] == 5)
