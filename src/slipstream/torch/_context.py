"""What the drop-in's helpers read of a ``slipstream.torch.DataLoader``.

* ``LoaderContext``: the loader's settings as they are when the loader builds it (at ``iter()``,
  ``state_dict()`` and ``load_state_dict``), torch's arguments and slipstream's, with what torch keeps
  in private attributes (``_compat``) as plain fields. The helpers (the core loader's construction,
  an epoch's iterator, the checkpoint, the ``IterableDataset``'s workers) read these fields instead
  of the loader's attributes. An epoch keeps the context of its ``iter()``, as torch's iterator keeps
  the loader's settings from its creation.
* ``CloseCount``: how many times ``loader.close()`` has run, shared by the loader and its epochs
  (an epoch whose worker processes were stopped under it says so).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["CloseCount", "LoaderContext"]


@dataclass(frozen=True)
class LoaderContext:
    """A ``DataLoader``'s settings, read once (the samplers and the dataset are the loader's own objects)."""

    dataset: Any
    iterable: bool  # torch took the dataset as an IterableDataset
    batch_size: int | None
    auto_collation: bool  # batches through the batch sampler (False: batch_size=None, one sample per index)
    drop_last: bool
    sampler: Any
    batch_sampler: Any
    index_sampler: Any  # what len(loader) counts: the batch sampler, or the sampler with batch_size=None
    generator: torch.Generator | None
    collate_fn: Callable[[Any], Any]
    user_collate: bool  # collate_fn was given (torch's default_collate otherwise)
    shuffle: bool  # shuffle=True over a map-style dataset
    seed: int | None  # slipstream's seed= (None: torch's shuffling)
    num_workers: int
    backend: str  # "process" or "thread"
    prefetch_factor: int | None
    persistent_workers: bool
    timeout: float
    in_order: bool
    worker_init_fn: Callable[[int], Any] | None
    multiprocessing_context: Any
    reported_length: int | None  # what len(loader) last reported for an IterableDataset (None: not asked)


class CloseCount:
    """The number of ``loader.close()`` calls so far (``count``)."""

    def __init__(self) -> None:
        self.count = 0
