"""Download claims between processes sharing a page cache: one download of a page at a time.

``claim(dir_fd, name, wait, on_wait)`` is a context manager held by whoever downloads the page
whose claim file is ``name`` (``<key>.claim`` in the cache's private folder, reached through its
descriptor): it yields True once this holder has the claim, after waiting (at most ``wait``
seconds, ``on_wait()`` called once when it starts to wait) for another holder to finish; False
when it was not taken (the wait ran out, or no claim file could be made or used), and the caller
downloads unclaimed (a cost in bandwidth, never in correctness). A holder checks the cache first:
what a previous holder stored is there.

How it stays safe:

* The claim is an ``flock`` on the claim file, so the kernel drops it when its holder exits or is
  killed: a dead downloader never leaves a claim held (its file stays until it is reused by the
  next claim of that page, or removed by ``sweep``, which the cache's ``put`` runs on every claim
  file it finds unheld).
* Files exist only while they are claimed: the holder unlinks its file before it unlocks. A waiter
  that gets the lock of a file no longer under the name (or under it as another file) tries again
  with the file the name holds now, so two holders never hold one page's claim at once.
* Claim files are per page, not slots shared by pages: no download waits for another page's, and
  the threads of one process never wait for each other (their fetcher downloads a page once at a
  time; a ``flock`` taken through another open file conflicts even within one process, as it
  should for two fetchers). Files are opened without following links or blocking, made 0600, and
  anything but a regular file under a claim's name is no claim.
* A fork does not carry a claim on: ``flock`` belongs to the open file, which a forked child
  shares, so every claim file open in a process is closed in its forked children at once (the
  parent keeps the claim), and a holder unlocks explicitly before it closes.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import time
from collections.abc import Callable, Iterator

__all__ = ["SUFFIX", "claim", "sweep"]

SUFFIX = ".claim"
_OPEN = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_FIRST_PAUSE, _MOST_PAUSE = 0.0005, 0.01  # seconds between looks while another holder downloads
_FILES: set[int] = set()  # the claim files open in this process


def _close_in_child() -> None:
    for fd in list(_FILES):  # (the child's copies: closing them leaves the parent's claims held)
        with contextlib.suppress(OSError):
            os.close(fd)
    _FILES.clear()


os.register_at_fork(after_in_child=_close_in_child)


@contextlib.contextmanager
def claim(dir_fd: int, name: str, wait: float, on_wait: Callable[[], None] | None = None) -> Iterator[bool]:
    """Hold the claim ``name`` in the folder ``dir_fd`` (see the module doc)."""
    pid = os.getpid()
    fd = _take(dir_fd, name, wait, on_wait)
    try:
        yield fd is not None
    finally:
        if fd is not None and os.getpid() == pid:  # (in a forked child the file was closed at the fork)
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=dir_fd)
            _close(fd, unlock=True)


def sweep(dir_fd: int, name: str) -> None:
    """Remove the claim file ``name`` if no one holds it (a killed holder's)."""
    try:
        fd = os.open(name, _OPEN & ~os.O_CREAT, dir_fd=dir_fd)
    except OSError:
        return
    _FILES.add(fd)
    try:
        if _lock(fd) and _named(dir_fd, name, fd):
            os.unlink(name, dir_fd=dir_fd)
    except OSError:
        pass
    finally:
        _close(fd, unlock=True)


def _take(dir_fd: int, name: str, wait: float, on_wait: Callable[[], None] | None) -> int | None:
    """The claim file's descriptor, locked (see ``claim``), or None."""
    deadline = None
    while True:
        try:
            fd = os.open(name, _OPEN, 0o600, dir_fd=dir_fd)
        except OSError:
            return None
        _FILES.add(fd)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                _close(fd)
                return None
            pause = _FIRST_PAUSE
            while not _lock(fd):
                if deadline is None:
                    deadline = time.monotonic() + wait
                    if on_wait is not None:
                        on_wait()
                if time.monotonic() >= deadline:
                    _close(fd)
                    return None
                time.sleep(pause)
                pause = min(2 * pause, _MOST_PAUSE)
            if _named(dir_fd, name, fd):
                return fd
            _close(fd, unlock=True)  # its holder removed it as it finished: try the file there now
        except OSError:
            _close(fd, unlock=True)
            return None
        except BaseException:
            _close(fd, unlock=True)
            raise


def _lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def _named(dir_fd: int, name: str, fd: int) -> bool:
    """Whether ``name`` in the folder is the file open as ``fd`` now."""
    try:
        here = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (here.st_dev, here.st_ino) == (mine.st_dev, mine.st_ino)


def _close(fd: int, unlock: bool = False) -> None:
    _FILES.discard(fd)
    with contextlib.suppress(OSError):
        if unlock:  # (of the open file, for every process that shares it)
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
