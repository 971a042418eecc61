"""order.orders: a permutation holds each index once, is a pure function of seed and epoch, and differs
between epochs."""

from hypothesis import given
from hypothesis import strategies as st

from slipstream.order.orders import permutation


@given(st.integers(0, 300), st.integers(0, 2**63 - 1), st.integers(0, 1000))
def test_a_permutation_holds_each_index_once_and_is_a_pure_function_of_seed_and_epoch(n, seed, epoch):
    order = permutation(n, seed, epoch)
    assert sorted(order.tolist()) == list(range(n))
    assert permutation(n, seed, epoch).tolist() == order.tolist()


def test_each_epoch_gets_a_new_permutation():
    orders = {tuple(permutation(100, 5, epoch)) for epoch in range(5)}
    assert len(orders) == 5
