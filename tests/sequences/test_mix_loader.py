"""ss.mix under ss.DataLoader: runtime weight changes (set_weights between next() calls) settle
where the loader says, are part of loader.state_dict(), and a resume, also elastic onto another
number of ranks, reproduces the same sequence, for every backend and worker count.

Items are {"tokens": [source, index]} so a batch says which item of which source it holds.
Process-backend loaders run with ``timeout=`` so a hang fails the test instead of holding the suite.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import snapshot
from statedata import elastic_two_to_three, record_run

import slipstream as ss

BS, PREFETCH = 4, 2
LENGTHS = {"web": 50, "code": 23, "math": 9}
CHANGES = {(0, 1): {"web": 0, "code": 1, "math": 1}, (0, 5): {"web": 3, "code": 1, "math": 0}, (1, 2): {"web": 1, "code": 1, "math": 1}}


def sources():
    return {name: [{"tokens": np.array([i, j])} for j in range(n)] for i, (name, n) in enumerate(LENGTHS.items())}


def mixture(length=96, schedule=False):
    weights = [(0, {"web": 0.6, "code": 0.3, "math": 0.1}), (40, {"web": 0.2, "code": 0.4, "math": 0.4})] if schedule \
        else {"web": 0.6, "code": 0.3, "math": 0.1}
    return ss.mix(sources(), weights, seed=7, length=length, ramp=schedule)


def make(data, workers=0, backend="thread", **kwargs):
    kwargs.setdefault("prefetch", PREFETCH)
    kwargs.setdefault("seed", 1)
    if backend != "thread" and workers:
        kwargs.setdefault("mp_context", "fork")
    return ss.DataLoader(data, batch_size=BS, workers=workers, backend=backend, timeout=60, **kwargs)


def run(loader, data, epochs=2, changes=CHANGES, first_epoch=0, at=(0, 0)):
    """The batches from ``first_epoch`` on, ``data.set_weights`` called before the ``next()`` that
    ``changes`` names (at: the (epoch, step) a resumed loader starts at)."""
    out = []
    for e in range(first_epoch, epochs):
        it = iter(loader)
        k = at[1] if e == at[0] else 0
        while True:
            if (e, k) in changes:
                data.set_weights(changes[(e, k)])
            try:
                out.append(snapshot(next(it)))
            except StopIteration:
                break
            k += 1
    return out


def same(got, want):
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        for key in w:
            np.testing.assert_array_equal(g[key], w[key], err_msg=f"batch {k}, {key}")


def rows(batches):
    return sorted(tuple(int(v) for v in row) for b in batches for row in np.asarray(b["tokens"]))


def test_changes_settle_ahead_of_the_batches_handed_out_and_the_batches_are_the_mixture_items():
    data = mixture()
    batches = run(make(data), data, epochs=1)
    assert [p for p, _ in data._changes] == [(1 + PREFETCH) * BS, (5 + PREFETCH) * BS]
    for k, batch in enumerate(batches):
        items = [data[i] for i in range(k * BS, (k + 1) * BS)]
        np.testing.assert_array_equal(batch["tokens"], np.stack([item["tokens"] for item in items]))
        np.testing.assert_array_equal(batch["source"], [item["source"] for item in items])
        np.testing.assert_array_equal(batch["tokens"][:, 0], batch["source"])
    assert data.counts((5 + PREFETCH) * BS)["web"] == data.counts((1 + PREFETCH) * BS)["web"]  # web at 0 in between


@pytest.mark.parametrize("workers,backend", [(0, "thread"), (1, "thread"), (4, "thread"), (1, "process"), (4, "process"), (2, "helper")])
def test_the_same_batches_for_every_backend_and_worker_count(workers, backend):
    reference = mixture()
    want = run(make(reference), reference)
    data = mixture()
    with make(data, workers, backend) as loader:
        got = run(loader, data)
    same(got, want)
    assert data.state_dict() == reference.state_dict()


@pytest.mark.parametrize("workers,backend,schedule", [(0, "thread", False), (2, "thread", True), (2, "process", False)])
def test_resume_from_every_step_with_changes_pending_and_settled_gives_the_rest_exactly(workers, backend, schedule):
    data = mixture(schedule=schedule)
    loader = make(data, workers, backend)
    with loader:
        states, batches = record_run(loader, data.set_weights, CHANGES, 2, snapshot)
    points = states if backend == "thread" else states[::9]
    for state, e0, k0, consumed in points:
        fresh = mixture(schedule=schedule)
        resumed = make(fresh, workers, backend)
        resumed.load_state_dict(state)
        later = {key: v for key, v in CHANGES.items() if key > (e0, k0)}
        with resumed:
            rest = run(resumed, fresh, changes=later, first_epoch=state["epoch"], at=(e0, k0))
        same(rest, batches[consumed:])
        assert fresh.state_dict() == data.state_dict()


def test_a_state_of_another_mixture_is_refused_by_the_loader_and_nothing_changes():
    data = mixture()
    loader = make(data)
    next(iter(loader))
    other = ss.mix(sources(), {"web": 0.6, "code": 0.3, "math": 0.1}, seed=8, length=96)
    target = make(other)
    before = target.state_dict()
    with pytest.raises(ValueError, match="another mixture: its seed: 7, this mixture's: 8"):
        target.load_state_dict(loader.state_dict())
    assert target.state_dict() == before


@pytest.mark.parametrize("listed", [True, False])
def test_an_elastic_resume_2_to_3_ranks_reads_every_position_once_with_the_changes(listed):
    n, steps = 96, 3  # 2 ranks x 3 steps x 4 = 24 positions, the other 72 shared by 3 ranks without padding
    old, new, loaders, loaded, seen = elastic_two_to_three(
        lambda: mixture(n), make, lambda data, weights: data.set_weights(weights), {"web": 0, "code": 1, "math": 2}, {"web": 1, "code": 0, "math": 0},
        listed, steps, snapshot,
    )
    assert all(state == old[0].state_dict() for state in loaded)
    for loader in loaders:
        loader.close()
    assert all(d.state_dict() == new[0].state_dict() for d in new)
    final = mixture(n)
    final.load_state_dict(new[0].state_dict())
    assert rows(seen) == sorted(tuple(int(v) for v in final[k]["tokens"]) for k in range(n))
    assert len(new[0].state_dict()["changes"]) == 2
