"""Jobs and tasks: the plain descriptors every backend runs.

A *task* is ``fn(*args)`` with ``fn`` a module-level function: a thread backend calls it, a
process backend sends it to a worker (which calls ``fn(state, *args)``). A *job* is one unit of
output (a batch, one mapped item) made of tasks that may run in parallel; once all have run,
``finish(results)`` makes the output from the tasks' return values (in task order).

The executor contract (every backend's executor keeps it; see ``backends.ordered``): jobs are
handed out in order (or as ready); the first failing task of a job raises its original exception
when the consumer reaches that job, and the job's other results are dropped; ``failed_tag`` names a
failed job the executor went on past (``keep_going``); a failure that is not one job's own (the
source of jobs failed) is ``fatal``: it ends the stream either way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

__all__ = ["Job", "Task", "batch_name", "failed_job", "name_of", "raise_failure", "task_error"]


class Task:
    """``fn(*args)``; ``extras`` are what a process backend ships beside it (shared objects and
    memory segments the worker must hold before it runs)."""

    __slots__ = ("fn", "args", "extras")

    def __init__(self, fn: Callable[..., Any], args: tuple = (), extras: dict[str, Any] | None = None):
        self.fn, self.args, self.extras = fn, args, extras

    def __call__(self) -> Any:
        return self.fn(*self.args)


class Job:
    """One output unit: ``tasks`` run in any order (in parallel), then ``finish(results)`` makes
    the result. ``keep`` (a batch's storage) stays referenced until the job completes."""

    __slots__ = ("tasks", "finish", "tag", "keep", "results", "remaining", "error", "error_pos", "result", "done", "fatal")

    def __init__(self, tasks: list[Any], finish: Callable[[list[Any]], Any], tag: Any = None, keep: Any = None):
        self.tasks = tasks
        self.finish = finish
        self.tag = tag  # the caller's name for the job (the loader's batch number); see ``last_tag``
        self.keep = keep
        self.results: list[Any] = [None] * len(tasks)
        self.remaining = len(tasks)
        self.error: BaseException | None = None
        self.error_pos = -1
        self.result: Any = None
        self.done = False
        self.fatal = False  # its error ends the stream even with keep_going (the source failed)

    def fail(self, pos: int, error: BaseException) -> None:
        """Task ``pos`` raised ``error``; the earliest failing task's error is the job's."""
        if self.error is None or pos < self.error_pos:
            self.error, self.error_pos = error, pos

    def complete(self) -> None:
        """Run ``finish`` once every task has run (and none failed); then drop the tasks, their
        results and ``keep``, so a batch's buffers are not held longer than the batch."""
        if self.error is None:
            try:
                self.result = self.finish(self.results)
            except BaseException as exc:  # noqa: BLE001 - handed to the consumer
                self.fail(len(self.tasks), exc)
        self.tasks, self.results, self.keep = [], [], None
        self.done = True


def task_error(exc: BaseException) -> BaseException:
    """A task's exception as the consumer should see it: a StopIteration would end the consumer's
    loop silently, so it becomes a RuntimeError caused by it (as PEP 479 does for generators)."""
    if isinstance(exc, StopIteration):
        error = RuntimeError(f"a task raised StopIteration: {exc!r}")
        error.__cause__ = exc
        for note in getattr(exc, "__notes__", []):
            error.__notes__ = [*getattr(error, "__notes__", []), note]
        return error
    return exc


def failed_job(error: BaseException, tag: Any = None, fatal: bool = True) -> Job:
    """A finished job that raises ``error``: by default the source's, where the next job would
    have been (fatal); with ``fatal=False`` job ``tag``'s own (the stream may go on past it)."""
    job = Job([], _nothing, tag=tag)
    job.fail(0, error)
    job.done, job.fatal = True, fatal
    return job


def _nothing(results: list[Any]) -> None:
    return None


def name_of(tag: Any) -> str:
    """The default ``describe`` of a job's tag for messages (None: a job not started yet)."""
    return "the next result" if tag is None else str(tag)


def batch_name(epoch: int) -> Callable[[Any], str]:
    """The loader's ``describe``: how messages name batch ``k`` of ``epoch`` (None: the next one,
    not started yet)."""
    return lambda k: f"the next batch of epoch {epoch}" if k is None else f"batch {k} of epoch {epoch}"


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
