"""Shared-memory segments for process workers: sized up front, nameless once created, passed by fd.

A segment is a file created in ``/dev/shm`` (or ``$SLIPSTREAM_SHM_DIR``), unlinked at once and
kept only as an open file descriptor, which is handed to worker processes over their Unix-socket
pipe (``SCM_RIGHTS``). Because no name survives the creation, nothing is ever left behind in
``/dev/shm``: not when a worker crashes, not when the parent is killed with SIGKILL. The memory
returns to the system when the last process holding the fd or a mapping lets go.

The pages are reserved with ``posix_fallocate`` when the segment is made, so a ``/dev/shm`` that
is too small raises ``SharedMemoryError`` (saying how much was needed and what to do) instead of
killing the process with SIGBUS the first time a worker writes to a page that cannot be backed.
Where there is no ``posix_fallocate`` (macOS, whose temp dir is on disk) the file is only sized.
"""

from __future__ import annotations

import errno
import mmap
import os
import secrets
import shutil
import tempfile
import weakref
from typing import Any

import numpy as np

from ..core.errors import SharedMemoryError
from ..core.forking import at_worker_fork
from .rawmap import Mapping

__all__ = ["Segment", "SharedMemoryError", "attach", "close_inherited_fds", "layout", "shm_directory"]

_ALIGN = 64


def shm_directory() -> str:
    """Where segments are created: ``$SLIPSTREAM_SHM_DIR``, else ``/dev/shm``, else the temp dir."""
    chosen = os.environ.get("SLIPSTREAM_SHM_DIR")
    if chosen:
        return chosen
    return "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()


def _free_bytes(directory: str) -> int | None:
    try:
        return shutil.disk_usage(directory).free
    except OSError:
        return None


def _mib(n: int) -> str:
    return f"{n / 2**20:,.1f} MiB"


class Segment:
    """``size`` bytes of shared memory: ``fd`` to pass to other processes, ``buffer`` mapped here.

    ``purpose`` is used in the error message when there is no room. The fd is closed when the
    segment object is collected; arrays made with ``array()`` keep the mapping alive on their own.
    """

    def __init__(self, size: int, purpose: str = "batch buffers", raw: bool = False):
        size = max(int(size), 1)
        directory = shm_directory()
        path = os.path.join(directory, f"slipstream-{os.getpid()}-{secrets.token_hex(8)}")
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        except OSError as exc:
            raise SharedMemoryError(
                f"slipstream: cannot create a shared-memory file in {directory} for the process workers' "
                f"{purpose}: {exc}. Set SLIPSTREAM_SHM_DIR to a writable directory (a tmpfs is best), "
                "or use backend='thread'."
            ) from exc
        try:
            os.unlink(path)
            _reserve(fd, size, directory, purpose)
            if raw:  # arrays over it hold no fd (see rawmap); it has no ``buffer``
                self.mapping: Any = Mapping(fd, size)
            else:
                self.buffer = mmap.mmap(fd, size)
                self.mapping = None
        except BaseException:
            os.close(fd)
            raise
        self.fd, self.size = fd, size
        self.key = secrets.randbits(62)
        self._close = weakref.finalize(self, os.close, fd)
        if raw:
            _raw_segments.add(self)

    @classmethod
    def mapped(cls, buffer: mmap.mmap, key: int = 0) -> Segment:
        """A segment another process made, mapped here as ``buffer`` (no fd of its own to pass on)."""
        segment = cls.__new__(cls)
        segment.buffer, segment.size, segment.fd, segment.key = buffer, len(buffer), -1, key
        segment.mapping = None
        segment._close = lambda: None
        return segment

    def __reduce__(self) -> tuple[Any, ...]:
        # plain pickling copies the bytes (slipstream's worker start-up passes the fd instead)
        return (_copy_of, (bytes(self.buffer),))

    def array(self, offset: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An array over this segment's memory (it keeps the mapping alive; views of it point at it)."""
        if self.mapping is not None:
            return self.mapping.window(offset, shape, dtype)
        return np.ndarray(shape, dtype, buffer=self.buffer, offset=offset)

    def close(self) -> None:
        """Close the fd now (mappings already made stay valid)."""
        self._close()


_raw_segments: weakref.WeakSet[Segment] = weakref.WeakSet()  # batch slots: their fds are closed in forked workers


@at_worker_fork
def close_inherited_fds() -> None:
    """In a forked worker: close the fds of the parent's batch-slot segments (it gets its own)."""
    for segment in list(_raw_segments):
        segment.close()
    _raw_segments.clear()


def _copy_of(data: bytes) -> Segment:
    segment = Segment(len(data))
    segment.buffer[:] = data
    return segment


def _reserve(fd: int, size: int, directory: str, purpose: str) -> None:
    """Back all ``size`` bytes now, so a full file system is an exception here, never a SIGBUS later."""
    fallocate = getattr(os, "posix_fallocate", None)
    if fallocate is None:  # macOS: no posix_fallocate; sized, not reserved (its temp dir is a disk, rarely full)
        os.ftruncate(fd, size)
        return
    try:
        fallocate(fd, 0, size)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.ENOMEM, errno.EFBIG, errno.EDQUOT):
            free = _free_bytes(directory)
            have = f"{_mib(free)} is free there" if free is not None else "its free space is unknown"
            raise SharedMemoryError(
                f"slipstream: the process workers' {purpose} need {_mib(size)} more of shared memory in {directory}, "
                f"but {have}. Make room (with Docker: --shm-size=2g or larger; or set SLIPSTREAM_SHM_DIR to a "
                "bigger tmpfs or a local disk directory), or lower batch_size or prefetch, or use backend='thread'."
            ) from exc
        if exc.errno in (errno.EOPNOTSUPP, errno.EINVAL, errno.ENOSYS):
            os.ftruncate(fd, size)  # a file system without fallocate: sized, not reserved
        else:
            raise


def layout(shapes: list[tuple[tuple[int, ...], np.dtype]]) -> tuple[list[int], int]:
    """Offsets (64-byte aligned) for arrays of these shapes and dtypes packed in one segment, and the total size."""
    offsets, end = [], 0
    for shape, dtype in shapes:
        end = -(-end // _ALIGN) * _ALIGN
        offsets.append(end)
        end += int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
    return offsets, end


def attach(fd: int, size: int) -> mmap.mmap:
    """Map a segment received as ``fd`` (the fd is closed; the mapping stays)."""
    try:
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)
