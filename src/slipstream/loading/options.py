"""The DataLoader's arguments, checked: one clear error per mistake, before anything starts.

``check_options`` checks and normalises the arguments (NumPy integers become ints, ``workers="auto"``
becomes ``usable_cores()``, ``shuffle`` becomes ``order="random"``, ``finish_ahead=None`` becomes
``max(2, prefetch)``), builds the loader's epoch order from them (``order.epochs``) and returns the
one frozen ``Options`` that the loader and its backend read. An unknown keyword gets a hint naming
slipstream's word for it (``num_workers=`` is torch's ``workers=``).

It also warns (a ``UserWarning``, once per loader made) of a global random order over data whose
pages are read into memory within a bound (``pages_kept()``: object storage, data read in place)
when the data holds more pages than that bound: nearly every batch would read and decode pages
again (``order="quasi_random"``, or a larger ``keep=``, reads each page once an epoch).
"""

from __future__ import annotations

import contextlib
import secrets
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..core.arguments import check_callable, check_flag, check_int, check_timeout, check_workers
from ..files.shards import data_name
from ..order.epochs import BatchSamplerOrder, EpochOrder, IndexOrder, SamplerOrder, UserOrder
from .backends import BACKENDS

__all__ = ["ORDERS", "Options", "check_options", "unknown_arguments", "warn_scattered_reads"]

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


@dataclass(frozen=True, slots=True, eq=False)
class Options:
    """A DataLoader's arguments, checked and normalised: built by ``check_options`` only.

    Frozen: the loader's order, buffers and workers are built from it. The loader keeps it whole
    (``DataLoader.options``) and hands it to its backend; a new seed (``loader.seed = ...``,
    ``load_state_dict``) or ``restart_workers(worker_init)`` makes the loader a new one
    (``dataclasses.replace``), and nothing else changes after construction.
    """

    data: Any = field(repr=False)
    """What the batches are read from: a container (``__len__`` + ``__getitem__``), an array, or a tuple/dict of those."""
    batch_size: int
    """Observations per batch (>= 1); the last batch is short unless ``drop_last``."""
    shuffle: bool
    """Whether the order is "random" (``shuffle=True`` asks for it, and so does ``order="random"``)."""
    drop_last: bool
    """Whether an epoch's short last batch is left out."""
    collate: Callable[[list[Any]], Any] | None
    """The user's ``f(samples) -> batch``; None: the default collate, into reused buffers."""
    seed: int
    """Seeds the order and ``sample_rng()`` (>= 0): the one given, else drawn at random."""
    workers: int
    """Workers (>= 0; "auto" is resolved to the usable cores); 0 loads in the consumer's thread."""
    prefetch: int
    """Batches loaded ahead of the consumer (>= 1), with ``workers > 0``."""
    in_order: bool
    """False lets a finished batch overtake one still loading."""
    rank: int
    """This process's rank (0 <= rank < world_size)."""
    world_size: int
    """How many ranks share each epoch (>= 1)."""
    sampler: Iterable[int] | None = field(repr=False)
    """An iterable of indices, re-iterated each epoch, or None."""
    batch_sampler: Iterable[Iterable[int]] | None = field(repr=False)
    """An iterable of index lists, re-iterated each epoch, or None."""
    order: str | EpochOrder
    """One of ``ORDERS`` (None is resolved from ``shuffle``), or the user's epoch order object."""
    backend: str
    """The backend's name: a key of ``backends.BACKENDS`` ("thread", "process", "helper")."""
    timeout: float | None
    """Seconds to wait for one batch (> 0), or None: no limit."""
    worker_init: Callable[[int], Any] | None
    """``f(worker_id)`` run once in each worker before it loads anything, or None."""
    mp_context: Any
    """The process start method: None (the platform's default), a method's name, or a ``multiprocessing`` context."""
    finish_ahead: int
    """Batches finished ahead of the consumer for data with a batch finisher (>= 1; default ``max(2, prefetch)``)."""
    epoch_order: EpochOrder = field(repr=False)
    """The order the epochs' batches are drawn from, built from ``order``, the samplers, the batching and the rank."""


def check_options(
    data: Any,
    *,
    batch_size: Any,
    shuffle: Any,
    drop_last: Any,
    collate: Any,
    seed: Any,
    workers: Any,
    prefetch: Any,
    in_order: Any,
    rank: Any,
    world_size: Any,
    sampler: Any,
    batch_sampler: Any,
    order: Any,
    backend: Any,
    timeout: Any,
    worker_init: Any,
    mp_context: Any,
    finish_ahead: Any,
) -> Options:
    """The loader's arguments checked and normalised, with the epoch order built from them.

    Raises ``TypeError`` (a wrong kind of value) or ``ValueError`` (a value out of range, or
    arguments that exclude each other), naming the argument and what was given."""
    batch_size = check_int("batch_size", batch_size, 1)
    workers = check_workers(workers)
    prefetch = check_int("prefetch", prefetch, 1)
    world_size = check_int("world_size", world_size, 1)
    rank = check_int("rank", rank, 0)
    if rank >= world_size:
        raise ValueError(f"rank must be < world_size ({world_size}), got {rank}")
    drawn = seed is None
    seed = secrets.randbits(63) if drawn else check_int("seed", seed, 0)
    shuffle = check_flag("shuffle", shuffle)
    drop_last, in_order = check_flag("drop_last", drop_last), check_flag("in_order", in_order)
    check_callable("collate", collate)
    order = _order_name(order, shuffle)
    epoch_order = _epoch_order(data, order, shuffle, batch_size, drop_last, rank, world_size, sampler, batch_sampler)
    if drawn and world_size > 1 and order in ("random", "quasi_random"):
        raise ValueError(
            f"order={order!r} with world_size={world_size} needs seed= (the same on every rank): the ranks deal "
            "one permutation between them, and a seed drawn by each rank would give each its own"
        )
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {list(BACKENDS)}, got {backend!r}")
    timeout = check_timeout(timeout)
    check_callable("worker_init", worker_init)
    finish_ahead = max(2, prefetch) if finish_ahead is None else check_int("finish_ahead", finish_ahead, 1)
    if order == "random" and sampler is None and batch_sampler is None:
        warn_scattered_reads(
            data, 'order="quasi_random" (pages shuffled, each read once an epoch)', "order='random' (shuffle=True) reads each batch's samples from all over the data"
        )
    return Options(
        data=data, batch_size=batch_size, shuffle=order == "random", drop_last=drop_last, collate=collate, seed=seed,
        workers=workers, prefetch=prefetch, in_order=in_order, rank=rank, world_size=world_size, sampler=sampler,
        batch_sampler=batch_sampler, order=order, backend=backend, timeout=timeout, worker_init=worker_init,
        mp_context=mp_context, finish_ahead=finish_ahead, epoch_order=epoch_order,
    )  # fmt: skip


