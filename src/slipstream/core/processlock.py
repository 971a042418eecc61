"""A lock for state that a forked process inherits: ``ProcessLock``.

A ``threading.Lock`` held by one of the parent's threads at the moment of a fork stays held in the
child forever (the thread that would release it does not exist there), so the child's first
``with lock:`` hangs. A ``ProcessLock`` notices it is in another process (its pid changed) and
takes a fresh lock there instead; it pickles as a fresh lock too. Use it for locks of objects that
worker processes inherit or receive (a remote dataset's caches and counters); it guards only
threads of one process against each other, never processes.

``PathLocks`` hands out one ``ProcessLock`` per folder (by its real path): for a file lock, which
belongs to the process rather than to a handle, so the threads of one process must take turns
before it (two handles in two threads would both hold it, and closing either would release it).
"""

from __future__ import annotations

import os
import threading
from typing import Any

__all__ = ["PathLocks", "ProcessLock"]


class ProcessLock:
    """``with lock:`` as a ``threading.Lock``, fresh in every process (see the module doc)."""

    __slots__ = ("_lock", "_pid")

    def __init__(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()

    def __enter__(self) -> ProcessLock:
        if self._pid != os.getpid():  # a forked child: the parent's lock may be held by a thread that is not here
            self._pid, self._lock = os.getpid(), threading.Lock()
        self._lock.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self._lock.release()

    def __getstate__(self) -> dict[str, Any]:
        return {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__()  # type: ignore[misc]


class PathLocks:
    """One ``ProcessLock`` per path in this process (``of(path)``, by its real path: see the module doc)."""

    def __init__(self) -> None:
        self._locks: dict[str, ProcessLock] = {}
        self._lock = ProcessLock()

    def of(self, path: str | os.PathLike) -> ProcessLock:
        """The one lock of ``path`` in this process."""
        key = os.path.realpath(path)
        with self._lock:
            return self._locks.setdefault(key, ProcessLock())
