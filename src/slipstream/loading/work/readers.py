"""Readers: fill positions of a batch's storage from a container, the fastest way it allows.

* arrays and tuples/dicts of arrays (through any ``obsview``): one ``take`` per leaf into the
  batch buffer, no per-sample Python at all;
* containers with ``getobs_batch_into(buffer, indices)`` (packed files): one call per chunk of a
  batch, writing into row slices of the batch buffer; their ``batch_spec()``, when they have one,
  gives the batch structure without reading a sample;
* containers with ``__getitems__``: one call per batch, then a checked copy per sample;
* containers with ``getobs_into``: written in place through per-sample views of the buffer
  (shaped by their ``batch_spec()`` when they declare one: a mapped packed file);
* anything else: ``getobs`` and a checked copy per sample.

Per-sample readers run user code inside ``sample_context`` so ``sample_rng()`` works, stop between
samples once the batch is cancelled, and give an exception raised for a sample a note naming its
index, batch and epoch.
"""

from __future__ import annotations

import threading
from time import perf_counter as clock
from typing import Any

import numpy as np

from ...core import timings
from ...core.containers import getobs, getobs_into, is_group, origin_note
from ...core.errors import Cancelled, add_note
from ...core.nodes import ArrayLeaf
from ...core.rng import sample_context
from ...core.spec import Spec, spec_of_data
from ...core.views import ObsView

__all__ = ["BatchInfo", "Reader", "collated", "make_reader"]


def collated(collate: Any, samples: list[Any], info: Any) -> Any:
    """``collate(samples)``; an exception it raises gets a note naming the batch."""
    began = clock()
    try:
        return collate(samples)
    except BaseException as exc:
        add_note(exc, f"slipstream: raised by the collate function for {info} ({len(samples)} samples)")
        raise
    finally:
        timings.add("collate", clock() - began)


class BatchInfo:
    """What a reader needs to know about the batch it fills."""

    __slots__ = ("seed", "epoch", "batch", "stop")

    def __init__(self, seed: int, epoch: int, batch: int, stop: threading.Event):
        self.seed, self.epoch, self.batch, self.stop = seed, epoch, batch, stop

    def __str__(self) -> str:
        return f"batch {self.batch} of epoch {self.epoch}"


class Reader:
    """Fills ``storage[leaf][a:a+len(indices)]`` with observations ``indices`` of the data.

    Indices must be in range (the loader checks each epoch's order once before reading)."""

    batched = False  # True when one call per whole batch is the natural unit (``__getitems__``)
    vectorized = False  # True when no per-sample Python runs (arrays)

    def __init__(self, data: Any, index_map: np.ndarray | None, declared: Spec | None = None):
        self.data, self.index_map = data, index_map
        self.declared = declared  # the batch structure the data declares (never changed), else None

    def resolve(self, indices: np.ndarray) -> np.ndarray:
        return indices if self.index_map is None else self.index_map[indices]

    def origin(self, i: int) -> str:
        """`` (file x.jpg)``: where the loader's sample ``i`` comes from, when the data says
        (``core.containers.origin_note``), else ""."""
        return origin_note(self.data, int(self.resolve(np.asarray([i]))[0]))

    def read(self, spec: Spec, storage: list[Any], a: int, indices: np.ndarray, info: BatchInfo) -> None:
        """Fill rows ``a..`` of ``storage`` (laid out by ``spec``) with observations ``indices``."""
        raise NotImplementedError

    def samples(self, indices: np.ndarray, info: BatchInfo) -> list[Any]:
        """The observations themselves (for a user's collate)."""
        timings.count(len(indices))
        data, out, stop = self.data, [], info.stop
        with sample_context(info.seed, info.epoch) as ctx:
            for i, idx in zip(indices.tolist(), self.resolve(indices).tolist()):
                if stop.is_set():
                    raise Cancelled
                ctx.index, ctx.rng = i, None
                try:
                    out.append(getobs(data, idx))
                except BaseException as exc:
                    add_note(exc, f"slipstream: raised while loading sample {i}{self.origin(i)} ({info})")
                    raise
        return out


