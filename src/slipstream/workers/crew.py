"""A worker process's threads: the tasks and jobs the parent sends, run on ``threads`` threads.

A pool worker started with ``threads > 1`` (the "helper" backend's one process) reads its pipe in
its main thread as every worker does, but hands each TASK and JOB to its ``Crew``:

* each crew thread first sets its ``worker_info()`` and runs ``worker_init(id)`` (thread-local
  set-up works, as in a thread backend's worker); ``start`` returns once all have, with the first
  error raised there (the worker's INIT_ERROR);
* the threads take parts in the order they arrived (a job's parts one after another, jobs in
  order), so the oldest job finishes first, after about ``parts / threads`` part-times;
* a part is skipped once its job has failed or its generation was cancelled (``state.cancelled``);
* the thread that finishes a job's last part answers it (``Run.reply``), under one lock for all
  answers; a TASK is a run of one part, answered as the one-thread worker answers it;
* ``stop()`` (CLOSE, the pipe ended, the parent gone) wakes the threads. They are daemons: one
  stuck in user code does not keep the process alive. A thread that fails outside a part (it
  could not answer) ends the process, so the parent sees a dead worker instead of waiting.

``Run`` is also how a one-thread worker runs a JOB (its parts in turn, in its main thread).
"""

from __future__ import annotations

import os
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from typing import Any

from ..core import timings
from ..core.carried import wrap_error
from ..core.errors import Cancelled, add_note
from ..core.workerinfo import WorkerInfo, set_worker_info
from . import protocol

__all__ = ["Crew", "Run"]


class Run:
    """One TASK (``generation`` None: ``fn(state, *args)``) or JOB (each part ``fn(state, *args,
    generation)``) being run: its results, how many parts are left, its earliest error."""

    __slots__ = ("ticket", "generation", "parts", "results", "left", "error_pos", "error", "error_where", "seconds", "stages")

    def __init__(self, ticket: int, parts: list[tuple[Callable[..., Any], tuple[Any, ...]]], generation: Any = None):
        self.ticket, self.parts, self.generation = ticket, parts, generation
        self.results: list[Any] = [None] * len(parts)
        self.left = len(parts)
        self.error_pos, self.error, self.error_where = len(parts), None, ""
        self.seconds = 0.0  # time its parts ran
        self.stages: dict[str, float] = {}  # ... and what they reported of it (``core.timings``)

    def part(self, state: Any, pos: int) -> tuple[Any, BaseException | None, float, dict[str, float]]:
        """Run part ``pos``: ``(result, error, seconds, stages it reported)``; a job's part is
        skipped (a ``Cancelled`` error) once the job failed or its generation was cancelled."""
        spent: dict[str, float] = {}
        if self.generation is not None and (self.error is not None or state.cancelled(self.generation)):
            return None, Cancelled(), 0.0, spent
        fn, args = self.parts[pos]
        timings.install(spent)
        began = time.perf_counter()
        try:
            result = fn(state, *args) if self.generation is None else fn(state, *args, self.generation)
        except BaseException as exc:  # noqa: BLE001 - answered to the parent
            return None, exc, time.perf_counter() - began, spent
        finally:
            timings.install(None)
        return result, None, time.perf_counter() - began, spent

    def settle(
        self, pos: int, result: Any, error: BaseException | None, seconds: float, spent: dict[str, float], where: str
    ) -> bool:
        """Record part ``pos``'s outcome (``where``: who ran it); True once every part has one. The
        earliest failed part's error is the run's (a skipped part never replaces a real error)."""
        self.seconds += seconds
        for stage, value in spent.items():
            self.stages[stage] = self.stages.get(stage, 0.0) + value
        if error is None:
            self.results[pos] = result
        elif pos < self.error_pos and not (isinstance(error, Cancelled) and self.error is not None):
            self.error_pos, self.error, self.error_where = pos, error, where
        self.left -= 1
        return self.left == 0

    def reply(self, where: str) -> bytes:
        """The answer: OK with the result (a TASK) or ``(results, seconds, stages)`` (a JOB), else
        ERR with the error and ``where`` it was raised (``where``: who answers)."""
        ticket, error = self.ticket, self.error
        if error is None:
            try:
                value = self.results[0] if self.generation is None else (self.results, self.seconds, self.stages)
                return protocol.ok(ticket, value)
            except BaseException as exc:  # noqa: BLE001 - a result that does not pickle
                error, self.error_where = exc, where
        return protocol.err(ticket, wrap_error(error, f"raised in {self.error_where}"))


class Crew:
    """``threads`` threads serving the runs ``put`` here; see the module docstring."""

    def __init__(
        self,
        state: Any,
        infos: list[WorkerInfo],
        worker_init: Callable[[int], Any] | None,
        send: Callable[[bytes], None],
        where: str,
    ):
        self._state, self._send, self._where = state, send, where
        self._cond = threading.Condition(threading.Lock())
        self._queue: deque[tuple[Run, int]] = deque()
        self._stopped = False
        self._started = 0
        self._init_error: BaseException | None = None
        self._threads = [
            threading.Thread(target=self._work, args=(info, worker_init), name=f"slipstream-helper-{info.id}", daemon=True)
            for info in infos
        ]

    def start(self) -> None:
        """Start the threads and wait until each has run its set-up; raise the first error there."""
        for thread in self._threads:
            thread.start()
        with self._cond:
            while self._started < len(self._threads) and self._init_error is None:
                self._cond.wait()
            if self._init_error is not None:
                self._stopped = True
                self._cond.notify_all()
                raise self._init_error

    def put(self, run: Run) -> None:
        """Queue every part of ``run``."""
        with self._cond:
            self._queue.extend((run, pos) for pos in range(len(run.parts)))
            self._cond.notify(len(run.parts))

    def stop(self) -> None:
        """Let the threads exit (a part already running finishes first). Idempotent."""
        with self._cond:
            self._stopped = True
            self._queue.clear()
            self._cond.notify_all()

    def _work(self, info: WorkerInfo, worker_init: Callable[[int], Any] | None) -> None:
        set_worker_info(info)
        try:
            if worker_init is not None:
                worker_init(info.id)
        except BaseException as exc:  # noqa: BLE001 - the worker's INIT_ERROR
            add_note(exc, f"slipstream: raised by worker_init in worker thread {info.id} of {self._where}")
            with self._cond:
                if self._init_error is None:
                    self._init_error = exc
                self._cond.notify_all()
            return
        with self._cond:
            self._started += 1
            self._cond.notify_all()
        try:
            self._serve(f"worker thread {info.id} of {self._where}")
        except BaseException:  # noqa: BLE001 - never a run left unanswered: the parent sees this process die
            traceback.print_exc()
            os._exit(70)

    def _serve(self, where: str) -> None:
        cond, state = self._cond, self._state
        while True:
            with cond:
                while not self._queue and not self._stopped:
                    cond.wait()
                if self._stopped:
                    return
                run, pos = self._queue.popleft()
            outcome = run.part(state, pos)
            with cond:
                last = run.settle(pos, *outcome, where)
            if last:
                self._send(run.reply(where))
            run = outcome = None  # a part's traceback keeps this frame: no cycle through it
