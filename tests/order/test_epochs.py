"""Epoch orders (order/epochs.py): the built-in ones and an order object given as ``order=``."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import slipstream as ss
from slipstream.order.epochs import BatchSamplerOrder, IndexOrder, SamplerOrder


class Listed:
    """An epoch order that gives fixed batches, different each epoch, and records its calls."""

    def __init__(self, batches, streamed=False):
        self.fixed, self.streamed, self.calls = batches, streamed, []

    def batches(self, epoch, n, seed):
        self.calls.append((epoch, n, seed))
        batches = [[(i + epoch) % n for i in b] for b in self.fixed]
        return iter(batches) if self.streamed else batches

    def num_batches(self, n):
        if self.streamed:
            raise TypeError("len() is unknown")
        return len(self.fixed)


@settings(max_examples=25, deadline=None)
@given(
    batches=st.lists(st.lists(st.integers(0, 19), min_size=1, max_size=6), min_size=1, max_size=6),
    workers=st.sampled_from([0, 2]),
    streamed=st.booleans(),
)
def test_a_loader_with_an_order_object_loads_exactly_its_batches_each_epoch(batches, workers, streamed):
    order = Listed(batches, streamed)
    loader = ss.DataLoader(np.arange(20) * 10, order=order, workers=workers, seed=5)
    for epoch in range(2):
        got = [b.tolist() for b in loader]
        assert got == [[10 * ((i + epoch) % 20) for i in b] for b in batches]
    assert order.calls == [(0, 20, 5), (1, 20, 5)]  # drawn once per epoch, when it starts
    if streamed:
        with pytest.raises(TypeError, match="unknown"):
            len(loader)
    else:
        assert len(loader) == len(batches)


def test_an_order_objects_bad_indices_are_named():
    class Bad(Listed):
        def batches(self, epoch, n, seed):
            return self.fixed

    loader = ss.DataLoader(np.arange(5), order=Bad([[0, 1], [7]]))
    with pytest.raises(IndexError, match="the order gave sample index 7, out of range for 5"):
        list(loader)
    with pytest.raises(ValueError, match="epoch order"):
        ss.DataLoader(np.arange(5), order=object())


def test_resuming_with_an_order_object_gives_the_rest_of_the_epoch():
    order = Listed([[0, 1], [2, 3], [4, 5], [6, 7]])
    loader = ss.DataLoader(np.arange(8), order=order)
    it = iter(loader)
    next(it), next(it)
    state = loader.state_dict()
    again = ss.DataLoader(np.arange(8), order=order)
    again.load_state_dict(state)
    assert [b.tolist() for b in again] == [[4, 5], [6, 7]]


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(0, 40),
    batch_size=st.integers(1, 7),
    drop_last=st.booleans(),
    world_size=st.integers(1, 4),
    kind=st.sampled_from(["sequential", "random"]),
)
def test_the_ranks_batches_cover_the_epoch_and_num_batches_is_exact(n, batch_size, drop_last, world_size, kind):
    orders = [IndexOrder(kind, None, batch_size, drop_last, r, world_size) for r in range(world_size)]
    shares = [o.batches(3, n, seed=11) for o in orders]
    for o, share in zip(orders, shares):
        assert len(share) == o.num_batches(n)
        assert all(len(b) == batch_size for b in share[: len(share) - 1])
    seen = np.concatenate([np.concatenate(s) if s else np.zeros(0, np.intp) for s in shares])
    if drop_last:
        assert len(set(seen.tolist())) == len(seen)  # nothing twice
    else:
        assert set(seen.tolist()) == set(range(n))  # nothing lost (padding repeats the start)


def test_a_sampler_order_equals_its_indices_cut_in_batches_and_a_batch_sampler_order_is_its_batches():
    sampler = [5, 3, 1, 0, 2, 4]
    assert [b.tolist() for b in SamplerOrder(sampler, 4, False, 0, 1).batches(0, 6, 0)] == [[5, 3, 1, 0], [2, 4]]
    assert [b.tolist() for b in BatchSamplerOrder([[1], [2, 3]], 0, 1).batches(0, 6, 0)] == [[1], [2, 3]]
    with pytest.raises(TypeError, match="integer sample indices"):
        SamplerOrder([0.5, 1.0], 2, False, 0, 1).batches(0, 6, 0)
