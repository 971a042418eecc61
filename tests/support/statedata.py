"""A stateful container for the data-state protocol tests (module-level: spawned workers import it).

``Dial(n)``: item ``i`` is ``[i, value]``, where ``value`` is the one set by the last change that
took effect at a position ``<= i`` (0 before any). ``set(value)`` records a pending change;
``settle_changes(p)`` makes it take effect from ``p`` (positions before ``p`` keep their items) and
logs ``p``. It logs the positions it reads (in this process) and, at each settle, how many reads
came before, so a test can check that no position ``>= p`` was read before the settle at ``p``.
"""

from __future__ import annotations

import bisect
import json
import threading
from typing import Any

import numpy as np

TAG = "dial"


class Dial:
    def __init__(self, n: int):
        self.n = n
        self._changes: tuple[tuple[int, int], ...] = ((0, 0),)  # (from position, value), ascending; replaced whole
        self.pending: int | None = None
        self.reads: list[int] = []  # positions read here (list.append is atomic)
        self.settles: list[tuple[int, int, bool]] = []  # (position, reads before it, changed)
        self.loads = 0
        self.lock = threading.Lock()
        self.read_event = threading.Condition(self.lock)

    def __len__(self) -> int:
        return self.n

    def value_at(self, i: int) -> int:
        changes = self._changes  # one read: a settle replaces the tuple in one step
        k = bisect.bisect_right([p for p, _ in changes], i) - 1
        return changes[k][1]

    def __getitem__(self, i: int) -> np.ndarray:
        i = int(i)
        self.reads.append(i)
        with self.read_event:
            self.read_event.notify_all()
        return np.array([i, self.value_at(i)], dtype=np.int64)

    def set(self, value: int) -> None:
        self.pending = int(value)

    def settle_changes(self, position: int) -> bool:
        if self.pending is None:
            self.settles.append((int(position), len(self.reads), False))
            return False
        value, self.pending = self.pending, None
        kept = tuple(c for c in self._changes if c[0] < position)
        self._changes = (*kept, (int(position), value))
        self.settles.append((int(position), len(self.reads), True))
        return True

    def state_dict(self) -> dict[str, Any]:
        return {"tag": TAG, "n": self.n, "changes": [list(c) for c in self._changes], "pending": self.pending}

    def load_state_dict(self, state: Any) -> None:
        if not isinstance(state, dict) or state.get("tag") != TAG:
            raise ValueError(f"Dial: not a Dial state: {state!r:.80}")
        if state.get("n") != self.n:
            raise ValueError(f"Dial: the state is of a Dial of {state.get('n')} items, this one has {self.n}")
        changes = tuple((int(p), int(v)) for p, v in state["changes"])
        self.loads += 1
        self._changes, self.pending = changes, state["pending"]

    def wait_reads(self, count: int, timeout: float = 20.0) -> bool:
        """Wait (on the reads' condition, no sleeping) until ``count`` positions were read here."""
        with self.read_event:
            return self.read_event.wait_for(lambda: len(self.reads) >= count, timeout)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in ("lock", "read_event"):
            state.pop(name)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self.lock = threading.Lock()
        self.read_event = threading.Condition(self.lock)


class Finisher:
    """A batch finisher that hands batches out as they are (``loading.finishing``)."""

    def finish(self, batch: Any) -> Any:
        return batch

    def handoff(self, finished: Any) -> Any:
        return finished


class FinishedDial(Dial):
    """A ``Dial`` whose batches go through a finisher (``finish_ahead`` more batches ahead)."""

    def batch_finisher(self) -> Finisher:
        return Finisher()


class HomeOnlyDial(Dial):
    """A ``Dial`` whose copies in other processes refuse every state (to see a worker's refusal)."""

    def __init__(self, n: int):
        super().__init__(n)
        import os

        self.home = os.getpid()

    def load_state_dict(self, state: Any) -> None:
        import os

        if os.getpid() != self.home:
            raise ValueError("HomeOnlyDial: a copy in another process refuses states")
        super().load_state_dict(state)


def record_run(loader, change, changes, epochs: int, snapshot):
    """Run ``epochs`` epochs of ``loader``, calling ``change(v)`` before the ``next()`` that
    ``changes`` names ((epoch, k) -> v), and recording before each ``next()`` the loader's state (a
    JSON round trip), the epoch, k and the batches handed out so far; returns (states, batches)."""
    states, batches = [], []
    for e in range(epochs):
        it = iter(loader)
        k = 0
        while True:
            if (e, k) in changes:
                change(changes[(e, k)])
            states.append((json.loads(json.dumps(loader.state_dict())), e, k, len(batches)))
            try:
                batches.append(snapshot(next(it)))
            except StopIteration:
                break
            k += 1
    return states, batches


def elastic_two_to_three(build, make, change, before, after, listed: bool, steps: int, snapshot):
    """Two ranks (``make(data, 1, rank=r, world_size=2)`` over ``build()``) read ``steps`` batches
    each, ``change(data, before)`` applied before step 1; their states (a JSON round trip) are loaded
    by three new ranks (all of them when ``listed``, else rank 0's), which read the rest of the epoch
    with 2 workers, ``change(data, after)`` applied before their step 2. Returns (old data, new data,
    every loader, the new data's states as loaded, the batches seen in order)."""
    old = [build(), build()]
    loaders = [make(d, 1, rank=r, world_size=2) for r, d in enumerate(old)]
    its = [iter(loader) for loader in loaders]
    seen = []
    for k in range(steps):
        for r in range(2):
            if k == 1:
                change(old[r], before)
            seen.append(snapshot(next(its[r])))
    states = [json.loads(json.dumps(loader.state_dict())) for loader in loaders]
    new = [build() for _ in range(3)]
    resumed = [make(d, 2, rank=r, world_size=3) for r, d in enumerate(new)]
    for loader in resumed:
        loader.load_state_dict(states if listed else states[0])
    loaded = [d.state_dict() for d in new]
    its = [iter(loader) for loader in resumed]
    for k in range(len(resumed[0]) + 1):
        for r in range(3):
            if k == 2:
                change(new[r], after)
            seen.extend(snapshot(b) for b in [next(its[r], None)] if b is not None)
    return old, new, loaders + resumed, loaded, seen
