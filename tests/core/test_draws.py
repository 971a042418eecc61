"""core.draws: counter-based draws are a pure function of (seed, epoch, index, stream, k)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slipstream.core.draws import Draws
from slipstream.core.rng import sample_context, sample_draws

seeds = st.integers(0, 2**70)
indices = st.lists(st.integers(0, 2**40), min_size=1, max_size=30)


@settings(max_examples=200, deadline=None)
@given(seeds, st.integers(0, 10**6), indices, st.integers(0, 50), st.integers(1, 30))
def test_each_samples_numbers_do_not_depend_on_the_others_drawn_with_it(seed, epoch, idx, stream, count):
    together = Draws(seed, epoch, idx).uniforms(stream, count)
    assert together.shape == (len(idx), count) and together.dtype == np.float64
    assert ((together >= 0) & (together < 1)).all()
    for row, i in enumerate(idx):
        np.testing.assert_array_equal(Draws(seed, epoch, [i]).uniforms(stream, count)[0], together[row])
    order = np.random.default_rng(seed % 2**32).permutation(len(idx))
    np.testing.assert_array_equal(Draws(seed, epoch, np.asarray(idx)[order]).uniforms(stream, count), together[order])
    np.testing.assert_array_equal(Draws(seed, epoch, idx).take(order).uniforms(stream, count), together[order])
    np.testing.assert_array_equal(Draws(seed, epoch, idx).uniforms(stream, count + 3)[:, :count], together)  # a prefix


@settings(max_examples=100, deadline=None)
@given(seeds, st.integers(0, 1000), indices)
def test_a_block_is_its_streams_side_by_side(seed, epoch, idx):
    draws = Draws(seed, epoch, idx)
    block = draws.block(((3, 22), (0, 1), (7, 4)))
    expected = np.concatenate([draws.uniforms(3, 22), draws.uniforms(0, 1), draws.uniforms(7, 4)], axis=1)
    np.testing.assert_array_equal(block, expected)


def test_seeds_epochs_streams_and_indices_each_change_every_number():
    base = Draws(5, 2, [9]).uniforms(1, 8)
    for other in (Draws(6, 2, [9]), Draws(5 + 2**64, 2, [9]), Draws(5, 3, [9]), Draws(5, 2, [10])):
        assert not np.isin(other.uniforms(1, 8), base).any()
    assert not np.isin(Draws(5, 2, [9]).uniforms(2, 8), base).any()
    assert len(np.unique(base)) == 8


def test_the_numbers_are_uniform_and_uncorrelated():
    u = Draws(0, 0, np.arange(100_000)).uniforms(0, 4)
    assert abs(u.mean() - 0.5) < 0.005 and abs(u.var() - 1 / 12) < 0.002
    assert np.abs(np.corrcoef(u.T) - np.eye(4)).max() < 0.02
    consecutive = Draws(0, 0, np.arange(100_000)).uniforms(0, 1)[:, 0]
    assert abs(np.corrcoef(consecutive[:-1], consecutive[1:])[0, 1]) < 0.02  # neighbouring samples too
    counts = np.histogram(u, bins=20, range=(0, 1))[0]
    assert counts.min() > 0.95 * counts.mean()


def test_a_negative_seed_is_refused():
    with pytest.raises(ValueError, match="seed must be >= 0"):
        Draws(-1, 0, [0])


def test_sample_draws_follow_the_loading_context():
    with sample_context(3, 1) as ctx:
        ctx.batch(np.array([4, 8, 15]))
        batch = sample_draws(3).uniforms(0, 5)
        ctx.indices = None
        ctx.at(8)
        one = sample_draws(1).uniforms(0, 5)
    np.testing.assert_array_equal(batch, Draws(3, 1, [4, 8, 15]).uniforms(0, 5))
    np.testing.assert_array_equal(one[0], batch[1])
    assert not np.array_equal(sample_draws(1).uniforms(0, 5), sample_draws(1).uniforms(0, 5))  # outside: fresh
