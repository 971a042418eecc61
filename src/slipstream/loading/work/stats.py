"""What an epoch's input pipeline is doing, measured always and cheaply (``DataLoader.stats()``).

``EpochStats`` is kept by each epoch's iterator: the batches and samples it handed out, the time
from the first ``next()`` to the latest batch, and how much of that time the consumer spent inside
``next()`` (waiting for a batch, or shaping one): the *wait fraction*. Near 1, training is input
bound (more workers, a faster pipeline, or processes); near 0, the loader keeps ahead. Thread
workers also report how busy they were (time in tasks over ``workers`` times the epoch's time so
far), and where that time went per sample (``core.timings``: decode, augment, collate as the work
reports them, read the rest). Two clock reads per batch on the consumer's side, one pair per task
in a worker thread, one or two per stage a task reports.
"""

from __future__ import annotations

import time
from typing import Any

from ...core.timings import SAMPLES

__all__ = ["Busy", "BusyMeter", "EpochStats", "clock", "per_sample"]


class BusyMeter:
    """Seconds each worker thread spent in tasks, and in each stage (``core.timings``: each worker
    adds to its own entries only)."""

    __slots__ = ("seconds", "stages", "born")

    def __init__(self, workers: int):
        self.seconds = [0.0] * workers
        self.stages: list[dict[str, float]] = [{} for _ in range(workers)]
        self.born = time.perf_counter()

    def reading(self) -> Busy:
        return Busy(sum(self.seconds), len(self.seconds), self.born, _summed(self.stages))


class Busy:
    """What a ``BusyMeter`` read: seconds in tasks, workers, when they started, and the stages'
    seconds summed over the workers (with the samples they loaded under ``stages.SAMPLES``)."""

    __slots__ = ("seconds", "workers", "born", "stages")

    def __init__(self, seconds: float, workers: int, born: float, stages: dict[str, float]):
        self.seconds, self.workers, self.born, self.stages = seconds, workers, born, stages


def _summed(meters: list[dict[str, float]]) -> dict[str, float]:
    total: dict[str, float] = {}
    for meter in meters:
        for stage, seconds in list(meter.items()):  # (a worker may add a stage meanwhile)
            total[stage] = total.get(stage, 0.0) + seconds
    return total


def per_sample(busy: Busy) -> dict[str, float] | None:
    """Microseconds of worker time per sample loaded, per stage: the stages the work reported,
    and "read" the rest of the time in tasks (reading bytes and fields, planning, writing rows)."""
    samples = busy.stages.get(SAMPLES, 0.0)
    if not samples:
        return None
    stages = {stage: 1e6 * seconds / samples for stage, seconds in busy.stages.items() if stage != SAMPLES}
    reported = sum(stages.values())
    return {"read": max(0.0, 1e6 * busy.seconds / samples - reported), **dict(sorted(stages.items()))}


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

    def summary(self, busy: Busy | None) -> dict[str, Any]:
        """``busy``: what the worker threads' ``BusyMeter`` read, else None; their time counts up
        to the latest batch handed out."""
        span = (self.last - self.first) if self.first is not None and self.last is not None else 0.0
        busy_fraction = None
        if busy is not None and busy.workers and self.last is not None and self.last > busy.born:
            busy_fraction = min(1.0, busy.seconds / (busy.workers * (self.last - busy.born)))
        return {
            "epoch": self.epoch,
            "batches": self.batches,
            "samples": self.samples,
            "seconds": span,
            "batches_per_s": self.batches / span if span > 0 else None,
            "samples_per_s": self.samples / span if span > 0 else None,
            "wait_fraction": min(1.0, self.inside / span) if span > 0 else None,
            "worker_busy": busy_fraction,
            "us_per_sample": None if busy is None else per_sample(busy),
        }


clock = time.perf_counter  # (the function itself: no extra call per batch)
