"""``SharedList``: a read-only list whose items live as pickled bytes in one shared-memory buffer.

A dataset that keeps millions of small Python objects (dicts of annotations, file names, token
lists) grows every worker process's private memory as it reads them: each read writes the
object's reference count, and the kernel copies the page it sits on (copy-on-read,
pytorch/pytorch#13246). A ``SharedList`` holds no per-item Python objects at all: one int64
offset table and one byte buffer in a shared-memory segment, which forked workers inherit and
spawned workers map (its file descriptor travels with the worker's copy of the dataset), so all
processes read the same physical pages and total memory stays flat as workers are added.

Contract: ``lst[i]`` unpickles item ``i`` afresh (a new object each time: mutating it changes
nothing stored); negative indices and slices (returning a list) work; ``len`` is exact. Reads are
thread-safe. Building one pickles every item once (items must be picklable). Pickling a
``SharedList`` outside slipstream's worker start-up copies its bytes, so it round-trips anywhere.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, overload

import numpy as np

from .shm import Segment

__all__ = ["SharedList"]


class SharedList(Sequence):
    """A read-only sequence of ``items``, stored pickled in shared memory (see the module docstring)."""

    def __init__(self, items: Iterable[Any]):
        offsets, blobs, end = [0], [], 0
        for k, item in enumerate(items):
            try:
                blob = pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as exc:  # noqa: BLE001 - pickling raises many types
                raise TypeError(f"SharedList: item {k} ({type(item).__name__}) cannot be pickled: {exc}") from exc
            blobs.append(blob)
            end += len(blob)
            offsets.append(end)
        n = len(blobs)
        segment = Segment(8 * (n + 1) + end, purpose="SharedList")
        table = np.ndarray((n + 1,), np.int64, buffer=segment.buffer, offset=0)
        table[:] = offsets
        start = 8 * (n + 1)
        for blob, at in zip(blobs, offsets):
            segment.buffer[start + at : start + at + len(blob)] = blob
        self._attach(segment, n)

    def _attach(self, segment: Any, n: int) -> None:
        self._segment, self._n = segment, n
        self._offsets = np.ndarray((n + 1,), np.int64, buffer=segment.buffer, offset=0)
        self._data = memoryview(segment.buffer)[8 * (n + 1) :]

    @classmethod
    def _from_segment(cls, segment: Any, n: int) -> SharedList:
        shared = cls.__new__(cls)
        shared._attach(segment, n)
        return shared

    def __reduce__(self) -> tuple[Any, ...]:
        return (SharedList._from_segment, (self._segment, self._n))

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> Any: ...

    @overload
    def __getitem__(self, index: slice) -> list[Any]: ...

    def __getitem__(self, index: int | slice) -> Any:
        if isinstance(index, slice):
            return [self[k] for k in range(*index.indices(self._n))]
        try:
            k = index.__index__()
        except AttributeError:
            raise TypeError(f"SharedList indices must be integers or slices, not {type(index).__name__}") from None
        if k < 0:
            k += self._n
        if not 0 <= k < self._n:
            raise IndexError(f"SharedList index {index} out of range for {self._n} items")
        a, b = int(self._offsets[k]), int(self._offsets[k + 1])
        return pickle.loads(self._data[a:b])

    def __iter__(self) -> Iterator[Any]:
        for k in range(self._n):
            yield self[k]

    @property
    def nbytes(self) -> int:
        """Bytes of shared memory the list occupies."""
        return self._segment.size

    def __repr__(self) -> str:
        return f"SharedList({self._n} items, {self.nbytes / 2**20:.1f} MiB shared)"
