"""The process backend: persistent worker processes that write batches into shared memory.

The workers get the loader's data (and collate) once: inherited with the "fork" start method,
pickled once otherwise. They persist across epochs until ``close()`` (or ``restart()``: the next
epoch starts fresh ones with the data as it is then), and a new pool replaces one that broke or
whose seed changed. Batch slots live in shared-memory segments (``allocate``), so a worker writes
its rows where the consumer reads them, without a copy. A batch plan becomes a job of tasks
(``loading.work.readtasks``' ``remote_*`` functions: the same read path as threads) sent by the
``ProcessExecutor``. When stateful data changes state (``data_changed``), every job made afterwards
carries the state as an ``Apply`` object (``workers.protocol``), which the pool sends to each worker
once and the worker's copy loads before it reads the job (``order.datastate``); a new pool's workers
start with the data as it is then, and get only the changes after. ``layout()`` says how many processes run how many threads each: ``workers``
processes of one thread here; the helper backend (``helper``) is one process of ``workers`` threads.
"""

from __future__ import annotations

import secrets
import weakref
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from ...core.spec import Spec
from ...order.datastate import load_in_worker
from ...workers.pool import WorkerPool
from ...workers.protocol import Apply
from ...workers.shm import Segment, layout
from ..work.batchplan import COLLATE, INTO, BatchPlan
from ..work.jobs import Job, Task, batch_name
from ..work.readtasks import failed, remote_collate, remote_read_into, remote_samples, unshaped
from .base import Backend, Reading
from .process_executor import ProcessExecutor

if TYPE_CHECKING:  # for the hints only: options imports backends (BACKENDS)
    from ..options import Options

__all__ = ["LoaderPayload", "ProcessBackend", "shared_arrays"]


class LoaderPayload:
    """What each worker process holds for a loader: the data and the user's collate (or None)."""

    def __init__(self, data: Any, collate: Callable[[list[Any]], Any] | None):
        self.data, self.collate = data, collate

    def parts(self) -> dict[str, Any]:
        """What an error should name when this cannot be pickled."""
        return {"dataset": self.data, "collate function": self.collate}


def shared_arrays(spec: Spec, rows: int) -> tuple[list[np.ndarray], Segment, list[int]]:
    """A slot's arrays for ``rows`` observations, packed into one fresh shared-memory segment."""
    shapes = [((rows, *leaf.shape), leaf.dtype) for leaf in spec.array_leaves]
    offsets, size = layout(shapes)
    segment = Segment(size, raw=True)
    return [segment.array(at, shape, dtype) for at, (shape, dtype) in zip(offsets, shapes)], segment, offsets


class ProcessBackend(Backend):
    """``workers`` persistent processes, started at the first ``run``."""

    name = "process"
    shares_memory = True
    whole_jobs = False  # True: each batch goes to one process as one message (its threads share it)

    def __init__(self, options: Options):
        super().__init__(options)
        self._pool: WorkerPool | None = None
        self._seed: int | None = None
        self._retire: Any = None  # the finalizer that retires the pool with its owner
        self._spec_keys: dict[int, tuple[Spec, int]] = {}  # id(spec) -> (spec, the key workers cache it under)
        self._data_state: list[tuple[int, Apply]] = []  # the data's latest state, as the jobs carry it (none: unchanged)

    @property
    def pids(self) -> list[int]:
        pool = self._pool
        return [] if pool is None or pool.closed else pool.pids

    def allocate(self, spec: Any, rows: int) -> tuple[list[Any], Any, list[int]]:
        return shared_arrays(spec, rows)

    def layout(self) -> tuple[int, int]:
        """(worker processes, threads in each)."""
        return self.options.workers, 1

    def _workers(self, seed: int) -> WorkerPool:
        """The persistent pool: started at the first run, replaced if it broke or the seed changed."""
        pool = self._pool
        if pool is not None and (pool.closed or self._seed != seed):
            self._stop(pool.close)
            pool = None
        if pool is None:
            s = self.options
            processes, threads = self.layout()
            pool = WorkerPool(
                LoaderPayload(s.data, s.collate),
                processes,
                context=s.mp_context,
                worker_init=s.worker_init,
                seed=seed,
                name="slipstream" if self.name == "process" else f"slipstream-{self.name}",
                timeout=s.timeout,
                threads=threads,
                backend=self.name,
            )
            self._pool, self._seed = pool, seed
            self._retire = weakref.finalize(self, pool.retire)  # its iterators hold the loader anyway
            self._data_state = []  # the new workers hold the data as it is now: an older state sent would undo changes since
        return pool

    def data_changed(self, state: Any) -> None:
        """Jobs made from now on carry ``state``: each worker's copy loads it once, before their reads."""
        self._data_state = [(secrets.randbits(62), Apply(load_in_worker, (state,)))]

    def _key(self, spec: Spec) -> int:
        entry = self._spec_keys.get(id(spec))
        if entry is None or entry[0] is not spec:
            entry = self._spec_keys[id(spec)] = (spec, secrets.randbits(62))
        return entry[1]

    def job(self, plan: BatchPlan, reading: Reading) -> Job:
        if plan.error is not None:
            return failed(plan)
        info, n = plan.info, len(plan.indices)
        seed, epoch, k = info.seed, info.epoch, info.batch
        changed = {"objects": self._data_state} if self._data_state else None
        if plan.mode == COLLATE:  # the user's collate runs in the worker, on the whole batch
            return Job([Task(remote_collate, (plan.indices, seed, epoch, k), changed)], _first, tag=k)
        if plan.mode != INTO:  # the default collate, before the buffers have a shape: see Buffers.shape
            tasks = [Task(remote_samples, (part, seed, epoch, k), changed) for _, part in plan.chunks()]
            return Job(tasks, unshaped(plan), tag=k)
        pool = reading.buffers.pool
        assert pool is not None
        storage = pool.acquire(n)
        spec, segment, key = pool.spec, storage.segment, self._key(pool.spec)
        extras = {"objects": [(key, spec), *self._data_state], "segments": [segment]}
        where = (key, segment.key, storage.offsets, storage.rows)
        chunks = plan.chunks()
        tasks = [Task(remote_read_into, (*where, a, part, seed, epoch, k), extras) for a, part in chunks]

        def finish(results: list[Any]) -> Any:
            for (a, _), objects in zip(chunks, results):
                for slot, values in (objects or {}).items():
                    storage[slot][a : a + len(values)] = values
            return spec.build(storage, n)

        return Job(tasks, finish, tag=k, keep=storage)

    def executor(self, jobs: Iterator[Job], reading: Reading, epoch: int, keep_going: bool) -> ProcessExecutor:
        s = self.options
        pool = self._workers(reading.seed)
        return ProcessExecutor(pool, jobs, s.prefetch, s.in_order, s.timeout, batch_name(epoch), keep_going, self.whole_jobs)

    def _stop(self, how: Callable[[], None]) -> None:
        self._pool = None
        if self._retire is not None:
            self._retire.detach()
            self._retire = None
        how()

    def restart(self, worker_init: Callable[[int], Any] | None = None) -> None:
        """The next epoch starts fresh worker processes (with the data as it is then, and
        ``worker_init`` when given); the current ones finish serving the iterators that use them."""
        super().restart(worker_init)
        pool = self._pool
        if pool is not None:
            self._stop(pool.retire)

    def close(self) -> None:
        pool = self._pool
        if pool is not None:
            self._stop(pool.close)


def _first(results: list[Any]) -> Any:
    return results[0]
