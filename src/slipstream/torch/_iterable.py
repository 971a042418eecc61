"""``IterableDataset`` loading, as torch does it.

* ``Fetcher`` batches an iterator as torch's ``_IterableDatasetFetcher`` does (``batch_size``
  items or one unbatched item, the last batch short unless ``drop_last``), in this thread
  (``num_workers=0``) or in a worker process.
* In worker processes (``num_workers > 0``): each worker holds an ``IterablePayload`` (its own
  copy of the dataset); ``_iterable_begin`` sets the worker up as torch does (seeding,
  ``get_worker_info()``, ``worker_init_fn``, once per process) and starts the epoch's iterator;
  ``_iterable_next`` returns its next collated batch, or ``_Ended``. These are module-level: they
  are pickled by reference into the workers.
* ``round_robin`` takes the workers' batches in torch's order and raises
  ``DataLoaderTimeoutError`` (also a ``RuntimeError``, as torch's) past ``timeout``.
* ``Skipping`` replays a resumed epoch: it drops the batches handed out before the checkpoint
  (a ``Fetcher`` reads their items without collating them) at the first ``next()``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any

import torch

from ..core.errors import DataLoaderTimeoutError, WorkerError
from ._compat import seed_like_torch, set_worker_info
from ._context import LoaderContext
from ._epoch import close_source, torch_worker_error
from ._record import EpochRecord


class IterablePayload:
    """What each worker process holds for an ``IterableDataset``: sent once (inherited with fork),
    so lambdas work as ``collate_fn``/``worker_init_fn`` with fork, as in torch."""

    def __init__(self, dataset: Any, collate_fn: Any, worker_init_fn: Any, batch_size: int | None, drop_last: bool):
        self.dataset, self.collate_fn, self.worker_init_fn = dataset, collate_fn, worker_init_fn
        self.batch_size, self.drop_last = batch_size, drop_last


class _Ended:
    """A worker's iterator is exhausted (torch's ``_IterableDatasetStopIteration``)."""


class Fetcher:
    """Batches of an iterator as torch's ``_IterableDatasetFetcher`` makes them: ``batch_size``
    items (None: one item, not batched), the last batch short unless ``drop_last``, and the
    iterator not touched again once it has ended."""

    def __init__(self, iterator: Iterator[Any], batch_size: int | None, drop_last: bool, collate_fn: Callable[[Any], Any]):
        self.iterator, self.batch_size, self.drop_last, self.collate_fn = iterator, batch_size, drop_last, collate_fn
        self.ended = False

    def __iter__(self) -> Fetcher:
        return self

    def __next__(self) -> Any:  # (an error of the dataset's iterator passes through, as in torch)
        return self.fetch()

    def fetch(self) -> Any:
        """The next collated batch; StopIteration at the end."""
        if self.ended:
            raise StopIteration
        if self.batch_size is None:
            return self.collate_fn(next(self.iterator))
        data = []
        for _ in range(self.batch_size):
            try:
                data.append(next(self.iterator))
            except StopIteration:
                self.ended = True
                break
        if not data or (self.drop_last and len(data) < self.batch_size):
            raise StopIteration
        return self.collate_fn(data)

    def skip(self, batches: int) -> None:
        """Read the items of the next ``batches`` batches without collating them (fewer if the
        iterator ends first: then it has ended). An item that raises ends its batch there, as
        ``fetch`` does: that batch was handed out as the error."""
        per_batch = 1 if self.batch_size is None else self.batch_size
        for _ in range(batches):
            try:
                for _ in range(per_batch):
                    if self.ended:
                        return
                    next(self.iterator)
            except StopIteration:
                self.ended = True
            except Exception:  # noqa: BLE001 - the batch's own error, raised when it was handed out
                continue


class Skipping:
    """``source``'s batches but its first ``count``, dropped at the first ``next()`` (a resumed
    epoch read again from its start: exact for a dataset that yields the same stream again). A
    batch's error passes through without ending it, as ``source``'s own; ``close()`` closes it."""

    def __init__(self, source: Iterator[Any], count: int):
        self.source, self.count = source, count

    def __iter__(self) -> Skipping:
        return self

    def __next__(self) -> Any:
        if self.count:
            count, self.count = self.count, 0
            if isinstance(self.source, Fetcher):
                self.source.skip(count)
            else:
                for _ in range(count):
                    next(self.source)  # StopIteration: the stream ended sooner than before
        return next(self.source)

    def close(self) -> None:
        close_source(self.source)


def seeded_pipe(dataset: Any, shared_seed: int | None, num_workers: int, worker_id: int, shard: bool = True) -> Any:
    """An ``IterDataPipe`` seeded (its shuffles) from ``shared_seed`` and sharded between
    ``num_workers`` as torch's DataLoader does it; any other dataset as it is."""
    if shared_seed is None:
        return dataset
    from torch.utils.data import graph_settings

    rng = torch.Generator()
    rng.manual_seed(shared_seed)
    dataset = graph_settings.apply_random_seed(dataset, rng)
    if shard:
        graph_settings.apply_sharding(dataset, num_workers, worker_id)
    return dataset


