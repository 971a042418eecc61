"""The process executor: the loader's batches read by a ``WorkerPool``, in order, ahead of the consumer.

A *remote job* is one batch: a few calls (chunks of its indices) sent to the workers, each
writing its rows straight into the batch's shared-memory slot (or, with a user ``collate``, one
call that returns the collated batch). All the parent does is hand out indices and wait; there is
no parent-side thread. ``ahead`` jobs are sent at a time, so the workers keep loading while the
consumer trains.

Contract: like ``ThreadExecutor`` (ordered or as-ready output, errors raised at their batch with
their original type and the worker's traceback in a note), plus: a worker that dies raises
``WorkerError`` at once; a batch not ready within ``timeout`` seconds raises ``TimeoutError`` and
stops the workers. ``close()`` cancels what is in flight without waiting: workers stop between
samples, and a batch's shared buffer is not reused until every task writing to it has answered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from ..core.collate import ArrayLeaf, Spec
from ..workers.pool import WorkerPool
from .executor import Job, fail, name_of, next_ready
from .readers import BatchInfo, add_note, collated, make_reader
from ..workers.shm import Segment, layout

__all__ = ["LoaderPayload", "ProcessExecutor", "RemoteJob", "collate_task", "read_task", "samples_task", "shared_arrays"]


class LoaderPayload:
    """What each worker process holds for a loader: the data and the user's collate (or None)."""

    def __init__(self, data: Any, collate: Callable[[list[Any]], Any] | None):
        self.data, self.collate = data, collate

    def parts(self) -> dict[str, Any]:
        """What an error should name when this cannot be pickled."""
        return {"dataset": self.data, "collate function": self.collate}


class RemoteJob(Job):
    """One batch: ``tasks`` are calls ``(fn, args, extras)`` run in workers; ``finish(results)``
    makes the batch. ``keep`` (the batch's storage) stays referenced until every call has answered."""

    __slots__ = ("keep", "results", "waiting")

    def __init__(self, tag: Any, calls: list[tuple[Any, tuple, dict]], keep: Any, finish: Callable[[list[Any]], Any]):
        super().__init__(calls, finish, tag)  # type: ignore[arg-type]
        self.keep = keep
        self.results: list[Any] = [None] * len(calls)
        self.waiting: dict[int, int] = {}  # ticket -> call position

    def _result(self) -> Any:
        return self.finish(self.results)  # type: ignore[call-arg]

    def complete(self) -> None:
        super().complete()
        self.results, self.keep = [], None


class ProcessExecutor:
    """Runs ``source``'s remote jobs on ``pool``; ``next()`` hands out their results."""

    def __init__(
        self,
        pool: WorkerPool,
        source: Iterator[RemoteJob],
        ahead: int,
        in_order: bool = True,
        timeout: float | None = None,
        describe: Callable[[Any], str] = name_of,
        keep_going: bool = False,
    ):
        self._pool, self._source, self._ahead, self._in_order = pool, source, ahead, in_order
        self._timeout, self._describe = timeout, describe
        self.keep_going = keep_going  # public: part of the executor contract (see _executor.fail)
        self._jobs: dict[int, RemoteJob] = {}  # position -> job, started and not handed out
        self._tickets: dict[int, tuple[RemoteJob, int]] = {}
        self._started = 0
        self._consumed = 0
        self._exhausted = False
        self._closed = False
        self._generation = pool.open_generation()
        pool.attach()
        self.last_tag: Any = None
        self.failed_tag: Any = None  # keep_going: the tag of the job whose error ``next()`` raised

    def __iter__(self) -> ProcessExecutor:
        return self

    def _start(self) -> None:
        """Send jobs until ``ahead`` are in flight (or the source ends)."""
        pool = self._pool
        while not self._exhausted and self._started - self._consumed < self._ahead:
            try:
                job = next(self._source)
            except StopIteration:
                self._exhausted = True
                return
            except BaseException as exc:  # noqa: BLE001 - raised at its position, in order
                self._exhausted = True
                self._add_failed(exc)  # not made here: this frame, kept by the error's traceback, must not hold the job
                return
            self._jobs[self._started] = job
            self._started += 1
            for pos, (fn, args, extras) in enumerate(job.tasks):
                worker = min(range(pool.workers), key=pool.load)
                ticket = pool.submit(worker, fn, *args, self._generation, keep=job.keep, **extras)
                job.waiting[ticket] = pos
                self._tickets[ticket] = (job, pos)
            if not job.tasks:
                job.complete()

    def _add_failed(self, error: BaseException) -> None:
        """A job that raises ``error`` at its position (the source failed to make the next one)."""
        job = RemoteJob(None, [], None, lambda results: None)
        job.fail(0, error)
        job.complete()
        job.fatal = True
        self._jobs[self._started] = job
        self._started += 1

    def _waited_tag(self) -> Any:
        """The tag of the job the consumer waits for (the next in order), else None."""
        job = self._jobs.get(self._consumed) if self._in_order else None
        return None if job is None else job.tag

    def _ready(self) -> int | None:
        return next_ready(self._jobs, self._consumed, self._in_order)

    def __next__(self) -> Any:
        if self._closed:
            raise StopIteration
        try:
            self._start()
            while (key := self._ready()) is None:
                if self._exhausted and not self._jobs:
                    self.close()
                    raise StopIteration
                self._collect_one()
        except StopIteration:
            raise
        except BaseException:
            self.close()
            raise
        job = self._jobs.pop(key)
        self._consumed += 1
        if job.error is not None:
            fail(self, job)  # keep_going: the next ``next()`` sends the jobs that take its place
        self.last_tag = job.tag
        self._start()  # keep ``ahead`` jobs in the workers while the consumer works
        return job.result

    def _collect_one(self) -> None:
        try:
            ticket, ok, value = self._pool.wait(set(self._tickets), self._timeout)
        except TimeoutError:
            what = self._describe(self._waited_tag())
            self._pool.close(polite=False)
            raise TimeoutError(
                f"slipstream: {what} was not ready within timeout={self._timeout} s; the worker processes "
                f"(pids {self._pool.pids}) were stopped. A sample that takes that long, or one that never returns?"
            ) from None
        except BaseException as exc:
            if self._consumed in self._jobs:  # (no local holds the job: the traceback would keep its buffers)
                add_note(exc, f"slipstream: while loading {self._describe(self._waited_tag())}")
            raise
        job, pos = self._tickets.pop(ticket)
        del job.waiting[ticket]
        if ok:
            job.results[pos] = value
        else:
            job.fail(pos, value)
        if not job.waiting:
            job.complete()

    def close(self) -> None:
        """Stop: cancel the tasks in flight (their buffers stay reserved until they answer). Idempotent."""
        if self._closed:
            return
        self._closed = True
        pool = self._pool
        if not pool.closed:
            pool.cancel(self._generation)
            pool.discard(list(self._tickets))
        pool.detach()
        self._tickets.clear()
        self._jobs.clear()
        self._source = iter(())


