"""The process executor: jobs whose tasks run in a ``WorkerPool``, handed out in order.

Each task of a job is sent to the least-loaded worker as ``fn(state, *args, generation)``; its
``extras`` (shared objects, memory segments) go first, once per worker. With ``whole_jobs`` (workers
that run threads: the helper backend) a job goes to one worker as one message, its tasks shared
between that worker's threads, and comes back as one answer, with the seconds its tasks ran and
the stages they reported (the ``busy_meter`` that ``stats()`` reads). All the parent does is send and wait for answers: there is
no parent-side thread. ``prefetch`` jobs are in flight at a time, so the workers keep loading while
the consumer trains.

Contract: hand-out and errors as in ``backends.ordered`` (an error raised in a worker comes back
with its original type and the worker's traceback in a note), plus: a worker that dies raises
``WorkerError`` at once; a batch not ready within ``timeout`` seconds raises ``TimeoutError`` and
stops the workers. ``close()`` cancels what is in flight without waiting: workers stop between
samples, and a job's ``keep`` (its shared buffer) is held until every task writing to it answered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ...core.errors import add_note
from ...workers.pool import WorkerPool
from ..work.jobs import Job, name_of, task_error
from ..work.stats import BusyMeter
from .ordered import OrderedOutput, next_job

__all__ = ["ProcessExecutor"]


class ProcessExecutor(OrderedOutput):
    """Runs ``source``'s jobs on ``pool``; ``next()`` hands out their results."""

    def __init__(
        self,
        pool: WorkerPool,
        source: Iterator[Job],
        prefetch: int,
        in_order: bool = True,
        timeout: float | None = None,
        describe: Callable[[Any], str] = name_of,
        keep_going: bool = False,
        whole_jobs: bool = False,
    ):
        super().__init__(in_order, keep_going, describe)
        self._pool, self._source, self._prefetch, self._timeout = pool, source, prefetch, timeout
        self._tickets: dict[int, tuple[Job, int]] = {}  # ticket -> (job, task position; -1: the whole job)
        self._whole_jobs = whole_jobs
        self.busy_meter = BusyMeter(pool.workers * pool.threads)  # read by DataLoader.stats()
        self._exhausted = False
        self._closed = False
        self._generation = pool.open_generation()
        pool.attach()

    def _start(self) -> None:
        """Send jobs until ``prefetch`` are in flight (or the source ends)."""
        pool = self._pool
        while not self._exhausted and self._started - self._consumed < self._prefetch:
            job = next_job(self._source)
            if job is None or job.fatal:
                self._exhausted = True
            if job is None:
                return
            self._add(job)
            if self._whole_jobs and job.tasks:
                worker = min(range(pool.workers), key=pool.load)
                parts = [(task.fn, task.args) for task in job.tasks]
                ticket = pool.submit_job(worker, parts, self._generation, keep=job.keep, **_extras(job.tasks))
                self._tickets[ticket] = (job, -1)
            else:
                for pos, task in enumerate(job.tasks):  # each task a job of one part: it answers its seconds and stages
                    worker = min(range(pool.workers), key=pool.load)
                    ticket = pool.submit_job(worker, [(task.fn, task.args)], self._generation, keep=job.keep, **(task.extras or {}))
                    self._tickets[ticket] = (job, pos)
            if not job.tasks and not job.done:
                job.complete()
            job = None  # a failed job's traceback may keep this frame: it must not keep the job

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
        result = self._deliver(self._take(key))  # keep_going: the next ``next()`` sends the jobs that take its place
        self._start()  # keep ``prefetch`` jobs in the workers while the consumer works
        return result

    def _collect_one(self) -> None:
        try:
            ticket, ok, value = self._pool.wait(set(self._tickets), self._timeout)
        except LookupError:
            if self._closed:  # another thread closed this executor while the consumer waited
                raise StopIteration from None
            raise
        except TimeoutError:
            what = self._waited()
            self._pool.close(polite=False)
            raise TimeoutError(
                f"slipstream: {what} was not ready within timeout={self._timeout} s; the worker processes "
                f"(pids {self._pool.pids}) were stopped. A sample that takes that long, or one that never returns?"
            ) from None
        except BaseException as exc:
            if self._consumed in self._jobs:  # (no local holds the job: the traceback would keep its buffers)
                add_note(exc, f"slipstream: while loading {self._waited()}")
            raise
        try:
            job, pos = self._tickets.pop(ticket)
        except KeyError:
            if self._closed:  # another thread closed this executor as the answer came: close discarded it
                raise StopIteration from None
            raise
        if not ok:
            job.fail(max(pos, 0), task_error(value))
        else:  # every task's result (a whole job's, or one task's), the seconds they ran and the stages they reported
            results, seconds, spent = value
            if pos >= 0:
                job.results[pos] = results[0]
            else:
                job.results = results
            meter = self.busy_meter  # (it sums its entries: the first takes all)
            meter.seconds[0] += seconds
            for stage, part in spent.items():
                meter.stages[0][stage] = meter.stages[0].get(stage, 0.0) + part
        job.remaining = 0 if pos < 0 else job.remaining - 1
        if not job.remaining:
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


def _extras(tasks: list[Any]) -> dict[str, list[Any]]:
    """The shared objects and segments of ``tasks``, each once (a job's tasks share its batch's)."""
    objects: dict[int, Any] = {}
    segments: dict[int, Any] = {}
    for task in tasks:
        extras = task.extras or {}
        objects.update(extras.get("objects", ()))
        segments.update((segment.key, segment) for segment in extras.get("segments", ()))
    return {"objects": list(objects.items()), "segments": list(segments.values())}
