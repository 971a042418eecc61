"""Hugging Face ``accelerate``: keep a ``slipstream.torch.DataLoader`` when an ``Accelerator`` prepares it.

``Accelerator.prepare`` replaces every ``torch.utils.data.DataLoader`` it is given by its own
``DataLoaderShard``, rebuilt from the loader's attributes: the dataset is then read by torch's
machinery and slipstream is silently out of the loop. Two things here stop that:

* ``prepare(accelerator, loader)``: the loader, checked for this process (sharded, on the
  accelerator's device), registered with the accelerator and returned as it is.
* the bypass warning: before rebuilding a loader, ``Accelerator.prepare_data_loader`` asks it
  ``getattr(loader, "_is_accelerate_prepared", False)`` (accelerate's own "already prepared?"
  check). slipstream's loader answers that question itself: ``True`` once ``prepare`` has taken it
  (accelerate then hands it back unchanged), otherwise ``False`` with an ``AccelerateBypassWarning``.
  The attribute is read only there, once per ``prepare``; nothing on the loading path pays for it.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.utils.data as _tud

from ..core.devices import device_name
from ._bypass import AccelerateBypassWarning, mark_prepared
from ._dataloader import DataLoader
from ._datasets import length

__all__ = ["AccelerateBypassWarning", "prepare"]


def _sampler_of(loader: DataLoader) -> Any:
    """What draws the loader's indices: the sampler inside torch's own ``BatchSampler``, or the
    batch sampler given, or the sampler (``batch_size=None``)."""
    batches = loader.batch_sampler
    if batches is None:
        return loader.sampler
    return batches.sampler if isinstance(batches, _tud.BatchSampler) else batches


def _whole(sampler: Any, size: int | None) -> bool:
    """``sampler`` reads the same indices, from the whole dataset, in every process: torch's
    ``RandomSampler``/``SequentialSampler``/``WeightedRandomSampler`` (drawn from the same seeds),
    or a ``SubsetRandomSampler`` or plain sequence of indices holding every index of the dataset
    (one over part of it is taken as this process's share, as the user made it)."""
    if isinstance(sampler, (_tud.RandomSampler, _tud.SequentialSampler, _tud.WeightedRandomSampler)):
        return True
    indices = sampler.indices if isinstance(sampler, _tud.SubsetRandomSampler) else sampler
    if size is None or not isinstance(indices, (list, tuple, range)):
        return False
    try:
        return len(set(indices)) >= size
    except TypeError:  # unhashable entries: not plain indices
        return False


def _check_shard(loader: DataLoader, processes: int, index: int) -> None:
    """A map-style loader in a run of several processes must read this process's share only."""
    if processes <= 1 or isinstance(loader.dataset, _tud.IterableDataset):
        return  # an IterableDataset shards itself (it is given no sampler)
    sampler = _sampler_of(loader)
    if isinstance(sampler, _tud.DistributedSampler):
        if (sampler.num_replicas, sampler.rank) != (processes, index):
            raise ValueError(
                f"the loader's DistributedSampler is for rank {sampler.rank} of {sampler.num_replicas}, but this is "
                f"process {index} of {processes} (accelerator.process_index / accelerator.num_processes)"
            )
    elif _whole(sampler, length(loader.dataset)):
        raise ValueError(
            f"this is process {index} of {processes}, but the loader reads the whole dataset (as every other process, "
            f"through its {type(sampler).__name__}): "
            "give it sampler=torch.utils.data.DistributedSampler(dataset, num_replicas=accelerator.num_processes, "
            "rank=accelerator.process_index, shuffle=..., seed=...) and call loader.sampler.set_epoch(epoch) "
            "before each epoch"
        )


def _same_device(a: torch.device | None, b: torch.device | None) -> bool:
    """``a`` and ``b`` (None: the CPU) are the same device; a CUDA device without an index is the
    current one (``torch.cuda.current_device()``, 0 when it cannot be asked)."""
    if a is None or b is None:
        return a is b
    return a.type == b.type and _index(a) == _index(b)


def _index(device: torch.device) -> int | None:
    if device.index is not None or device.type != "cuda":
        return device.index
    try:
        return torch.cuda.current_device()
    except (RuntimeError, AssertionError):  # CUDA not initialisable here: cuda means cuda:0
        return 0


def _placed_on(device: Any) -> torch.device | None:
    """The accelerator's ``device`` as the loader holds its own: None for the CPU (``device_name``
    reads it, ``ValueError`` for what is not a device)."""
    name = device_name(device, "accelerator.device")
    if name is None:
        return None
    chosen = torch.device(name)
    return None if chosen.type == "cpu" else chosen


def _check_placement(loader: DataLoader, accelerator: Any) -> None:
    """With device placement on, batches must arrive on ``accelerator.device`` (the loader moves them)."""
    if not getattr(accelerator, "device_placement", True):
        return
    want = _placed_on(accelerator.device)
    if not _same_device(loader.device, want):
        raise ValueError(
            f"accelerate places batches on {accelerator.device}, but this loader hands them out on "
            f"{loader.device or 'the CPU'}: build it with device=accelerator.device (slipstream copies each batch "
            "there one batch ahead), or Accelerator(device_placement=False) to move batches yourself"
        )


def prepare(accelerator: Any, loader: DataLoader) -> DataLoader:
    """Give ``loader`` to ``accelerator`` and get the same loader back, still loaded by slipstream.

    Use it instead of ``accelerator.prepare(loader)``, which would replace the loader by
    accelerate's own. It checks that ``loader`` suits this process, registers it with the
    accelerator and returns it unchanged (``prepare(...) is loader``):

    * sharding: with ``accelerator.num_processes > 1`` a map-style loader must read this process's
      share, through ``sampler=DistributedSampler(dataset, num_replicas=accelerator.num_processes,
      rank=accelerator.process_index, ...)`` (or a sampler or batch sampler of your own, which is
      trusted); a loader over the whole dataset (``shuffle``, torch's ``RandomSampler``,
      ``SequentialSampler`` or ``WeightedRandomSampler``, a ``SubsetRandomSampler`` or list holding
      every index, also inside a ``BatchSampler`` or a subclass of it), or a ``DistributedSampler``
      for another rank, raises ``ValueError``. An ``IterableDataset`` must shard itself; it is not
      checked.
    * device: with the accelerator's device placement on (its default), the loader must have been
      built with ``device=accelerator.device`` (``ValueError`` otherwise; the CPU needs nothing;
      ``"cuda"`` is the current CUDA device, so it matches ``cuda:0`` where that is current).
    * registration: ``accelerator.prepare(loader)`` hands the loader back unchanged from now on (no
      warning), and, when the loader has ``state_dict``/``load_state_dict``,
      ``accelerator.save_state``/``load_state`` save and restore its position with the rest.

    Not provided, unlike accelerate's loader: ``set_epoch`` on the sampler (call
    ``loader.sampler.set_epoch(epoch)`` yourself), the end-of-epoch signal that
    ``accelerator.accumulate`` and ``gather_for_metrics`` read (gradients sync every
    ``gradient_accumulation_steps`` batches across epoch ends; metrics are not de-duplicated).
    ``accelerate.skip_first_batches`` also replaces the loader: resume with ``load_state_dict``.
    """
    if not isinstance(loader, DataLoader):
        raise TypeError(
            f"slipstream.torch.prepare takes a slipstream.torch.DataLoader, got {type(loader).__name__}; "
            "give other loaders to accelerator.prepare"
        )
    _check_shard(loader, int(accelerator.num_processes), int(accelerator.process_index))
    _check_placement(loader, accelerator)
    mark_prepared(loader, True)
    if callable(getattr(loader, "state_dict", None)) and callable(getattr(loader, "load_state_dict", None)):
        loader.use_stateful_dataloader = True  # accelerate's save_state/load_state include it
    prepared = accelerator.prepare_data_loader(loader)
    if prepared is not loader:  # accelerate stopped honouring its own "already prepared" check
        raise RuntimeError(
            "accelerate replaced the slipstream loader although it was marked as prepared; this version of "
            "accelerate is not supported by slipstream.torch.prepare"
        )
    return loader
