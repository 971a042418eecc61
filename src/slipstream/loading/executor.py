"""Executors: run a stream of jobs, each split into tasks, and hand out results in order.

A *job* is one unit of output (a batch, or one mapped item) made of one or more *tasks* (a few
samples each). Workers take tasks in job order, so the first job finishes after about
``tasks / workers`` task-times instead of waiting for one worker to do it alone. At most
``ahead`` jobs are started and not yet handed out; every blocking wait has a way out (close, an
error, or a liveness check of the workers), so iteration never hangs.

Contract: ``next()`` is called from one consumer thread at a time. The first failing task of a job
raises its original exception (type, message, traceback) when the consumer reaches that job;
after that the executor is closed, or, made with ``keep_going=True``, it goes on with the
following jobs (``failed_tag`` names the failed one until the consumer takes it), as torch's
iterator does; a failure that is not one job's (a timeout, dead workers, a source that raised)
closes it either way. ``close()`` is idempotent, safe from any thread, and returns once every
worker thread has exited (a task already running finishes first), or after one short deadline
for all of them together when a task is stuck.
"""

from __future__ import annotations

import atexit
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

__all__ = ["InlineExecutor", "Job", "ThreadExecutor", "fail", "name_of", "next_ready", "raise_failure"]

_JOIN_TIMEOUT = 1.0  # for all the workers together: a thread stuck in a sample is not waited for twice
_LIVENESS_POLL = 1.0


class Job:
    """One output unit: ``tasks`` run in any order (in parallel), then ``finish()`` makes the result."""

    __slots__ = ("tasks", "finish", "tag", "remaining", "error", "error_pos", "result", "done", "fatal")

    def __init__(self, tasks: list[Callable[[], None]], finish: Callable[[], Any], tag: Any = None):
        self.tasks = tasks
        self.tag = tag  # the caller's name for the job (the loader's batch number); see ``last_tag``
        self.finish = finish
        self.remaining = len(tasks)
        self.error: BaseException | None = None
        self.error_pos = -1
        self.result: Any = None
        self.done = False
        self.fatal = False  # its error ends the stream even with keep_going (the source failed)

    def fail(self, pos: int, error: BaseException) -> None:
        if self.error is None or pos < self.error_pos:
            self.error, self.error_pos = error, pos

    def complete(self) -> None:
        """Run ``finish`` once every task has run (and none failed)."""
        if self.error is None:
            try:
                self.result = self._result()
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer
                self.fail(len(self.tasks), exc)
        self.tasks = []  # drop closures (and their buffers) as soon as possible
        self.done = True

    def _result(self) -> Any:
        return self.finish()


def _task_error(exc: BaseException) -> BaseException:
    """A task's exception as the consumer should see it: a StopIteration would end the consumer's
    loop silently, so it becomes a RuntimeError caused by it (as PEP 479 does for generators)."""
    if isinstance(exc, StopIteration):
        error = RuntimeError(f"a task raised StopIteration: {exc!r}")
        error.__cause__ = exc
        for note in getattr(exc, "__notes__", []):
            error.__notes__ = [*getattr(error, "__notes__", []), note]
        return error
    return exc


def name_of(tag: Any) -> str:
    """The default ``describe`` of a job's tag for messages (None: a job not started yet)."""
    return "the next result" if tag is None else str(tag)


def next_ready(jobs: dict[int, Any], consumed: int, in_order: bool) -> int | None:
    """The position of the job to hand out next, if it is done: the next in order, or (not
    ``in_order``) the earliest finished one."""
    if in_order:
        job = jobs.get(consumed)
        return consumed if job is not None and job.done else None
    done = [k for k, job in jobs.items() if job.done]
    return min(done) if done else None


def fail(executor: Any, job: Job) -> NoReturn:
    """Raise failed ``job``'s error at the consumer: the executor goes on with the next jobs when
    it keeps going and the error is the job's own (``failed_tag`` names the job), else it closes."""
    if executor.keep_going and not job.fatal:
        executor.failed_tag = job.tag
    else:
        executor.close()
    raise_failure(job)


def raise_failure(job: Job) -> NoReturn:
    """Raise ``job``'s error, leaving no reference cycle behind: neither the job nor this frame
    keeps the error, so the buffers its traceback's frames hold are freed as soon as the caller
    drops the exception, not at the next garbage collection (a retry needs that memory)."""
    error, job.error = job.error, None
    assert error is not None
    try:
        raise error
    finally:
        del error, job


def _failed_job(error: BaseException) -> Job:
    """The job that raises the source's error where the next job would have been."""
    job = Job([], lambda: None)
    job.fail(0, error)
    job.done = job.fatal = True
    return job


class InlineExecutor:
    """Runs each job in the consumer's thread when it is asked for: no threads, no prefetch."""

    def __init__(self, source: Iterator[Job], keep_going: bool = False):
        self._source = source
        self._closed = False
        self.keep_going = keep_going  # public: part of the executor contract (see fail)
        self.last_tag: Any = None  # the tag of the job whose result ``next()`` returned last
        self.failed_tag: Any = None  # keep_going: the tag of the job whose error ``next()`` raised

    def __iter__(self) -> InlineExecutor:
        return self

    def __next__(self) -> Any:
        if self._closed:
            raise StopIteration
        try:
            job = next(self._source)
        except BaseException:
            self.close()
            raise
        for pos, task in enumerate(job.tasks):
            try:
                task()
            except BaseException as exc:  # noqa: BLE001 - re-raised below
                job.fail(pos, _task_error(exc))
                break
        job.complete()
        if job.error is not None:
            fail(self, job)
        self.last_tag = job.tag
        return job.result

    def close(self, timeout: float | None = None) -> None:
        self._closed = True
        self._source = iter(())


