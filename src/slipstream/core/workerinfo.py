"""``worker_info()``: which loader worker is running this code (thread or process), or None."""

from __future__ import annotations

import random
import sys
import threading
from typing import NamedTuple

import numpy as np

from . import streams

__all__ = ["WorkerInfo", "seed_globals", "set_worker_info", "worker_info", "worker_seed"]



class WorkerInfo(NamedTuple):
    """``id`` in ``0..num_workers-1``; ``seed`` seeded Python's ``random`` and NumPy's global generator
    in a process worker; ``backend`` is "thread", "process" or "helper"."""

    id: int
    num_workers: int
    seed: int
    backend: str


_local = threading.local()
_process_info: WorkerInfo | None = None


def worker_info() -> WorkerInfo | None:
    """The worker running the calling code: inside a loader's worker thread or process, its
    ``WorkerInfo``; in the main thread of the main process (``workers=0``), None."""
    info = getattr(_local, "info", None)
    return info if info is not None else _process_info


def set_worker_info(info: WorkerInfo | None, *, process: bool = False) -> None:
    global _process_info
    if process:
        _process_info = info
    else:
        _local.info = info


def worker_seed(seed: int, worker_id: int) -> int:
    """A 64-bit seed for worker ``worker_id`` of a loader seeded with ``seed``."""
    return int(np.random.SeedSequence(seed, spawn_key=(streams.WORKER, worker_id)).generate_state(1, np.uint64)[0])


def seed_globals(seed: int) -> None:
    """Seed Python's ``random``, NumPy's global generator and (when loaded) torch's from ``seed``."""
    random.seed(seed)
    np.random.seed(np.random.SeedSequence(seed).generate_state(4))
    torch = sys.modules.get("torch")
    if torch is not None and hasattr(torch, "manual_seed"):
        torch.manual_seed(seed & (2**63 - 1))
