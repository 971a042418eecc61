"""The messages between a pool (the parent) and its workers: one enum of their kinds, one function
per message that encodes it, and ``decode``; both ends use these, neither spells a message itself.

A message is one frame on the worker's Unix-socket pipe (``Connection.send_bytes``): the pickle of
``(kind.value, *fields)``. A file descriptor travels on its own (``send_fd``/``recv_fd``,
``SCM_RIGHTS``), right after the message that announces it.

parent -> worker
    TASK        ticket, fn, args   run ``fn(state, *args)``; answered by OK or ERR with the same ticket
    JOB         ticket, generation, parts
                                   run each part ``(fn, args)`` as ``fn(state, *args, generation)``
                                   (on the worker's threads, see ``crew``), skipping the rest once
                                   one failed or ``generation`` is cancelled; answered once: OK with
                                   ``(results in part order, seconds the parts ran, the seconds per
                                   stage they reported (core.timings))``, or ERR with the earliest
                                   failed part's exception
    ATTACH      key, size          one fd follows: map ``size`` bytes of it as ``state.segments[key]``
    PUT         key, obj           ``state.cache[key] = obj``; an ``Apply`` is run instead, at once
                                   (``fn(state, *args)``, before the messages after it are read)
    FORGET      keys               drop these keys from ``state.segments`` and ``state.cache``
    CLOSE                          exit now
worker -> parent
    OK          ticket, value      a task's result
    ERR         ticket, wrapped    a task's exception (``core.carried.wrap_error``)
    INIT_ERROR  wrapped            the worker could not start; it has exited, or is about to

Start-up ("spawn"/"forkserver"; a forked worker inherits all of it): before any message, the
parent writes the ``startup`` frames (the pickled payload, the pickled ``worker_init``, the sizes of
the payload's shared-memory segments), then one fd per segment; ``read_startup`` reads the frames.

Cancellation does not wait for a message: each consumer's tasks carry a generation, and the
parent cancels it by changing a flag in shared memory (``Generations``) that the worker's tasks
read (``cancelled``) between samples.

Only tasks and jobs count as unanswered bytes for the parent's flow control (see ``pool``); the
worker answers every TASK and JOB and nothing else: in the order received when it has one thread,
as they finish when it has several (``crew``).
"""

from __future__ import annotations

import enum
import pickle
from collections.abc import Callable
from multiprocessing import reduction
from typing import Any

from ..core.carried import Wrapped
from .payload import pickled

__all__ = [
    "Apply", "Generations", "Kind", "attach", "cancelled", "close", "decode", "err", "forget", "init_error", "job", "ok", "put",
    "read_startup", "recv_fd", "send_fd", "startup", "task",
]  # fmt: skip


class Kind(enum.Enum):
    """A message's kind; its value is what goes over the pipe."""

    TASK = "task"
    JOB = "job"
    ATTACH = "attach"
    PUT = "put"
    FORGET = "forget"
    CLOSE = "close"
    OK = "ok"
    ERR = "err"
    INIT_ERROR = "init-error"


class Apply:
    """An object to ``put`` that the worker runs instead of keeping: ``fn(state, *args)`` (``fn`` a
    module-level function), in the worker's main thread, before it reads the next message. So the
    tasks sent after it (once per worker, like any object put by key) run after it, and tasks of a
    worker's other threads may still run beside it. ``fn`` keeps its own errors: one raised there
    ends the worker (the parent sees a ``WorkerError``)."""

    __slots__ = ("fn", "args")

    def __init__(self, fn: Callable[..., Any], args: tuple[Any, ...] = ()):
        self.fn, self.args = fn, args

    def __reduce__(self) -> tuple[Any, ...]:
        return (Apply, (self.fn, self.args))


def _frame(kind: Kind, *fields: Any) -> bytes:
    return pickle.dumps((kind.value, *fields), protocol=pickle.HIGHEST_PROTOCOL)


def decode(frame: bytes) -> tuple[Kind, tuple[Any, ...]]:
    """A received frame's kind and fields (in the order the table in the module docstring gives)."""
    kind, *fields = pickle.loads(frame)
    return Kind(kind), tuple(fields)


# -- parent -> worker ------------------------------------------------------------------------


def task(ticket: int, fn: Callable[..., Any], args: tuple[Any, ...]) -> bytes:
    """Run ``fn(state, *args)``. A TypeError names ``fn`` or the argument that cannot be pickled."""
    return pickled((Kind.TASK.value, ticket, fn, args), "task")


