"""core.views: ``ObsView``, ``mapobs``, ``BatchView``, ``shuffleobs``, ``splitobs`` and ``joinobs``: indexing
(slices, masks, negative indices, views of views), laziness, batching arithmetic, seeded shuffles and
splits, and views as containers of the protocol."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import slipstream as ss
from slipstream.core.views import ObsView


def test_obsview_reindexes_and_supports_slices_masks_and_negative_indices():
    x = np.arange(10) * 10
    view = ss.obsview(x, [9, 0, -1])
    assert len(view) == 3
    assert [view[k] for k in range(3)] == [90, 0, 90]
    assert list(ss.obsview(x, slice(2, 5)).indices) == [2, 3, 4]
    mask = x % 20 == 0
    assert list(ss.obsview(x, mask).indices) == [0, 2, 4, 6, 8]
    with pytest.raises(IndexError, match="out of range"):
        ss.obsview(x, [10])
    with pytest.raises(ValueError, match="one entry per observation"):
        ss.obsview(x, [True, False])


@given(st.lists(st.integers(0, 19), max_size=30), st.data())
def test_a_view_of_a_view_indexes_the_original_data_through_one_array(first, data):
    x = np.arange(20) * 3
    outer = ss.obsview(x, first)
    second = data.draw(st.lists(st.integers(0, max(len(first) - 1, 0)), max_size=30)) if first else []
    inner = ss.obsview(outer, second)
    assert inner.data is x
    assert [inner[k] for k in range(len(inner))] == [x[first[j]] for j in second]


def test_views_read_groups_and_write_in_place():
    data = {"a": np.arange(6).reshape(3, 2), "b": ["p", "q", "r"]}
    view = ss.obsview(data, [2, 0])
    assert view[0]["b"] == "r"
    buffer = {"a": np.zeros(2, np.int64), "b": None}
    out = view.getobs_into(buffer, 1)
    np.testing.assert_array_equal(buffer["a"], [0, 1])
    assert out["b"] == "p"


def test_mapobs_applies_the_function_lazily():
    calls = []

    def double(v):
        calls.append(v)
        return v * 2

    view = ss.mapobs(double, np.arange(5))
    assert calls == [] and len(view) == 5
    assert view[3] == 6 and calls == [3]
    with pytest.raises(TypeError, match="callable"):
        ss.mapobs(3, [1])


@given(st.integers(0, 40), st.integers(1, 12), st.booleans())
def test_batchview_batches_cover_the_data_with_drop_last_arithmetic(n, size, drop_last):
    x = np.arange(n)
    batches = ss.batchview(x, size, drop_last=drop_last)
    expected = n // size if drop_last else -(-n // size)
    assert len(batches) == expected
    flat = [v for k in range(len(batches)) for v in batches[k]]
    assert flat == list(range(len(flat)))
    assert len(flat) == (expected * size if drop_last else n)


def test_batchview_collates_plain_containers_and_accepts_a_collate():
    data = [{"v": i, "s": str(i)} for i in range(5)]
    batch = ss.batchview(data, 2)[1]
    np.testing.assert_array_equal(batch["v"], [2, 3])
    assert batch["s"] == ["2", "3"]
    assert ss.batchview(data, 2, collate=len)[2] == 1
    with pytest.raises(ValueError, match="batch_size must be >= 1"):
        ss.batchview(data, 0)


def test_shuffleobs_is_a_seeded_permutation():
    x = np.arange(50)
    a, b = ss.shuffleobs(x, seed=7), ss.shuffleobs(x, seed=7)
    assert list(a.indices) == list(b.indices)
    assert sorted(a.indices) == list(range(50))
    assert list(ss.shuffleobs(x, seed=8).indices) != list(a.indices)


@given(st.integers(0, 60), st.floats(0.01, 0.99), st.booleans())
def test_splitobs_parts_are_disjoint_and_cover_the_data(n, at, shuffle):
    parts = ss.splitobs(np.arange(n), at=at, shuffle=shuffle, seed=1)
    assert len(parts) == 2
    assert len(parts[0]) == int(np.floor(at * n))
    seen = sorted(int(i) for p in parts for i in p.indices)
    assert seen == list(range(n))


def test_splitobs_takes_several_fractions_or_counts_and_rejects_too_many():
    a, b, c = ss.splitobs(np.arange(10), at=(0.5, 0.3))
    assert (len(a), len(b), len(c)) == (5, 3, 2)
    a, b = ss.splitobs(list(range(10)), at=4)
    assert (len(a), len(b)) == (4, 6)
    with pytest.raises(ValueError, match="ask for 12 observations but the data holds 10"):
        ss.splitobs(np.arange(10), at=(6, 6))
    with pytest.raises(ValueError, match=r"in \(0, 1\)"):
        ss.splitobs(np.arange(10), at=1.5)


def test_joinobs_concatenates_and_flattens_nested_joins():
    joined = ss.joinobs(np.arange(3), [10, 11], ss.joinobs(np.array([20]), [30, 31]))
    assert len(joined) == 8
    assert [joined[k] for k in range(8)] == [0, 1, 2, 10, 11, 20, 30, 31]
    assert len(joined.parts) == 4
    assert joined[-1] == 31
    with pytest.raises(IndexError):
        joined[8]


def test_views_are_containers_for_the_protocol_functions():
    view = ObsView(np.arange(6).reshape(3, 2), [2])
    assert ss.numobs(view) == 1
    np.testing.assert_array_equal(ss.getobs(view, 0), [4, 5])
