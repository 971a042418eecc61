"""A pool of reusable batch buffers ("slots") that never overwrites a batch anyone still holds.

Each slot owns one freshly allocated array per array leaf of the spec, so every view of a batch,
however indirect, keeps a reference to one of those arrays (NumPy points views at the array that
owns the memory). A slot is handed out again only when none of its arrays is referenced from
outside the pool: not by a batch being filled, not by a batch the user kept, not by a view or a
``torch.from_numpy`` tensor of one. A training loop that drops each batch before the next-but-one
cycles through a handful of slots and allocates nothing in steady state; a user who keeps batches
(``list(loader)``) gets fresh ones, and the kept ones leave the pool.
"""

from __future__ import annotations

import sys
import threading
import weakref
from typing import Any

import numpy as np

from .forking import at_worker_fork
from .nodes import ArrayLeaf
from .spec import Spec

__all__ = ["SlotPool", "Storage", "heap_arrays"]


def _refcounts(arrays: list[np.ndarray]) -> list[int]:
    return [sys.getrefcount(a) for a in arrays]


class Storage(list):
    """A batch's storage: one array (array leaves) or list (object leaves) per leaf, in leaf order.

    ``segment`` and ``offsets`` say where the arrays live when they are in shared memory."""

    __slots__ = ("segment", "offsets", "rows")


def heap_arrays(spec: Spec, rows: int) -> tuple[list[np.ndarray], Any, list[int]]:
    """Fresh private arrays for ``rows`` observations of ``spec`` (no segment, no offsets)."""
    return [np.empty((rows, *leaf.shape), leaf.dtype) for leaf in spec.array_leaves], None, []


class _Slot:
    __slots__ = ("rows", "arrays", "base", "segment", "offsets")

    def __init__(self, spec: Spec, rows: int, allocate: Any):
        self.rows = rows
        self.arrays, self.segment, self.offsets = allocate(spec, rows)
        self.base = _refcounts(self.arrays)  # the pool's own references; measured the way free() measures

    def free(self) -> bool:
        return _refcounts(self.arrays) == self.base


class SlotPool:
    """Thread-safe pool of batch slots for one spec, holding at most ``capacity`` slots.

    Slots have room for ``batch_size`` observations, or more when a larger batch asks (a batch
    sampler's batches vary in size); a batch uses the first rows of its slot.
    """

    def __init__(self, spec: Spec, batch_size: int, capacity: int, allocate: Any = heap_arrays):
        self.spec = spec
        self._allocate = allocate  # (spec, rows) -> (arrays, segment, offsets); see heap_arrays
        self.batch_size = batch_size
        self.capacity = capacity
        self._slots: list[_Slot] = []
        self._lock = threading.Lock()
        self.allocations = 0
        if allocate is not heap_arrays:
            _shared_pools.add(self)

    def acquire(self, n: int) -> list[Any]:
        """Storage for a batch of ``n``: per leaf, an array of an unreferenced slot or a fresh list.

        The slot stays taken for as long as the returned storage, or anything built from it, lives.
        """
        with self._lock:
            for slot in self._slots:
                if slot.rows >= n and slot.free():
                    break
            else:
                if len(self._slots) >= self.capacity:
                    del self._slots[0]  # kept elsewhere (or too small): whoever holds it owns that memory now
                slot = _Slot(self.spec, max(n, self.batch_size), self._allocate)
                self._slots.append(slot)
                self.allocations += 1
            if not self.spec.object_leaves:
                storage = Storage(slot.arrays)
            else:
                arrays = iter(slot.arrays)
                storage = Storage(next(arrays) if isinstance(leaf, ArrayLeaf) else [None] * n for leaf in self.spec.leaves)
            storage.segment, storage.offsets, storage.rows = slot.segment, slot.offsets, slot.rows
            return storage

    def unmap_free(self) -> None:
        """Unmap and forget the shared slots nothing uses (see ``drop_free_shared_slots``). For a
        freshly forked, single-threaded child only: it takes no lock, since a lock copied while
        another thread of the parent held it would never be released here."""
        kept = []
        for slot in self._slots:
            mapping = getattr(slot.segment, "mapping", None)
            if mapping is not None and slot.free():
                slot.arrays = []
                mapping.release()
            else:
                kept.append(slot)
        self._slots = kept

    def clear(self) -> None:
        """Forget every slot (batches still held stay valid: they own their memory now)."""
        with self._lock:
            self._slots.clear()


_shared_pools: weakref.WeakSet[SlotPool] = weakref.WeakSet()


@at_worker_fork
def drop_free_shared_slots() -> None:
    """In a forked worker: unmap the parent's shared slots that nothing uses and forget them, so
    closing the parent's loader frees their memory (slots a kept batch still uses stay mapped)."""
    for pool in list(_shared_pools):
        pool.unmap_free()
