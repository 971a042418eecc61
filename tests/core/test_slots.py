"""core.slots: the pool of batch buffers reuses a slot only once nothing references its arrays (views
included), drops kept slots when full, and sizes slots to the batch."""

import numpy as np

from slipstream.core.slots import SlotPool
from slipstream.core.spec import Spec


def make_pool(capacity=3):
    return SlotPool(Spec.of({"x": np.zeros(2, np.float32), "s": "a"}), batch_size=4, capacity=capacity)


def test_a_slot_is_reused_once_nothing_references_its_arrays():
    pool = make_pool()
    storage = pool.acquire(4)
    address = storage[0].__array_interface__["data"][0]
    del storage
    again = pool.acquire(4)
    assert again[0].__array_interface__["data"][0] == address
    assert pool.allocations == 1


def test_a_slot_held_through_a_view_is_not_reused():
    pool = make_pool()
    view = pool.acquire(4)[0][1:3]
    other = pool.acquire(4)
    assert other[0] is not view.base
    assert pool.allocations == 2


def test_kept_slots_leave_the_pool_when_it_is_full():
    pool = make_pool(capacity=2)
    kept = [pool.acquire(4) for _ in range(5)]
    assert pool.allocations == 5
    assert len({id(s[0]) for s in kept}) == 5


def test_object_leaves_get_fresh_lists_and_larger_batches_get_larger_slots():
    pool = make_pool()
    storage = pool.acquire(2)
    assert storage[1] == [None, None]
    big = pool.acquire(9)
    assert big[0].shape == (9, 2)
