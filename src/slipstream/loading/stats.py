"""What an epoch's input pipeline is doing, measured always and cheaply (``DataLoader.stats()``).

``EpochStats`` is kept by each epoch's iterator: the batches and samples it handed out, the time
from the first ``next()`` to the latest batch, and how much of that time the consumer spent inside
``next()`` (waiting for a batch, or shaping one): the *wait fraction*. Near 1, training is input
bound (more workers, a faster pipeline, or processes); near 0, the loader keeps ahead. Thread
workers also report how busy they were (time in tasks over ``workers`` times the epoch's time so
far). Two clock reads per batch on the consumer's side, one pair per task in a worker thread.
"""

from __future__ import annotations

import time
from typing import Any

__all__ = ["BusyMeter", "EpochStats", "clock"]


class BusyMeter:
    """Seconds each worker thread spent in tasks (each worker adds to its own entry only)."""

    __slots__ = ("seconds", "born")

    def __init__(self, workers: int):
        self.seconds = [0.0] * workers
        self.born = time.perf_counter()

    def reading(self) -> tuple[float, int, float]:
        """(seconds in tasks, workers, when they started)."""
        return sum(self.seconds), len(self.seconds), self.born


class EpochStats:
    """One epoch's counters (see the module docstring); ``summary()`` is what ``stats()`` returns."""

    __slots__ = ("epoch", "batches", "samples", "inside", "first", "last", "sizes")

    def __init__(self, epoch: int):
        self.epoch = epoch
        self.batches = self.samples = 0
        self.inside = 0.0  # seconds the consumer spent inside next()
        self.first: float | None = None  # when the first next() was called
        self.last: float | None = None  # when the latest batch was handed out
        self.sizes: dict[int, int] = {}  # batch number -> samples, for batches started and not handed out

    def planned(self, k: int, n: int) -> None:
        self.sizes[k] = n

    def handed_out(self, k: Any, began: float, now: float) -> None:
        if self.first is None:
            self.first = began
        self.last = now
        self.inside += now - began
        self.batches += 1
        self.samples += self.sizes.pop(k, 0)

    def summary(self, busy: tuple[float, int, float] | None) -> dict[str, Any]:
        """``busy``: (seconds in tasks, workers, when they started) of thread workers, else None;
        their time counts up to the latest batch handed out."""
        span = (self.last - self.first) if self.first is not None and self.last is not None else 0.0
        busy_fraction = None
        if busy is not None and busy[1] and self.last is not None and self.last > busy[2]:
            busy_fraction = min(1.0, busy[0] / (busy[1] * (self.last - busy[2])))
        return {
            "epoch": self.epoch,
            "batches": self.batches,
            "samples": self.samples,
            "seconds": span,
            "batches_per_s": self.batches / span if span > 0 else None,
            "samples_per_s": self.samples / span if span > 0 else None,
            "wait_fraction": min(1.0, self.inside / span) if span > 0 else None,
            "worker_busy": busy_fraction,
        }


clock = time.perf_counter  # (the function itself: no extra call per batch)
