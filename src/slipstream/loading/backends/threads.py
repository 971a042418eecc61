"""The thread backend: worker threads share each batch's tasks; results come out in order.

``ThreadExecutor`` runs a stream of jobs in ``workers`` threads. Workers take tasks in job order,
so the first batch finishes after about ``tasks / workers`` task-times instead of waiting for one
worker to read it alone. At most ``prefetch`` jobs are started and not yet handed out; every blocking
wait has a way out (close, an error, a timeout, or a liveness check of the workers), so iteration
never hangs. The source of jobs is advanced by one worker at a time (never concurrently), outside
the lock, so a slow source (a sampler reading files, a generator) does not stall the others.

Contract: ``next()`` is called from one consumer thread at a time; hand-out and errors as in
``backends.ordered``. ``close()`` is idempotent, safe from any thread, and returns once every
worker thread has exited (a task already running finishes first), or after one short deadline for
all of them together when a task is stuck.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

from ...core import timings
from ...core.closing import close_at_exit, forget_at_exit
from ...core.errors import add_note
from ...core.workerinfo import WorkerInfo, set_worker_info, worker_seed
from ..work.jobs import Job, batch_name, name_of, task_error
from ..work.stats import BusyMeter
from .base import Backend
from .ordered import OrderedOutput, next_job

__all__ = ["ThreadBackend", "ThreadExecutor"]

_JOIN_TIMEOUT = 1.0  # for all the workers together: a thread stuck in a sample is not waited for twice
_LIVENESS_POLL = 1.0


class ThreadExecutor(OrderedOutput):
    """``workers`` threads run the jobs of ``source``; results come out in order (or as ready)."""

    closes_with_timeout = True

    def __init__(
        self,
        source: Iterator[Job],
        workers: int,
        prefetch: int,
        in_order: bool = True,
        name: str = "slipstream",
        init: Callable[[int], Any] | None = None,
        timeout: float | None = None,
        describe: Callable[[Any], str] = name_of,
        keep_going: bool = False,
    ):
        if workers < 1 or prefetch < 1:
            raise ValueError(f"ThreadExecutor needs workers >= 1 and prefetch >= 1, got {workers} and {prefetch}")
        super().__init__(in_order, keep_going, describe)
        self._source = source
        self._prefetch = prefetch
        self._cond = threading.Condition(threading.Lock())
        self._pending: deque[tuple[Job, int]] = deque()
        self._pulling = False
        self._exhausted = False
        self._closed = False
        self._init, self._init_error = init, None
        self._timed_out = False  # then close() does not wait for the thread that is stuck
        self._timeout = timeout
        self.busy_meter = BusyMeter(workers)  # read by DataLoader.stats(); holds nothing of the executor
        self._threads = [
            threading.Thread(target=self._work, args=(k,), name=f"{name}-worker-{k}", daemon=True) for k in range(workers)
        ]
        close_at_exit(self)
        for thread in self._threads:
            thread.start()

    # -- workers ---------------------------------------------------------------------------
    def _work(self, k: int) -> None:
        cond, busy = self._cond, self.busy_meter.seconds
        timings.install(self.busy_meter.stages[k])  # what the tasks report (decode, augment...)
        if self._init is not None and not self._initialized(k):
            return
        while True:
            with cond:
                while not (
                    self._closed
                    or self._pending
                    or (not self._exhausted and not self._pulling and self._started - self._consumed < self._prefetch)
                ):
                    cond.wait()
                if self._closed:
                    cond.notify_all()  # wake the others: close() may have run without the lock (see close)
                    job = task = error = None  # a task's traceback keeps this frame: no cycle through it
                    return
                if self._pending:
                    job, pos = self._pending.popleft()
                    task = job.tasks[pos] if job.error is None else None  # skip the rest of a failed job
                else:
                    self._pulling = True
                    job = None
            if job is None:
                self._pull()
                continue
            error = None
            began = time.perf_counter()
            try:
                if task is not None:
                    job.results[pos] = task()
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer
                error = task_error(exc)
            busy[k] += time.perf_counter() - began
            with cond:
                if error is not None:
                    job.fail(pos, error)
                job.remaining -= 1
                last = job.remaining == 0
            if last:
                job.complete()
                with cond:
                    cond.notify_all()

    def _initialized(self, k: int) -> bool:
        """Run ``init(k)``; False (and the executor closed, the error kept for the consumer) if it raised."""
        try:
            self._init(k)  # type: ignore[misc]
            return True
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            add_note(exc, f"slipstream: raised by worker_init in worker thread {k}")
            with self._cond:
                if self._init_error is None:
                    self._init_error = exc
                self._closed = True
                self._cond.notify_all()
            return False

    def _pull(self) -> None:
        job = next_job(self._source)
        if job is not None and not job.tasks and not job.done:
            job.complete()  # nothing to run in parallel: finish it here, outside the lock
        with self._cond:
            self._pulling = False
            if job is None or job.fatal:
                self._exhausted = True
            if job is not None and not self._closed:
                self._add(job)
                self._pending.extend((job, pos) for pos in range(len(job.tasks)))
            self._cond.notify_all()
        job = None  # a failed pull's traceback keeps this frame: it must not keep the job (a cycle)

    # -- consumer --------------------------------------------------------------------------
    def __next__(self) -> Any:
        cond = self._cond
        deadline = None if self._timeout is None else time.monotonic() + self._timeout
        with cond:
            while True:
                if self._init_error is not None:
                    error, self._init_error = self._init_error, None
                    raise error
                if self._closed:
                    raise StopIteration
                key = self._ready()
                if key is not None:
                    break
                if self._exhausted and not self._jobs and not self._pulling:
                    break
                left = _LIVENESS_POLL if deadline is None else min(_LIVENESS_POLL, deadline - time.monotonic())
                if left <= 0:
                    self._closed = self._timed_out = True
                    self._pending.clear()
                    cond.notify_all()
                    raise TimeoutError(
                        f"slipstream: {self._waited()} was not ready within timeout={self._timeout} s; the worker threads "
                        "were told to stop (a thread inside a sample finishes it first). A sample that takes that long?"
                    )
                if not cond.wait(left) and not any(t.is_alive() for t in self._threads):
                    self._closed = True
                    raise RuntimeError("slipstream: every worker thread has exited while work was pending")
            job = None if key is None else self._take(key)
            if job is not None:
                cond.notify_all()
        if job is None:
            self.close()
            raise StopIteration
        return self._deliver(job)

    def close(self, timeout: float = _JOIN_TIMEOUT) -> None:
        """Stop all work: drop queued tasks, wake the workers and wait up to ``timeout`` s in total
        for them to exit. Idempotent. A worker inside a task finishes that task first; one stuck
        there (I/O that never returns) is not waited for beyond the deadline: it is a daemon thread
        that exits when its task returns, and the batch buffer it writes stays out of use until then
        (its task holds it).

        On one of this executor's own workers (a garbage collection that ran the iterator's
        finalizer there, perhaps while that worker holds the lock) it only raises the flag: the
        worker sees it at its next step and wakes the others.
        """
        current = threading.current_thread()
        if current in self._threads:
            self._closed = True
            forget_at_exit(self)
            return
        with self._cond:
            self._closed = True
            self._pending.clear()
            self._jobs.clear()
            self._cond.notify_all()
        deadline = time.monotonic() + (0 if self._timed_out else timeout)
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        forget_at_exit(self)

    @property
    def threads(self) -> list[threading.Thread]:
        return list(self._threads)


def thread_init(worker_init: Callable[[int], Any] | None, workers: int, seed: int) -> Callable[[int], None]:
    """Each worker thread's set-up: ``worker_info()`` for its thread, then the user's ``worker_init``."""

    def init(k: int) -> None:
        set_worker_info(WorkerInfo(k, workers, worker_seed(seed, k), "thread"))
        if worker_init is not None:
            worker_init(k)

    return init


class ThreadBackend(Backend):
    """``workers`` threads per epoch, started by ``run`` and stopped with its executor."""

    name = "thread"

    def executor(self, jobs: Iterator[Job], reading: Any, epoch: int, keep_going: bool) -> ThreadExecutor:
        s = self.options
        return ThreadExecutor(
            jobs,
            s.workers,
            s.prefetch,
            s.in_order,
            name=f"slipstream-e{epoch}",
            init=thread_init(s.worker_init, s.workers, reading.seed),
            timeout=s.timeout,
            describe=batch_name(epoch),
            keep_going=keep_going,
        )
