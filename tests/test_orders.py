import math
from collections import Counter

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from slipstream.core.orders import num_batches, permutation, shard, shard_batches, split_batches


@given(st.integers(0, 300), st.integers(0, 2**63 - 1), st.integers(0, 1000))
def test_a_permutation_holds_each_index_once_and_is_a_pure_function_of_seed_and_epoch(n, seed, epoch):
    order = permutation(n, seed, epoch)
    assert sorted(order.tolist()) == list(range(n))
    assert permutation(n, seed, epoch).tolist() == order.tolist()


def test_each_epoch_gets_a_new_permutation():
    orders = {tuple(permutation(100, 5, epoch)) for epoch in range(5)}
    assert len(orders) == 5


@given(st.integers(0, 200), st.integers(1, 9), st.booleans(), st.integers(0, 10**6))
def test_ranks_get_equal_shares_whose_union_is_the_data(n, world, drop_last, seed):
    order = permutation(n, seed, 0)
    shares = [shard(order, r, world, drop_last) for r in range(world)]
    sizes = {len(s) for s in shares}
    assert len(sizes) == 1
    counts = Counter(i for s in shares for i in s.tolist())
    if drop_last:
        assert len(shares[0]) == n // world
        assert all(c == 1 for c in counts.values())
        assert len(counts) == world * (n // world)
    else:
        assert len(shares[0]) == math.ceil(n / world)
        assert set(counts) == set(range(n))  # nothing lost
        duplicates = sum(c - 1 for c in counts.values())
        assert duplicates == world * math.ceil(n / world) - n  # only the documented padding


@given(st.integers(0, 100), st.integers(1, 16), st.booleans())
def test_split_batches_follows_drop_last_arithmetic(m, size, drop_last):
    order = np.arange(m)
    batches = split_batches(order, size, drop_last)
    assert len(batches) == num_batches(m, size, drop_last)
    assert all(len(b) == size for b in batches[:-1])
    flat = [i for b in batches for i in b.tolist()]
    assert flat == list(range(len(flat)))
    if drop_last:
        assert len(flat) == (m // size) * size
    else:
        assert len(flat) == m


@given(st.integers(0, 30), st.integers(1, 5))
def test_batch_sharding_gives_every_rank_the_same_count_and_loses_none(count, world):
    batches = [[k] for k in range(count)]
    shares = [shard_batches(batches, r, world) for r in range(world)]
    assert len({len(s) for s in shares}) == 1
    assert {b[0] for s in shares for b in s} == set(range(count))