def _iterable_begin(state: Any, epoch: int, base_seed: int, shared_seed: int | None, skip: int = 0) -> None:
    """Start an epoch in this worker: set up the worker (first time only), then ``iter(dataset)``
    and read past its first ``skip`` batches (a resumed epoch: the ones handed out before).
    A DataPipe is seeded from ``shared_seed`` every epoch and sharded once, as torch's workers do."""
    payload: IterablePayload = state.payload
    cache = state.cache
    cache.pop("iterator", None)
    if "torch-worker" not in cache:  # once per process: persistent workers are set up once, as in torch
        cache["torch-worker"] = True
        torch.set_num_threads(1)
        seed = seed_like_torch(base_seed, state.id)
        payload.dataset = seeded_pipe(payload.dataset, shared_seed, state.num_workers, state.id, shard=False)
        set_worker_info(state.id, state.num_workers, seed, payload.dataset)
        if shared_seed is not None:  # torch's _sharding_worker_init_fn, before the user's
            from torch.utils.data import graph_settings

            graph_settings.apply_sharding(payload.dataset, state.num_workers, state.id)
        if payload.worker_init_fn is not None:
            payload.worker_init_fn(state.id)
    else:
        payload.dataset = seeded_pipe(payload.dataset, shared_seed, state.num_workers, state.id, shard=False)
    fetcher = Fetcher(iter(payload.dataset), payload.batch_size, payload.drop_last, payload.collate_fn)
    fetcher.skip(skip)
    cache["iterator"] = (epoch, fetcher)


def _iterable_next(state: Any, epoch: int) -> Any:
    """The worker's next collated batch of the epoch, or an ``_Ended``."""
    entry = state.cache.get("iterator")
    if entry is None or entry[0] != epoch:
        return _Ended()
    try:
        return entry[1].fetch()
    except StopIteration:
        state.cache.pop("iterator", None)
        return _Ended()


def round_robin(
    context: LoaderContext,
    pool: Any,
    epoch: int,
    base_seed: int,
    shared_seed: int | None,
    own_pool: bool,
    record: EpochRecord | None = None,
    skips: list[int] | None = None,
) -> Iterator[Any]:
    """One epoch's batches from ``pool``'s workers (the loader's settings at this epoch's ``iter()``
    are ``context``), as torch takes them: round-robin (with
    ``context.in_order``; else whichever worker's next batch is ready first, each worker's in its
    order), skipping a worker whose iterator has ended, each worker ``context.prefetch_factor``
    batches ahead. Worker ``w`` first reads past ``skips[w]`` batches (a resumed epoch); ``record``
    (with ``workers`` counts) is told the worker of each batch taken. Past ``context.timeout`` (0:
    none) it closes the pool and raises ``DataLoaderTimeoutError``; at the end it closes the pool
    when ``own_pool``, else discards the tasks still outstanding."""
    k = context.num_workers
    ahead = context.prefetch_factor if context.prefetch_factor is not None else 2
    timeout = context.timeout or None
    queues: list[deque[int]] = [deque() for _ in range(k)]
    owner: dict[int, int] = {}
    begins: set[int] = set()

    def send(w: int, fn: Callable[..., Any], *args: Any) -> int:
        ticket = pool.submit(w, fn, *args)
        queues[w].append(ticket)
        owner[ticket] = w
        return ticket

    def wait(tickets: set[int]) -> tuple[int, bool, Any]:
        try:
            return pool.wait(tickets, timeout)
        except TimeoutError:
            pool.close()
            raise DataLoaderTimeoutError(
                f"DataLoader timed out after {context.timeout} seconds (slipstream: no batch from the "
                f"{k} worker processes; they were stopped)"
            ) from None
        except WorkerError as exc:
            torch_error = torch_worker_error(exc)
            if torch_error is exc:
                raise
            raise torch_error from None

    try:
        for w in range(k):
            begins.add(send(w, _iterable_begin, epoch, base_seed, shared_seed, skips[w] if skips else 0))
            for _ in range(ahead):
                send(w, _iterable_next, epoch)
        active = [True] * k
        w = 0
        while any(active):
            if context.in_order:
                if not active[w]:
                    w = (w + 1) % k
                    continue
                ticket = queues[w][0]
                ticket, ok, value = wait({ticket})
            else:
                ticket, ok, value = wait({queue[0] for queue in queues if queue})  # each worker's in order
                w = owner[ticket]
            queues[w].remove(ticket)
            del owner[ticket]
            counted = record is not None and record.workers is not None and ticket not in begins
            if not ok:
                if counted:  # the worker's batch, handed out as its error
                    record.from_worker(w)  # type: ignore[union-attr]
                raise value
            if ticket in begins:
                begins.discard(ticket)
                continue  # the same worker's first batch comes next
            if isinstance(value, _Ended):
                active[w] = False
                pool.discard(list(queues[w]))
                for t in queues[w]:
                    owner.pop(t, None)
                queues[w].clear()
                w = (w + 1) % k
                continue
            send(w, _iterable_next, epoch)
            if counted:
                record.from_worker(w)  # type: ignore[union-attr]
            w = (w + 1) % k
            yield value
    finally:
        if own_pool:
            pool.close()
        elif owner and not pool.closed:
            pool.discard(list(owner))
