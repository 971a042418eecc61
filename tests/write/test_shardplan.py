"""write.shardplan: the split of a sharded write, decided up front from a probe."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from slipstream.write.shardplan import PROBE_RUN, PROBE_RUNS, probe_runs, split


def test_small_datasets_are_probed_whole_and_large_ones_in_evenly_spaced_runs():
    assert probe_runs(0) == [] and probe_runs(5) == [range(5)] and probe_runs(64) == [range(64)]
    runs = probe_runs(1000)
    assert len(runs) == PROBE_RUNS and all(len(r) == PROBE_RUN for r in runs)
    assert runs[0].start == 0 and runs[-1].stop == 1000  # from the first sample to the last
    assert all(a.stop <= b.start for a, b in zip(runs, runs[1:]))
    with pytest.raises(ValueError, match="count must be >= 0, got -1"):
        probe_runs(-1)


@given(count=st.integers(0, 5_000), per_sample=st.integers(1, 10_000), shard_size=st.integers(0, 10**7))
def test_the_split_covers_every_sample_once_in_equal_runs(count, per_sample, shard_size):
    probed = min(count, 64) or 1
    ranges = split(count, per_sample * probed, probed, shard_size)
    assert ranges[0].start == 0 and ranges[-1].stop == count
    assert all(a.stop == b.start for a, b in zip(ranges, ranges[1:]))
    sizes = [len(r) for r in ranges]
    assert max(sizes) - min(sizes) <= 1 and (min(sizes) >= 1 or count == 0)
    if count and shard_size:
        # as few shards as hold the estimate: each about shard_size, none over it by more than a sample's bytes
        assert len(ranges) == min(count, max(1, -(-count * per_sample // shard_size)))
        assert max(sizes) * per_sample <= shard_size + per_sample or len(ranges) == count


def test_the_split_is_in_integers_and_names_bad_numbers():
    assert split(10, 0, 10, 100) == [range(10)]  # samples of no bytes: one shard
    assert split(3, 30, 3, 0) == [range(0, 1), range(1, 2), range(2, 3)]  # shard_size 0: a sample each
    assert split(0, 0, 0, 100) == [range(0, 0)]  # an empty dataset is one empty shard
    big = 10**17 + 1  # bytes beyond a float's exact integers: still exact
    assert len(split(big, 3 * 64, 64, 10**14)) == 3001
    with pytest.raises(ValueError, match="shard_size must be an integer >= 0, got 1.5"):
        split(10, 10, 1, 1.5)
    with pytest.raises(ValueError, match="a probe of 0 samples"):
        split(10, 0, 0, 100)
