"""A pool of persistent worker processes that run small tasks against a payload sent to each once.

The parent talks to each worker over its own Unix-socket pipe: tasks go out as pickled
``(fn, args)`` (``fn`` a module-level function, called as ``fn(state, *args)`` in the worker),
results come back on the same pipe, and file descriptors of shared-memory segments travel beside
them (``SCM_RIGHTS``). Nothing blocks without a way out:

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

import atexit
import copyreg
import errno
import multiprocessing
import multiprocessing.connection as mpc
import os
import pickle
import select
import signal
import threading
import time
import traceback
import weakref
from collections import deque
from collections.abc import Callable, Iterable
from typing import Any

from .shm import Segment, attach
from ..core.errors import WorkerError, add_note
from ..core.forking import at_worker_fork, run_worker_fork_hooks
from ..core.workerinfo import WorkerInfo, seed_globals, set_worker_info, worker_seed

__all__ = ["WorkerError", "WorkerPool", "WorkerState"]

_PARENT_POLL = 0.25  # how often an idle worker checks that its parent lives (seconds)
_WAIT_SLICE = 0.5  # the longest the parent sleeps between liveness checks
_IN_FLIGHT_BYTES = 64 * 1024  # unanswered message bytes allowed per worker (well under a socket buffer)
_JOIN = 1.0
_FLAGS = 1024  # cancellation flags: one per live generation (iterator), reused once it is cancelled


def _context(context: Any) -> Any:
    if context is None:
        return multiprocessing.get_context()
    if isinstance(context, str):
        return multiprocessing.get_context(context)
    if hasattr(context, "Process") and hasattr(context, "get_start_method"):
        return context
    raise TypeError(f"mp_context must be None, 'fork', 'spawn', 'forkserver' or a multiprocessing context, got {context!r}")


def _pickled(obj: Any, what: str) -> bytes:
    """``obj`` pickled; else a TypeError naming it (or, for an object with ``parts()``, the part that failed)."""
    try:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - pickling raises many types
        for name, part in getattr(obj, "parts", dict)().items():
            _pickled(part, name)
        raise TypeError(
            f"slipstream: backend='process' sends the {what} to each worker process by pickling it, but "
            f"{type(obj).__module__}.{type(obj).__qualname__} cannot be pickled: {exc}. Make it picklable "
            "(define it at module level; open files and locks in __getstate__/__setstate__ or lazily), "
            "use mp_context='fork', or use backend='thread'."
        ) from exc


class _PayloadPickler(pickle.Pickler):
    """Pickles shared-memory segments inside the payload as references to fds sent beside it."""

    def __init__(self, file: Any):
        super().__init__(file, protocol=pickle.HIGHEST_PROTOCOL)
        self.segments: list[Segment] = []
        self.dispatch_table = {**copyreg.dispatch_table, Segment: self._segment}

    def _segment(self, segment: Segment) -> tuple[Any, ...]:
        if segment.fd < 0:  # mapped from elsewhere: no fd to pass on, so copy it
            return segment.__reduce__()
        self.segments.append(segment)
        return (_received_segment, (len(self.segments) - 1, segment.key))


_incoming: list[Any] = []  # in a worker: the segments that arrived beside the payload


def _received_segment(index: int, key: int) -> Segment:
    return Segment.mapped(_incoming[index], key)


def _pickled_payload(payload: Any) -> tuple[bytes, list[Segment]]:
    import io

    buffer = io.BytesIO()
    pickler = _PayloadPickler(buffer)
    try:
        pickler.dump(payload)
    except Exception:  # noqa: BLE001 - re-raised below with a name
        _pickled(payload, "dataset")  # raises the named error
        raise
    return buffer.getvalue(), pickler.segments


def describe_exit(exitcode: int | None) -> str:
    if exitcode is None:
        return "stopped answering"
    if exitcode < 0:
        try:
            name = signal.Signals(-exitcode).name
        except ValueError:
            name = f"signal {-exitcode}"
        hint = " (SIGKILL often means the kernel's out-of-memory killer)" if -exitcode == signal.SIGKILL else ""
        return f"was killed by {name} ({-exitcode}){hint}"
    return f"exited with code {exitcode}"


# -- the worker side ---------------------------------------------------------------------------


class WorkerState:
    """What a task function sees in its worker: the payload, who it is, and a per-worker cache."""

    def __init__(self, payload: Any, worker_id: int, num_workers: int, seed: int, cancel: Any):
        self.payload, self.id, self.num_workers, self.seed = payload, worker_id, num_workers, seed
        self.cache: dict[Any, Any] = {}  # kept across tasks (objects put by the parent land here too)
        self.segments: dict[int, Any] = {}  # shared-memory mappings by key
        self._cancel = cancel

    def cancelled(self, generation: tuple[int, int]) -> bool:
        """True once the parent has cancelled the tasks sent under ``generation``."""
        flag, number = generation
        return self._cancel[flag] != number


def _wrap_error(exc: BaseException, note: str) -> tuple[bytes | None, str, str]:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        data = pickle.dumps(exc, protocol=pickle.HIGHEST_PROTOCOL)
        pickle.loads(data)  # some exceptions pickle but cannot be rebuilt
    except BaseException:  # noqa: BLE001 - even a __reduce__ that raises SystemExit must not kill the worker
        data = None
    return data, f"{type(exc).__module__}.{type(exc).__qualname__}: {exc}", f"{note}\n{text}"


def _send(conn: Any, message: Any) -> None:
    conn.send_bytes(pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL))


def _worker_main(
    conn: Any, inherited: bool, payload: Any, worker_id: int, num_workers: int, seed: int, worker_init: Any, cancel: Any
) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    parent = os.getppid()
    pid = os.getpid()
    where = f"worker {worker_id} (pid {pid})"
    try:
        if inherited:  # fork: let go of what the parent's other loaders and workers hold
            run_worker_fork_hooks()
        else:  # spawn/forkserver: the pickled payload comes first on the pipe, then its segments
            from multiprocessing.reduction import recv_handle

            blob, init_blob, sizes = conn.recv_bytes(), conn.recv_bytes(), pickle.loads(conn.recv_bytes())
            _incoming[:] = [attach(recv_handle(conn), size) for size in sizes]
            try:
                payload = pickle.loads(blob)
                worker_init = pickle.loads(init_blob)
            except (AttributeError, ImportError) as exc:
                add_note(
                    exc,
                    "slipstream: each worker rebuilds the dataset by unpickling it, so its classes and functions must "
                    "be importable in a fresh interpreter (defined in a module, not in the __main__ of an interactive "
                    "session or `python -c`); or use mp_context='fork'",
                )
                raise
            _incoming.clear()
        set_worker_info(WorkerInfo(worker_id, num_workers, seed, "process"), process=True)
        seed_globals(seed)
        if worker_init is not None:
            worker_init(worker_id)
    except (EOFError, OSError):
        return
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        _send(conn, ("init-error", _wrap_error(exc, f"raised while starting {where}")))
        return
    state = WorkerState(payload, worker_id, num_workers, seed, cancel)
    while True:
        try:
            if not conn.poll(_PARENT_POLL):
                if os.getppid() != parent:
                    return  # the parent died: we were re-parented
                continue
            message = pickle.loads(conn.recv_bytes())
        except (EOFError, OSError):
            return  # the parent closed the pipe (or died)
        kind = message[0]
        if kind == "task":
            _, ticket, fn, args = message
            try:
                reply = ("ok", ticket, fn(state, *args))
                data = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
            except BaseException as exc:  # noqa: BLE001 - reported to the parent
                data = pickle.dumps(("err", ticket, _wrap_error(exc, f"raised in {where}")), protocol=pickle.HIGHEST_PROTOCOL)
            try:
                conn.send_bytes(data)
            except OSError:
                return
        elif kind == "attach":
            _, key, size = message
            from multiprocessing.reduction import recv_handle

            state.segments[key] = attach(recv_handle(conn), size)
        elif kind == "put":
            state.cache[message[1]] = message[2]
        elif kind == "forget":
            for key in message[1]:
                state.segments.pop(key, None)
                state.cache.pop(key, None)
        elif kind == "close":
            return


# -- the parent side ---------------------------------------------------------------------------

_parent_ends: weakref.WeakSet[Any] = weakref.WeakSet()


@at_worker_fork
def _close_parent_ends() -> None:
    """In a forked worker: close the parent ends of every pool's pipes, so each pipe ends when the
    parent does (the shm and slot modules register their own clean-ups)."""
    for conn in list(_parent_ends):
        conn.close()

_live: weakref.WeakSet[WorkerPool] = weakref.WeakSet()


@atexit.register
def _close_all() -> None:
    for pool in list(_live):
        pool.close()


class _Worker:
    __slots__ = ("id", "process", "conn", "queue", "in_flight", "tickets", "known")

    def __init__(self, worker_id: int, process: Any, conn: Any):
        self.id, self.process, self.conn = worker_id, process, conn
        self.queue: deque[tuple[Any, int]] = deque()  # messages not yet written: (bytes or an fd, counted size)
        self.in_flight = 0  # bytes written and not yet answered
        self.tickets: dict[int, int] = {}  # ticket -> its message size, for tasks written or queued
        self.known: set[int] = set()  # keys of objects and segments this worker has


class WorkerPool:
    """``workers`` processes, each holding ``payload``; see the module docstring for the guarantees.

    ``timeout`` bounds the start-up (handing the pickled payload to every worker); a worker that
    dies while starting raises ``WorkerError``."""

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
    ):
        ctx = _context(context)
        self.start_method = ctx.get_start_method()
        forked = self.start_method == "fork"
        blob, shared = (b"", []) if forked else _pickled_payload(payload)
        init_blob = b"" if forked else _pickled(worker_init, "worker_init function")
        self._lock = threading.RLock()
        self._cancel = ctx.RawArray("q", _FLAGS)
        self._generations = 0
        self._free_flags = list(range(_FLAGS - 1, -1, -1))
        self._results: dict[int, tuple[bool, Any]] = {}
        self._keep: dict[int, Any] = {}  # ticket -> what must stay alive until its answer
        self._discarded: set[int] = set()
        self._forgotten: list[int] = []
        self._tracked: set[int] = set()  # segments whose collection tells the workers to unmap them
        self._next_ticket = 0
        self._closed = False
        self._pid = os.getpid()
        self._users = 0  # consumers (iterators) using the pool; see retire()
        self._retired = False
        self.error: BaseException | None = None  # why the pool broke, once it has
        self._workers: list[_Worker] = []
        _live.add(self)
        try:
            for k in range(workers):
                parent_end, child_end = ctx.Pipe(duplex=True)
                _parent_ends.add(parent_end)
                args = (child_end, forked, payload if forked else None, k, workers, worker_seed(seed, k), worker_init if forked else None, self._cancel)
                process = ctx.Process(target=_worker_main, args=args, name=f"{name}-worker-{k}", daemon=True)
                process.start()
                child_end.close()
                self._workers.append(_Worker(k, process, parent_end))
            if not forked:  # every worker is booting now; hand each the payload, all at once
                self._send_payloads([blob, init_blob, pickle.dumps([segment.size for segment in shared])], shared, timeout)
        except BaseException:
            self.close()
            raise

    def _send_payloads(self, messages: list[bytes], shared: list[Segment], timeout: float | None) -> None:
        """Write the payload to every worker from one thread each, watching the workers meanwhile:
        a payload bigger than a socket buffer blocks until its worker has booted and reads it."""
        from multiprocessing.reduction import send_handle

        errors: dict[int, BaseException] = {}

        def send(w: _Worker) -> None:
            try:
                for message in messages:
                    w.conn.send_bytes(message)
                for segment in shared:
                    send_handle(w.conn, segment.fd, w.process.pid)
            except BaseException as exc:  # noqa: BLE001 - reported below
                errors[w.id] = exc

        senders = [threading.Thread(target=send, args=(w,), name=f"slipstream-start-{w.id}", daemon=True) for w in self._workers]
        for thread in senders:
            thread.start()
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            busy = [w for w, thread in zip(self._workers, senders) if thread.is_alive()]
            dead = [w for w in self._workers if w.process.exitcode is not None]
            if dead:
                w = dead[0]
                while not self._closed and w.conn.poll(0) and self._read(w):  # it may have said why (worker_init)
                    pass
                if self.error is not None:
                    raise self.error
                error: BaseException = WorkerError(
                    f"slipstream: worker {w.id} (pid {w.process.pid}) {describe_exit(w.process.exitcode)} while starting, "
                    "before it had the dataset (its output above may say why)",
                    w.process.pid,
                    w.process.exitcode,
                )
                self._fail(error)
                raise error
            if not busy:
                break
            if deadline is not None and time.monotonic() > deadline:
                self._fail(TimeoutError(f"slipstream: the worker processes did not start within timeout={timeout} s"))
                raise self.error  # type: ignore[misc]
            mpc.wait([w.process.sentinel for w in busy], 0.1)
        if errors:
            k, exc = min(errors.items())
            error = OSError(getattr(exc, "errno", None), f"slipstream: could not send the dataset to worker {k}: {exc}")
            self._fail(error)
            raise error from exc

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
        ``state.cancelled``); ``cancel(generation)`` stops those tasks and no others.

        A generation is a flag (one of ``_FLAGS``, reused only after ``cancel``) and a number that
        is never reused, so a late task of a cancelled generation never sees a newer one's flag."""
        with self._lock:
            if not self._free_flags:
                raise RuntimeError(f"slipstream: more than {_FLAGS} iterators of one loader are open at once; close some")
            self._generations += 1
            flag = self._free_flags.pop()
            self._cancel[flag] = self._generations
            return flag, self._generations

    def cancel(self, generation: tuple[int, int]) -> None:
        """Tasks sent under ``generation`` see ``state.cancelled(generation)`` become true. Idempotent."""
        flag, number = generation
        with self._lock:
            if self._cancel[flag] == number:
                self._cancel[flag] = -1
                self._free_flags.append(flag)

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
        with self._lock:
            self._check_open()
            w = self._workers[worker]
            if self._forgotten:
                keys, self._forgotten = self._forgotten, []
                for other in self._workers:
                    gone = [k for k in keys if k in other.known]
                    if gone:
                        other.known.difference_update(gone)
                        self._queue(other, pickle.dumps(("forget", gone)))
            for key, obj in objects:
                if key not in w.known:
                    w.known.add(key)
                    self._queue(w, _pickled(("put", key, obj), "object sent to the workers"))
            for segment in segments:
                if segment.key not in w.known:
                    w.known.add(segment.key)
                    self._queue(w, pickle.dumps(("attach", segment.key, segment.size)))
                    self._queue(w, segment.fd)
                    if segment.key not in self._tracked:
                        self._tracked.add(segment.key)
                        weakref.finalize(segment, _forget, weakref.ref(self), segment.key)
            ticket = self._next_ticket
            self._next_ticket += 1
            message = _pickled(("task", ticket, fn, args), "task")
            w.tickets[ticket] = len(message)
            if keep is not None:
                self._keep[ticket] = keep
            self._queue(w, message, counted=True)
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
        worker's traceback. Raises ``WorkerError`` if a worker dies (the pool is then closed) and
        ``TimeoutError`` if none finishes within ``timeout`` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with self._lock:
                for ticket in tickets:
                    if ticket in self._results:
                        ok, value = self._results.pop(ticket)
                        return ticket, ok, value
                self._check_open()
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    raise TimeoutError("no answer in time")
                self._guarded(self._receive, _WAIT_SLICE if left is None else min(left, _WAIT_SLICE))

    def close(self, polite: bool = True) -> None:
        """Stop every worker (politely, then by force; at once by force when not ``polite``: a
        worker past a timeout is stuck) and release all buffers. Idempotent."""
        if self._closed:
            return
        self._closed = True
        _live.discard(self)
        if os.getpid() != self._pid:  # a forked copy of the pool (user code forked): not ours to stop
            return
        for w in self._workers:
            try:  # a polite word first, if it cannot block (a full pipe means a busy or stuck worker)
                if w.process.is_alive() and select.select([], [w.conn.fileno()], [], 0)[1]:
                    w.conn.send_bytes(pickle.dumps(("close",)))
            except (OSError, ValueError):
                pass
        try:
            deadline = time.monotonic() + (_JOIN if polite else 0.0)
            for w in self._workers:
                w.process.join(max(0.0, deadline - time.monotonic()))
        finally:  # even if a Ctrl-C cuts the wait short, no worker outlives this
            for stop in ("terminate", "kill"):  # all of them at once, then one deadline for all
                alive = [w.process for w in self._workers if w.process.is_alive()]
                for process in alive:
                    getattr(process, stop)()
                deadline = time.monotonic() + _JOIN
                for process in alive:
                    process.join(max(0.0, deadline - time.monotonic()))
            for w in self._workers:
                w.conn.close()
        self._keep.clear()
        self._results.clear()

    # -- internals -------------------------------------------------------------------------
    def _check_open(self) -> None:
        if self.error is not None:
            raise self.error
        if self._closed:
            raise RuntimeError("slipstream: the worker pool is closed")

    def _queue(self, w: _Worker, message: bytes | int, counted: bool = False) -> None:
        """Queue a message (bytes, or an int: an fd to pass); only tasks count as unanswered bytes."""
        w.queue.append((message, len(message) if counted else 0))

    def _flush(self, w: _Worker) -> None:
        """Write queued messages while the worker's unanswered bytes stay small (or it has none)."""
        from multiprocessing.reduction import send_handle

        try:
            while w.queue:
                message, size = w.queue[0]
                if size and w.in_flight and w.in_flight + size > _IN_FLIGHT_BYTES:
                    return
                w.queue.popleft()
                if isinstance(message, int):
                    send_handle(w.conn, message, w.process.pid)
                else:
                    w.conn.send_bytes(message)
                w.in_flight += size
        except OSError as exc:
            if exc.errno in (errno.EPIPE, errno.ECONNRESET, errno.EBADF) or not w.process.is_alive():
                return  # the worker is gone: its sentinel tells ``_receive``
            error = OSError(exc.errno, f"slipstream: could not send to worker {w.id} (pid {w.process.pid}): {exc.strerror}")
            error.__cause__ = exc
            self._fail(error)
            raise error from exc

    def _receive(self, timeout: float) -> None:
        conns = {w.conn: w for w in self._workers}
        sentinels = {w.process.sentinel: w for w in self._workers}
        ready = mpc.wait([*conns, *sentinels], timeout)
        dead = []
        for item in ready:
            if item in conns:
                self._read(conns[item])
            else:
                dead.append(sentinels[item])
        for w in dead:
            while not w.conn.closed and w.conn.poll(0):  # what it said before dying comes first
                if not self._read(w):
                    break
            if self.error is None:
                w.process.join(_JOIN)
                self._fail(
                    WorkerError(
                        f"slipstream: worker {w.id} (pid {w.process.pid}) {describe_exit(w.process.exitcode)}; "
                        "the other workers were stopped",
                        w.process.pid,
                        w.process.exitcode,
                    )
                )
        if self.error is not None:
            raise self.error

    def _read(self, w: _Worker) -> bool:
        try:
            message = pickle.loads(w.conn.recv_bytes())
        except (EOFError, OSError):
            return False
        kind = message[0]
        if kind == "init-error":
            self._fail(_rebuild(message[1]))
        else:
            _, ticket, value = message
            w.in_flight -= w.tickets.pop(ticket, 0)
            self._keep.pop(ticket, None)
            if ticket in self._discarded:
                self._discarded.discard(ticket)
            else:
                self._results[ticket] = (True, value) if kind == "ok" else (False, _rebuild(value))
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


def _rebuild(wrapped: tuple[bytes | None, str, str]) -> BaseException:
    data, summary, text = wrapped
    error: BaseException | None = None
    if data is not None:
        try:
            error = pickle.loads(data)
        except Exception:  # noqa: BLE001
            error = None
    if error is None:
        error = RuntimeError(f"{summary} (the exception could not be sent back as itself)")
    add_note(error, text.rstrip())
    return error

