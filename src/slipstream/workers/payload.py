"""What crosses a worker pipe besides the message frame: pickled objects and shared memory.

* ``pickled(obj, what)``: ``obj`` pickled, or a ``TypeError`` that names what could not be pickled
  (for an object with ``parts()``, the part that failed) and how to fix it;
* ``pickled_payload``/``unpickled_payload``: the dataset sent once to every "spawn"/"forkserver"
  worker. Shared-memory segments inside it are not copied: each is pickled as a reference to an
  fd sent beside the bytes (``SCM_RIGHTS``), and the worker maps the fd it received;
* ``describe_exit``: a dead worker's exit code in words.

A task's exception crosses as ``core.carried`` makes it (``wrap_error``/``rebuild_error``).

Both ends import this module; it holds no state but the segments of the payload being unpickled.
"""

from __future__ import annotations

import copyreg
import io
import mmap
import pickle
import signal
from typing import Any

from .shm import Segment

__all__ = ["describe_exit", "pickled", "pickled_payload", "unpickled_payload"]


def pickled(obj: Any, what: str) -> bytes:
    """``obj`` pickled; else a TypeError naming it (or, for an object with ``parts()``, the part that failed)."""
    try:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # pickling raises many types
        for name, part in getattr(obj, "parts", dict)().items():
            pickled(part, name)
        raise TypeError(
            f"slipstream: backend='process' (or 'helper') sends the {what} to each worker process by pickling it, but "
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


_incoming: list[mmap.mmap] = []  # in a worker: the segments that arrived beside the payload


def _received_segment(index: int, key: int) -> Segment:
    return Segment.mapped(_incoming[index], key)


def pickled_payload(payload: Any) -> tuple[bytes, list[Segment]]:
    """The payload's bytes and the segments whose fds must be sent after them, in this order."""
    buffer = io.BytesIO()
    pickler = _PayloadPickler(buffer)
    try:
        pickler.dump(payload)
    except Exception:  # re-raised below with a name
        pickled(payload, "dataset")  # raises the named error
        raise
    return buffer.getvalue(), pickler.segments


def unpickled_payload(blob: bytes, segments: list[mmap.mmap]) -> Any:
    """In a worker: the payload of ``pickled_payload``, its segments over the mappings ``segments``
    (the received fds, mapped, in the order they were sent)."""
    _incoming[:] = segments
    try:
        return pickle.loads(blob)
    finally:
        _incoming.clear()


def describe_exit(exitcode: int | None) -> str:
    """How a worker ended, in words: ``exited with code N``, ``was killed by SIGNAME (N)``, or
    ``stopped answering`` (no exit code yet)."""
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
