"""The inline backend: each batch loads in the consumer's thread when it is asked for."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ..work.jobs import Job, task_error
from .base import Backend
from .ordered import OrderedOutput, next_job

__all__ = ["InlineBackend", "InlineExecutor"]


class InlineExecutor(OrderedOutput):
    """Runs each job in the consumer's thread when it is asked for: no threads, no prefetch."""

    def __init__(self, source: Iterator[Job], keep_going: bool = False):
        super().__init__(True, keep_going)
        self._source = source
        self._closed = False

    def __next__(self) -> Any:
        if self._closed:
            raise StopIteration
        job = next_job(self._source)
        if job is None:
            self.close()
            raise StopIteration
        for pos, task in enumerate(job.tasks):
            try:
                job.results[pos] = task()
            except Exception as exc:  # noqa: BLE001 - re-raised below, as the batch's own error
                job.fail(pos, task_error(exc))
                break
            except BaseException:  # an interrupt (Ctrl-C lands in this thread): not the batch's error
                self.close()
                raise
        if not job.done:
            job.complete()
        return self._deliver(job)

    def close(self, timeout: float | None = None) -> None:
        self._closed = True
        self._source = iter(())


class InlineBackend(Backend):
    """``workers=0``: no background work at all."""

    name = "inline"

    def executor(self, jobs: Iterator[Job], reading: Any, epoch: int, keep_going: bool) -> InlineExecutor:
        return InlineExecutor(jobs, keep_going)
