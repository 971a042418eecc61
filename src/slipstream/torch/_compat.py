"""torch's private names, read here and nowhere else in ``slipstream.torch``.

The drop-in reproduces parts of torch's ``DataLoader`` machinery that torch does not make public.
Every private name it relies on is read in this module, so a torch release that renames one breaks
here, at import or at the one call that reads it. Checked against torch 2.13.0 (the CPU build);
each name below is present, with the meaning given, in that release.

Attributes of ``torch.utils.data.DataLoader`` (set by its constructor, which the drop-in runs):

* ``_dataset_kind`` compared with ``torch.utils.data.dataloader._DatasetKind.Iterable``
  (``is_iterable``): whether torch took the dataset as an ``IterableDataset``; it picks the
  loading path and goes into a checkpoint's identity.
* ``_auto_collation`` (``auto_collation``): whether batches are made by torch's batch sampler
  (``batch_size`` not None) rather than one sample per index.
* ``_index_sampler`` (``index_sampler``): what ``len(loader)`` and ``len(iter(loader))`` count
  (the batch sampler, or the sampler with ``batch_size=None``).
* ``_IterableDataset_len_called`` (``reported_length``): the length ``len(loader)`` reported for an
  ``IterableDataset``, for torch's warning when more batches come than that.

Module ``torch.utils.data._utils.worker`` (what torch's worker loop sets in a worker process):

* ``_worker_info`` and ``WorkerInfo`` (``set_worker_info``): what ``get_worker_info()`` returns.
* ``_generate_state`` (``seed_like_torch``): the NumPy seed torch's worker loop derives from
  ``(base_seed, worker_id)``; where a torch lacks it, ``(base_seed + worker_id) % 2**32``.

Module ``torch.utils.data._utils.pin_memory``:

* ``pin_memory`` (``pin_memory``): torch's walk pinning every tensor of a batch.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from torch.utils.data._utils import pin_memory as _torch_pin_memory
from torch.utils.data._utils import worker as _torch_worker
from torch.utils.data.dataloader import _DatasetKind

__all__ = [
    "auto_collation",
    "index_sampler",
    "is_iterable",
    "pin_memory",
    "reported_length",
    "seed_like_torch",
    "set_worker_info",
]


def is_iterable(loader: torch.utils.data.DataLoader) -> bool:
    """Whether torch's constructor took ``loader``'s dataset as an ``IterableDataset``."""
    return loader._dataset_kind == _DatasetKind.Iterable


def auto_collation(loader: torch.utils.data.DataLoader) -> bool:
    """Whether ``loader`` batches through its batch sampler (False: ``batch_size=None``)."""
    return bool(loader._auto_collation)


def index_sampler(loader: torch.utils.data.DataLoader) -> Any:
    """What ``loader`` draws its indices from, one entry per batch: the batch sampler, or the
    sampler with ``batch_size=None``."""
    return loader._index_sampler


def reported_length(loader: torch.utils.data.DataLoader) -> int | None:
    """The length ``len(loader)`` last reported for an ``IterableDataset`` (None: not asked)."""
    return loader._IterableDataset_len_called


def seed_like_torch(base_seed: int, worker_id: int) -> int:
    """Seed this process's global RNGs (``random``, ``torch``, NumPy) as torch's worker loop seeds
    worker ``worker_id``; returns the worker's seed (``base_seed + worker_id``)."""
    seed = base_seed + worker_id
    random.seed(seed)
    torch.manual_seed(seed)
    generate = getattr(_torch_worker, "_generate_state", None)
    np.random.seed(generate(base_seed, worker_id) if generate is not None else seed % 2**32)
    return seed


def set_worker_info(worker_id: int, num_workers: int, seed: int, dataset: Any) -> None:
    """Make ``torch.utils.data.get_worker_info()`` return these values in this process."""
    _torch_worker._worker_info = _torch_worker.WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed, dataset=dataset)


def pin_memory(batch: Any) -> Any:
    """``batch`` with every tensor pinned, by torch's own walk (its nesting kept as torch keeps it)."""
    return _torch_pin_memory.pin_memory(batch)
