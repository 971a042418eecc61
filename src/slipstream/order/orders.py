"""Orders: which observations each rank loads in an epoch, and in which batches.

Every order is a pure function of (seed, epoch, rank, world_size), so a checkpoint needs only a
few integers. An epoch's global order (sequential, a permutation, or a user's sampler) is cut into
``world_size`` equal shares, rank ``r`` taking positions ``r, r + world_size, ...``. When the
length does not divide, ``drop_last=True`` drops the tail of the order (at most
``world_size - 1`` observations) and ``drop_last=False`` pads it by repeating the order from its
start, the only way an observation is loaded twice in one epoch. Each share is then cut into
batches, the last one short unless ``drop_last``. Every rank gets the same number of batches.
``order.deals`` does the dealing (also of the rest of an epoch, for elastic resume).
"""

from __future__ import annotations

import math

import numpy as np

from ..core import streams

__all__ = ["num_batches", "permutation", "quasi_random"]



def _order_rng(seed: int, epoch: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(streams.ORDER, epoch))))


def permutation(n: int, seed: int, epoch: int) -> np.ndarray:
    """The random order of ``n`` observations in ``epoch``: a pure function of (seed, epoch)."""
    return _order_rng(seed, epoch).permutation(n).astype(np.intp, copy=False)


def quasi_random(page_starts: np.ndarray, n: int, seed: int, epoch: int, window: int = 8) -> np.ndarray:
    """A page-aware random order: pages in random order, samples shuffled within each run of
    ``window`` consecutive pages of that order. Reading it touches one window of pages at a time,
    so an epoch over a file larger than RAM reads each page about once (ranks reading their strided
    shares of the same order move through the same windows together). A pure function of
    (seed, epoch); ``page_starts`` are the pages' first sample indices (ascending, from 0).
    """
    rng = _order_rng(seed, epoch)
    starts = np.asarray(page_starts, dtype=np.intp)
    stops = np.append(starts[1:], n)
    pages = rng.permutation(len(starts))
    parts = []
    for w in range(0, len(pages), window):
        chosen = pages[w : w + window]
        indices = np.concatenate([np.arange(starts[p], stops[p], dtype=np.intp) for p in chosen])
        rng.shuffle(indices)
        parts.append(indices)
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.intp)


def num_batches(m: int, batch_size: int, drop_last: bool) -> int:
    return m // batch_size if drop_last else math.ceil(m / batch_size)
