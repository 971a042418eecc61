"""Seeded jitter of a mixture's interleave inside blocks of ``size`` positions.

Block ``b`` (positions ``b * size .. (b + 1) * size - 1``) holds the same sources as the plain
interleave's block, in the order of the seeded permutation ``permute(., size, jitter_keys(seed, b))``:
position ``b * size + v`` reads the source the plain interleave puts at ``b * size + pi(v)``. Each
source's items keep their order (the ``t``-th occurrence of a source in the block reads the item the
plain interleave's ``t``-th occurrence reads), so counts at every block boundary are the plain
ones exactly; inside a block a count is off the plain one by at most that block's occurrences.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from .permute import jitter_keys, permute

__all__ = ["jittered"]

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
