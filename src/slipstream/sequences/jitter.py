"""Seeded jitter of a mixture's interleave inside blocks of ``size`` positions.

Block ``b`` (positions ``b * size .. (b + 1) * size - 1``) holds the same sources as the plain
interleave's block, in the order of the seeded permutation ``permute(., size, jitter_keys(seed, b))``:
position ``b * size + v`` reads the source the plain interleave puts at ``b * size + pi(v)``. Each
source's items keep their order (the ``t``-th occurrence of a source in the block reads the item the
plain interleave's ``t``-th occurrence reads), so counts at every block boundary are the plain
ones exactly; inside a block a count is off the plain one by at most that block's occurrences.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

import numpy as np

from .permute import jitter_keys, permute

__all__ = ["JitterCache", "jittered"]

_GROUP = 256  # positions (whole blocks) jittered together and kept: a batch read in order touches one or two
_CACHED = 8

Locate = Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]]


def jittered(locate: Locate, positions: np.ndarray, size: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(source, count before) of ``positions`` under jitter, given ``locate`` (the plain interleave's)."""
    positions = np.asarray(positions, np.int64)
    blocks, row = np.unique(positions // size, return_inverse=True)
    nb = len(blocks)
    offsets = np.arange(size, dtype=np.int64)
    src, count = locate((blocks[:, None] * size + offsets).ravel())
    src, count = src.reshape(nb, size), count.reshape(nb, size)
    order = permute(np.tile(offsets, nb), size, np.repeat(jitter_keys(seed, blocks), size)).reshape(nb, size)
    jsrc = np.take_along_axis(src, order, axis=1)
    # the t-th occurrence of a source (in position order) gets the plain t-th occurrence's count
    plain = np.argsort(src, axis=1, kind="stable")
    moved = np.argsort(jsrc, axis=1, kind="stable")
    jcount = np.empty_like(count)
    np.put_along_axis(jcount, moved, np.take_along_axis(count, plain, axis=1), axis=1)
    column = positions - blocks[row] * size
    return jsrc[row, column], jcount[row, column]


class JitterCache:
    """``jittered`` through the last few groups of whole blocks read: positions read in order cost a
    lookup, not a jitter computation per batch. A group is kept with the ``key`` it was computed
    under (the mixture's routing: a settled change makes another), and never reaches past ``end``
    (the mixture's length rounded up to a block). Safe beside other threads; pickles empty."""

    def __init__(self, size: int, seed: int, end: int):
        self.size, self.seed, self.end = size, seed, end
        self.group = size * max(1, _GROUP // size)
        self._lock = threading.Lock()
        self._groups: OrderedDict[int, tuple[Any, np.ndarray, np.ndarray]] = OrderedDict()

    def __reduce__(self) -> tuple[Any, ...]:
        return (JitterCache, (self.size, self.seed, self.end))

    def locate(self, locate: Locate, key: Any, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``jittered(locate, positions, size, seed)``; ``locate`` must depend on ``key`` only."""
        g = self.group
        if not len(positions):
            return jittered(locate, positions, self.size, self.seed)
        first, last = int(positions.min()) // g, int(positions.max()) // g
        if last - first > 1:  # scattered: no group worth keeping
            return jittered(locate, positions, self.size, self.seed)
        parts = [self._group(locate, key, b) for b in range(first, last + 1)]
        src, count = parts[0] if len(parts) == 1 else (np.concatenate([parts[0][0], parts[1][0]]), np.concatenate([parts[0][1], parts[1][1]]))
        j = positions - first * g
        return src[j], count[j]

    def _group(self, locate: Locate, key: Any, b: int) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:
            hit = self._groups.get(b)
            if hit is not None and hit[0] is key:
                self._groups.move_to_end(b)
                return hit[1], hit[2]
        a = b * self.group
        src, count = jittered(locate, np.arange(a, min(a + self.group, max(self.end, a + self.size)), dtype=np.int64), self.size, self.seed)
        with self._lock:
            self._groups[b] = (key, src, count)
            self._groups.move_to_end(b)
            while len(self._groups) > _CACHED:
                self._groups.popitem(last=False)
        return src, count
