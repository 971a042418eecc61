"""A local disk cache of remote pages, bounded in bytes, shared by every process on a node.

``PageCache(folder, limit)``: ``get(key, length)`` returns a cached page's bytes (None when absent
or not ``length`` bytes long), and marks it as just used; ``put(key, data)`` stores one, evicting
the least recently used pages first, and returns whether it was stored; ``usage()`` is the bytes
held. Keys are hex names (the reader makes them from the object, range and checksum, so a page of
changed data has another key).

How it stays correct with many processes and crashes:

* An entry appears only by ``os.replace`` of a fully written temporary file, under the cache's
  lock: a reader sees a whole page or none, and a killed writer leaves only a temporary file,
  which the next ``put`` removes (every temporary file present while the lock is held is an
  orphan, since writes happen under it).
* The lock is a POSIX record lock (``lockf``) on ``<folder>/.lock``: the kernel releases it when
  its holder exits or is killed, so no crash leaves it held, and a process forked while one of its
  parent's threads holds it does not inherit it (an ``flock`` would stay held by the child's copy
  of the descriptor for the child's whole life). It is held only to evict and write one page.
* Eviction removes the entries with the oldest modification time (``get`` touches an entry when it
  is read) until the new page fits. A reader holds a page through a memory map of its file (or its
  own copy, fresh from a download): evicting the file never changes what any reader holds, so no
  page in use is lost, and the files in the folder stay within the limit at all times (a page
  evicted while mapped keeps its blocks until the reader drops it: at most the pages each process
  keeps decoded). A page larger than the whole limit is not stored
  (``put`` returns False and the caller serves it from memory), so a limit below a page (or below
  a shard) is allowed and never waits.
* A restart (or another loader) finds every page already there: the cache is its folder.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import secrets
from pathlib import Path

from ..core.processlock import ProcessLock

__all__ = ["PageCache"]

_SUFFIX = ".page"
_TEMPORARY = ".tmp"


class PageCache:
    """Pages on disk under ``folder``, at most ``limit`` bytes of them (see the module doc)."""

    def __init__(self, folder: str | os.PathLike, limit: int):
        self.folder = Path(folder)
        self.limit = int(limit)
        self.folder.mkdir(parents=True, exist_ok=True)
        self._lock_path = self.folder / ".lock"
        self._threads = _folder_lock(self.folder)  # one put at a time per folder in this process (see _folder_lock)

    def _path(self, key: str) -> Path:
        return self.folder / (key + _SUFFIX)

    def get(self, key: str, length: int) -> memoryview | None:
        """The page ``key`` if cached and ``length`` bytes long (marked as just used), else None: a
        read-only view of the file's memory map (no copy; the page stays readable through it even
        if evicted meanwhile, its disk blocks held until the view is dropped)."""
        path = self._path(key)
        try:
            with open(path, "rb") as handle:
                if os.fstat(handle.fileno()).st_size != length:
                    return None
                data = memoryview(mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if length else b"")
        except FileNotFoundError:
            return None
        try:
            os.utime(path)
        except FileNotFoundError:  # evicted since it was mapped: the mapping is still the page
            pass
        return data

    def has(self, key: str) -> bool:
        """Whether page ``key`` is cached now (it may be evicted the moment after)."""
        return self._path(key).exists()

    def put(self, key: str, data: bytes) -> bool:
        """Store page ``key``; False when it cannot fit under the limit even with every other page
        evicted, or cannot be written (a full or read-only disk: the caller serves it from memory)."""
        if len(data) > self.limit:
            return False
        with self._threads, open(self._lock_path, "a+b") as lock:
            fcntl.lockf(lock, fcntl.LOCK_EX)  # released when closed, or when this process dies; never inherited by a fork
            entries = self._entries(orphans=True)
            used = sum(size for _, size, _ in entries)
            for path, size, _ in sorted(entries, key=lambda entry: entry[2]):  # oldest first
                if used + len(data) <= self.limit:
                    break
                path.unlink(missing_ok=True)
                used -= size
            if used + len(data) > self.limit:  # (other processes' pages appeared meanwhile: none left to evict)
                return False
            temporary = self.folder / f"{key}.{os.getpid()}.{secrets.token_hex(4)}{_TEMPORARY}"
            try:
                with open(temporary, "wb") as handle:
                    handle.write(data)
                os.replace(temporary, self._path(key))
            except OSError:
                temporary.unlink(missing_ok=True)
                return False
            except BaseException:
                temporary.unlink(missing_ok=True)
                raise
        return True

    def _entries(self, orphans: bool = False) -> list[tuple[Path, int, int]]:
        """(path, size, last use in ns) of every page; with ``orphans`` (only while the lock is
        held) temporary files are removed."""
        out = []
        with os.scandir(self.folder) as found:
            for entry in found:
                try:
                    if orphans and entry.name.endswith(_TEMPORARY):
                        os.unlink(entry.path)
                    elif entry.name.endswith(_SUFFIX):
                        st = entry.stat()
                        out.append((Path(entry.path), st.st_size, st.st_mtime_ns))
                except FileNotFoundError:
                    continue
        return out

    def usage(self) -> int:
        """Bytes of cached pages now."""
        return sum(size for _, size, _ in self._entries())


_FOLDER_LOCKS: dict[str, ProcessLock] = {}
_FOLDER_LOCKS_LOCK = ProcessLock()


def _folder_lock(folder: Path) -> ProcessLock:
    """The one thread lock of this process for the cache in ``folder``, whichever ``PageCache`` uses
    it: the file lock belongs to the process, not to a handle (two caches on one folder, in two
    threads, would both hold it at once, and closing either handle would release it for both)."""
    key = os.path.realpath(folder)
    with _FOLDER_LOCKS_LOCK:
        return _FOLDER_LOCKS.setdefault(key, ProcessLock())