_live: weakref.WeakSet[ThreadExecutor] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    """At exit, stop every executor without waiting long for a task stuck in user code (0.2 s in all)."""
    deadline = time.monotonic() + 0.2
    for executor in list(_live):
        executor.close(timeout=max(0.0, deadline - time.monotonic()))


class ThreadExecutor:
    """``workers`` threads run the jobs of ``source``; results come out in order (or as ready).

    The source iterator itself is advanced by one worker at a time (never concurrently), outside
    the executor's lock, so a slow source (reading files, a generator) does not stall the others.
    """

    def __init__(
        self,
        source: Iterator[Job],
        workers: int,
        ahead: int,
        in_order: bool = True,
        name: str = "slipstream",
        init: Callable[[int], Any] | None = None,
        timeout: float | None = None,
        describe: Callable[[Any], str] = name_of,
        keep_going: bool = False,
    ):
        if workers < 1 or ahead < 1:
            raise ValueError(f"ThreadExecutor needs workers >= 1 and ahead >= 1, got {workers} and {ahead}")
        self._source = source
        self._ahead = ahead
        self._in_order = in_order
        self._cond = threading.Condition(threading.Lock())
        self._pending: deque[tuple[Job, int]] = deque()
        self._jobs: dict[int, Job] = {}
        self._started = 0  # jobs taken from the source
        self._consumed = 0  # jobs handed to the consumer
        self._pulling = False
        self._exhausted = False
        self._closed = False
        self._init, self._init_error = init, None
        self._timed_out = False  # then close() does not wait for the thread that is stuck
        self._timeout, self._describe = timeout, describe
        self.keep_going = keep_going  # public: part of the executor contract (see fail)
        self.last_tag: Any = None  # the tag of the job whose result ``next()`` returned last
        self.failed_tag: Any = None  # keep_going: the tag of the job whose error ``next()`` raised
        self._threads = [
            threading.Thread(target=self._work, args=(k,), name=f"{name}-worker-{k}", daemon=True) for k in range(workers)
        ]
        _live.add(self)
        for thread in self._threads:
            thread.start()

    # -- workers ---------------------------------------------------------------------------
    def _work(self, k: int) -> None:
        cond = self._cond
        if self._init is not None:
            try:
                self._init(k)
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer
                from .readers import add_note

                add_note(exc, f"slipstream: raised by worker_init in worker thread {k}")
                with cond:
                    if self._init_error is None:
                        self._init_error = exc
                    self._closed = True
                    cond.notify_all()
                return
        while True:
            with cond:
                while not (
                    self._closed
                    or self._pending
                    or (not self._exhausted and not self._pulling and self._started - self._consumed < self._ahead)
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
            try:
                if task is not None:
                    task()
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer
                error = _task_error(exc)
            with cond:
                if error is not None:
                    job.fail(pos, error)
                job.remaining -= 1
                last = job.remaining == 0
            if last:
                job.complete()
                with cond:
                    cond.notify_all()

    def _pull(self) -> None:
        try:
            job = next(self._source)
        except StopIteration:
            job = None
        except BaseException as exc:  # noqa: BLE001 - the consumer sees it in order
            job = _failed_job(exc)
            with self._cond:
                self._exhausted = True
        if job is not None and not job.tasks and not job.done:
            job.complete()  # nothing to run in parallel: finish it here, outside the lock
        with self._cond:
            self._pulling = False
            if job is None:
                self._exhausted = True
            elif not self._closed:
                self._jobs[self._started] = job
                self._started += 1
                self._pending.extend((job, pos) for pos in range(len(job.tasks)))
            self._cond.notify_all()
        job = None  # a failed pull's traceback keeps this frame: it must not keep the job (a cycle)

    # -- consumer --------------------------------------------------------------------------
    def __iter__(self) -> ThreadExecutor:
        return self

    def _ready(self) -> int | None:
        return next_ready(self._jobs, self._consumed, self._in_order)

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
                    what = self._describe(self._consumed_tag())
                    raise TimeoutError(
                        f"slipstream: {what} was not ready within timeout={self._timeout} s; the worker threads were "
                        "told to stop (a thread inside a sample finishes it first). A sample that takes that long?"
                    )
                if not cond.wait(left) and not any(t.is_alive() for t in self._threads):
                    self._closed = True
                    raise RuntimeError("slipstream: every worker thread has exited while work was pending")
            if key is None:
                job = None
            else:
                job = self._jobs.pop(key)
                self._consumed += 1
                cond.notify_all()
        if job is None:
            self.close()
            raise StopIteration
        if job.error is not None:
            fail(self, job)
        self.last_tag = job.tag
        return job.result

    def _consumed_tag(self) -> Any:
        """The tag of the job the consumer waits for (the next in order), or None when it has not
        even been started (the source itself is slow)."""
        job = self._jobs.get(self._consumed) if self._in_order else None
        return None if job is None else job.tag

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
            _live.discard(self)
            return
        with self._cond:
            self._closed = True
            self._pending.clear()
            self._jobs.clear()
            self._cond.notify_all()
        deadline = time.monotonic() + (0 if self._timed_out else timeout)
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        _live.discard(self)

    @property
    def threads(self) -> list[threading.Thread]:
        return list(self._threads)
