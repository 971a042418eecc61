"""slipstream's core loader for a torch map-style dataset: how the drop-in's arguments become it.

The dataset is wrapped for process workers, groups and odd arrays (``_datasets``); the batches are
default-collated into reused buffers when the first batch's samples allow it (``_MapLoader``),
else collated by the user's or torch's function; the order is slipstream's permutation of
``(seed, epoch)`` with ``seed=`` and shuffling, else torch's sampler drawn as torch draws it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..core.containers import is_group
from ..loading.loader import DataLoader as _SSLoader
from ._context import LoaderContext
from ._convert import Convert, collate_plan, keep
from ._datasets import (
    BatchIntoDataset,
    CollateOne,
    IndexedDataset,
    ManyDataset,
    MapWorkerInit,
    SamplerOrder,
    WholeCollate,
    WholeDataset,
    _finishes,
    dataset_tokens,
)
from ._record import SamplerDraws

__all__ = ["make_map_loader"]


def _odd_array(dataset: Any) -> bool:
    """An ndarray dataset whose rows the buffers cannot turn into torch's batches (strings, objects,
    uint64 scalars): read sample by sample and collated by torch, as any dataset of such samples."""
    if not isinstance(dataset, np.ndarray):
        return False
    return dataset.ndim == 0 or dataset.dtype.kind not in "biufc" or (len(dataset) > 0 and collate_plan(dataset[0]) is None)


class _MapLoader(_SSLoader):
    """slipstream's loader for a torch map-style dataset with the default collate. The first
    batch's own samples (the first of them) decide how its default-collated batches become
    torch's (``convert``), or that torch's ``default_collate`` collates them (samples the buffers
    cannot reproduce): nothing is read before the epoch, so a dataset sees exactly torch's reads."""

    def __init__(self, data: Any, torch_collate: Callable[[list[Any]], Any], **kwargs: Any):
        super().__init__(data, **kwargs)
        self.convert: Convert = keep
        self._torch_collate = torch_collate
        self._collates = False  # True: the samples are collated by torch's default_collate
        self._decided = threading.Lock(), False
        if self.spec is not None and len(self.data):  # arrays: shaped from the data, not a batch
            self._decide(self.data[0])

    def _decide(self, sample: Any) -> None:
        lock, done = self._decided
        with lock:
            if done:
                return
            plan = None if sample is None else collate_plan(sample)
            if plan is None:
                self._collates = True
            else:
                self.convert = plan
            self._decided = lock, True

    def shape_batch(self, unshaped: Any) -> Any:  # the core's hook for batches read before the buffers had a shape
        samples = unshaped.samples
        if samples:
            self._decide(samples[0])
        if self._collates:
            return self._torch_collate(samples)
        return super().shape_batch(unshaped)


def make_map_loader(
    context: LoaderContext, base_seed: int, draws: SamplerDraws, batch_ops: tuple[Any, ...] = ()
) -> tuple[_SSLoader, SamplerOrder | None]:
    """The core loader for a drop-in over a map-style dataset, built with the settings ``context``, and
    the torch-sampler order it draws from (None with slipstream's own permutation of ``(seed,
    epoch)``). ``base_seed`` is torch's base seed of the first epoch (the process workers' seeds);
    ``draws`` is told about each draw of the sampler (the loader's ``SamplerDraws``); ``batch_ops``
    are applied to each batch by the core loader (on its NumPy batch, or torch's collated one)."""
    order: SamplerOrder | None = None
    dataset = context.dataset
    processes = context.num_workers > 0 and context.backend == "process"
    many = bool(getattr(dataset, "__getitems__", None))
    collate: Callable[[list[Any]], Any] | None
    adapter: type[IndexedDataset] | None = None
    if not context.auto_collation:  # batch_size=None: collate_fn(dataset[i]), no __getitems__
        collate = CollateOne(context.collate_fn)
        adapter = IndexedDataset if (processes or many or is_group(dataset)) else None
    elif context.user_collate:
        collate = context.collate_fn
        if many:
            adapter, collate = WholeDataset, WholeCollate(context.collate_fn)
    else:
        collate = None  # the buffers, if the first batch's samples are ones they reproduce exactly
    if adapter is None and (
        processes or is_group(dataset) or _odd_array(dataset) or (_finishes(dataset) and not hasattr(dataset, "batch_finisher"))
    ):
        if hasattr(dataset, "getobs_batch_into") and not many:
            adapter = BatchIntoDataset
        else:
            adapter = ManyDataset if many else IndexedDataset
    token = next(dataset_tokens)
    data = dataset if adapter is None else adapter(dataset, token)
    if context.seed is not None:
        ss_seed = context.seed
    else:  # reproducible under torch.manual_seed / a seeded generator, drawing nothing from them
        source = context.generator if context.generator is not None else torch.default_generator
        ss_seed = source.initial_seed() % 2**63
    kwargs: dict[str, Any] = {"collate": collate, "seed": ss_seed, "in_order": context.in_order}
    if batch_ops:
        kwargs.update(batch_ops=batch_ops)
    if context.seed is not None and context.shuffle:  # slipstream's own permutation of (seed, epoch)
        kwargs.update(batch_size=context.batch_size or 1, shuffle=True, drop_last=context.drop_last)
    else:
        sampler = context.batch_sampler if context.auto_collation else context.sampler
        order = SamplerOrder(sampler, batched=context.auto_collation, draws=draws)
        kwargs.update(order=order)
    if _finishes(dataset):  # a device stage: prefetch_factor finished batches ahead (each holds device memory)
        kwargs.update(finish_ahead=max(2, context.prefetch_factor or 2))
    if context.num_workers > 0:
        factor = context.prefetch_factor if context.prefetch_factor is not None else 2
        kwargs.update(
            # torch keeps prefetch_factor batches in flight per worker; slipstream's workers
            # share each batch, so as many batches are started ahead as torch's workers hold
            workers=context.num_workers,
            prefetch=context.num_workers * factor,
            backend=context.backend,
            timeout=context.timeout or None,
        )
        if processes:
            kwargs.update(
                worker_init=MapWorkerInit(token, base_seed, context.num_workers, context.worker_init_fn),
                mp_context=context.multiprocessing_context,
            )
        elif context.worker_init_fn is not None:
            kwargs.update(worker_init=context.worker_init_fn)
    loader = _MapLoader(data, context.collate_fn, **kwargs) if collate is None else _SSLoader(data, **kwargs)
    if batch_ops:  # the samplers shard the data (DistributedSampler): the ops' draws are keyed by torch's rank
        loader.draw_rank = _process_rank()
    # without seed=, the core's seed is derived from torch's generator here: a loaded state's is
    # taken (the drop-in's own identity checks seed= against the state's)
    loader.seed_given = context.seed is not None
    return loader, order


def _process_rank() -> int:
    """This process's rank in torch's default process group (0 without one)."""
    distributed = torch.distributed
    if distributed.is_available() and distributed.is_initialized():
        return int(distributed.get_rank())
    return 0
