"""The parent's end of each worker process: starting it, writing to it, stopping it.

* ``WorkerLink.start``: one duplex pipe and one process per worker. The parent end of every pipe
  is closed in a forked worker (a ``core.forking`` hook), so each pipe ends when the parent does;
* ``hand_payload``: a "spawn"/"forkserver" worker's start-up frames and fds (``protocol.startup``),
  written to all workers at once, one thread each, while watching them: a payload bigger than a
  socket buffer blocks until its worker has booted and reads it, and a worker that dies meanwhile
  (or says why it could not start) or a ``timeout`` ends the wait with that error;
* ``enqueue``/``flush``, the flow control: messages to a worker are held back while more than
  ``_IN_FLIGHT_BYTES`` of its tasks are unanswered, so the parent never blocks writing to a worker
  that is itself blocked writing a large result; a write to a worker that is gone is dropped (the
  pool sees its process sentinel), any other failed write raises an ``OSError`` naming the worker;
* ``stop_links``: a polite CLOSE where it cannot block, a join, then terminate and kill for all.

Reading answers, tickets and liveness are the pool's (``pool``).
"""

from __future__ import annotations

import errno
import multiprocessing.connection as mpc
import select
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable
from typing import Any

from ..core.carried import rebuild_error
from ..core.errors import WorkerError
from ..core.forking import at_worker_fork
from . import protocol
from .payload import describe_exit
from .protocol import Kind
from .shm import Segment

__all__ = ["WorkerLink", "hand_payload", "stop_links"]

_IN_FLIGHT_BYTES = 64 * 1024  # unanswered message bytes allowed per worker (well under a socket buffer)
_JOIN = 1.0  # seconds a stop waits for the workers, at each step

_parent_ends: weakref.WeakSet[Any] = weakref.WeakSet()


@at_worker_fork
def _close_parent_ends() -> None:
    """In a forked worker: close the parent ends of every pool's pipes."""
    for conn in list(_parent_ends):
        conn.close()


class WorkerLink:
    """The parent's end of one worker: its process, its pipe, and the messages not yet written."""

    __slots__ = ("id", "process", "conn", "queue", "in_flight", "tickets", "known", "role")

    def __init__(self, worker_id: int, process: Any, conn: Any, role: str = "worker"):
        self.id, self.process, self.conn, self.role = worker_id, process, conn, role
        self.queue: deque[tuple[Any, int]] = deque()  # messages not yet written: (bytes or an fd, counted size)
        self.in_flight = 0  # bytes written and not yet answered
        self.tickets: dict[int, int] = {}  # ticket -> its message size, for tasks written or queued
        self.known: set[int] = set()  # keys of objects and segments this worker has

    @classmethod
    def start(
        cls, ctx: Any, worker_id: int, target: Callable[..., Any], args: tuple[Any, ...], name: str, role: str = "worker"
    ) -> WorkerLink:
        """Start a process running ``target(conn, *args)``, ``conn`` its end of a new pipe; ``role``
        is what messages call it ("worker", "helper process")."""
        parent_end, child_end = ctx.Pipe(duplex=True)
        _parent_ends.add(parent_end)
        process = ctx.Process(target=target, args=(child_end, *args), name=name, daemon=True)
        process.start()
        child_end.close()
        return cls(worker_id, process, parent_end, role)

    def describe(self) -> str:
        """``worker K (pid N)`` (its role, its number) and how it ended."""
        return f"{self.role} {self.id} (pid {self.process.pid}) {describe_exit(self.process.exitcode)}"

    def enqueue(self, message: bytes | int, counted: bool = False) -> None:
        """Queue a message (bytes, or an int: an fd to pass); only tasks count as unanswered bytes."""
        self.queue.append((message, len(message) if counted else 0))

    def flush(self) -> None:
        """Write queued messages while the worker's unanswered bytes stay small (or it has none)."""
        try:
            while self.queue:
                message, size = self.queue[0]
                if size and self.in_flight and self.in_flight + size > _IN_FLIGHT_BYTES:
                    return
                self.queue.popleft()
                if isinstance(message, int):
                    protocol.send_fd(self.conn, message, self.process.pid)
                else:
                    self.conn.send_bytes(message)
                self.in_flight += size
        except OSError as exc:
            if exc.errno in (errno.EPIPE, errno.ECONNRESET, errno.EBADF) or not self.process.is_alive():
                return  # the worker is gone: its sentinel tells the pool
            error = OSError(exc.errno, f"slipstream: could not send to worker {self.id} (pid {self.process.pid}): {exc.strerror}")
            raise error from exc

    def answered(self, ticket: int) -> None:
        """The answer to ``ticket`` arrived: its bytes no longer count."""
        self.in_flight -= self.tickets.pop(ticket, 0)


def hand_payload(links: list[WorkerLink], frames: list[bytes], shared: list[Segment], timeout: float | None) -> None:
    """Write the start-up ``frames`` and the fds of ``shared`` to every worker, all at once."""
    errors: dict[int, BaseException] = {}

    def send(w: WorkerLink) -> None:
        try:
            for frame in frames:
                w.conn.send_bytes(frame)
            for segment in shared:
                protocol.send_fd(w.conn, segment.fd, w.process.pid)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors[w.id] = exc

    senders = [threading.Thread(target=send, args=(w,), name=f"slipstream-start-{w.id}", daemon=True) for w in links]
    for thread in senders:
        thread.start()
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        busy = [w for w, thread in zip(links, senders) if thread.is_alive()]
        dead = [w for w in links if w.process.exitcode is not None]
        if dead:
            w = dead[0]
            _raise_init_error(w)  # it may have said why (worker_init)
            raise WorkerError(
                f"slipstream: {w.describe()} while starting, before it had the dataset (its output above may say why)",
                w.process.pid,
                w.process.exitcode,
            )
        if not busy:
            break
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"slipstream: the worker processes did not start within timeout={timeout} s")
        mpc.wait([w.process.sentinel for w in busy], 0.1)
    if errors:
        k, exc = min(errors.items())
        raise OSError(getattr(exc, "errno", None), f"slipstream: could not send the dataset to worker {k}: {exc}") from exc


def _raise_init_error(w: WorkerLink) -> None:
    """Raise the start-up error a dead worker sent, if it sent one (nothing else comes before its payload)."""
    while w.conn.poll(0):
        try:
            kind, fields = protocol.decode(w.conn.recv_bytes())
        except (EOFError, OSError):
            return
        if kind is Kind.INIT_ERROR:
            raise rebuild_error(fields[0])


def stop_links(links: list[WorkerLink], polite: bool) -> None:
    """Stop these workers: a CLOSE to those whose pipe has room, ``_JOIN`` seconds to exit when
    ``polite``, then terminate and kill the rest (all at once, one deadline for all); close the pipes."""
    for w in links:
        try:  # a polite word first, if it cannot block (a full pipe means a busy or stuck worker)
            if w.process.is_alive() and select.select([], [w.conn.fileno()], [], 0)[1]:
                w.conn.send_bytes(protocol.close())
        except (OSError, ValueError):
            pass
    try:
        deadline = time.monotonic() + (_JOIN if polite else 0.0)
        for w in links:
            w.process.join(max(0.0, deadline - time.monotonic()))
    finally:  # even if a Ctrl-C cuts the wait short, no worker outlives this
        for stop in ("terminate", "kill"):
            alive = [w.process for w in links if w.process.is_alive()]
            for process in alive:
                getattr(process, stop)()
            deadline = time.monotonic() + _JOIN
            for process in alive:
                process.join(max(0.0, deadline - time.monotonic()))
        for w in links:
            w.conn.close()
