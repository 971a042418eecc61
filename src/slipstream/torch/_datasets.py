"""How slipstream sees a torch map-style dataset, and what its process workers set up.

* ``IndexedDataset`` and its subclasses wrap the user's dataset so slipstream indexes it as torch does
  (a tuple or dict dataset is one container, not a slipstream group), with or without
  ``__getitems__``, keeping a packed file's ``getobs_batch_into`` and ``batch_spec`` and a stateful
  dataset's ``state_dict``/``load_state_dict``/``settle_changes`` (``order.datastate``). Each
  wrapper carries a token and registers itself in ``_DATASETS`` when made or unpickled, so a
  worker process finds its own copy for ``get_worker_info().dataset``.
* ``WholeDataset``/``WholeCollate`` pass ``__getitems__``'s return value whole to the user's
  ``collate_fn``; ``CollateOne`` is ``batch_size=None``'s ``collate_fn(dataset[i])``.
* ``SamplerOrder`` is the loader's epoch order: the epoch's batches of indices, drawn from torch's sampler.
* ``MapWorkerInit`` is slipstream's ``worker_init`` for map-style process workers: torch's
  seeding and ``get_worker_info()``, then the user's ``worker_init_fn``.

Everything here is module-level: it is pickled by reference into worker processes.
"""

from __future__ import annotations

import itertools
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import torch

from ..core.views import ObsView
from ._compat import seed_like_torch, set_worker_info

# The process workers' copies of the datasets, by token, for ``get_worker_info().dataset``: a copy
# registers itself when unpickled (spawn, forkserver) or is inherited with this module (fork).
_DATASETS: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
dataset_tokens = itertools.count()


def _restore(cls: type, dataset: Any, token: int) -> Any:
    return cls(dataset, token)


class IndexedDataset:
    """A map-style dataset indexed as torch indexes it (a tuple or dict dataset is one container,
    not a slipstream group); ``__getitems__`` hidden (``batch_size=None`` reads one index at a time)."""

    def __init__(self, dataset: Any, token: int):
        self.dataset, self.token = dataset, token
        _DATASETS[token] = self

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        return self.dataset[index]

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore, (type(self), self.dataset, self.token))

    # the dataset's state, when it has one (``order.datastate``): AttributeError where it has none
    @property
    def state_dict(self) -> Any:
        return self.dataset.state_dict

    @property
    def load_state_dict(self) -> Any:
        return self.dataset.load_state_dict

    @property
    def settle_changes(self) -> Any:
        return self.dataset.settle_changes

    def batch_finisher(self) -> Any:
        """The dataset's batch finisher (a device stage's: ``loading.finishing``), or None."""
        make = getattr(_unsubset(self.dataset), "batch_finisher", None)
        return make() if callable(make) else None


def _unsubset(dataset: Any) -> Any:
    """The dataset under torch ``Subset`` and slipstream ``obsview`` wrappers (which read samples of
    it as they are)."""
    while True:
        if isinstance(dataset, torch.utils.data.Subset):
            dataset = dataset.dataset
        elif isinstance(dataset, ObsView):
            dataset = dataset.data
        else:
            return dataset


def _finishes(dataset: Any) -> bool:
    """Whether ``dataset`` (under ``Subset`` and ``obsview`` wrappers) finishes its batches itself: a device stage
    (``ss.open(p).map(..., device=...)``), whose batches arrive on the device, finished ahead."""
    return callable(getattr(_unsubset(dataset), "batch_finisher", None))


class ManyDataset(IndexedDataset):
    """... with the dataset's ``__getitems__`` (torch calls it for every batch when present)."""

    def __getitems__(self, indices: list[int]) -> Any:
        return self.dataset.__getitems__(indices)


class BatchIntoDataset(IndexedDataset):
    """... keeping a packed file's vectorized reads (``getobs_batch_into``: whole chunks of a batch
    decoded into the batch buffer, the same values its ``__getitem__`` gives)."""

    def getobs_batch_into(self, buffer: Any, indices: Any) -> Any:
        return self.dataset.getobs_batch_into(buffer, indices)

    def batch_spec(self) -> Any:
        """The dataset's declared batch structure (a packed file's: which fields vary per sample
        and how they batch), None where it declares none: without it a JSON field or a ragged
        array would have to match the first sample's structure."""
        declare = getattr(self.dataset, "batch_spec", None)
        return declare() if callable(declare) else None


