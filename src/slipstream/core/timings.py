"""Where a worker's time goes: seconds per stage of loading, reported by the code doing the work.

A thread that runs a loader's tasks installs a ``dict`` (``install``); code running inside a task
reports with ``add(stage, seconds)`` ("decode", "augment", "collate") and ``count(samples)``; with
nothing installed both cost one attribute lookup. The loader sums the threads' dicts for
``stats()``: the stages' seconds per sample, and "read" as the rest of the workers' busy time.
"""

from __future__ import annotations

import threading

__all__ = ["SAMPLES", "add", "count", "install"]

_local = threading.local()
SAMPLES = "samples"  # the key of the samples counted in an installed dict


def install(seconds: dict[str, float] | None) -> None:
    """Report this thread's stages into ``seconds`` from now on (None: stop reporting)."""
    _local.seconds = seconds


def add(stage: str, seconds: float) -> None:
    """``seconds`` spent in ``stage`` by this thread (dropped when nothing is installed)."""
    target = getattr(_local, "seconds", None)
    if target is not None:
        target[stage] = target.get(stage, 0.0) + seconds


def count(samples: int) -> None:
    """``samples`` loaded by this thread (dropped when nothing is installed)."""
    add(SAMPLES, samples)
