"""order.datastate: a change pending when the state is saved settles, after a resume, where the run
that saved it would have settled it, whatever the resumed loader's world size, batch size or prefetch.

The run that saved the state settles a pending change at its next ``next()``, at the first position
of the batch ``prefetch`` past those handed out (or, that batch beyond the epoch, at the next epoch's
start). A resumed loader with other batching or another prefetch would compute another position: the
state says where (``settle_at``), and the resumed loader settles there before it reads anything.
``Dial`` (tests/support/statedata.py): item ``i`` is ``[i, value]``.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from statedata import Dial

import slipstream as ss

BS = 4


def loaders(n, world_size, prefetch=2, batch_size=BS, workers=0):
    datas = [Dial(n) for _ in range(world_size)]
    made = [
        ss.DataLoader(d, batch_size=batch_size, workers=workers, prefetch=prefetch, rank=r, world_size=world_size, seed=1)
        for r, d in enumerate(datas)
    ]
    return datas, made


def lockstep(its, seen, epoch, steps=None):
    """``next()`` on every rank in turn (``steps`` times, or to the end), recording (epoch, position) -> value."""
    k = 0
    while steps is None or k < steps:
        got = [next(it, None) for it in its]
        if all(b is None for b in got):
            return
        for b in got:
            if b is not None:
                for i, v in np.asarray(b).reshape(-1, 2):
                    assert seen.setdefault((epoch, int(i)), int(v)) == int(v), f"position {i} read twice, differently"
        k += 1


def reference_and_resumed(n, steps, resumed_world_size, resumed_prefetch=2, resumed_batch_size=BS, workers=0):
    """The items of the rest of epoch 0 and of epoch 1, once from the 2-rank run that saved its state
    after ``steps`` steps and a pending change, once from a resume of that state."""
    datas, old = loaders(n, 2)
    its = [iter(loader) for loader in old]
    lockstep(its, {}, 0, steps)
    for d in datas:
        d.set(7)  # pending when the state is saved
    states = [json.loads(json.dumps(loader.state_dict())) for loader in old]
    want: dict = {}
    lockstep(its, want, 0)
    lockstep([iter(loader) for loader in old], want, 1)
    new, resumed = loaders(n, resumed_world_size, resumed_prefetch, resumed_batch_size, workers)
    for loader in resumed:
        loader.load_state_dict(states)
    got: dict = {}
    lockstep([iter(loader) for loader in resumed], got, 0)
    lockstep([iter(loader) for loader in resumed], got, 1)
    for loader in resumed:
        loader.close()
    return want, got, datas, new


@pytest.mark.parametrize(
    "world_size,prefetch,batch_size,workers",
    [(3, 2, BS, 0), (3, 2, BS, 2), (1, 2, BS, 0), (2, 4, BS, 0), (2, 2, 2 * BS, 0)],
    ids=["to 3 ranks", "to 3 ranks, 2 worker threads", "to 1 rank", "another prefetch", "another batch size"],
)
def test_a_change_pending_in_the_state_settles_where_the_saving_run_would_have(world_size, prefetch, batch_size, workers):
    want, got, datas, new = reference_and_resumed(96, 3, world_size, prefetch, batch_size, workers)
    assert {k: v for k, v in got.items() if k in want} == want  # every position read has the saving run's item
    assert set(want) <= set(got)
    assert all(d.state_dict() == datas[0].state_dict() for d in new)


@pytest.mark.parametrize("world_size", [1, 3])
def test_a_change_pending_past_the_epochs_last_settle_waits_for_the_next_epoch_after_a_resume(world_size):
    """The saving run had no batch ``prefetch`` ahead left in the epoch: its change waited for the next
    epoch's start; a resumed epoch with more batches left must not settle it mid-epoch."""
    want, got, datas, new = reference_and_resumed(48, 4, world_size)
    assert {k: v for k, v in want.items() if k[0] == 0} and all(v == 0 for k, v in want.items() if k[0] == 0)
    assert {k: v for k, v in got.items() if k in want} == want
    assert all(d.state_dict() == datas[0].state_dict() for d in new)


def test_a_resumed_state_saved_again_before_its_first_batch_keeps_the_position():
    datas, old = loaders(96, 2)
    its = [iter(loader) for loader in old]
    lockstep(its, {}, 0, 3)
    datas[0].set(7)
    saved = json.loads(json.dumps(old[0].state_dict()))
    _, again = loaders(96, 1, prefetch=5)
    again[0].load_state_dict(saved)
    twice = json.loads(json.dumps(again[0].state_dict()))
    assert twice["settle_at"] == saved["settle_at"] == 40  # batch 3 + 2 of the 2-rank run starts at 5 * 2 * BS
    it = iter(again[0])
    next(it)
    again_state = again[0].state_dict()
    assert again[0].data.state_dict()["changes"] == [[0, 0], [40, 7]] and again_state["settle_at"] != 40


def test_a_state_whose_settle_position_is_not_one_is_refused_and_nothing_changes():
    datas, old = loaders(96, 1)
    it = iter(old[0])
    next(it)
    datas[0].set(7)
    state = {**old[0].state_dict(), "settle_at": "12"}
    target = Dial(96)
    loader = ss.DataLoader(target, batch_size=BS, seed=1)
    before, data_before = loader.state_dict(), target.state_dict()
    with pytest.raises(ValueError, match="settle_at"):
        loader.load_state_dict(state)
    assert loader.state_dict() == before and target.state_dict() == data_before
