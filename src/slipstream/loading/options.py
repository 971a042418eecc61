"""The DataLoader's arguments, checked: one clear error per mistake, before anything starts.

``check_options`` normalises the arguments (NumPy integers become ints, ``workers="auto"`` becomes
``usable_cores()``, ``shuffle`` becomes ``order="random"``) and turns them into the loader's epoch order (``order.epochs``); an unknown
keyword gets a hint naming slipstream's word for it (``num_workers=`` is torch's ``workers=``).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable
from types import SimpleNamespace
from typing import Any

from ..core.arguments import check_callable, check_flag, check_int, check_timeout, check_workers
from ..order.epochs import BatchSamplerOrder, EpochOrder, IndexOrder, SamplerOrder, UserOrder
from .backends import BACKENDS

__all__ = ["check_options", "unknown_arguments"]

ORDERS = ("sequential", "random", "quasi_random")

_TORCH_NAMES = {
    "num_workers": "workers",
    "collate_fn": "collate",
    "worker_init_fn": "worker_init",
    "prefetch_factor": "prefetch (batches ahead in all, not per worker)",
    "multiprocessing_context": "mp_context",
    "persistent_workers": None,
    "pin_memory": None,
    "pin_memory_device": None,
    "generator": None,
}


def unknown_arguments(unknown: dict[str, Any]) -> str:
    """A TypeError message for arguments DataLoader does not take, with the names to use instead."""
    hints = []
    for name in sorted(unknown):
        if name in _TORCH_NAMES:
            ours = _TORCH_NAMES[name]
            hints.append(f"{name}= is torch's name: use {ours}=" if ours else f"{name}= is torch's only")
    text = f"DataLoader() got unexpected keyword argument(s) {', '.join(map(repr, sorted(unknown)))}"
    if hints:
        text += "; " + "; ".join(hints) + ". With PyTorch's arguments as they are, use slipstream.torch.DataLoader (a drop-in)"
    return text


def check_options(data: Any, **given: Any) -> SimpleNamespace:
    """The loader's arguments checked and normalised, with ``epoch_order`` built from them."""
    o = SimpleNamespace(**given)
    o.batch_size = check_int("batch_size", o.batch_size, 1)
    o.workers = check_workers(o.workers)
    o.prefetch = check_int("prefetch", o.prefetch, 1)
    o.world_size = check_int("world_size", o.world_size, 1)
    o.rank = check_int("rank", o.rank, 0)
    if o.rank >= o.world_size:
        raise ValueError(f"rank must be < world_size ({o.world_size}), got {o.rank}")
    drawn = o.seed is None
    o.seed = secrets.randbits(63) if drawn else check_int("seed", o.seed, 0)
    shuffle = check_flag("shuffle", o.shuffle)
    o.drop_last, o.in_order = check_flag("drop_last", o.drop_last), check_flag("in_order", o.in_order)
    check_callable("collate", o.collate)
    o.epoch_order = _epoch_order(data, o, shuffle)
    o.shuffle = o.order == "random"
    if drawn and o.world_size > 1 and o.order in ("random", "quasi_random"):
        raise ValueError(
            f"order={o.order!r} with world_size={o.world_size} needs seed= (the same on every rank): the ranks deal "
            "one permutation between them, and a seed drawn by each rank would give each its own"
        )
    if o.backend not in BACKENDS:
        raise ValueError(f"backend must be one of {list(BACKENDS)}, got {o.backend!r}")
    o.timeout = check_timeout(o.timeout)
    check_callable("worker_init", o.worker_init)
    return o


def _epoch_order(data: Any, o: SimpleNamespace, shuffle: bool) -> EpochOrder:
    custom = o.order is not None and not isinstance(o.order, str)
    if custom and not isinstance(o.order, EpochOrder):
        raise ValueError(f"order must be one of {sorted(ORDERS)}, got {o.order!r} (or an epoch order: batches(), num_batches())")
    if o.order is None:
        o.order = "random" if shuffle else "sequential"
    if not custom and o.order not in ORDERS:
        raise ValueError(f"order must be one of {sorted(ORDERS)}, got {o.order!r}")
    if shuffle and o.order != "random":
        raise ValueError(f"shuffle=True asks for order='random' but order={o.order!r} was given")
    if o.order == "quasi_random" and not callable(getattr(data, "page_starts", None)):
        raise TypeError(
            f"order='quasi_random' needs data with page_starts() (a packed file from ss.open), got {type(data).__name__}"
        )
    chosen = "shuffle=True" if shuffle else f"order={o.order!r}"
    if o.sampler is not None:
        if o.order != "sequential":
            raise ValueError(f"sampler and {chosen} exclude each other: the sampler decides the order")
        if not isinstance(o.sampler, Iterable):
            raise TypeError(f"sampler must be an iterable of indices, got {type(o.sampler).__name__}")
    if o.batch_sampler is not None:
        if o.batch_size != 1 or o.order != "sequential" or o.sampler is not None or o.drop_last:
            raise ValueError(
                "batch_sampler excludes batch_size, shuffle, sampler and drop_last (it decides the batches); "
                f"got batch_size={o.batch_size}, shuffle={shuffle}, sampler={o.sampler!r}, drop_last={o.drop_last}"
            )
        if not isinstance(o.batch_sampler, Iterable):
            raise TypeError(f"batch_sampler must be an iterable of index lists, got {type(o.batch_sampler).__name__}")
    source = o.batch_sampler if o.batch_sampler is not None else o.sampler
    if source is not None and not hasattr(source, "__len__") and o.world_size > 1:
        raise ValueError(
            f"a {'batch_sampler' if o.batch_sampler is not None else 'sampler'} without __len__ is read as it goes, "
            "which cannot be shared out between ranks: give it __len__, or shard it yourself with world_size=1"
        )
    if custom:
        return UserOrder(o.order)
    if o.batch_sampler is not None:
        return BatchSamplerOrder(o.batch_sampler, o.rank, o.world_size)
    if o.sampler is not None:
        return SamplerOrder(o.sampler, o.batch_size, o.drop_last, o.rank, o.world_size)
    return IndexOrder(o.order, data, o.batch_size, o.drop_last, o.rank, o.world_size)
