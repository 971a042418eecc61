"""Epoch orders: which batches of indices one rank loads in an epoch.

An *epoch order* is any object with

* ``batches(epoch, n, seed) -> list | iterator`` of this rank's batches (integer index arrays or
  sequences) for ``epoch`` of a container of ``n`` observations, for a loader seeded with ``seed``:
  a list when the number of batches is known up front, an iterator (perhaps endless) when the
  batches are read as they are loaded;
* ``num_batches(n) -> int``, the exact number of batches per epoch (``TypeError`` when unknown).

The built-in ones deal an epoch's global order to the ranks (``order.deals``) and can deal the rest
of a partly consumed epoch (elastic resume, ``order.resume``): they add ``kind`` (their name in a
state) and ``units(n)`` (the global order's length), and take a ``deal`` as a fourth argument of
``batches``.

The loader builds one from its arguments (``order=``, ``shuffle``, ``sampler``, ``batch_sampler``,
``rank``/``world_size``), or takes one given as ``order=`` (an adapter's order: torch's sampler
drawn as torch draws it). Indices from samplers and user orders are checked once per epoch
(integers in ``[0, n)``) before anything is read; the built-in permutations need no check.
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Iterable, Iterator
from typing import Any, Protocol, runtime_checkable

import numpy as np

from .deals import FRESH, Deal, batches_per_rank, deal_positions
from .orders import num_batches, permutation, quasi_random

__all__ = [
    "BatchSamplerOrder",
    "EpochOrder",
    "IndexOrder",
    "SamplerOrder",
    "UserOrder",
    "as_indices",
    "check_indices",
    "page_layout",
]

Batches = list[np.ndarray] | Iterator[np.ndarray]


@runtime_checkable
class EpochOrder(Protocol):
    def batches(self, epoch: int, n: int, seed: int) -> Any: ...

    def num_batches(self, n: int) -> int: ...


def check_indices(indices: np.ndarray, n: int, source: str) -> np.ndarray:
    """``indices`` if all lie in ``[0, n)``; else an IndexError naming the first bad one."""
    if len(indices) and (indices.min() < 0 or indices.max() >= n):
        bad = int(indices[np.argmax((indices < 0) | (indices >= n))])
        raise IndexError(f"the {source} gave sample index {bad}, out of range for {n} observations")
    return indices


def as_indices(values: Iterable[Any], n: int, source: str) -> np.ndarray:
    """A sampler's indices as an intp array: integers only (no floats, bools or strings), all in ``[0, n)``."""
    # a copy, always: the epoch is drawn whole now, whatever the caller does to its array later
    indices = np.array(values) if isinstance(values, np.ndarray) else np.asarray(list(values))
    if indices.size == 0:
        return np.zeros(0, dtype=np.intp)
    if indices.ndim != 1 or indices.dtype.kind not in "iu":
        kind = f"{indices.dtype} values" if indices.ndim == 1 else f"an array of shape {indices.shape}"
        raise TypeError(f"the {source} must give integer sample indices, got {kind}")
    return check_indices(indices.astype(np.intp, copy=False), n, source)


def page_layout(page_starts: Any) -> dict[str, Any]:
    """``num_pages`` and ``page_layout`` (the first 16 hex digits of the SHA-256 of the pages'
    first sample indices as little-endian int64) of a paged container: small, JSON-serializable,
    and different for another page layout of the same samples."""
    starts = np.ascontiguousarray(np.asarray(page_starts).reshape(-1), dtype="<i8")
    return {"num_pages": len(starts), "page_layout": hashlib.sha256(starts.tobytes()).hexdigest()[:16]}


def _set_epoch(source: Any, epoch: int) -> None:
    if hasattr(source, "set_epoch"):
        source.set_epoch(epoch)


class _Sharded:
    """An epoch's global order of samples dealt to the ranks, cut into this rank's batches (see
    ``order.orders``); ``deal``: the rest of a partly consumed epoch (``order.deals``: elastic resume)."""

    kind: str  # the order's name in a state_dict
    streamed = False

    def __init__(self, batch_size: int, drop_last: bool, rank: int, world_size: int):
        self.batch_size, self.drop_last, self.rank, self.world_size = batch_size, drop_last, rank, world_size

    def split(self, order: np.ndarray, deal: Deal = FRESH) -> list[np.ndarray]:
        if deal.fresh and self.world_size == 1:  # consecutive runs: views, no copies
            size = self.batch_size
            return [order[k * size : (k + 1) * size] for k in range(num_batches(len(order), size, self.drop_last))]
        return [order[p] for p in deal_positions(len(order), deal, self.rank, self.world_size, self.batch_size, self.drop_last)]

    def count(self, n: int) -> int:
        return batches_per_rank(n, FRESH, self.world_size, self.batch_size, self.drop_last)


