"""The write lock of a sharded dataset's folder: one write into a folder at a time.

``locked(folder)`` holds ``folder/.slipstream-write.lock`` exclusively while a sharded write (a new
dataset or ``append=True``) decides its shard numbers, writes its shards and commits the index, so
two writes of one folder never both write ``shard-00001`` or both take an empty folder for theirs:
the second waits for the first, then sees what it left (``files.folder.writing``).

* The lock is a POSIX record lock (``lockf``) on that file: the kernel releases it when its holder
  exits or is killed (a ``kill -9`` mid-write never leaves it held), a process forked meanwhile does
  not inherit it, and it works on NFS where the file system supports locks. Being the process's, it
  is joined by one thread lock per folder (a ``ProcessLock``), so threads of one process queue too.
* The file is removed when the write ends (a dataset's folder holds only its shards and index). A
  writer that waited on a file removed meanwhile takes the lock again on the file now there (it
  checks that the file it locked is still the folder's), so two writers never hold it at once. A
  killed writer's lock file is left behind, unlocked; the next writer takes it and removes it.
* The holder writes its pid and host into the file. A process whose parent holds the lock (a
  worker process that runs the script's write again: a script without the ``__main__`` guard) is
  refused at once with a ``RuntimeError`` instead of waiting forever for a parent that waits for it.
* A file system that refuses locks (some FUSE and network mounts) is a ``RuntimeWarning`` and the
  write goes ahead unlocked: concurrent writes of one folder there are not kept apart.
"""

from __future__ import annotations

import errno
import fcntl
import multiprocessing
import os
import socket
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..core.processlock import ProcessLock

__all__ = ["LOCK", "locked"]

LOCK = ".slipstream-write.lock"

_THREAD_LOCKS: dict[str, ProcessLock] = {}
_THREAD_LOCKS_LOCK = ProcessLock()
_UNSUPPORTED = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, errno.EBADF}


def _thread_lock(folder: Path) -> ProcessLock:
    """This process's one thread lock for ``folder`` (the file lock is the process's, not a handle's)."""
    key = os.path.realpath(folder)
    with _THREAD_LOCKS_LOCK:
        return _THREAD_LOCKS.setdefault(key, ProcessLock())


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def _holder(fd: int) -> str:
    """What the lock's holder wrote in it: ``"<pid> <host>"`` (empty when it did not)."""
    try:
        return os.pread(fd, 512, 0).decode("utf-8", "replace").strip()
    except OSError:
        return ""


def _refuse_endless_wait(fd: int, path: Path) -> None:
    """``RuntimeError`` when the lock is held by this process's parent, or this is a worker process
    still starting (``multiprocessing`` runs the main script again in it): waiting would never end."""
    holder = _holder(fd).split()
    parent = len(holder) == 2 and holder[0] == str(os.getppid()) and holder[1] == socket.gethostname()
    starting = getattr(multiprocessing.current_process(), "_inheriting", False)
    if parent or starting:
        why = f"its holder is this process's parent (pid {holder[0]})" if parent else "this is a worker process still starting"
        raise RuntimeError(
            f"{path.parent}: this write would wait forever for the folder's write lock ({why}): a worker process must not "
            "write the folder its parent is writing. Worker processes run the main script again: a script that writes with "
            "engine='processes' must keep its code under if __name__ == \"__main__\":"
        )


def _record(fd: int) -> None:
    """Write this process's pid and host into the lock file (for ``_refuse_endless_wait``)."""
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
    except OSError:  # a full disk: the lock itself still holds
        pass


def _acquire(path: Path) -> int | None:
    """A descriptor of ``path`` holding its lock (None where the file system refuses locks)."""
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o666)
        try:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as busy:
                if busy.errno not in (errno.EACCES, errno.EAGAIN):
                    raise
                _refuse_endless_wait(fd, path)
                fcntl.lockf(fd, fcntl.LOCK_EX)  # another write of the folder: wait for it to end
        except OSError as exc:
            os.close(fd)
            if exc.errno in _UNSUPPORTED:
                try:
                    os.unlink(path)  # (no lock to keep: the folder holds only the dataset)
                except OSError:
                    pass
                warnings.warn(
                    f"{path.parent}: this file system refuses file locks ({exc}); the write goes ahead unlocked, so another write "
                    "of this folder at the same time could replace its shards: run one write of a folder at a time here",
                    RuntimeWarning,
                    stacklevel=2,
                )
                return None
            raise
        except BaseException:
            os.close(fd)
            raise
        if _same_file(fd, path):
            _record(fd)
            return fd
        os.close(fd)  # its holder removed it as we waited: lock the one there now


@contextmanager
def locked(folder: Path) -> Iterator[None]:
    """Hold ``folder``'s write lock (see the module doc); ``folder`` must exist."""
    path = folder / LOCK
    with _thread_lock(folder):
        fd = _acquire(path)
        try:
            yield
        finally:
            if fd is not None:
                try:
                    if _same_file(fd, path):
                        os.unlink(path)  # before the lock is released: a waiter then finds it gone and locks anew
                except OSError:  # left behind, unlocked: harmless (the next writer takes it)
                    pass
                os.close(fd)  # releases the lock
