"""The hand-out rules every executor shares: ordered (or as-ready) output, errors at their job.

An executor takes jobs from a source (an iterator of ``Job``), runs them its own way (inline, in
threads, in processes), and hands out their results through ``OrderedOutput``: ``_add`` records a
started job by position, ``_ready`` says which finished job goes out next (the next in order, or
with ``in_order=False`` the earliest finished), and ``_deliver`` returns its result or raises its
error. After a job's error the executor closes, or (``keep_going``) goes on with the next jobs,
``failed_tag`` naming the failed one until the consumer takes it; a fatal error (the source
failed) closes it either way. ``last_tag`` is the tag of the job whose result was handed out last.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ..work.jobs import Job, failed_job, name_of, raise_failure

__all__ = ["OrderedOutput", "next_job"]


def next_job(source: Iterator[Job]) -> Job | None:
    """The source's next job; None at its end; a fatal failed job when the source raised."""
    try:
        return next(source)
    except StopIteration:
        return None
    except BaseException as exc:  # noqa: BLE001 - the consumer sees it in order
        return failed_job(exc)


class OrderedOutput:
    """Jobs by position; see the module docstring. ``close()`` is the executor's own."""

    closes_with_timeout = False  # (see core.closing.close_at_exit)

    def __init__(self, in_order: bool, keep_going: bool, describe: Callable[[Any], str] = name_of):
        self._jobs: dict[int, Job] = {}  # position -> job, started and not handed out
        self._started = 0  # jobs taken from the source
        self._consumed = 0  # jobs handed to the consumer
        self._in_order = in_order
        self._describe = describe
        self.keep_going = keep_going
        self.last_tag: Any = None
        self.failed_tag: Any = None

    def _add(self, job: Job) -> None:
        self._jobs[self._started] = job
        self._started += 1

    def _ready(self) -> int | None:
        """The position of the job to hand out next, if it is done."""
        jobs = self._jobs
        if self._in_order:
            job = jobs.get(self._consumed)
            return self._consumed if job is not None and job.done else None
        done = [k for k, job in jobs.items() if job.done]
        return min(done) if done else None

    def _take(self, key: int) -> Job:
        self._consumed += 1
        return self._jobs.pop(key)

    def _waited(self) -> str:
        """The message name of the job the consumer waits for (the next in order); the describer
        gets None when it has not even been started (the source itself is slow)."""
        job = self._jobs.get(self._consumed) if self._in_order else None
        return self._describe(None if job is None else job.tag)

    def _deliver(self, job: Job) -> Any:
        """``job``'s result, or its error raised (see the module docstring)."""
        if job.error is not None:
            if self.keep_going and not job.fatal:
                self.failed_tag = job.tag
            else:
                self.close()
            raise_failure(job)
        self.last_tag = job.tag
        return job.result

    def close(self) -> None:
        raise NotImplementedError

    def __iter__(self) -> OrderedOutput:
        return self