class IndexOrder(_Sharded):
    """The built-in orders: "sequential", "random" (a permutation of ``(seed, epoch)``) or
    "quasi_random" (page-aware: ``page_starts()`` of the data, see ``order.orders.quasi_random``)."""

    def __init__(self, kind: str, data: Any, batch_size: int, drop_last: bool, rank: int, world_size: int):
        super().__init__(batch_size, drop_last, rank, world_size)
        self.kind, self.data = kind, data

    def units(self, n: int) -> int:
        """The length of the epoch's global order of a container of ``n`` observations."""
        return n

    def layout(self) -> dict[str, Any]:
        """What the order depends on besides the length and the seed, as a state records it:
        for "quasi_random", the data's page layout (``num_pages`` and ``page_layout``, a digest of
        ``page_starts()``: the same samples written with another page size give another order);
        nothing for the others."""
        if self.kind != "quasi_random":
            return {}
        return page_layout(self.data.page_starts())

    def batches(self, epoch: int, n: int, seed: int, deal: Deal = FRESH) -> list[np.ndarray]:
        if self.kind == "random":
            order = permutation(n, seed, epoch)
        elif self.kind == "quasi_random":
            order = check_indices(quasi_random(self.data.page_starts(), n, seed, epoch), n, "page_starts()")
        else:
            order = np.arange(n, dtype=np.intp)
        return self.split(order, deal)

    def num_batches(self, n: int) -> int:
        return self.count(n)


class SamplerOrder(_Sharded):
    """A user's sampler (an iterable of indices, re-iterated each epoch, ``set_epoch`` called when
    it has one): drawn whole when it has ``__len__``, else read as the batches are loaded."""

    kind = "sampler"

    def __init__(self, sampler: Iterable[Any], batch_size: int, drop_last: bool, rank: int, world_size: int):
        super().__init__(batch_size, drop_last, rank, world_size)
        self.sampler = sampler
        self.streamed = not hasattr(sampler, "__len__")

    def units(self, n: int) -> int:
        return len(self.sampler)  # type: ignore[arg-type]

    def batches(self, epoch: int, n: int, seed: int, deal: Deal = FRESH) -> Batches:
        _set_epoch(self.sampler, epoch)
        if self.streamed:
            return _chunked(iter(self.sampler), n, self.batch_size, self.drop_last)
        return self.split(as_indices(self.sampler, n, "sampler"), deal)

    def num_batches(self, n: int) -> int:
        if self.streamed:
            raise TypeError("len() is unknown: the sampler has no __len__ (it is read as the batches are loaded)")
        return self.count(len(self.sampler))  # type: ignore[arg-type]


def _chunked(indices: Iterator[Any], n: int, batch_size: int, drop_last: bool) -> Iterator[np.ndarray]:
    """Batches of ``batch_size`` indices read from ``indices`` as they are needed (it may be endless)."""
    while True:
        chunk = list(itertools.islice(indices, batch_size))
        if not chunk or (drop_last and len(chunk) < batch_size):
            return
        yield as_indices(chunk, n, "sampler")


class BatchSamplerOrder:
    """A user's batch sampler (an iterable of index lists, re-iterated each epoch): its batches,
    this rank's share of them; read as they are loaded when it has no ``__len__``."""

    kind = "batch_sampler"

    def __init__(self, batch_sampler: Iterable[Iterable[Any]], rank: int, world_size: int, source: str = "batch_sampler"):
        self.batch_sampler, self.rank, self.world_size, self.source = batch_sampler, rank, world_size, source
        self.streamed = not hasattr(batch_sampler, "__len__")

    def units(self, n: int) -> int:
        return len(self.batch_sampler)  # type: ignore[arg-type]

    def batches(self, epoch: int, n: int, seed: int, deal: Deal = FRESH) -> Batches:
        _set_epoch(self.batch_sampler, epoch)
        if self.streamed:
            return (as_indices(b, n, self.source) for b in self.batch_sampler)
        batches = [as_indices(b, n, self.source) for b in self.batch_sampler]
        return [batches[p[0]] for p in deal_positions(len(batches), deal, self.rank, self.world_size, 1, False)]

    def num_batches(self, n: int) -> int:
        if self.streamed:
            raise TypeError("len() is unknown: the sampler has no __len__ (it is read as the batches are loaded)")
        return math.ceil(len(self.batch_sampler) / self.world_size)  # type: ignore[arg-type]


class UserOrder:
    """An epoch order given as ``order=``: its batches, checked like a batch sampler's (errors name
    the order's ``source`` attribute when it has one, else "order")."""

    kind = "custom"  # not elastic (no ``units``): the order object decides this rank's batches itself

    def __init__(self, order: EpochOrder):
        self.order = order
        self.source = getattr(order, "source", "order")

    def batches(self, epoch: int, n: int, seed: int) -> Batches:
        batches, source = self.order.batches(epoch, n, seed), self.source
        if isinstance(batches, list):
            return [as_indices(b, n, source) for b in batches]
        return (as_indices(b, n, source) for b in batches)

    def num_batches(self, n: int) -> int:
        return self.order.num_batches(n)
