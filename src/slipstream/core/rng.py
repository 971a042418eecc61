"""Per-sample randomness: ``sample_rng()`` is a pure function of (seed, epoch, index).

The loader records which sample a thread is loading; code running inside that load (a container's
``__getitem__``, a ``mapobs`` function, an augmentation) calls ``sample_rng()`` and gets a NumPy
``Generator`` seeded from ``SeedSequence(seed, spawn_key=(2, epoch, index))``. Which worker loads a sample, and
how many workers there are, never changes what it draws, so the same seed gives the same batches
with 0, 1 or 64 workers, and a resumed run draws what the uninterrupted run drew.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

__all__ = ["sample_context", "sample_rng", "seed_rng"]

_local = threading.local()
_SAMPLE_TAG = 2  # keeps the samples' random streams apart from the orders' (see _orders)


def seed_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The generator ``sample_rng()`` returns while sample ``index`` of ``epoch`` loads under ``seed``."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(_SAMPLE_TAG, epoch, index))))


class _Context:
    __slots__ = ("seed", "epoch", "index", "rng")

    def __init__(self, seed: int, epoch: int):
        self.seed, self.epoch, self.index, self.rng = seed, epoch, -1, None

    def at(self, index: int) -> None:
        self.index, self.rng = int(index), None


def _current() -> _Context | None:
    return getattr(_local, "context", None)


@contextmanager
def sample_context(seed: int, epoch: int) -> Iterator[_Context]:
    """Mark this thread as loading samples of ``epoch`` under ``seed``; call ``.at(index)`` per sample.

    Contexts nest (an inner loader inside a transform restores the outer one on exit).
    """
    outer = _current()
    context = _Context(seed, epoch)
    _local.context = context
    try:
        yield context
    finally:
        _local.context = outer


def sample_rng() -> np.random.Generator:
    """The random generator of the sample being loaded in this thread.

    Inside a loader it is derived from (seed, epoch, index) and created once per sample: repeated
    calls while loading one sample continue the same stream. Inside a batched read
    (``__getitems__``, ``getobs_batch_into``) it belongs to the first index of the call. Outside
    any loader (calling ``ds[i]`` by hand) there is no sample to derive from, and a fresh,
    unseeded generator is returned. It is not meant for a ``collate`` function (no sample is
    being loaded there).
    """
    context = _current()
    if context is None or context.index < 0:
        return np.random.default_rng()
    if context.rng is None:
        context.rng = seed_rng(context.seed, context.epoch, context.index)
    return context.rng
