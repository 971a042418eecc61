"""The loader's batch buffers: shaped once, from the data's declared structure or the first batch.

``Buffers`` holds the pool of reusable batch slots (``core.slots.SlotPool``) once their structure
is known. Data that declares its batch structure (arrays, packed files) has it from the start;
otherwise no sample is read before the epoch: the first batches come back as ``Unshaped`` (their
samples, read as they are), and ``shape()`` (in the consumer's thread, so the first batch handed
out decides) writes them into a pool shaped from the first sample. The pool becomes the loader's
only once that whole batch fits it: a batch that fails to fit shapes nothing. Where the slots'
memory comes from (private, or shared with worker processes) is the backend's ``allocate``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from ...core.slots import SlotPool
from ...core.spec import Spec
from .readers import BatchInfo

__all__ = ["Buffers", "Unshaped"]


class Unshaped:
    """A batch's samples, read before the loader's buffers had a shape (see ``Buffers.shape``)."""

    __slots__ = ("samples", "indices", "info")

    def __init__(self, samples: list[Any], indices: np.ndarray, info: BatchInfo):
        self.samples, self.indices, self.info = samples, indices, info


class Buffers:
    """The batch slots of one loader: ``pool`` is None until the structure is known."""

    def __init__(
        self, batch_size: int, capacity: int, allocate: Callable[..., Any], declared: Spec | None, origin: Callable[[int], str] = lambda i: ""
    ):
        self.batch_size, self.capacity, self.allocate = batch_size, capacity, allocate
        self.origin = origin  # sample i -> " (file x.jpg)" or "", for the errors that name a sample
        self._lock = threading.Lock()
        self.pool: SlotPool | None = None if declared is None else self._make(declared)

    @property
    def spec(self) -> Spec | None:
        """The batch structure, once known."""
        pool = self.pool
        return None if pool is None else pool.spec

    def _make(self, spec: Spec) -> SlotPool:
        return SlotPool(spec, self.batch_size, capacity=self.capacity, allocate=self.allocate)

    def shape(self, unshaped: Unshaped) -> Any:
        """The batch of ``unshaped`` samples, written into the buffers (shaped from its first
        sample when they have no shape yet: never empty, see ``plan.BatchPlan``)."""
        samples, indices = unshaped.samples, unshaped.indices
        pool = self.pool
        fresh = pool is None
        if fresh:
            pool = self._make(Spec.of(samples[0]))
        storage = pool.acquire(len(samples))
        for j, (i, sample) in enumerate(zip(indices.tolist(), samples)):
            pool.spec.write(storage, j, sample, f"sample {i}{self.origin(i)} ({unshaped.info})")
        if fresh:
            with self._lock:
                if self.pool is None:
                    self.pool = pool
        return pool.spec.build(storage, len(samples))

    def clear(self) -> None:
        """Forget every slot (batches still held stay valid: they own their memory now)."""
        pool = self.pool
        if pool is not None:
            pool.clear()