class _Whole:
    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


class WholeDataset(IndexedDataset):
    """... with ``__getitems__``'s return value passed whole to the user's collate_fn (torch does
    not require it to be a list of samples): slipstream sees one wrapped value and placeholders."""

    def __getitems__(self, indices: list[int]) -> list[Any]:
        return [_Whole(self.dataset.__getitems__(indices)), *([None] * (len(indices) - 1))]


class WholeCollate:
    def __init__(self, collate_fn: Callable[[Any], Any]):
        self.collate_fn = collate_fn

    def __call__(self, samples: list[Any]) -> Any:
        parts = [s.value for s in samples if type(s) is _Whole]
        if len(parts) == 1:
            return self.collate_fn(parts[0])
        return self.collate_fn([s for part in parts for s in part])  # one batch read in chunks


class CollateOne:
    """``batch_size=None``: torch gives ``collate_fn(dataset[i])`` (no batching)."""

    def __init__(self, collate_fn: Callable[[Any], Any]):
        self.collate_fn = collate_fn

    def __call__(self, samples: list[Any]) -> Any:
        return self.collate_fn(samples[0])


def length(obj: Any) -> int | None:
    """``len(obj)``, or None where it has none (``TypeError``)."""
    try:
        return len(obj)
    except TypeError:
        return None


def _sized(sampler: Any) -> bool:
    """Whether ``len(sampler)`` works (torch's BatchSampler has ``__len__`` only if its sampler has)."""
    return length(sampler) is not None


class SamplerOrder:
    """The epoch order (``slipstream.order.epochs``) of a torch loader: each epoch's batches
    drawn from torch's batch sampler (or, ``batch_size=None``, its sampler, one index per batch)
    when slipstream starts the epoch, as torch's iterator draws them: a sized sampler whole, one
    without ``__len__`` as the batches are loaded. No ``set_epoch``: torch leaves that to the user."""

    source = "batch_sampler"  # what index errors name

    def __init__(self, sampler: Iterable[Any], batched: bool, draws: Callable[..., Any] | None = None):
        self.sampler, self.batched = sampler, batched
        self.sized = _sized(sampler)
        self.draws = draws  # called around each draw: ``draws(draw, lazy)`` (the resumable state's record)
        self.skip_next = False  # the next epoch is one a resumed loader moves past: empty, nothing drawn

    def batches(self, epoch: int, n: int, seed: int) -> list[list[int]] | Iterator[list[int]]:
        if self.skip_next:
            self.skip_next = False
            return []
        if self.draws is None:
            return self._draw()
        return self.draws(self._draw, not self.sized)

    def _draw(self) -> list[list[int]] | Iterator[list[int]]:
        drawn = (list(b) for b in self.sampler) if self.batched else ([i] for i in self.sampler)
        return list(drawn) if self.sized else drawn

    def num_batches(self, n: int) -> int:
        if not self.sized:
            raise TypeError("len() is unknown: the sampler has no __len__")
        return len(self.sampler)  # type: ignore[arg-type]


class MapWorkerInit:
    """``worker_init`` for slipstream's process workers (map-style datasets): torch's seeding and
    ``get_worker_info()``, then the user's ``worker_init_fn``."""

    def __init__(self, token: int, base_seed: int, num_workers: int, worker_init_fn: Callable[[int], Any] | None):
        self.token, self.base_seed, self.num_workers, self.worker_init_fn = token, base_seed, num_workers, worker_init_fn

    def reseeded(self, base_seed: int) -> MapWorkerInit:
        """The same set-up for fresh workers of an epoch with torch's new ``base_seed``."""
        return MapWorkerInit(self.token, base_seed, self.num_workers, self.worker_init_fn)

    def __call__(self, worker_id: int) -> None:
        torch.set_num_threads(1)
        seed = seed_like_torch(self.base_seed, worker_id)
        adapter = _DATASETS.get(self.token)
        set_worker_info(worker_id, self.num_workers, seed, None if adapter is None else adapter.dataset)
        if self.worker_init_fn is not None:
            self.worker_init_fn(worker_id)
