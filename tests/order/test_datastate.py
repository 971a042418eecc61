"""order.datastate: a stateful container's state is part of the loader's, and its run-time changes
settle at a position no worker has begun reading, the same for every backend, worker count and rank.

``Dial`` (tests/support/statedata.py) is the container: item ``i`` is ``[i, value]``, the value of the last
change that took effect at a position ``<= i``; it logs its reads and settle calls. Process-backend
loaders run with ``timeout=`` so a hang fails the test instead of holding the suite.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import snapshot
from statedata import Dial, FinishedDial, HomeOnlyDial, elastic_two_to_three, record_run

import slipstream as ss
from slipstream.order import datastate
from slipstream.order.deals import FRESH, Deal, deal_positions

BS, PREFETCH = 4, 2
CHANGES = {(0, 0): 5, (0, 3): 7, (0, 6): 9, (1, 0): 11, (1, 4): 13}  # (epoch, before next() number k) -> value
WORKERS = [(0, "thread"), (1, "thread"), (4, "thread"), (1, "process"), (4, "process"), (4, "helper")]


def make(data, workers=0, backend="thread", **kwargs):
    kwargs.setdefault("prefetch", PREFETCH)
    kwargs.setdefault("seed", 1)
    if backend != "thread" and workers:
        kwargs.setdefault("mp_context", "fork")
    return ss.DataLoader(data, batch_size=BS, workers=workers, backend=backend, timeout=60, **kwargs)


def run(loader, data, epochs=1, changes=CHANGES, wait=False):
    """The batches of ``epochs`` epochs, calling ``data.set(v)`` before the ``next()`` that ``changes``
    names; with ``wait``, before each ``next()`` the consumer waits (on the data's reads, not a clock)
    until the thread workers have read all they may: ``prefetch`` batches past those handed out."""
    out = []
    for e in range(epochs):
        it = iter(loader)
        k = 0
        while True:
            if (e, k) in changes:
                data.set(changes[(e, k)])
            if wait:
                data.wait_reads(min(len(data), (k + PREFETCH) * BS) + e * len(data))
            try:
                out.append(snapshot(next(it)))
            except StopIteration:
                break
            k += 1
    return out


def positions(data):
    return [p for p, _, _ in data.settles]


def expected(n, epochs, ahead, world_size=1, deal=FRESH, first_batch=0, opening=True):
    """The settle calls: 0 at a fresh epoch's start, then at each next() (the last one, which ends the
    epoch, too) the first position of the batches ``h + ahead``, while they lie within the epoch."""
    out = []
    for e in range(epochs):
        d = deal if e == 0 else FRESH
        batches = deal_positions(n, d, 0, world_size, BS, False)  # rank 0's: its batch m starts the global one
        if opening and (e > 0 or d.fresh and first_batch == 0):
            out.append(0)
        start = first_batch if e == 0 else 0
        for h in range(start, len(batches) + 1):
            if h + ahead < len(batches):
                out.append(int(batches[h + ahead][0]))
    return out


def consistent(batches, data):
    """Every item read is what the final state gives its position (a change never reached back)."""
    for b in batches:
        for i, v in np.asarray(b).reshape(-1, 2):
            assert v == data.value_at(int(i)), f"position {i} was read with value {v}, its value is {data.value_at(int(i))}"


def read_too_early(data):
    """The settles that came after a read of a position at or past theirs (reads logged in this process)."""
    bad, epoch_start = [], 0
    for p, before, _ in data.settles:
        if p == 0:
            epoch_start = before
        seen = data.reads[epoch_start:before]
        if seen and max(seen) >= p:
            bad.append((p, max(seen)))
    return bad


# -- state ------------------------------------------------------------------------------------


def test_the_data_state_is_in_the_loader_state_and_round_trips_through_json():
    data = Dial(40)
    loader = make(data)
    it = iter(loader)
    next(it)
    data.set(3)
    next(it)  # settles at the position of batch 1 + 2
    state = json.loads(json.dumps(loader.state_dict()))
    assert state["data"] == data.state_dict() and state["data"]["changes"] == [[0, 0], [12, 3]]
    fresh = Dial(40)
    make(fresh).load_state_dict(state)
    assert fresh.state_dict() == data.state_dict()


@pytest.mark.parametrize("workers,backend", [(0, "thread"), (2, "thread"), (2, "process")])
def test_resume_from_every_step_with_changes_pending_and_settled_gives_the_rest_exactly(workers, backend):
    """Changes are made before the state is saved (so some are pending in it), at the first step of an
    epoch (after its iterator settled at 0: the resumed one must not settle again) and mid-epoch."""
    n, epochs = 40, 2
    data = Dial(n)
    loader = make(data, workers, backend)
    with loader:
        states, batches = record_run(loader, data.set, CHANGES, epochs, snapshot)
    points = states if backend == "thread" else states[::7]  # a few restore points where workers start each time
    for state, e0, k0, consumed in points:
        fresh = Dial(n)
        resumed = make(fresh, workers, backend)
        resumed.load_state_dict(state)
        later = {key: v for key, v in CHANGES.items() if key > (e0, k0)}
        with resumed:
            rest = []
            for e in range(state["epoch"], epochs):
                it = iter(resumed)
                k = k0 if e == e0 else 0
                while True:
                    if (e, k) in later:
                        fresh.set(later[(e, k)])
                    try:
                        rest.append(snapshot(next(it)))
                    except StopIteration:
                        break
                    k += 1
        assert len(rest) == len(batches) - consumed, (e0, k0)
        for got, want in zip(rest, batches[consumed:]):
            np.testing.assert_array_equal(got, want, err_msg=f"resumed at epoch {e0} step {k0}")
        assert fresh.state_dict() == data.state_dict()


def test_a_refused_data_state_propagates_and_nothing_changes():
    data = Dial(40)
    loader = make(data)
    it = iter(loader)
    next(it)
    before, data_before = loader.state_dict(), data.state_dict()
    bad = {**before, "data": {"tag": "dial", "n": 41, "changes": [[0, 0]], "pending": None}}
    with pytest.raises(ValueError, match="Dial of 41 items"):
        loader.load_state_dict(bad)
    assert loader.state_dict() == before and data.state_dict() == data_before


def test_a_state_the_loader_refuses_puts_the_data_back_as_it_was():
    data = Dial(40)
    other = Dial(40)
    other.set(4)
    other.settle_changes(8)
    shuffled = {**make(Dial(40), shuffle=True, seed=1).state_dict(), "data": other.state_dict()}
    loader = make(data)
    before = loader.state_dict()
    with pytest.raises(ValueError, match="order"):
        loader.load_state_dict(shuffled)  # the data loaded first, then the loader refused the order
    assert data.loads == 2 and data.state_dict() == before["data"] and loader.state_dict() == before


def test_a_state_without_data_leaves_the_data_and_data_that_is_not_stateful_refuses_one():
    data = Dial(40)
    data.set(2)
    data.settle_changes(4)
    kept = data.state_dict()
    state = make(Dial(40)).state_dict()
    del state["data"]
    make(data).load_state_dict(state)
    assert data.state_dict() == kept and data.loads == 0
    with pytest.raises(ValueError, match="no state_dict/load_state_dict"):
        make(np.zeros((40, 2))).load_state_dict(make(Dial(40)).state_dict())
    assert "data" not in make(np.zeros((40, 2))).state_dict()


# -- where changes settle -------------------------------------------------------------------------


@pytest.mark.parametrize("workers,backend", WORKERS)
def test_settle_positions_and_batches_are_the_same_for_every_backend_and_worker_count(workers, backend):
    reference = Dial(60)
    want = run(make(reference), reference, epochs=2)
    data = Dial(60)
    with make(data, workers, backend) as loader:
        got = run(loader, data, epochs=2)
    assert positions(data) == positions(reference) == expected(60, 2, PREFETCH)
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        np.testing.assert_array_equal(g, w, err_msg=f"batch {k}")  # the worker copies read the new state from P on
    assert data.state_dict() == reference.state_dict()


@pytest.mark.parametrize("workers", [0, 1, 4])
def test_no_position_at_or_past_p_is_read_before_the_settle_at_p(workers):
    data = Dial(80)
    batches = run(make(data, workers), data, wait=workers > 0)
    assert data.settles and read_too_early(data) == []
    consistent(batches, data)


def test_the_read_check_catches_a_settle_one_batch_too_late(monkeypatch):
    """The check above can fail: with one batch less of margin, workers that ran ``prefetch`` ahead
    had read positions past P when it settled."""

    class Late(datastate.Settler):
        def __init__(self, data, first, ahead, changed):
            super().__init__(data, first, ahead - 1, changed)

    monkeypatch.setattr(datastate, "Settler", Late)
    data = Dial(80)
    run(make(data, 2), data, wait=True)
    assert read_too_early(data)


def test_world_size_2_ranks_in_lockstep_settle_at_the_same_global_positions():
    datas = [Dial(50), Dial(50)]
    loaders = [make(d, 2, rank=r, world_size=2) for r, d in enumerate(datas)]
    its = [iter(loader) for loader in loaders]
    got = [[], []]
    for k in range(len(loaders[0]) + 1):
        for r in range(2):
            if k == 2:
                datas[r].set(6)
            got[r].extend(snapshot(b) for b in [next(its[r], None)] if b is not None)
    assert positions(datas[0]) == positions(datas[1]) == expected(50, 1, PREFETCH, world_size=2)
    assert datas[0].state_dict() == datas[1].state_dict()
    for r in range(2):
        consistent(got[r], datas[r])


@pytest.mark.parametrize("listed", [True, False])
def test_an_elastic_resume_2_to_3_ranks_settles_at_the_same_positions_on_every_new_rank(listed):
    n, steps = 90, 3
    old, new, _, loaded, seen = elastic_two_to_three(lambda: Dial(n), make, Dial.set, 4, 8, listed, steps, snapshot)
    assert all(state == old[0].state_dict() for state in loaded)
    deal = Deal(steps * 2 * BS)
    saved = (steps + PREFETCH) * 2 * BS  # where the 2 old ranks would have settled next: the new ones settle there first
    assert positions(new[0]) == positions(new[1]) == positions(new[2]) == [saved, *expected(n, 1, PREFETCH, 3, deal)]
    assert len(new[0].state_dict()["changes"]) == 3
    consistent(seen, new[0])  # old and new ranks' items agree with the final state: nothing reached back
    items = sorted(int(i) for b in seen for i in np.asarray(b)[:, 0])
    assert set(items) == set(range(n))


def test_states_whose_data_disagree_are_refused_and_nothing_changes():
    datas = [Dial(40), Dial(40)]
    loaders = [make(d, rank=r, world_size=2) for r, d in enumerate(datas)]
    datas[1].set(3)
    datas[1].settle_changes(0)
    states = [loader.state_dict() for loader in loaders]
    target = Dial(40)
    loader = make(target, world_size=3)
    before = loader.state_dict()
    with pytest.raises(ValueError, match=r"disagree on 'data' \(ranks \[1\]"):
        loader.load_state_dict(states)
    assert target.loads == 0 and loader.state_dict() == before


def test_an_elastic_resume_between_disjoint_extra_positions_counts_them_out():
    """A deal with positions consumed beyond its prefix (batches that overtook the rest): the i-th
    position of what is left skips them."""
    n, deal = 64, Deal(8, [9, 10, 13, 20])
    first = datastate.sequential_first(ss.DataLoader(Dial(n), BS, world_size=2).options.epoch_order, n, deal)
    for m in range(10):
        want = deal_positions(n, deal, 0, 2, BS, False)
        assert first(m) == (int(want[m][0]) if m < len(want) else None)


def test_a_shuffled_order_settles_only_at_the_next_fresh_epochs_start():
    data = Dial(40)
    batches = run(make(data, 2, shuffle=True, seed=3), data, epochs=2, changes={(0, 2): 7, (1, 5): 9})
    assert positions(data) == [0, 0]  # one settle per epoch start, none at next()
    values = [set(np.asarray(b)[:, 1]) for b in batches]
    assert set().union(*values[:10]) == {0} and set().union(*values[10:]) == {7}
    assert data.pending == 9  # waits for the next epoch


def test_a_shuffled_epoch_resumed_mid_epoch_does_not_settle_at_its_start():
    data = Dial(40)
    loader = make(data, shuffle=True, seed=3)
    it = iter(loader)
    next(it)
    data.set(7)
    state = loader.state_dict()
    fresh = Dial(40)
    resumed = make(fresh, shuffle=True, seed=3)
    resumed.load_state_dict(state)
    rest = list(resumed)
    assert positions(fresh) == [] and fresh.pending == 7 and all(set(np.asarray(b)[:, 1]) == {0} for b in rest)


def test_out_of_order_output_settles_by_the_number_handed_out():
    data = Dial(120)
    batches = run(make(data, 4, in_order=False), data, wait=True)
    assert positions(data) == expected(120, 1, PREFETCH) and read_too_early(data) == []
    consistent(batches, data)
    assert sorted(int(i) for b in batches for i in np.asarray(b)[:, 0]) == list(range(120))


@pytest.mark.parametrize("workers", [0, 2])
def test_a_finisher_adds_finish_ahead_batches_of_margin(workers):
    data = FinishedDial(80)
    batches = run(make(data, workers, finish_ahead=3), data, wait=workers > 0)
    assert positions(data) == expected(80, 1, PREFETCH + 3) and read_too_early(data) == []
    consistent(batches, data)


# -- worker copies ------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ["process", "helper"])
def test_worker_processes_load_a_state_loaded_into_the_loader_before_their_next_jobs(backend):
    changed = Dial(40)
    changed.set(6)
    changed.settle_changes(0)
    data = Dial(40)
    with make(data, 2, backend) as loader:
        assert {int(v) for b in loader for v in np.asarray(b)[:, 1]} == {0}  # workers started, with value 0
        pids = loader.worker_pids
        loader.load_state_dict({**make(Dial(40)).state_dict(), "data": changed.state_dict()})
        values = {int(v) for b in loader for v in np.asarray(b)[:, 1]}
        assert loader.worker_pids == pids  # the same workers, told the new state
    assert values == {6}


@pytest.mark.parametrize("backend", ["process", "helper"])
def test_spawned_workers_get_the_state_at_their_start_and_each_change_after(backend):
    data = Dial(48)
    data.set(5)
    data.settle_changes(0)  # before the workers are pickled: the pickle holds it
    reference = Dial(48)
    reference.load_state_dict(data.state_dict())
    want = run(make(reference), reference, changes={(0, 3): 7})
    with make(data, 2, backend, mp_context="spawn") as loader:
        got = run(loader, data, changes={(0, 3): 7})
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)
    assert len(got) == len(want)


def test_a_worker_copy_that_refuses_the_state_raises_it_at_its_next_read():
    data = HomeOnlyDial(40)
    with make(data, 1, "process") as loader:
        it = iter(loader)
        next(it)
        data.set(3)
        with pytest.raises(ValueError, match="refuses states") as caught:
            list(it)
    assert any("worker 0's copy of the data" in note for note in getattr(caught.value, "__notes__", []))


# -- the torch drop-in ------------------------------------------------------------------------------


@pytest.mark.parametrize("workers", [0, 2])
def test_the_torch_drop_in_carries_the_dataset_state_and_settles_changes_at_epoch_starts(workers):
    torch = pytest.importorskip("torch")
    from slipstream.torch import DataLoader as TorchLoader

    torch.manual_seed(0)
    data = Dial(24)
    loader = TorchLoader(data, batch_size=BS, num_workers=workers, multiprocessing_context="fork" if workers else None)
    it = iter(loader)
    next(it)
    data.set(5)  # torch's sampler is an order of its own: it settles at the next epoch's start
    first = [b for b in it]
    state = json.loads(json.dumps(loader.state_dict()))
    second = [b for b in loader]
    assert state["loader"]["data"]["pending"] == 5 and positions(data) == [0, 0]
    assert {int(v) for b in first for v in b[:, 1]} == {0} and {int(v) for b in second for v in b[:, 1]} == {5}
    fresh = Dial(24)
    resumed = TorchLoader(fresh, batch_size=BS, num_workers=workers, multiprocessing_context="fork" if workers else None)
    resumed.load_state_dict(state)
    assert fresh.pending == 5  # loaded at load_state_dict: a refusal would raise there
    assert [b.tolist() for b in resumed] == [b.tolist() for b in second]
    bad = json.loads(json.dumps(state))
    bad["loader"]["data"]["n"] = 25
    with pytest.raises(ValueError, match="Dial of 25 items"):
        TorchLoader(Dial(24), batch_size=BS).load_state_dict(bad)
    loader.close()
    resumed.close()
