"""ss.pack: packed rows are a partition of the documents (hypothesis), the compiled gather equals
the NumPy reference, dtypes convert, every source kind packs (in-memory, packed files, shards,
a hand-made Documents), pickles travel, the loader gives the same batches for every backend,
worker count and rank split and resumes exactly, and bad input is refused by name."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from helpers import assert_resumes_exactly, assert_same, no_seqcore, snapshot
from hypothesis import given, settings
from hypothesis import strategies as st

import slipstream as ss
from slipstream import fields as F
from slipstream.sequences.documents import ArrayDocuments, Documents, documents_of
from slipstream.sequences.packplan import kernels

kernel, why = kernels()
needs_kernel = pytest.mark.skipif(kernel is None, reason=f"slipstream.sequences._packing: {why}")
SPAN = 1000  # token id = document * SPAN + position: every token says where it came from


def numbered(lengths: list[int], dtype=np.int64) -> list[np.ndarray]:
    return [(d * SPAN + np.arange(n)).astype(dtype) for d, n in enumerate(lengths)]


def all_rows(packed) -> dict[str, np.ndarray]:
    return packed.getobs_batch_into({}, np.arange(len(packed)))


def segments(rows: dict[str, np.ndarray], field: str = "tokens"):
    """(row, segment id, tokens, positions) of every segment, checking the row layout as it goes:
    segment ids 1, 2, ... then padding (0) to the end; positions 0.. in each segment and padding run."""
    for k, (tokens, seg, pos) in enumerate(zip(rows[field], rows["segment_ids"], rows["positions"])):
        ids = seg[seg > 0]
        starts = np.flatnonzero(np.diff(np.concatenate([[0], seg])) != 0)
        assert np.all(seg[: ids.size] > 0) and np.all(seg[ids.size :] == 0), f"row {k}: padding before a segment"
        expected_ids = np.repeat(np.arange(1, len(starts) + 1), np.diff(np.concatenate([starts, [seg.size]])))
        if ids.size < seg.size:
            expected_ids[ids.size :] = 0
        np.testing.assert_array_equal(seg, expected_ids, err_msg=f"row {k}: segment ids")
        pad = seg.size - ids.size
        np.testing.assert_array_equal(pos[ids.size :], np.arange(pad), err_msg=f"row {k}: padding positions")
        for s in range(1, int(ids.max(initial=0)) + 1):
            where = seg == s
            np.testing.assert_array_equal(pos[where], np.arange(where.sum()), err_msg=f"row {k} segment {s}: positions")
            yield k, s, tokens[where], pos[where]


lengths_st = st.lists(st.integers(0, 90), min_size=1, max_size=60)


@settings(max_examples=80, deadline=None)
@given(lengths_st, st.integers(1, 40), st.sampled_from([None, 0, 3]))
def test_concat_holds_every_token_of_every_document_once_in_order(lengths, length, seed):
    if sum(lengths) == 0:
        return
    packed = ss.pack(numbered(lengths), length, method="concat", seed=seed)
    rows = all_rows(packed)
    assert len(packed) == -(-sum(lengths) // length)
    stream = np.concatenate([t for _, _, t, _ in segments(rows)])
    order = range(len(lengths)) if seed is None else packed.plan.order.tolist()
    np.testing.assert_array_equal(stream, np.concatenate([numbered(lengths)[d] for d in order]))
    assert int((rows["segment_ids"] == 0).sum()) == len(packed) * length - sum(lengths)  # padding: the last row's tail only
    assert packed.stats()["padding"] == len(packed) * length - sum(lengths)
    for k, s, tokens, _ in segments(rows):
        assert len(set((tokens // SPAN).tolist())) == 1, f"row {k} segment {s} mixes documents"


@settings(max_examples=80, deadline=None)
@given(
    lengths_st,
    st.integers(1, 40),
    st.sampled_from(["best_fit", "first_fit"]),
    st.sampled_from([None, 0, 5]),
    st.sampled_from(["split", "truncate"]),
)
def test_bins_hold_every_document_once_whole_or_in_its_pieces(lengths, length, method, seed, too_long):
    if sum(lengths) == 0:
        return
    packed = ss.pack(numbered(lengths), length, method=method, seed=seed, too_long=too_long, pad_id=-1)
    rows = all_rows(packed)
    assert np.all(rows["tokens"][rows["segment_ids"] == 0] == -1)
    seen: dict[int, list[np.ndarray]] = {}
    for _, _, tokens, _ in segments(rows):
        doc = int(tokens[0] // SPAN)
        assert np.all(tokens // SPAN == doc)
        seen.setdefault(doc, []).append(tokens % SPAN)
    assert sorted(seen) == [d for d, n in enumerate(lengths) if n]
    for doc, parts in seen.items():
        n = lengths[doc]
        if n <= length or too_long == "truncate":
            assert len(parts) == 1
            np.testing.assert_array_equal(parts[0], np.arange(min(n, length)))  # whole (or its first `length`)
        else:
            got = np.sort(np.concatenate(parts))
            np.testing.assert_array_equal(got, np.arange(n))  # every token once
            assert all(p.size == length or p.size == n % length for p in parts)


@needs_kernel
@settings(max_examples=60, deadline=None)
@given(
    lengths_st,
    st.integers(1, 40),
    st.sampled_from(["concat", "best_fit", "first_fit"]),
    st.sampled_from([np.uint16, np.int32, np.uint32, np.int64, np.uint8, np.int8]),
    st.sampled_from(["int32", "int64"]),
)
def test_the_compiled_gather_gives_the_reference_rows(lengths, length, method, stored, dtype):
    if sum(lengths) == 0:
        return
    rng = np.random.default_rng(len(lengths))
    info, out = np.iinfo(stored), np.iinfo(dtype)  # ids that fit the output (others: tests/sequences/test_pack_edges.py)
    low, high = max(info.min, out.min), min(info.max, out.max)
    docs = [rng.integers(low, high, n, endpoint=True).astype(stored) for n in lengths]
    compiled = ss.pack(docs, length, method=method, dtype=dtype, pad_id=7)
    with no_seqcore():
        reference = ss.pack(docs, length, method=method, dtype=dtype, pad_id=7)
    assert compiled.kernel_status == "active" and reference.kernel_status.startswith("disabled")
    indices = rng.permutation(len(compiled))
    assert_same(all_rows(compiled), all_rows(reference))
    assert_same(compiled.getobs_batch_into({}, indices), reference.getobs_batch_into({}, indices))
    row = compiled[len(compiled) - 1]
    tokens = np.concatenate([d for d in docs])
    assert row["tokens"].dtype == np.dtype(dtype) and set(np.unique(row["tokens"][row["segment_ids"] > 0])) <= set(
        tokens.astype(dtype).tolist()
    )


def test_an_item_is_the_row_of_a_batch_and_negative_indices_count_from_the_end():
    packed = ss.pack(numbered([5, 9, 3, 12, 7]), 8, method="best_fit", seed=None)
    rows = all_rows(packed)
    for k in range(len(packed)):
        item = packed[k]
        assert list(item) == ["tokens", "segment_ids", "positions"]
        assert_same(item, {name: rows[name][k] for name in item})
    assert_same(packed[-1], packed[len(packed) - 1])
    with pytest.raises(IndexError, match=r"row 99 is out of range for \d+ rows"):
        packed[99]
    with pytest.raises(TypeError, match="row index must be an integer"):
        packed[1.0]


def test_the_batch_is_written_into_the_buffers_given():
    packed = ss.pack(numbered([5, 9, 3, 12, 7]), 8)
    buffer = {name: np.full((2, 8), -5, np.int32) for name in ("tokens", "segment_ids", "positions")}
    out = packed.getobs_batch_into(buffer, np.asarray([1, 0]))
    assert all(out[name] is buffer[name] for name in buffer)
    assert_same(out["tokens"][1], packed[0]["tokens"])
    odd = {"tokens": np.zeros((2, 8), np.int64), "positions": np.zeros((2, 8), np.int32)[:, ::1]}
    out = packed.getobs_batch_into(odd, [0, 1])  # wrong dtype: a new array; missing: made
    assert out["tokens"] is not odd["tokens"] and out["positions"] is odd["positions"] and out["tokens"].dtype == np.int32
    spec = packed.batch_spec()
    assert [leaf.shape for leaf in spec.array_leaves] == [(8,)] * 3


def test_stats_and_repr_say_rows_tokens_and_padding():
    packed = ss.pack(numbered([5, 9, 0, 3, 12, 7]), 8, method="best_fit", too_long="truncate")
    s = packed.stats()
    assert s["documents"] == 6 and s["empty_documents"] == 1 and s["long_documents"] == 2 and s["truncated_tokens"] == 5
    assert s["tokens"] == 31 and s["rows"] == len(packed) and s["padding"] == s["rows"] * 8 - 31
    assert s["padding_fraction"] == pytest.approx(packed.padding_fraction) and s["lower_bound_rows"] == 4
    assert "method='best_fit'" in repr(packed) and f"{len(packed)} rows of 8 int32 tokens from 6 documents" in repr(packed)


def test_dicts_lists_and_a_2d_array_are_documents():
    rows = [{"ids": [1, 2, 3], "text": "a"}, {"ids": np.asarray([4, 5], np.uint16), "text": "b"}]
    packed = ss.pack(rows, 4, field="ids", seed=None)
    assert list(packed[0]) == ["ids", "segment_ids", "positions"]
    assert packed[0]["ids"].tolist() == [1, 2, 3, 4] and packed[1]["ids"].tolist() == [5, 0, 0, 0]
    grid = ss.pack(np.arange(12).reshape(3, 4), 6, seed=None)
    assert grid[1]["tokens"].tolist() == list(range(6, 12))
    assert ss.pack(iter([[1, 2], [3]]), 3, seed=None)[0]["tokens"].tolist() == [1, 2, 3]


def test_a_hand_made_documents_in_pages_packs():
    class Paged(Documents):
        def __init__(self):
            self.parts = [numbered([3, 4]), [], numbered([0, 0, 5])]  # page 1 holds no document
            lengths = [3, 4, 5]
            super().__init__("paged", [0, 2, 2, 3], np.int64, lengths)

        def page(self, p):
            docs = [d for d in numbered([3, 4, 5])]
            chosen = {0: docs[:2], 1: [], 2: docs[2:]}[p]
            offsets = np.concatenate([[0], np.cumsum([d.size for d in chosen])]).astype(np.int64)
            return offsets, np.concatenate(chosen) if chosen else np.zeros(0, np.int64)

    for method in ("concat", "best_fit"):
        packed = ss.pack(Paged(), 6, method=method, seed=None)
        stream = sorted(np.concatenate([t for _, _, t, _ in segments(all_rows(packed))]).tolist())
        assert stream == sorted(np.concatenate(numbered([3, 4, 5])).tolist())


class Fetched(ArrayDocuments):
    """Documents in several pages that are not resident (as pages fetched from object storage):
    a gather asks for just the pages it reads."""

    resident = False

    def __init__(self, docs, per_page):
        whole = ArrayDocuments(np.concatenate([[0], np.cumsum([d.size for d in docs])]), np.concatenate(docs), "fetched")
        Documents.__init__(
            self, "fetched", list(range(0, len(docs), per_page)) + [len(docs)], whole.dtype, whole.lengths, resident=False
        )
        self.whole, self.reads = whole, []

    def page(self, p):
        self.reads.append(p)
        a, b = int(self.page_first[p]), int(self.page_first[p + 1])
        offsets = self.whole.offsets[a : b + 1]
        return offsets - offsets[0], self.whole.values[offsets[0] : offsets[-1]]


@pytest.mark.parametrize("method", ["concat", "best_fit"])
def test_documents_not_resident_are_read_page_by_page_as_a_batch_needs_them(method):
    docs = numbered([int(n) for n in np.random.default_rng(2).integers(1, 60, 80)])
    fetched = Fetched(docs, per_page=8)
    packed, memory = ss.pack(fetched, 32, method=method), ss.pack(docs, 32, method=method)
    fetched.reads.clear()
    assert_same(packed.getobs_batch_into({}, [3]), memory.getobs_batch_into({}, [3]))
    assert 1 <= len(fetched.reads) <= 3 and len(set(fetched.reads)) == len(fetched.reads)  # the row's pages, once each
    assert_same(all_rows(packed), all_rows(memory))


@needs_kernel
def test_the_compiled_gather_refuses_bad_buffers_without_crashing():
    packed = ss.pack(numbered([5, 3]), 8, method="best_fit")
    plan, docs = packed.plan, packed.documents
    offsets, values = docs.page(0)
    table = (
        np.asarray([0, 2], np.int64),
        np.asarray([offsets.ctypes.data], np.uint64),
        np.asarray([values.ctypes.data], np.uint64),
        np.asarray([values.size], np.int64),
    )
    extra = (plan.bin_offsets, plan.bin_items, docs.lengths, plan.extra_doc, plan.extra_start)
    out = [np.zeros((1, 8), np.int32) for _ in range(3)]
    missing = np.zeros(4, np.int64)
    assert kernel.rows_bins(np.asarray([0]), *table, *out, missing, *extra, 8, 0, 5, 0, 0) == 0
    with pytest.raises(ValueError, match="tokens holds 8 values, not 2 rows of 8"):
        kernel.rows_bins(np.asarray([0, 1]), *table, *out, missing, *extra, 8, 0, 5, 0, 0)
    with pytest.raises(ValueError, match="row 7 is out of range"):
        kernel.rows_bins(np.asarray([7]), *table, *out, missing, *extra, 8, 0, 5, 0, 0)
    with pytest.raises(TypeError, match="segment_ids: expected an aligned contiguous array of 4-byte"):
        kernel.rows_bins(np.asarray([0]), *table, out[0], np.zeros((1, 8), np.int64), out[2], missing, *extra, 8, 0, 5, 0, 0)
    with pytest.raises((TypeError, ValueError)):
        kernel.rows_bins(
            np.asarray([0]), *table, out[0], out[1], np.zeros((1, 16), np.int32)[:, ::2], missing, *extra, 8, 0, 5, 0
        )
    longer = docs.lengths + 100  # lengths the page does not have: caught, never read past
    with pytest.raises(
        ValueError, match=r"document 0 \(page 0, row 0\): tokens 0..8 are not inside it \(offsets 0..5 of 8 values\)"
    ):
        kernel.rows_bins(
            np.asarray([0]),
            *table,
            *out,
            missing,
            plan.bin_offsets,
            plan.bin_items,
            longer,
            plan.extra_doc,
            plan.extra_start,
            8,
            0,
            5,
            0,
            0,
        )
    with pytest.raises(ValueError, match="bad token type"):
        kernel.rows_bins(np.asarray([0]), *table, *out, missing, *extra, 8, 0, 42, 0, 0)


def test_a_page_that_disagrees_with_the_lengths_is_refused_by_name():
    class Lying(ArrayDocuments):
        def page(self, p):
            offsets, values = super().page(p)
            return offsets * 2, np.concatenate([values, values])  # every document twice as long

    docs = Lying(np.asarray([0, 3, 5]), np.arange(5), name="liar")
    for method in ("concat", "best_fit"):
        packed = ss.pack(docs, 4, method=method)
        with pytest.raises(ValueError, match=r"liar: page 0 \(documents 0..1\): its offsets disagree with the document lengths"):
            packed[0]


@pytest.fixture
def token_file(tmp_path):
    rng = np.random.default_rng(3)
    docs = [rng.integers(0, 60000, int(n)).astype(np.uint16) for n in rng.integers(0, 200, 600)]
    path = tmp_path / "tokens.ss"
    ss.write(
        path,
        [{"tokens": d, "n": i} for i, d in enumerate(docs)],
        fields={"tokens": F.Tokens(), "n": F.Int()},
        page_size=16 * 1024,
    )
    return path, docs


@pytest.mark.parametrize("method", ["concat", "best_fit", "first_fit"])
def test_a_packed_file_packs_as_its_documents_do_and_pickles_without_its_tokens(token_file, method):
    path, docs = token_file
    data = ss.open(path)
    assert data.num_pages > 2
    packed, memory = ss.pack(data, 256, method=method), ss.pack(docs, 256, method=method)
    assert_same(all_rows(packed), all_rows(memory))
    blob = pickle.dumps(packed)
    assert len(blob) < sum(d.nbytes for d in docs) / 4
    assert_same(all_rows(pickle.loads(blob)), all_rows(memory))
    shards = ss.open([path, path])
    assert_same(all_rows(ss.pack(shards, 256, method=method)), all_rows(ss.pack(docs + docs, 256, method=method)))


def test_a_token_file_packs_through_its_own_documents(tmp_path):
    rng = np.random.default_rng(5)
    docs = [np.append(rng.integers(1, 500, int(n)), 0).astype(np.uint16) for n in rng.integers(0, 90, 200)]
    path = tmp_path / "train.bin"
    np.concatenate(docs).tofile(path)
    for method in ("concat", "best_fit"):
        packed = ss.pack(ss.token_file(path, dtype="uint16", eod=0), 64, method=method)
        assert_same(all_rows(packed), all_rows(ss.pack(docs, 64, method=method)))
        assert_same(all_rows(pickle.loads(pickle.dumps(packed))), all_rows(packed))


def test_a_packed_file_field_that_is_not_tokens_is_named(token_file):
    path, _ = token_file
    with pytest.raises(TypeError, match=r"tokens.ss: field 'n' is .*not token documents"):
        ss.pack(ss.open(path), 8, field="n")
    with pytest.raises(KeyError, match=r"no field 'ids' to pack; it has \['tokens', 'n'\]"):
        ss.pack(ss.open(path), 8, field="ids")
    assert len(documents_of(ss.open(path), "tokens")) == 600


def loader_batches(data, **options):
    with ss.DataLoader(data, 8, shuffle=True, seed=4, timeout=60, **options) as loader:
        return [snapshot(b) for b in loader]


@pytest.mark.parametrize("method", ["concat", "best_fit"])
def test_the_loader_gives_the_same_batches_for_every_backend_and_worker_count(token_file, method):
    path, _ = token_file
    packed = ss.pack(ss.open(path), 128, method=method)
    expected = loader_batches(packed)
    assert len(expected) == -(-len(packed) // 8)
    for backend, workers in [("thread", 1), ("thread", 4), ("process", 1), ("process", 4), ("helper", 2)]:
        got = loader_batches(packed, backend=backend, workers=workers)
        assert_same(got, expected, f"{backend} x {workers}")
    spawned = loader_batches(packed, backend="process", workers=2, mp_context="spawn")
    assert_same(spawned, expected, "spawn")


def test_two_ranks_together_read_every_row():
    packed = ss.pack(numbered([30, 5, 17, 44, 8, 26, 9, 13, 2, 40]), 16, method="best_fit")
    seen = []
    for rank in (0, 1):
        for batch in loader_batches(packed, rank=rank, world_size=2, drop_last=False):
            seen += [tuple(row) for row in batch["tokens"].tolist()]
    every = [tuple(packed[k]["tokens"].tolist()) for k in range(len(packed))]
    assert set(seen) == set(every) and len(set(every)) == len(every)
    assert len(every) <= len(seen) < len(every) + 2  # the loader evens out the ranks by repeating at most one row


@pytest.mark.parametrize("method", ["concat", "first_fit"])
def test_a_resumed_loader_gives_the_rest_of_the_epoch_exactly(method):
    packed = ss.pack(numbered([30, 5, 17, 44, 8, 26, 9, 13, 2, 40] * 3), 16, method=method)
    assert assert_resumes_exactly(lambda: ss.DataLoader(packed, 4, shuffle=True, seed=2, workers=2)) > 10


@pytest.mark.parametrize(
    "call, error, message",
    [
        (
            lambda: ss.pack([[1.5, 2.0]], 4),
            TypeError,
            r"document 0, field 'tokens': expected integer token ids, got dtype float64",
        ),
        (
            lambda: ss.pack([[1, 2], [[1, 2]]], 4),
            ValueError,
            r"document 1, field 'tokens': expected a 1-d array of token ids, got shape \(1, 2\)",
        ),
        (lambda: ss.pack([{"ids": [1]}], 4), KeyError, r"document 0 has no field 'tokens'"),
        (lambda: ss.pack([[True, False]], 4), TypeError, r"got dtype bool"),
        (
            lambda: ss.pack([[1]], 4, method="greedy"),
            ValueError,
            r"unknown method 'greedy'; expected one of 'concat', 'best_fit', 'first_fit'",
        ),
        (lambda: ss.pack([[1]], 0), ValueError, r"length must be at least 1, got 0"),
        (lambda: ss.pack([[1]], 2.5), TypeError, r"length must be an integer"),
        (lambda: ss.pack([], 4), ValueError, r"holds no documents \(field 'tokens'\)"),
        (lambda: ss.pack([[], []], 4), ValueError, r"the 2 documents of .* hold no tokens"),
        (
            lambda: ss.pack([[1, 2, 3]], 2, method="best_fit", too_long="error"),
            ValueError,
            r"document 0 has 3 tokens, more than length=2",
        ),
        (lambda: ss.pack([[1]], 4, too_long="drop"), ValueError, r"too_long must be one of"),
        (lambda: ss.pack([[1]], 4, dtype="float32"), TypeError, r"dtype must be one of int32, int64, uint16, uint32, got float32"),
        (lambda: ss.pack([[1]], 4, pad_id=2**40), ValueError, r"pad_id 1099511627776 does not fit dtype int32"),
        (lambda: ss.pack([[1]], 4, seed=-1), ValueError, r"seed must be None or an integer >= 0"),
        (lambda: ss.pack([[1]], 4, field="positions"), ValueError, r"field must be a name other than"),
        (lambda: ss.pack(np.zeros((2, 2, 2), np.int32), 4), ValueError, r"shape \(2, 2, 2\) is not token documents"),
    ],
)
def test_bad_input_is_refused_naming_the_field_or_document(call, error, message):
    with pytest.raises(error, match=message):
        call()
