"""loading.readahead.FirstWindow: remote data hears of a loader's first batches when the loader is made.

Remote data (a ``remote`` attribute and ``prefetch``) records every hint. A loader hints the first
``depth_of(prefetch, workers)`` batches of the epoch it starts next as it is made, exactly the batches that
epoch then reads first (with ranks, and after ``load_state_dict``: the resumed epoch's), and ``iter()`` hints
only those after them; another start (a state loaded, a seed set) is hinted afresh. Orders it does not draw
itself (a sampler), batches read in other processes and data with a state of its own get no hint before
``iter()``.
"""

from __future__ import annotations

import numpy as np
import pytest

import slipstream as ss
from slipstream.loading.readahead import depth_of

BATCH = 4


class _Remote:
    """40 remote samples in pages of 7; records each hint."""

    remote = True

    def __init__(self, n: int = 40):
        self.n, self.hinted = n, []

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        return {"v": np.int64(i)}

    def page_starts(self) -> np.ndarray:
        return np.arange(0, self.n, 7, dtype=np.int64)

    def prefetch(self, indices) -> None:
        self.hinted.append([int(i) for i in indices])


def _read(loader: ss.DataLoader) -> list[list[int]]:
    return [batch["v"].tolist() for batch in loader]


@pytest.mark.parametrize("order", ["quasi_random", "random", "sequential"])
def test_a_loader_hints_the_batches_its_first_epoch_reads_first_when_it_is_made(order):
    data = _Remote()
    loader = ss.DataLoader(data, BATCH, order=order, seed=5)
    depth = depth_of(loader.prefetch, loader.workers)
    early = list(data.hinted)
    batches = _read(loader)
    assert early == batches[:depth]  # before iter(): the first batches, in order
    assert data.hinted == batches  # and iter() hinted the rest, each batch once


def test_each_rank_hints_its_own_first_batches():
    for rank in range(3):
        data = _Remote(100)
        loader = ss.DataLoader(data, BATCH, order="quasi_random", seed=5, rank=rank, world_size=3)
        early = list(data.hinted)
        batches = _read(loader)
        assert len(batches) > depth_of(2, 0)
        assert early == batches[: depth_of(2, 0)]
        assert data.hinted == batches


def test_a_loaded_state_hints_the_resumed_epochs_first_batches_instead():
    data = _Remote()
    loader = ss.DataLoader(data, BATCH, order="quasi_random", seed=5)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    del it

    data = _Remote()
    resumed = ss.DataLoader(data, BATCH, order="quasi_random", seed=5)
    data.hinted.clear()
    resumed.load_state_dict(state)
    early = list(data.hinted)
    rest = _read(resumed)
    assert early == rest[: len(early)] and len(early) == min(depth_of(2, 0), len(rest))
    assert data.hinted == rest  # each batch of the rest hinted once


def test_a_seed_set_before_iter_has_its_epoch_hint_every_batch_itself():
    data = _Remote()
    loader = ss.DataLoader(data, BATCH, order="random", seed=5)
    early = list(data.hinted)
    loader.seed = 6
    data.hinted.clear()
    batches = _read(loader)
    assert early != batches[: len(early)]  # the hints given for seed 5 were for other batches...
    assert data.hinted == batches  # ...so iter() hinted all of seed 6's


def test_the_second_epoch_is_hinted_by_its_own_iter():
    data = _Remote()
    loader = ss.DataLoader(data, BATCH, order="quasi_random", seed=5)
    _read(loader)
    data.hinted.clear()
    second = _read(loader)
    assert data.hinted == second


def test_no_hint_before_iter_for_a_sampler_other_processes_or_stateful_data():
    data = _Remote()
    ss.DataLoader(data, BATCH, sampler=list(range(39, -1, -1)))
    assert data.hinted == []
    with ss.DataLoader(data, BATCH, order="random", seed=1, workers=1, backend="process"):  # (no worker starts before iter())
        assert data.hinted == []

    class Stateful(_Remote):
        def state_dict(self) -> dict:
            return {}

        def load_state_dict(self, state: dict) -> None:
            pass

    stateful = Stateful()
    ss.DataLoader(stateful, BATCH, order="random", seed=1)
    assert stateful.hinted == []


def test_data_that_is_not_remote_hears_nothing():
    class Local(_Remote):
        remote = False

    data = Local()
    _read(ss.DataLoader(data, BATCH, order="random", seed=1))
    assert data.hinted == []


def test_a_hint_that_raises_changes_nothing():
    class Broken(_Remote):
        def prefetch(self, indices) -> None:
            raise RuntimeError("no network")

    with pytest.raises(RuntimeError, match="no network"):  # iter()'s own read-ahead still meets it, as before
        _read(ss.DataLoader(Broken(), BATCH, order="random", seed=1))