def job(ticket: int, generation: tuple[int, int], parts: list[tuple[Callable[..., Any], tuple[Any, ...]]]) -> bytes:
    """Run each of ``parts`` as ``fn(state, *args, generation)``; one answer for all. A TypeError
    names what cannot be pickled."""
    return pickled((Kind.JOB.value, ticket, generation, parts), "job")


def attach(key: int, size: int) -> bytes:
    """Map the fd sent next (``send_fd``) as ``state.segments[key]``."""
    return _frame(Kind.ATTACH, key, size)


def put(key: int, obj: Any) -> bytes:
    """Keep ``obj`` as ``state.cache[key]``. A TypeError names it if it cannot be pickled."""
    return pickled((Kind.PUT.value, key, obj), "object sent to the workers")


def forget(keys: list[int]) -> bytes:
    """Drop these segments and cached objects."""
    return _frame(Kind.FORGET, keys)


def close() -> bytes:
    """Exit."""
    return _frame(Kind.CLOSE)


def startup(payload: bytes, worker_init: bytes, sizes: list[int]) -> list[bytes]:
    """The frames a "spawn"/"forkserver" worker reads first (then one fd per size)."""
    return [payload, worker_init, pickle.dumps(sizes, protocol=pickle.HIGHEST_PROTOCOL)]


def read_startup(conn: Any) -> tuple[bytes, bytes, list[int]]:
    """In a worker: the pickled payload, the pickled ``worker_init`` and the segments' sizes."""
    return conn.recv_bytes(), conn.recv_bytes(), pickle.loads(conn.recv_bytes())


# -- worker -> parent ------------------------------------------------------------------------


def ok(ticket: int, value: Any) -> bytes:
    """A task's result; raises whatever pickling it raises (the worker then sends ``err``)."""
    return _frame(Kind.OK, ticket, value)


def err(ticket: int, wrapped: Wrapped) -> bytes:
    """A task's exception, wrapped by ``core.carried.wrap_error``."""
    return _frame(Kind.ERR, ticket, wrapped)


def init_error(wrapped: Wrapped) -> bytes:
    """Why the worker could not start, wrapped by ``core.carried.wrap_error``."""
    return _frame(Kind.INIT_ERROR, wrapped)


# -- file descriptors --------------------------------------------------------------------------


def send_fd(conn: Any, fd: int, pid: int) -> None:
    """Send ``fd`` to the process ``pid`` at the other end of ``conn`` (``SCM_RIGHTS``)."""
    reduction.send_handle(conn, fd, pid)  # looked up at each call, as a test or a user may wrap it


def recv_fd(conn: Any) -> int:
    """An fd sent with ``send_fd``: a new descriptor of this process, the caller's to close."""
    return reduction.recv_handle(conn)


# -- cancellation: flags in shared memory, read by the workers' tasks ---------------------------

_FLAGS = 1024  # one per open generation (a consumer, an iterator), reused once it is cancelled


class Generations:
    """The parent's cancellation flags (``flags``, shared with every worker at its start).

    A generation is a flag (one of ``_FLAGS``, reused only after ``cancel``) and a number that is
    never reused, so a late task of a cancelled generation never sees a newer one's flag. The
    caller serializes ``open`` and ``cancel`` (the pool holds its lock)."""

    def __init__(self, ctx: Any):
        self.flags = ctx.RawArray("q", _FLAGS)
        self._opened = 0
        self._free = list(range(_FLAGS - 1, -1, -1))

    def open(self) -> tuple[int, int]:
        """A new generation; a RuntimeError when ``_FLAGS`` are open at once."""
        if not self._free:
            raise RuntimeError(f"slipstream: more than {_FLAGS} iterators of one loader are open at once; close some")
        self._opened += 1
        flag = self._free.pop()
        self.flags[flag] = self._opened
        return flag, self._opened

    def cancel(self, generation: tuple[int, int]) -> None:
        """Cancel ``generation`` (its flag is free again). Idempotent."""
        flag, number = generation
        if self.flags[flag] == number:
            self.flags[flag] = -1
            self._free.append(flag)


def cancelled(flags: Any, generation: tuple[int, int]) -> bool:
    """In a worker: True once the parent has cancelled ``generation``."""
    flag, number = generation
    return flags[flag] != number