# -- what the workers run ----------------------------------------------------------------------


class _Stop:
    """``BatchInfo.stop`` in a worker: set once the parent cancels this task's generation."""

    __slots__ = ("state", "generation")

    def __init__(self, state: Any, generation: tuple[int, int]):
        self.state, self.generation = state, generation

    def is_set(self) -> bool:
        return self.state.cancelled(self.generation)


def _reader(state: Any) -> Any:
    reader = state.cache.get("reader")
    if reader is None:
        reader = state.cache["reader"] = make_reader(state.payload.data)
    return reader


def read_task(
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
    """Fill rows ``a..a+len(indices)`` of a shared batch slot; returns the object leaves' values."""
    spec: Spec = state.cache[spec_key]
    buffer = state.segments[segment_key]
    storage: list[Any] = []
    places = iter(offsets)
    for leaf in spec.leaves:
        if isinstance(leaf, ArrayLeaf):
            storage.append(np.ndarray((rows, *leaf.shape), leaf.dtype, buffer=buffer, offset=next(places)))
        else:
            storage.append([None] * rows)
    reader = _reader(state)
    reader.spec = spec
    reader.read(storage, a, indices, BatchInfo(seed, epoch, batch, _Stop(state, generation)))
    if not spec.object_leaves:
        return None
    b = a + len(indices)
    return {leaf.slot: storage[leaf.slot][a:b] for leaf in spec.object_leaves}


def samples_task(state: Any, indices: np.ndarray, seed: int, epoch: int, batch: int, generation: tuple[int, int]) -> list[Any]:
    """Load samples and send them back as they are (to shape the batch buffers from the first)."""
    return _reader(state).samples(indices, BatchInfo(seed, epoch, batch, _Stop(state, generation)))


def collate_task(state: Any, indices: np.ndarray, seed: int, epoch: int, batch: int, generation: tuple[int, int]) -> Any:
    """Load a batch's samples and collate them with the user's function, in the worker."""
    samples = samples_task(state, indices, seed, epoch, batch, generation)
    return collated(state.payload.collate, samples, BatchInfo(seed, epoch, batch, _Stop(state, generation)))


def shared_arrays(spec: Spec, rows: int) -> tuple[list[np.ndarray], Segment, list[int]]:
    """A slot's arrays for ``rows`` observations, packed into one fresh shared-memory segment."""
    shapes = [((rows, *leaf.shape), leaf.dtype) for leaf in spec.array_leaves]
    offsets, size = layout(shapes)
    segment = Segment(size, raw=True)
    return [segment.array(at, shape, dtype) for at, (shape, dtype) in zip(offsets, shapes)], segment, offsets
