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
from contextlib import contextmanager, nullcontext
from typing import Any

import numpy as np
import numpy.random  # noqa: F401 - NumPy loads it on first use: here, not in an epoch's first batch (~8 ms)

from . import streams
from .draws import Draws

__all__ = ["one_sample", "sample_context", "sample_draws", "sample_rng", "seed_rng"]

_local = threading.local()


def seed_rng(seed: int, epoch: int, index: int) -> np.random.Generator:
    """The generator ``sample_rng()`` returns while sample ``index`` of ``epoch`` loads under ``seed``."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(streams.SAMPLE, epoch, index))))


class _Context:
    __slots__ = ("seed", "epoch", "index", "rng", "indices", "batched")

    def __init__(self, seed: int, epoch: int):
        self.seed, self.epoch, self.index, self.rng, self.indices = seed, epoch, -1, None, None
        self.batched = False  # inside a batched read (``__getitems__``): no one sample is being loaded

    def at(self, index: int) -> None:
        self.index, self.rng = int(index), None

    def batch(self, indices: np.ndarray, known: bool = True) -> None:
        """A batched read of samples ``indices`` (``sample_rng()`` belongs to the first). ``known``:
        the container reads them as a chunk whose draws it asks for at once (``getobs_batch_into``);
        else (``__getitems__``) per-sample draws continue ``sample_rng()``'s stream."""
        self.at(indices[0] if len(indices) else 0)
        self.indices = indices if known else None
        self.batched = not known

    @contextmanager
    def one(self, index: int) -> Iterator[None]:
        """Load sample ``index`` on its own within a batched read: ``sample_rng()`` and
        ``sample_draws(1)`` are that sample's meanwhile."""
        saved = (self.index, self.rng, self.indices, self.batched)
        self.index, self.rng, self.indices, self.batched = int(index), None, None, False
        try:
            yield
        finally:
            self.index, self.rng, self.indices, self.batched = saved


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
    those of a chunk read at once (``sample_context``'s ``batch``) of ``n`` samples, or of the one
    sample being loaded when ``n`` is 1. Inside a read that does not say which samples ask (a
    ``__getitems__`` reading row by row), draws keyed by the next number of ``sample_rng()``'s
    stream, so the rows still differ and repeat with the seed; outside a loader, fresh ones."""
    context = _current()
    if context is not None and context.index >= 0:
        if context.indices is not None and len(context.indices) == n:
            return Draws(context.seed, context.epoch, context.indices)
        if n == 1 and context.indices is None and not context.batched:
            return Draws(context.seed, context.epoch, [context.index])
        return Draws(int(sample_rng().integers(0, 1 << 63)), context.epoch, np.arange(n))
    return Draws.fresh(n)


def one_sample(index: int) -> Any:
    """A context in which sample ``index`` (the loader's index) is loaded on its own, inside a
    batched read: its own ``sample_rng()`` and draws (a no-op outside a loader)."""
    context = _current()
    return context.one(index) if context is not None else nullcontext()
