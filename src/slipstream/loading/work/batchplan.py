"""Batch plans: what the loader hands its backend, one per batch.

A plan says which batch it is (``info``: seed, epoch, number, the epoch's stop flag), which
indices it holds, and how they are cut into chunks that workers read in parallel; how the batch
is made (``mode``): written into the shared batch buffers (``INTO``), read as samples to shape
the buffers from (``SAMPLES``), or collated by the user's function (``COLLATE``). A plan that
cannot be loaded (an empty batch for the default collate) carries its error: that batch fails on
its own, and the epoch may go on past it.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .readers import BatchInfo, Reader

__all__ = ["COLLATE", "INTO", "SAMPLES", "BatchPlan", "chunk_size"]

INTO, SAMPLES, COLLATE = "into", "samples", "collate"


def chunk_size(n: int, workers: int, reader: Reader) -> int:
    """Indices per task: the whole batch inline or for batched containers (``__getitems__``); one
    share per worker for vectorized reads; four per worker otherwise, so uneven samples balance."""
    if workers == 0 or reader.batched:
        return max(n, 1)
    if reader.vectorized:
        return max(1, math.ceil(n / workers))
    return max(1, math.ceil(n / (4 * workers)))


class BatchPlan:
    """One batch: ``info``, ``indices``, chunks of ``step`` indices, ``mode``, and ``error`` when it cannot load."""

    __slots__ = ("info", "indices", "step", "mode", "error")

    def __init__(self, info: BatchInfo, indices: np.ndarray, step: int, mode: str):
        self.info, self.indices, self.step, self.mode = info, indices, step, mode
        self.error: BaseException | None = None
        if not len(indices) and mode != COLLATE:
            self.error = ValueError(
                f"slipstream: {info} is empty (the batch_sampler gave no indices): the default collate needs a "
                "sample; drop empty batches from the sampler, or pass collate= to make something of them"
            )

    @property
    def k(self) -> int:
        return self.info.batch

    def chunks(self) -> list[tuple[int, np.ndarray]]:
        """``(first row, indices)`` of each task's share."""
        indices, step = self.indices, self.step
        if step >= len(indices):
            return [(0, indices)]
        return [(a, indices[a : a + step]) for a in range(0, len(indices), step)]

    def __repr__(self) -> Any:
        return f"BatchPlan({self.info}, {len(self.indices)} indices in chunks of {self.step}, {self.mode})"
