"""Shared mappings that hold no file descriptor, exposed to NumPy one array at a time.

``mmap.mmap(fd, ...)`` keeps a ``dup`` of the fd for the mapping's whole life, so a program that
keeps a thousand shared batches would hold a thousand fds and hit ``RLIMIT_NOFILE``. Here the
segment is mapped with libc's ``mmap`` directly; the fd can be closed at once, and the mapping is
released (``munmap``) when the last array over it is collected.

Each ``window()`` is a separate NumPy array whose ``base`` is a small object holding the mapping,
so views of that array point at it (NumPy collapses view chains to the first array whose base is
not an array): the batch-slot pool can tell, by reference counts, whether anyone still uses it.
"""

from __future__ import annotations

import ctypes
import mmap
import os
import weakref
from typing import Any

import numpy as np

__all__ = ["Mapping"]

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
_libc.munmap.restype = ctypes.c_int
_libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
_MAP_FAILED = ctypes.c_void_p(-1).value


def _unmap(address: int, size: int, owner: int) -> None:
    if os.getpid() == owner:  # a forked child never unmaps what its parent mapped (see ``release``)
        _libc.munmap(address, size)


class Mapping:
    """``size`` bytes of the file ``fd``, mapped shared and read-write; ``fd`` is not kept."""

    def __init__(self, fd: int, size: int):
        address = _libc.mmap(None, size, mmap.PROT_READ | mmap.PROT_WRITE, mmap.MAP_SHARED, fd, 0)
        if address is None or address == _MAP_FAILED:
            code = ctypes.get_errno()
            raise OSError(code, f"mmap of {size} bytes of shared memory failed: {os.strerror(code)}")
        self.address, self.size = address, size
        self._unmap = weakref.finalize(self, _unmap, address, size, os.getpid())
        self._unmap.atexit = False  # at exit a daemon thread may still touch it: let the OS unmap

    def window(self, offset: int, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        """An array of ``shape`` and ``dtype`` at ``offset`` (it keeps the mapping alive)."""
        return np.asarray(_Window(self, offset, shape, np.dtype(dtype)))

    def release(self) -> None:
        """Unmap now, in whichever process this is (a forked worker dropping its parent's free slots).
        Arrays over the mapping must not be used afterwards."""
        self._unmap.detach()
        _libc.munmap(self.address, self.size)


class _Window:
    __slots__ = ("mapping", "__array_interface__")

    def __init__(self, mapping: Mapping, offset: int, shape: tuple[int, ...], dtype: np.dtype):
        self.mapping = mapping
        self.__array_interface__: dict[str, Any] = {
            "version": 3,
            "data": (mapping.address + offset, False),
            "shape": tuple(shape),
            "typestr": dtype.str,
            "descr": dtype.descr,
        }
