"""SharedList: a read-only list in shared memory that process workers read without copying."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from procdata import Holder

import slipstream as ss

psutil = pytest.importorskip("psutil")

values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text() | st.binary(),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=5), children, max_size=4),
    max_leaves=10,
)


@settings(max_examples=60, deadline=None)
@given(st.lists(values, max_size=30))
def test_items_round_trip_with_indices_negative_indices_slices_and_iteration(items):
    shared = ss.SharedList(items)
    assert len(shared) == len(items)
    assert list(shared) == items
    assert [shared[k] for k in range(-len(items), 0)] == items
    assert shared[1:-1:2] == items[1:-1:2]


def test_out_of_range_and_wrong_index_types_are_clear_errors():
    shared = ss.SharedList([1, 2, 3])
    with pytest.raises(IndexError, match="index 3 out of range for 3 items"):
        shared[3]
    with pytest.raises(TypeError, match="must be integers or slices, not str"):
        shared["a"]
    assert shared[np.int64(2)] == 3


def test_an_unpicklable_item_is_named():
    import threading

    with pytest.raises(TypeError, match="item 1 \\(lock\\) cannot be pickled"):
        ss.SharedList([1, threading.Lock()])


def test_each_read_is_a_fresh_object_so_mutating_it_changes_nothing():
    shared = ss.SharedList([{"a": [1]}])
    shared[0]["a"].append(2)
    assert shared[0] == {"a": [1]}


def test_plain_pickling_copies_the_bytes_and_round_trips():
    shared = ss.SharedList([{"k": k} for k in range(100)])
    copy = pickle.loads(pickle.dumps(shared))
    assert list(copy) == list(shared) and copy._segment.buffer is not shared._segment.buffer


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_process_workers_read_the_same_items(method):
    items = [{"id": k, "text": "x" * (k % 50)} for k in range(500)]
    data = Holder(ss.SharedList(items))
    with ss.DataLoader(data, 50, workers=2, backend="process", mp_context=method) as dl:
        got = [(int(i), int(s)) for b in dl for i, s in zip(b["id"], b["size"])]
    assert got == [(k, k % 50) for k in range(500)]


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_workers_do_not_copy_the_list_into_private_memory(method):
    # 40,000 items of 2 KiB: 80 MB of items; a worker reading all of a plain list copies most of it.
    # A worker's own interpreter and imports (numpy, slipstream; ~40 MiB when spawned) are private
    # too: measured on the same loader over 100 items, and taken off.
    def worker_uss(n):
        items = ss.SharedList({"id": k, "text": "y" * 2048 + str(k)} for k in range(n))
        with ss.DataLoader(Holder(items), 500, workers=2, backend="process", mp_context=method) as dl:
            for _ in dl:
                pass
            return items, [psutil.Process(pid).memory_full_info().uss for pid in dl.worker_pids]

    _, baseline = worker_uss(100)
    items, private = worker_uss(40_000)
    assert items.nbytes > 75 * 2**20
    for uss in private:
        grown = uss - max(baseline)
        assert grown < 0.5 * items.nbytes, f"a worker holds {grown / 2**20:.0f} MiB of private memory beyond its interpreter's"