def warn_scattered_reads(data: Any, fix: str, why: str, stacklevel: int = 4) -> None:
    """A ``UserWarning`` when ``data`` (or the data a mapped view of it reads: ``.data``) keeps
    fewer of its pages decoded (``pages_kept()``) than it holds, read in an order that ``why``
    says jumps over them all: naming the data, its pages, the bound, and the fixes (``fix``, or a
    ``keep=`` of its page count). Nothing for data that keeps every page, and nothing the second
    time for the same data (one warning per opened dataset, whoever reads it)."""
    paged = data
    for _ in range(4):  # a view's data, and its data: (``ds.map(...)``, its ``.map`` again)
        if callable(getattr(paged, "pages_kept", None)):
            break
        paged = getattr(paged, "data", None)
    else:
        return
    kept, pages = paged.pages_kept(), int(getattr(paged, "num_pages", 0))
    if kept is None or pages <= kept or getattr(paged, "_warned_scattered", False):
        return
    with contextlib.suppress(AttributeError):  # (data that takes no attribute is warned about each time)
        paged._warned_scattered = True
    warnings.warn(
        f"{data_name(paged)}: {why}, over {pages} pages (row groups, parts) of which this process keeps {kept} "
        f"decoded: most reads decode pages again (slow: CPU milliseconds per sample). Use {fix}, or open the data "
        f"with keep={pages} (or more) if {pages} decoded pages fit in memory",
        UserWarning,
        stacklevel=stacklevel,
    )


def _order_name(order: Any, shuffle: bool) -> str | EpochOrder:
    """``order`` checked against ``shuffle``: one of ``ORDERS`` (None: "random" with shuffle, else
    "sequential"), or an epoch order object."""
    custom = order is not None and not isinstance(order, str)
    if custom and not isinstance(order, EpochOrder):
        raise ValueError(f"order must be one of {sorted(ORDERS)}, got {order!r} (or an epoch order: batches(), num_batches())")
    if order is None:
        order = "random" if shuffle else "sequential"
    if not custom and order not in ORDERS:
        raise ValueError(f"order must be one of {sorted(ORDERS)}, got {order!r}")
    if shuffle and order != "random":
        raise ValueError(f"shuffle=True asks for order='random' but order={order!r} was given")
    return order


def _epoch_order(
    data: Any,
    order: str | EpochOrder,
    shuffle: bool,
    batch_size: int,
    drop_last: bool,
    rank: int,
    world_size: int,
    sampler: Any,
    batch_sampler: Any,
) -> EpochOrder:
    """The epoch order of ``order`` (checked by ``_order_name``) with the samplers and batching,
    which are checked against it and each other here."""
    if order == "quasi_random" and not callable(getattr(data, "page_starts", None)):
        raise TypeError(
            f"order='quasi_random' needs data with page_starts() (a packed file from ss.open), got {type(data).__name__}"
        )
    chosen = "shuffle=True" if shuffle else f"order={order!r}"
    if sampler is not None:
        if order != "sequential":
            raise ValueError(f"sampler and {chosen} exclude each other: the sampler decides the order")
        if not isinstance(sampler, Iterable):
            raise TypeError(f"sampler must be an iterable of indices, got {type(sampler).__name__}")
    if batch_sampler is not None:
        if batch_size != 1 or order != "sequential" or sampler is not None or drop_last:
            raise ValueError(
                "batch_sampler excludes batch_size, shuffle, sampler and drop_last (it decides the batches); "
                f"got batch_size={batch_size}, shuffle={shuffle}, sampler={sampler!r}, drop_last={drop_last}"
            )
        if not isinstance(batch_sampler, Iterable):
            raise TypeError(f"batch_sampler must be an iterable of index lists, got {type(batch_sampler).__name__}")
    source = batch_sampler if batch_sampler is not None else sampler
    if source is not None and not hasattr(source, "__len__") and world_size > 1:
        raise ValueError(
            f"a {'batch_sampler' if batch_sampler is not None else 'sampler'} without __len__ is read as it goes, "
            "which cannot be shared out between ranks: give it __len__, or shard it yourself with world_size=1"
        )
    if isinstance(order, EpochOrder):
        return UserOrder(order)
    if batch_sampler is not None:
        return BatchSamplerOrder(batch_sampler, rank, world_size)
    if sampler is not None:
        return SamplerOrder(sampler, batch_size, drop_last, rank, world_size)
    return IndexOrder(order, data, batch_size, drop_last, rank, world_size)
