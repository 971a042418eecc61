"""The write lock of a sharded dataset's folder: one write into a folder at a time.

``locked(folder)`` holds ``folder/.slipstream-write.lock`` exclusively while a sharded write (a new
dataset or ``append=True``) decides its shard numbers, writes its shards and commits the index, so
two writes of one folder never both write ``shard-00001`` or both take an empty folder for theirs:
the second waits for the first, then sees what it left (``write.folderwrite.writing``).

* The lock is a POSIX record lock (``lockf``) on that file: the kernel releases it when its holder
  exits or is killed (a ``kill -9`` mid-write never leaves it held), a process forked meanwhile does
  not inherit it, and it works on NFS where the file system supports locks. Being the process's, it
  is joined by one thread lock per folder (a ``ProcessLock``), so threads of one process queue too.
* The file is removed when the write ends (a dataset's folder holds only its shards and index). A
  writer that waited on a file removed meanwhile takes the lock again on the file now there (it
  checks that the file it locked is still the folder's), so two writers never hold it at once. A
  killed writer's lock file is left behind, unlocked; the next writer takes it and removes it.
* The holder writes its pid and host into the file (who holds it, for a person who finds it).
* A worker process still starting (``multiprocessing`` runs the main script again in it: a script
  without the ``__main__`` guard that writes with ``engine="processes"``) is refused at once with a
  ``RuntimeError`` instead of waiting forever for a parent that waits for it; any other process,
  the holder's children too, waits its turn.
* The file is opened without following links and used only when it is a regular file: anything
  else there is refused (``FileExistsError`` naming it), never written through.
* A file system that refuses locks (some FUSE and network mounts) is a ``RuntimeWarning`` and the
  write goes ahead unlocked (the lock file left as it is: it may be another writer's), so concurrent
  writes of one folder there are not kept apart. A wait for a lock that another writer holds never
  goes ahead unlocked: a failure there is an ``OSError``.
"""

from __future__ import annotations

import errno
import fcntl
import multiprocessing
import os
import socket
import stat
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..core.processlock import PathLocks

__all__ = ["LOCK", "WaitFailedError", "locked"]

LOCK = ".slipstream-write.lock"

_THREAD_LOCKS = PathLocks()  # one writer thread per folder in this process (the file lock is the process's)
_UNSUPPORTED = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS, errno.EINVAL, errno.EBADF}


class WaitFailedError(OSError):
    """The wait for a lock another writer holds failed (locks work there): the write does not go ahead."""


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    mine = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino)


def _refuse_endless_wait(path: Path) -> None:
    """``RuntimeError`` when this is a worker process still starting (``multiprocessing`` runs the
    main script again in it, while its parent holds the lock): waiting would never end. A process
    that is merely the holder's child (a rank a launcher started, a script's subprocess) waits its
    turn as any writer does."""
    if getattr(multiprocessing.current_process(), "_inheriting", False):
        raise RuntimeError(
            f"{path.parent}: this write would wait forever for the folder's write lock (this is a worker process still "
            "starting): a worker process must not write the folder its parent is writing. Worker processes run the main "
            "script again: a script that writes with engine='processes' must keep its code under if __name__ == \"__main__\":"
        )


def _open(path: Path) -> int:
    """A read-write descriptor of the lock file (made if missing), never through a link:
    ``FileExistsError`` naming it when a link, FIFO or anything but a regular file is there
    (whoever can write the folder could otherwise aim the writer at another file);
    ``FileNotFoundError`` when the folder is not there."""
    flags = os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    fd = None
    for _ in range(100):  # (made, or opened as it is; removed between the two by its holder: again)
        try:
            fd = os.open(path, flags | os.O_CREAT, 0o666)
            break
        except FileNotFoundError:
            if not path.parent.is_dir():
                raise FileNotFoundError(errno.ENOENT, f"{path.parent}: the folder to write is not there", str(path.parent)) from None
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
                raise
            break
    if fd is not None and stat.S_ISREG(os.fstat(fd).st_mode):
        return fd
    if fd is not None:
        os.close(fd)
    raise FileExistsError(
        errno.EEXIST,
        f"{path.parent}: {LOCK} there is not a regular file (a link, a FIFO or a folder, which slipstream never makes): "
        "refusing to write the folder through it; remove it if no write of the folder is under way",
        str(path),
    )


def _record(fd: int) -> None:
    """Write this process's pid and host into the lock file (who holds it, for a person who finds it)."""
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()} {socket.gethostname()}\n".encode(), 0)
    except OSError:  # a full disk: the lock itself still holds
        pass


def _acquire(path: Path) -> int | None:
    """A descriptor of ``path`` holding its lock (None where the file system refuses locks)."""
    while True:
        fd = _open(path)
        try:
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as busy:
                if busy.errno not in (errno.EACCES, errno.EAGAIN):
                    raise
                _refuse_endless_wait(path)
                try:
                    fcntl.lockf(fd, fcntl.LOCK_EX)  # another write of the folder: wait for it to end
                except OSError as exc:  # (locks work here, and another writer holds this one: never go ahead)
                    raise WaitFailedError(
                        exc.errno, f"{path.parent}: waiting for another write of this folder to end failed ({exc}); write it again", str(path)
                    ) from exc
        except OSError as exc:
            os.close(fd)
            if exc.errno in _UNSUPPORTED and not isinstance(exc, WaitFailedError):  # (the file is left: it may be another writer's)
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
    with _THREAD_LOCKS.of(folder):
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
