"""A local disk cache of remote pages, bounded in bytes, shared by every process on a node.

``PageCache(folder, limit)``: ``get(key, length)`` returns a cached page's bytes (None when absent,
not ``length`` bytes long, or not sealed by this cache), and marks it as just used; ``put(key,
data)`` stores one, evicting the least recently used pages first, and returns whether it was
stored; ``retire(key)`` marks a page as the first to evict (a reader that knows it is done with
it: the loader's read-ahead, so that eviction removes pages read before pages read ahead); ``usage()`` is the bytes its page files take on disk (each page plus its 32-byte seal).
Keys are hex names (the reader makes them from the object, range and checksum, so a page of
changed data has another key).

Who can put a page there (``remote.cachedir``): the folder is private to its user (made 0700; one
of another user, or one that others can write, is refused with a ``PermissionError`` saying how to
fix it), its files 0600, and every page carries a keyed seal (HMAC-SHA256), made when it is written and
checked at every read with the folder's secret key: a page that fails it (placed there by anything
but a slipstream process of this cache, or damaged) is a miss, so the reader downloads the page
again and its good copy replaces the file. (A miss, not an error: the store holds the truth, and
the cache is only a copy of it.) An entry is used only when it is a regular file of the expected
size, opened without following links and without blocking (a FIFO or a link under a page's name is
a miss, never a wait).

How it stays correct with many processes and crashes:

* An entry appears only by ``os.replace`` of a fully written temporary file, under the cache's
  lock: a reader sees a whole page or none, and a killed writer leaves only a temporary file,
  which the next ``put`` removes (every temporary file present while the lock is held is an
  orphan, since writes happen under it).
* The lock is a POSIX record lock (``lockf``) on ``<folder>/.lock``: the kernel releases it when
  its holder exits or is killed, so no crash leaves it held, and a process forked while one of its
  parent's threads holds it does not inherit it (an ``flock`` would stay held by the child's copy
  of the descriptor for the child's whole life). It is held only to evict and write one page (and
  once, to make the folder's key).
* Eviction removes the entries with the oldest modification time (``get`` touches an entry when it
  is read) until the new page fits. A reader holds a page through a memory map of its file (or its
  own copy, fresh from a download): evicting the file never changes what any reader holds, so no
  page in use is lost, and the files in the folder stay within the limit at all times (a page
  evicted while mapped keeps its blocks until the reader drops it: at most the pages each process
  keeps decoded). A page whose file would be larger than the whole limit is not stored
  (``put`` returns False and the caller serves it from memory), so a limit below a page (or below
  a shard) is allowed and never waits.
* Processes that miss the same page at once download it once: ``claim(key, length, wait)`` is held
  while one downloads it (an ``flock`` on a per-page claim file, which the kernel drops when its
  holder dies: ``remote.claims``), and another waits for it, at most ``wait`` seconds, then finds
  the page cached (or, the holder's download failed, downloads it itself). A page the cache cannot
  store takes no claim (nothing to share).
* A folder that cannot be written (a full disk, a read-only file system) stores nothing: ``put``
  returns False and the caller serves the page from memory; pages already there (sealed while it
  was writable) are still read. A read-only one takes no claims (none can be made there).
* A restart (or another loader) finds every page already there: the cache is its folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import mmap
import os
import secrets
import stat
import time
import weakref
from collections.abc import Callable, Iterator
from hmac import compare_digest
from pathlib import Path
from typing import Any

from ..core.processlock import PathLocks
from . import claims
from .cachedir import NEW, TAG, load_key, open_entry, open_private, seal

__all__ = ["PageCache"]

_SUFFIX = ".page"
_TEMPORARY = ".tmp"
_LOCK = ".lock"
_VERIFIED = 1 << 16  # entries whose verified state a process remembers (forgotten all at once past it)


class PageCache:
    """Pages on disk under ``folder``, at most ``limit`` bytes of them (see the module doc)."""

    def __init__(self, folder: str | os.PathLike, limit: int):
        self.folder = Path(folder)
        self.limit = int(limit)
        self._threads = _FOLDER_LOCKS.of(self.folder)  # one put at a time per folder in this process (core.processlock)
        self._dir = open_private(self.folder)  # (raises for a folder that is not private; None: cannot be made)
        self._key: bytes | None = None
        self.rejected = 0  # entries of the right size whose seal failed, in this process
        self._verified: dict[str, tuple[int, int]] = {}  # entry -> (inode, modification time) when its seal last held here
        if self._dir is not None:
            weakref.finalize(self, os.close, self._dir)
            self._key = load_key(self._dir, self._locked)

    @property
    def writable(self) -> bool:
        """Whether pages can be read and stored here at all (False: a folder that could not be made,
        or no key could be: every page is served from memory)."""
        return self._key is not None

    def fits(self, length: int) -> bool:
        """Whether a page of ``length`` bytes can be stored here at all (its file within the limit)."""
        return self._key is not None and length + TAG <= self.limit

    def get(self, key: str, length: int) -> memoryview | None:
        """The page ``key`` if cached, ``length`` bytes long and sealed by this cache (marked as just
        used), else None: a read-only view of the file's memory map (no copy; the page stays
        readable through it even if evicted meanwhile, its disk blocks held until the view is
        dropped). The seal is checked once per file and process: a file this process verified
        and last touched (the same inode, the modification time it set) is not checked again,
        since only a page's own writer (a new file) or this user could change it since."""
        if self._key is None:
            return None
        name = key + _SUFFIX
        fd = open_entry(self._dir, name, length + TAG)  # type: ignore[arg-type]
        if fd is None:
            return None
        try:
            st = os.fstat(fd)
            view = memoryview(mmap.mmap(fd, 0, access=mmap.ACCESS_READ))
            data = view[:length]
            if self._verified.get(name) != (st.st_ino, st.st_mtime_ns) and not compare_digest(seal(self._key, name, data), view[length:]):
                self.rejected += 1
                self._verified.pop(name, None)
                return None
            try:  # marked as just used, at a time this process knows (evicted since it was mapped, or read-only: as it was)
                now = time.time_ns()
                os.utime(fd, ns=(now, now))
                st = os.fstat(fd)
            except OSError:
                pass
            if len(self._verified) >= _VERIFIED:
                self._verified.clear()
            self._verified[name] = (st.st_ino, st.st_mtime_ns)
            return data
        except (OSError, ValueError):
            return None
        finally:
            os.close(fd)

    def has(self, key: str) -> bool:
        """Whether page ``key`` is cached now (it may be evicted the moment after)."""
        if self._key is None:
            return False
        try:
            return stat.S_ISREG(os.stat(key + _SUFFIX, dir_fd=self._dir, follow_symlinks=False).st_mode)
        except OSError:
            return False

    def retire(self, key: str) -> None:
        """Mark page ``key`` (if cached) as used longest ago: the next eviction removes it first."""
        if self._key is None:
            return
        with contextlib.suppress(OSError):  # (gone already, or a read-only folder: nothing to do)
            os.utime(key + _SUFFIX, ns=(0, 0), dir_fd=self._dir, follow_symlinks=False)

    @contextlib.contextmanager
    def claim(self, key: str, length: int, wait: float, on_wait: Callable[[], None] | None = None) -> Iterator[bool]:
        """The claim to download page ``key`` (``length`` bytes), across the processes sharing this
        cache: yields True once held, after waiting at most ``wait`` seconds for another holder
        (``on_wait()`` once when that wait starts); False when not taken (the wait ran out, or a page
        this cache cannot store: nothing to share, so no claim). See ``remote.claims``."""
        if not self.fits(length):
            yield False
            return
        with claims.claim(self._dir, key + claims.SUFFIX, wait, on_wait) as held:  # type: ignore[arg-type]
            yield held  # (this cache, and so the folder's descriptor, kept open meanwhile)

    def put(self, key: str, data: bytes) -> bool:
        """Store page ``key``; False when it cannot fit under the limit even with every other page
        evicted, or cannot be written (a full or read-only disk: the caller serves it from memory)."""
        size = len(data) + TAG
        if size > self.limit or self._key is None:
            return False
        name = key + _SUFFIX
        try:
            with self._locked():
                entries = self._entries(orphans=True)
                used = sum(size for _, size, _ in entries)
                for entry, bytes_, _ in sorted(entries, key=lambda entry: entry[2]):  # oldest first
                    if used + size <= self.limit:
                        break
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry, dir_fd=self._dir)
                    used -= bytes_
                if used + size > self.limit:  # (other processes' pages appeared meanwhile: none left to evict)
                    return False
                temporary = f"{key}.{os.getpid()}.{secrets.token_hex(4)}{_TEMPORARY}"
                try:  # (through open(), by its full path, with an opener that makes it private, in the folder held)
                    with open(self.folder / temporary, "wb", opener=self._opener(temporary)) as handle:
                        handle.write(data)
                        handle.write(seal(self._key, name, data))
                    os.replace(temporary, name, src_dir_fd=self._dir, dst_dir_fd=self._dir)
                except BaseException:
                    with contextlib.suppress(OSError):
                        os.unlink(temporary, dir_fd=self._dir)
                    raise
        except OSError:
            return False
        return True

    def _opener(self, name: str) -> Any:
        return lambda _path, _flags: os.open(name, NEW, 0o600, dir_fd=self._dir)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """The cache's lock: this process's thread lock for the folder, then the file lock."""
        with self._threads:
            fd = os.open(_LOCK, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600, dir_fd=self._dir)
            try:
                if not stat.S_ISREG(os.fstat(fd).st_mode):
                    raise OSError(f"{self.folder / _LOCK} is not a regular file")
                fcntl.lockf(fd, fcntl.LOCK_EX)  # released when closed, or when this process dies; never inherited by a fork
                yield
            finally:
                os.close(fd)

    def _entries(self, orphans: bool = False) -> list[tuple[str, int, int]]:
        """(name, size, last use in ns) of every page file; with ``orphans`` (only while the lock is
        held) temporary files are removed, and so are claim files no one holds."""
        out: list[tuple[str, int, int]] = []
        if self._dir is None:
            return out
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC, dir_fd=self._dir)  # (its own read position)
        try:
            with os.scandir(fd) as found:
                for entry in found:
                    try:
                        if orphans and entry.name.endswith(_TEMPORARY):
                            os.unlink(entry.name, dir_fd=self._dir)
                        elif orphans and entry.name.endswith(claims.SUFFIX):  # a killed downloader's, if unheld
                            claims.sweep(self._dir, entry.name)
                        elif entry.name.endswith(_SUFFIX):
                            st = entry.stat(follow_symlinks=False)
                            if stat.S_ISREG(st.st_mode):
                                out.append((entry.name, st.st_size, st.st_mtime_ns))
                    except FileNotFoundError:
                        continue
        finally:
            os.close(fd)
        return out

    def usage(self) -> int:
        """Bytes of cached page files now."""
        return sum(size for _, size, _ in self._entries())

    def __getstate__(self) -> dict[str, Any]:  # (a copy or another process opens the folder again, and checks it)
        return {"folder": str(self.folder), "limit": self.limit}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["folder"], state["limit"])  # type: ignore[misc]


_FOLDER_LOCKS = PathLocks()  # one put at a time per cache folder in this process, whichever PageCache puts
