"""Containers with a batch finisher, for the loading.finishing tests (module-level: child interpreters
and spawned workers import them by name).

``Data(n, finisher)``: sample i is ``{"x": int64(i)}`` (``bad_sample`` raises KeyError), finished by
``finisher``; ``Finisher`` adds 1000 in the finish thread, fails at the batches whose first value is in
``fail_at``, waits on ``gate`` when given, and records its threads and how far ahead it finished.
``SlowData(n, slow_from, delay)``: samples from ``slow_from`` on sleep ``delay`` seconds, finished by
``AddFinisher`` (adds 1000, waits on ``gate``, its handoff fails at ``handoff_fail_at``) unless another is given.
"""

from __future__ import annotations

import threading

import numpy as np


class Finisher:
    """Adds 1000 to the batch's values in the finish thread; counts what it finished ahead."""

    def __init__(self, fail_at: set[int] | None = None, gate: threading.Event | None = None):
        self.fail_at, self.gate = fail_at or set(), gate
        self.threads: set[str] = set()
        self.handoff_threads: set[str] = set()
        self.finished = self.handed = self.most_ahead = 0
        self.lock = threading.Lock()

    def finish(self, batch):
        if self.gate is not None:
            self.gate.wait(30)
        self.threads.add(threading.current_thread().name)
        if int(batch["x"][0]) in self.fail_at:
            raise ValueError(f"finish failed at {int(batch['x'][0])}")
        with self.lock:
            self.finished += 1
            self.most_ahead = max(self.most_ahead, self.finished - self.handed)
        return {"x": batch["x"] + 1000}

    def handoff(self, finished):
        self.handoff_threads.add(threading.current_thread().name)
        with self.lock:
            self.handed += 1
        return finished


class Data:
    def __init__(self, n: int, finisher: Finisher, bad_sample: int | None = None):
        self.n, self.finisher, self.bad_sample = n, finisher, bad_sample

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.bad_sample:
            raise KeyError(f"sample {i} is bad")
        return {"x": np.int64(i)}

    def batch_finisher(self):
        return self.finisher


class SlowData:
    """Sample i sleeps ``delay`` for i >= ``slow_from``; a finisher that adds 1000."""

    def __init__(self, n, slow_from=10**9, delay=0.0, finisher=None):
        self.n, self.slow_from, self.delay, self.finisher = n, slow_from, delay, finisher

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i >= self.slow_from:
            threading.Event().wait(self.delay)
        return {"x": np.int64(i)}

    def batch_finisher(self):
        return self.finisher or AddFinisher()


class AddFinisher:
    """Adds 1000 (after ``gate``, when given); its handoff raises RuntimeError for the batch starting at ``handoff_fail_at``."""

    def __init__(self, gate=None, handoff_fail_at=None):
        self.gate, self.handoff_fail_at = gate, handoff_fail_at

    def finish(self, batch):
        if self.gate is not None:
            self.gate.wait(30)
        return {"x": batch["x"] + 1000}

    def handoff(self, finished):
        if self.handoff_fail_at is not None and int(finished["x"][0]) == self.handoff_fail_at:
            raise RuntimeError(f"handoff failed at {self.handoff_fail_at}")
        return finished