class _ArrayReader(Reader):
    vectorized = True

    def __init__(self, data: Any, index_map: np.ndarray | None, spec: Spec):
        super().__init__(data, index_map, spec)
        self.pairs: list[tuple[np.ndarray, int]] = []
        self._pair(data, spec)

    def _pair(self, data: Any, spec: Spec) -> None:
        """Pair each array of ``data`` (an array or a group of them) with its leaf's slot."""
        for array, node in zip(spec.structure.flatten_up_to(data), spec.nodes):
            if isinstance(node, ArrayLeaf):
                self.pairs.append((array, node.slot))

    def read(self, spec: Spec, storage: list[Any], a: int, indices: np.ndarray, info: BatchInfo) -> None:
        timings.count(len(indices))
        rows = self.resolve(indices)
        b = a + len(rows)
        for array, slot in self.pairs:
            # the loader validates every index once per epoch, so 'clip' never clips; it avoids the
            # buffered copy that mode='raise' makes when given out=
            array.take(rows, axis=0, out=storage[slot][a:b], mode="clip")

    def samples(self, indices: np.ndarray, info: BatchInfo) -> list[Any]:
        timings.count(len(indices))
        return [getobs(self.data, int(i)) for i in self.resolve(indices)]


class _SampleReader(Reader):
    def read(self, spec: Spec, storage: list[Any], a: int, indices: np.ndarray, info: BatchInfo) -> None:
        timings.count(len(indices))
        data, stop = self.data, info.stop
        write = spec.write
        into = getattr(data, "getobs_into", None) is not None or is_group(data)
        with sample_context(info.seed, info.epoch) as ctx:
            for j, i, idx in zip(range(a, a + len(indices)), indices.tolist(), self.resolve(indices).tolist()):
                if stop.is_set():
                    raise Cancelled
                ctx.index, ctx.rng = i, None
                try:
                    if into:
                        views = spec.views(storage, j)
                        spec.settle(storage, j, getobs_into(views, data, idx), views, i)
                    else:
                        write(storage, j, data[idx], i)
                except BaseException as exc:
                    add_note(exc, f"slipstream: raised while loading sample {i}{self.origin(i)} ({info})")
                    raise


class _ManyReader(Reader):
    batched = True

    def read(self, spec: Spec, storage: list[Any], a: int, indices: np.ndarray, info: BatchInfo) -> None:
        for j, (i, sample) in enumerate(zip(indices.tolist(), self.samples(indices, info)), start=a):
            spec.write(storage, j, sample, i)

    def samples(self, indices: np.ndarray, info: BatchInfo) -> list[Any]:
        timings.count(len(indices))
        rows = [int(r) for r in self.resolve(indices)]
        with sample_context(info.seed, info.epoch) as ctx:
            ctx.batch(indices, known=False)
            try:
                samples = list(self.data.__getitems__(rows))
            except BaseException as exc:
                add_note(exc, f"slipstream: raised while loading samples {indices.tolist()} ({info})")
                raise
        if len(samples) != len(rows):
            raise ValueError(f"__getitems__ returned {len(samples)} observations for {len(rows)} indices ({info})")
        return samples


class _BatchIntoReader(Reader):
    vectorized = True

    def read(self, spec: Spec, storage: list[Any], a: int, indices: np.ndarray, info: BatchInfo) -> None:
        if info.stop.is_set():
            raise Cancelled
        timings.count(len(indices))
        b = a + len(indices)
        views = spec.batch_views(storage, a, b)
        with sample_context(info.seed, info.epoch) as ctx:
            ctx.batch(indices)
            try:
                value = self.data.getobs_batch_into(views, self.resolve(indices))
                began = clock()
                spec.settle_batch(storage, a, value, views, indices.tolist())
                timings.add("collate", clock() - began)
            except BaseException as exc:
                add_note(exc, f"slipstream: raised while loading samples {indices.tolist()} ({info})")
                raise


def _declared_spec(data: Any) -> Spec | None:
    """The batch structure a container declares (``batch_spec()``: a packed file knows its fields,
    which of them vary per sample, and how), so the buffers need not be shaped from sample 0."""
    declare = getattr(data, "batch_spec", None)
    return declare() if callable(declare) else None


def make_reader(data: Any) -> Reader:
    """The reader for ``data`` (an ``obsview`` is read through to its parent)."""
    index_map = None
    if isinstance(data, ObsView):
        data, index_map = data.data, data.indices
    spec = spec_of_data(data)
    if spec is not None:
        return _ArrayReader(data, index_map, spec)
    if hasattr(data, "getobs_batch_into"):
        return _BatchIntoReader(data, index_map, _declared_spec(data))
    kind = _ManyReader if hasattr(data, "__getitems__") else _SampleReader
    return kind(data, index_map, _declared_spec(data))  # a mapped packed file declares one, else None: shaped from a sample
