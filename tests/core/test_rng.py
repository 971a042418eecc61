"""core.rng: ``sample_rng()`` is a function of seed, epoch and index inside a sample context (nested and per
thread), independent of the order's stream, and a working generator outside a loader."""

import threading

import numpy as np

import slipstream as ss
from slipstream.core.rng import sample_context, seed_rng
from slipstream.order.orders import permutation


def test_outside_a_loader_sample_rng_returns_a_working_generator():
    assert isinstance(ss.sample_rng(), np.random.Generator)


def test_inside_a_context_the_generator_is_a_function_of_seed_epoch_and_index():
    with sample_context(seed=3, epoch=1) as ctx:
        ctx.at(7)
        first = ss.sample_rng().integers(0, 2**32, size=4)
        continued = ss.sample_rng().integers(0, 2**32, size=4)  # same sample: the stream continues
        ctx.at(7)
        again = ss.sample_rng().integers(0, 2**32, size=4)
    np.testing.assert_array_equal(first, again)
    assert not np.array_equal(first, continued)
    np.testing.assert_array_equal(first, seed_rng(3, 1, 7).integers(0, 2**32, size=4))


def test_different_seeds_epochs_and_indices_give_different_streams():
    draws = {tuple(seed_rng(s, e, i).integers(0, 2**32, size=2)) for s in (0, 1) for e in (0, 1) for i in (0, 1)}
    assert len(draws) == 8


def test_sample_streams_are_independent_of_the_order_stream():
    # index 0's generator must not replay the permutation's generator for the same (seed, epoch)
    perm_bits = np.random.Generator(np.random.PCG64(np.random.SeedSequence(5, spawn_key=(1, 0)))).integers(0, 2**32, 4)
    assert not np.array_equal(perm_bits, seed_rng(5, 0, 0).integers(0, 2**32, 4))
    assert sorted(permutation(10, 5, 0)) == list(range(10))


def test_contexts_nest_and_are_per_thread():
    seen = {}
    with sample_context(1, 0) as outer:
        outer.at(2)
        with sample_context(9, 9) as inner:
            inner.at(9)
        seen["after"] = ss.sample_rng().integers(0, 2**32)

        def other_thread():
            seen["thread"] = ss.sample_rng() is ss.sample_rng()  # no context there: fresh generators

        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
    assert seen["after"] == seed_rng(1, 0, 2).integers(0, 2**32)
    assert seen["thread"] is False
