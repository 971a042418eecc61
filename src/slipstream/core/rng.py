"""Per-sample randomness: ``sample_rng()`` is a pure function of (seed, epoch, index).

The loader records which sample a thread is loading; code running inside that load (a container's
``__getitem__``, a ``mapobs`` function, an augmentation) calls ``sample_rng()`` and gets a NumPy
``Generator`` seeded from ``SeedSequence(seed, spawn_key=(2, epoch, index))``. Which worker loads a sample, and
how many workers there are, never changes what it draws, so the same seed gives the same batches
with 0, 1 or 64 workers, and a resumed run draws what the uninterrupted run drew.

``sample_draws(n)`` gives the built-in augmentations their numbers (``core.draws``: counter-based,
drawn for a whole chunk of a batch at once) for the ``n`` samples being loaded.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np

from .draws import Draws

__all__ = ["sample_context", "sample_draws", "sample_rng", "seed_rng"]

_local = threading.local()
_SAMPLE_TAG = 2  # keeps the samples' random streams apart from the orders' (see _orders)


def seed_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The generator ``sample_rng()`` returns while sample ``index`` of ``epoch`` loads under ``seed``."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(_SAMPLE_TAG, epoch, index))))


class _Context:
    __slots__ = ("seed", "epoch", "index", "rng", "indices")

    def __init__(self, seed: int, epoch: int):
        self.seed, self.epoch, self.index, self.rng, self.indices = seed, epoch, -1, None, None

    def at(self, index: int) -> None:
        self.index, self.rng = int(index), None

    def batch(self, indices: np.ndarray) -> None:
        """A batched read of samples ``indices`` (``sample_rng()`` belongs to the first)."""
        self.at(indices[0] if len(indices) else 0)
        self.indices = indices


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


def sample_draws(n: int) -> Draws:
    """The counter-based draws (``core.draws``) of the ``n`` samples being loaded in this thread:
    those of a batched read (``sample_context``'s ``batch``) of ``n`` samples, or of the one sample
    being loaded when ``n`` is 1; outside a loader, fresh random ones."""
    context = _current()
    if context is not None:
        if context.indices is not None and len(context.indices) == n:
            return Draws(context.seed, context.epoch, context.indices)
        if context.index >= 0 and n == 1 and context.indices is None:
            return Draws(context.seed, context.epoch, [context.index])
    return Draws.fresh(n)
