"""A pool of persistent worker processes that run small tasks against a payload sent to each once.

This module is the parent side: tickets, results, consumers, cancellation, liveness and the
pool's life. The rest of the pool is split by role: ``link`` (the parent's end of each worker:
start, flow-controlled writes, stop), ``worker`` (the worker process's loop and ``WorkerState``),
``protocol`` (the message kinds, encoded and decoded by both ends) and ``payload`` (what the
messages carry: pickles with shared-memory fds beside them); exceptions cross as ``core.carried``
makes them, with their tracebacks.

The parent talks to each worker over its own Unix-socket pipe: tasks go out as pickled
``(fn, args)`` (``fn`` a module-level function, called as ``fn(state, *args)`` in the worker),
or several at once as a job (``submit_job``: one message out, one answer back), results come back
on the same pipe, and file descriptors of shared-memory segments travel beside them
(``SCM_RIGHTS``). A worker may run ``threads`` threads (``crew``): each is a worker of its own to
``worker_info()`` and ``worker_init``, and a job's parts are shared between them. Nothing blocks
without a way out:

* the parent waits on the pipes *and* the workers' process sentinels, so a worker that dies
  (segfault, ``os._exit``, SIGKILL, the out-of-memory killer) is seen at once and reported as a
  ``WorkerError`` naming its pid and its signal or exit code; the other workers are stopped;
* a worker polls its pipe with a short timeout and exits when the parent is gone (the pipe ends,
  or the process it was started under is no longer its parent);
* messages to a worker are held back while more than 64 KiB of earlier ones are unanswered, so
  the parent can never block writing to a worker that is itself blocked writing a large result;
* workers ignore SIGINT: Ctrl-C reaches the parent, which stops them.

Start methods: "fork" passes the payload by inheritance; "spawn" and "forkserver" pickle it once
in the parent (an unpicklable payload raises a ``TypeError`` naming its type there) and send the
bytes to every worker over its pipe after all workers have been started, so they boot in parallel.

Thread-safety: ``submit``/``wait`` may be called from several threads (one lock guards the pipes);
results are routed by ticket, so two consumers never take each other's results.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection as mpc
import os
import threading
import time
import weakref
from collections.abc import Callable, Iterable
from typing import Any

from ..core.carried import rebuild_error
from ..core.closing import close_at_exit, forget_at_exit
from ..core.errors import WorkerError
from ..core.workerinfo import worker_seed
from . import protocol
from .link import WorkerLink, hand_payload, stop_links
from .payload import pickled, pickled_payload
from .protocol import Generations, Kind
from .shm import Segment
from .worker import WorkerState, run_worker

__all__ = ["WorkerError", "WorkerPool", "WorkerState"]

_WAIT_SLICE = 0.5  # the longest the parent sleeps between liveness checks
_JOIN = 1.0  # seconds to wait for a dead worker's exit code


def _context(context: Any) -> Any:
    if context is None:
        return multiprocessing.get_context()
    if isinstance(context, str):
        return multiprocessing.get_context(context)
    if hasattr(context, "Process") and hasattr(context, "get_start_method"):
        return context
    raise TypeError(f"mp_context must be None, 'fork', 'spawn', 'forkserver' or a multiprocessing context, got {context!r}")


class WorkerPool:
    """``workers`` processes of ``threads`` threads each, each process holding ``payload``; see the
    module docstring for the guarantees.

    ``timeout`` bounds the start-up (handing the pickled payload to every worker); a worker that
    dies while starting raises ``WorkerError``. ``backend`` is what ``worker_info()`` says."""

    def __init__(
        self,
        payload: Any,
        workers: int,
        *,
        context: Any = None,
        worker_init: Callable[[int], Any] | None = None,
        seed: int = 0,
        name: str = "slipstream",
        timeout: float | None = None,
        threads: int = 1,
        backend: str = "process",
    ):
        ctx = _context(context)
        self.start_method = ctx.get_start_method()
        forked = self.start_method == "fork"
        blob, shared = (b"", []) if forked else pickled_payload(payload)
        init_blob = b"" if forked else pickled(worker_init, "worker_init function")
        self._lock = threading.RLock()
        self._generations = Generations(ctx)
        self._results: dict[int, tuple[bool, Any]] = {}
        self._keep: dict[int, Any] = {}  # ticket -> what must stay alive until its answer
        self._discarded: set[int] = set()
        self._forgotten: list[int] = []
        self._tracked: set[int] = set()  # segments whose collection tells the workers to unmap them
        self._next_ticket = 0
        self._reads = 0  # messages read so far (see _receive)
        self._closed = False
        self._pid = os.getpid()
        self._users = 0  # consumers (iterators) using the pool; see retire()
        self._retired = False
        self.error: BaseException | None = None  # why the pool broke, once it has
        self._workers: list[WorkerLink] = []
        self.threads = threads
        close_at_exit(self)  # no worker outlives the interpreter
        try:
            for k in range(workers):
                args = (
                    forked,
                    payload if forked else None,
                    k,
                    workers * threads,
                    [worker_seed(seed, k * threads + t) for t in range(threads)],
                    worker_init if forked else None,
                    self._generations.flags,
                    backend,
                )
                role = "worker" if backend == "process" else f"{backend} process"
                self._workers.append(WorkerLink.start(ctx, k, run_worker, args, f"{name}-worker-{k}", role))
            if not forked:  # every worker is booting now; hand each the payload, all at once
                hand_payload(
                    self._workers, protocol.startup(blob, init_blob, [segment.size for segment in shared]), shared, timeout
                )
        except BaseException:
            self.close()
            raise

    # -- parent API ------------------------------------------------------------------------
    @property
    def workers(self) -> int:
        return len(self._workers)

    @property
    def pids(self) -> list[int]:
        return [w.process.pid for w in self._workers]

    @property
    def closed(self) -> bool:
        return self._closed

    def open_generation(self) -> tuple[int, int]:
        """A new cancellation generation for one consumer's tasks (pass it to tasks that check
        ``state.cancelled``); ``cancel(generation)`` stops those tasks and no others (see
        ``protocol.Generations``)."""
        with self._lock:
            return self._generations.open()

    def cancel(self, generation: tuple[int, int]) -> None:
        """Tasks sent under ``generation`` see ``state.cancelled(generation)`` become true. Idempotent."""
        with self._lock:
            self._generations.cancel(generation)

    def attach(self) -> None:
        """A consumer (an iterator) starts using the pool."""
        with self._lock:
            self._users += 1

    def detach(self) -> None:
        """A consumer is done; a retired pool closes when its last consumer is."""
        with self._lock:
            self._users -= 1
            last = self._retired and self._users <= 0
        if last:
            self.close()

    def retire(self) -> None:
        """No new consumers: close now if none is left, else when the last one detaches."""
        with self._lock:
            self._retired = True
            idle = self._users <= 0
        if idle:
            self.close()

    def load(self, worker: int) -> int:
        """Tasks sent to ``worker`` and not yet answered."""
        return len(self._workers[worker].tickets)

    def submit(
        self,
        worker: int,
        fn: Callable[..., Any],
        *args: Any,
        keep: Any = None,
        objects: Iterable[tuple[int, Any]] = (),
        segments: Iterable[Segment] = (),
    ) -> int:
        """Run ``fn(state, *args)`` in ``worker``; returns a ticket for ``wait``.

        ``keep`` stays referenced until the answer arrives (or the pool closes), even if the
        ticket is discarded: use it for the shared buffers the task writes to. ``objects``
        ``(key, obj)`` are put into the worker's ``state.cache[key]`` and ``segments`` mapped into
        ``state.segments[seg.key]`` before the task runs, each only the first time for that worker.
        """
        return self._submit(worker, lambda ticket: protocol.task(ticket, fn, args), keep, objects, segments)

    def submit_job(
        self,
        worker: int,
        parts: list[tuple[Callable[..., Any], tuple[Any, ...]]],
        generation: tuple[int, int],
        *,
        keep: Any = None,
        objects: Iterable[tuple[int, Any]] = (),
        segments: Iterable[Segment] = (),
    ) -> int:
        """Run each of ``parts`` as ``fn(state, *args, generation)`` in ``worker``, shared between its
        threads; one ticket, whose value is ``(results in part order, seconds the parts ran, seconds
        per stage they reported)`` (``core.timings``), or the earliest failed part's exception. The
        rest as ``submit``."""
        return self._submit(worker, lambda ticket: protocol.job(ticket, generation, parts), keep, objects, segments)

    def _submit(
        self,
        worker: int,
        message: Callable[[int], bytes],
        keep: Any,
        objects: Iterable[tuple[int, Any]],
        segments: Iterable[Segment],
    ) -> int:
        with self._lock:
            self._check_open()
            w = self._workers[worker]
            if self._forgotten:
                keys, self._forgotten = self._forgotten, []
                for other in self._workers:
                    gone = [k for k in keys if k in other.known]
                    if gone:
                        other.known.difference_update(gone)
                        other.enqueue(protocol.forget(gone))
            for key, obj in objects:
                if key not in w.known:
                    w.known.add(key)
                    w.enqueue(protocol.put(key, obj))
            for segment in segments:
                if segment.key not in w.known:
                    w.known.add(segment.key)
                    w.enqueue(protocol.attach(segment.key, segment.size))
                    w.enqueue(segment.fd)
                    if segment.key not in self._tracked:
                        self._tracked.add(segment.key)
                        weakref.finalize(segment, _forget, weakref.ref(self), segment.key)
            ticket = self._next_ticket
            self._next_ticket += 1
            data = message(ticket)
            w.tickets[ticket] = len(data)
            if keep is not None:
                self._keep[ticket] = keep
            w.enqueue(data, counted=True)
            self._guarded(self._flush, w)
            return ticket

    def discard(self, tickets: Iterable[int]) -> None:
        """Forget these tickets' results (their ``keep`` objects are held until the answers arrive)."""
        with self._lock:
            for ticket in tickets:
                if self._results.pop(ticket, None) is None and any(ticket in w.tickets for w in self._workers):
                    self._discarded.add(ticket)

    def wait(self, tickets: set[int], timeout: float | None = None) -> tuple[int, bool, Any]:
        """The first of ``tickets`` to finish: ``(ticket, ok, value)``, where ``value`` is the result
        or (``ok`` False) the task's exception, rebuilt with its type and a note holding the
        worker's traceback. Raises ``WorkerError`` if a worker dies (the pool is then closed),
        ``TimeoutError`` if none finishes within ``timeout`` seconds, and ``LookupError`` once none
        of ``tickets`` can answer any more (another thread discarded them all: it closed the
        consumer that waits)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                for ticket in tickets:
                    if ticket in self._results:
                        ok, value = self._results.pop(ticket)
                        return ticket, ok, value
                self._check_open()
                if not any(t not in self._discarded and any(t in w.tickets for w in self._workers) for t in tickets):
                    raise LookupError("slipstream: no ticket waited for can answer any more (they were discarded)")
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError("no answer in time")
                waited = [w.conn for w in self._workers] + [w.process.sentinel for w in self._workers]
                reads = self._reads
            try:  # without the lock: another thread may submit, cancel or close meanwhile, at once
                ready = mpc.wait(waited, _WAIT_SLICE if left is None else min(left, _WAIT_SLICE))
            except (OSError, ValueError):  # a pipe was closed meanwhile (the pool closed): the checks say so
                continue
            with self._lock:
                self._guarded(self._receive, ready, self._reads == reads)

    def close(self, polite: bool = True) -> None:
        """Stop every worker (politely, then by force; at once by force when not ``polite``: a
        worker past a timeout is stuck) and release all buffers. Idempotent."""
        if self._closed:
            return
        self._closed = True
        forget_at_exit(self)
        if os.getpid() != self._pid:  # a forked copy of the pool (user code forked): not ours to stop
            return
        stop_links(self._workers, polite)
        self._keep.clear()
        self._results.clear()

    # -- internals -------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self.error is not None:
            raise self.error
        if self._closed:
            raise RuntimeError("slipstream: the worker pool is closed")

    def _flush(self, w: WorkerLink) -> None:
        """Write what flow control lets through; a failed write (the worker alive) breaks the pool."""
        try:
            w.flush()
        except OSError as error:
            self._fail(error)
            raise

    def _receive(self, ready: list[Any], fresh: bool) -> None:
        """Read what ``mpc.wait`` found ready and see to the workers whose sentinel fired. Unless
        ``fresh`` (no message was read by anyone since that wait began), another thread may have
        read what was ready: a pipe is then polled again first (each call that leaves the GIL costs
        a consumer beside a busy thread up to a switch interval, so not by default)."""
        if self._closed:
            return
        conns = {w.conn: w for w in self._workers}
        sentinels = {w.process.sentinel: w for w in self._workers}
        dead = []
        for item in ready:
            if item in conns:
                if fresh or conns[item].conn.poll(0):
                    self._read(conns[item])
            elif item in sentinels:
                dead.append(sentinels[item])
        for w in dead:
            while not w.conn.closed and w.conn.poll(0):  # what it said before dying comes first
                if not self._read(w):
                    break
            if self.error is None:
                w.process.join(_JOIN)
                others = "; the other workers were stopped" if len(self._workers) > 1 else ""
                self._fail(WorkerError(f"slipstream: {w.describe()}{others}", w.process.pid, w.process.exitcode))
        if self.error is not None:
            raise self.error

    def _read(self, w: WorkerLink) -> bool:
        self._reads += 1
        try:
            kind, fields = protocol.decode(w.conn.recv_bytes())
        except (EOFError, OSError):
            return False
        if kind is Kind.INIT_ERROR:
            self._fail(rebuild_error(fields[0]))
        else:  # OK or ERR
            ticket, value = fields
            w.answered(ticket)
            self._keep.pop(ticket, None)
            if ticket in self._discarded:
                self._discarded.discard(ticket)
            else:
                self._results[ticket] = (True, value) if kind is Kind.OK else (False, rebuild_error(value))
            self._flush(w)
        return True

    def _guarded(self, step: Callable[..., Any], *args: Any) -> Any:
        """Run a pipe operation; if anything else escapes it (a KeyboardInterrupt between two reads
        of one message), a pipe may be out of step: the pool stops, and the loader starts a new one."""
        try:
            return step(*args)
        except BaseException as exc:
            if exc is not self.error and not self._closed:
                broken = RuntimeError(f"slipstream: the worker pool was stopped after {type(exc).__name__} interrupted it")
                broken.__cause__ = exc
                self._fail(broken)
            raise

    def _fail(self, error: BaseException) -> None:
        self.error = error
        self.close()


def _forget(pool_ref: weakref.ref, key: int) -> None:
    pool = pool_ref()
    if pool is not None and not pool.closed:
        pool._forgotten.append(key)  # list.append is atomic; flushed with the next submit
