"""The read path: the tasks every backend runs, and the jobs that run them.

One batch plan becomes one job whose tasks read its chunks with the reader's two calls,
``Reader.read`` (rows into a batch's storage) and ``Reader.samples`` (the samples themselves). A
thread or the consumer calls them on the loader's reader and buffers; a worker process calls them
through the ``remote_*`` functions, which find the reader (built once per worker from its
payload) and the batch's shared-memory slot by key, then make the same call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ...core.nodes import ArrayLeaf
from ...core.spec import Spec
from ...order.datastate import refusal_of
from .batchplan import COLLATE, INTO, BatchPlan
from .buffers import Buffers, Unshaped
from .jobs import Job, Task, failed_job
from .readers import BatchInfo, Reader, collated, make_reader

__all__ = [
    "failed",
    "joined",
    "local_job",
    "remote_collate",
    "remote_read_into",
    "remote_samples",
    "unshaped",
]


def joined(parts: list[list[Any]]) -> list[Any]:
    return [s for part in parts for s in part]


def unshaped(plan: BatchPlan) -> Callable[[list[Any]], Unshaped]:
    """``finish`` of a batch read as samples, before the buffers had a shape."""
    return lambda results: Unshaped(joined(results), plan.indices, plan.info)


def failed(plan: BatchPlan) -> Job:
    """The job of a plan that cannot load: it raises the plan's error as that batch's own."""
    assert plan.error is not None
    return failed_job(plan.error, plan.k, fatal=False)


def local_job(plan: BatchPlan, reader: Reader, buffers: Buffers, collate: Callable[[list[Any]], Any] | None) -> Job:
    """The job of ``plan`` in this process (the consumer's thread or worker threads)."""
    if plan.error is not None:
        return failed(plan)
    info, n = plan.info, len(plan.indices)
    if plan.mode == INTO:
        pool = buffers.pool
        assert pool is not None
        spec, storage = pool.spec, pool.acquire(n)
        tasks = [Task(reader.read, (spec, storage, a, part, info)) for a, part in plan.chunks()]
        return Job(tasks, lambda results: spec.build(storage, n), tag=plan.k)
    tasks = [Task(reader.samples, (part, info)) for _, part in plan.chunks()]
    if plan.mode == COLLATE:
        return Job(tasks, lambda results: collated(collate, joined(results), info), tag=plan.k)
    return Job(tasks, unshaped(plan), tag=plan.k)


# -- in a worker process (``state``: the worker's ``WorkerState``) ---------------------------------


class _Stop:
    """``BatchInfo.stop`` in a worker: set once the parent cancels this task's generation."""

    __slots__ = ("state", "generation")

    def __init__(self, state: Any, generation: tuple[int, int]):
        self.state, self.generation = state, generation

    def is_set(self) -> bool:
        return self.state.cancelled(self.generation)


def _reader(state: Any) -> Reader:
    refused = refusal_of(state)  # the worker's copy of the data refused the loader's latest state
    if refused is not None:
        raise refused.with_traceback(None)
    reader = state.cache.get("reader")
    if reader is None:
        reader = state.cache["reader"] = make_reader(state.payload.data)
    return reader


def _info(state: Any, seed: int, epoch: int, batch: int, generation: tuple[int, int]) -> BatchInfo:
    return BatchInfo(seed, epoch, batch, _Stop(state, generation))  # type: ignore[arg-type]


def remote_read_into(
    state: Any,
    spec_key: int,
    segment_key: int,
    offsets: list[int],
    rows: int,
    a: int,
    indices: np.ndarray,
    seed: int,
    epoch: int,
    batch: int,
    generation: tuple[int, int],
) -> dict[int, list[Any]] | None:
    """Fill rows of a shared batch slot; returns the object leaves' values (they do not live in
    shared memory: the parent writes them into its storage)."""
    spec: Spec = state.cache[spec_key]
    buffer = state.segments[segment_key]
    storage: list[Any] = []
    places = iter(offsets)
    for leaf in spec.leaves:
        if isinstance(leaf, ArrayLeaf):
            storage.append(np.ndarray((rows, *leaf.shape), leaf.dtype, buffer=buffer, offset=next(places)))
        else:
            storage.append([None] * rows)
    _reader(state).read(spec, storage, a, indices, _info(state, seed, epoch, batch, generation))
    if not spec.object_leaves:
        return None
    b = a + len(indices)
    return {leaf.slot: storage[leaf.slot][a:b] for leaf in spec.object_leaves}


def remote_samples(state: Any, indices: np.ndarray, seed: int, epoch: int, batch: int, generation: tuple[int, int]) -> list[Any]:
    """The samples, read in a worker: they go back to the parent as they are."""
    return _reader(state).samples(indices, _info(state, seed, epoch, batch, generation))


def remote_collate(state: Any, indices: np.ndarray, seed: int, epoch: int, batch: int, generation: tuple[int, int]) -> Any:
    """A whole batch's samples collated by the user's function, in the worker."""
    info = _info(state, seed, epoch, batch, generation)
    return collated(state.payload.collate, _reader(state).samples(indices, info), info)
