"""The DataLoader: a container, an epoch order and a backend, composed.

``DataLoader = backend(plans of order(seed, epoch, rank, world_size) read from data)``. Each
``iter(loader)`` starts the next epoch: the loader draws the epoch's batches from its order
(``order.epochs``), skips those a resumed state already handed out (``order.progress``), lets
stateful data settle its changes where no worker has begun reading (``order.datastate``), makes
one ``BatchPlan`` per batch (``loading.work.batchplan``) and hands the plans to its backend
(``backends``), whose executor loads them ahead of the consumer. ``len(loader)`` is the epoch's
exact number of batches.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, Generic, TypeVar, overload

from ..core.arguments import check_callable, check_int
from ..core.containers import numobs
from ..core.spec import Spec
from ..order.datastate import DataState, opened_in, settle_at_in
from ..order.epochs import EpochOrder
from ..order.progress import Position, Progress, state_dict, todo
from ..order.resume import Batching, field_names, resume
from .backends import Reading, make_backend
from .batchfinish import BatchOpsFinisher, checked_ops
from .finishing import FinishingExecutor, finisher_of
from .iterator import LoaderIterator
from .options import Options, check_options, unknown_arguments
from .readahead import FirstWindow, depth_of, hint_of, read_ahead
from .work.batchplan import COLLATE, INTO, SAMPLES, BatchPlan, chunk_size
from .work.buffers import Buffers, Unshaped
from .work.readers import BatchInfo, make_reader
from .work.stats import EpochStats

__all__ = ["DataLoader", "LoaderIterator"]

_T = TypeVar("_T")


class _Fixed(Generic[_T]):
    """A DataLoader attribute that reads its ``options``; setting it raises: the loader's order,
    buffers and workers are built from it."""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name

    @overload
    def __get__(self, loader: None, owner: type | None = None) -> _Fixed[_T]: ...
    @overload
    def __get__(self, loader: DataLoader, owner: type | None = None) -> _T: ...
    def __get__(self, loader: DataLoader | None, owner: type | None = None) -> Any:
        if loader is None:
            return self
        return getattr(loader.options, self.name)

    def __set__(self, loader: DataLoader, value: Any) -> None:
        raise AttributeError(
            f"DataLoader.{self.name} is fixed once the loader is made (its order, buffers and workers are built "
            f"from it): make a new DataLoader (the state_dict of this one resumes there)"
        )


class DataLoader:
    """Batches of ``data`` in a (shuffled, sharded) order, loaded ahead by worker threads.

    Args:
        data: any container (``__len__`` + ``__getitem__``), array, or tuple/dict of those.
        batch_size: observations per batch; the last batch is short unless ``drop_last``.
        shuffle: a new permutation every epoch, a pure function of (seed, epoch).
        collate: ``f(list_of_samples) -> batch``. The default stacks into reused buffers.
        seed: seeds the order and ``sample_rng()``; drawn at random when None (and kept in the state).
        workers: 0 loads in the consumer's thread; ``k > 0`` uses ``k`` workers that split each
            batch between them, so the first batch arrives after about ``batch_size / k`` reads.
            "auto": one worker per core this process may use (its CPU affinity mask capped by the
            cgroup CPU quota, rounded up; not ``os.cpu_count()``); ``loader.workers`` holds the number.
        backend: "thread" (the default: best when the work releases the GIL: decoding, NumPy,
            I/O, packed files), "process" (pure-Python samples: tokenizers, PIL chains, dict
            juggling) or "helper" (the worker threads in one helper process: a training loop's
            Python and the loader's never wait for each other's GIL). Process and helper workers
            get the data once (inherited with the "fork" start method, pickled once otherwise),
            persist across epochs until ``close()``, and write batches into shared-memory buffers
            that the consumer receives without a copy; a worker process that dies raises
            ``WorkerError`` naming its pid and signal or exit code.
        timeout: seconds to wait for one batch before raising ``TimeoutError`` (None: no limit). It
            applies with ``workers > 0``; with ``workers=0`` the batch loads in your own thread.
        worker_init: ``f(worker_id)`` run once in each worker before it loads anything (process
            workers: once per process; thread workers: once per thread, i.e. per epoch; helper
            workers: once per thread, when the helper starts). Nothing is read before the workers
            start. ``ss.worker_info()`` tells a worker which it is.
        mp_context: the process start method: None (the platform's default, as torch does),
            "fork", "spawn", "forkserver", or a ``multiprocessing`` context.
        prefetch: batches loaded ahead of the consumer (with ``workers > 0``).
        finish_ahead: for data with a batch finisher (a device stage), the batches finished ahead
            of the consumer (default ``max(2, prefetch)``; see Finishing below).
        in_order: False lets a finished batch overtake one that is still loading.
        batch_ops: batch augmentations (``slipstream.images.batchops``: ``MixUp``, ``CutMix``,
            ``MixUpOrCutMix``) applied in order to each whole batch, in the finish thread
            (``loading.batchfinish``), after the data's own batch finisher when it has one; their
            draws are a pure function of (seed, epoch, batch number, rank).
        rank, world_size: this process's share of each epoch (see ``order.orders`` for padding); a
            shuffled order then needs ``seed`` (the same on every rank).
        sampler: an iterable of indices, re-iterated each epoch (``set_epoch(epoch)`` is called
            when it has one); excludes ``shuffle``. A sized one is drawn whole each epoch; one
            without ``__len__`` (even endless) is read as the batches are loaded, and then
            ``len(loader)`` raises ``TypeError`` and ``world_size`` must be 1.
        batch_sampler: an iterable of index lists (sized or not, likewise); excludes batch_size,
            shuffle, sampler, drop_last.
        order: "sequential", "random" (what ``shuffle=True`` means) or "quasi_random": pages of a
            packed file in random order, samples shuffled within a window of 8 pages, so an epoch
            reads each page about once (see ``order.orders.quasi_random``); works with rank sharding.
            Or an epoch order object (``batches(epoch, n, seed)``, ``num_batches(n)``: see
            ``order.epochs``) that decides this rank's batches itself.

    The arguments, checked and normalised, are ``loader.options`` (a frozen ``loading.options.Options``),
    and attributes of the same names (``loader.workers`` is the number "auto" came to); these are fixed
    once the loader is made (setting one raises ``AttributeError``), except ``seed``.

    Batches and buffers: with the default collate, batches are written into a small pool of
    preallocated buffers. A buffer is reused only when nothing outside the loader references any
    array of its batch, so a batch (or a view or tensor made from it) that you keep is never
    overwritten; dropping batches as you go lets the loader allocate nothing in steady state.
    The buffers are shaped from the first sample of the first batch handed out (no sample is read
    before the epoch): samples must share one structure, shapes and dtypes (a later sample is
    cast only safely, else an error names it). Containers that declare their batch structure
    (``batch_spec()``: packed files) batch fields whose values vary (JSON, ragged arrays, images)
    exactly as ``default_collate`` does. A dataset that mixes dtypes across samples gets batches
    typed by whichever batch shaped the buffers (this depends on the resume point and, with
    ``in_order=False``, on timing): give such data one dtype, or pass ``collate=``.

    Finishing: data that declares ``batch_finisher()`` (a device stage: ``ss.open(p).map(image=[...],
    device="cuda")``) has each batch finished in one more thread of this process, ``finish_ahead``
    batches ahead of the consumer (default ``max(2, prefetch)``; 2 lets one batch be finished while
    the consumer uses another; each holds device memory) (``loading.finishing``); ``timeout``
    applies to a finish too; ``state_dict()`` counts only the batches handed out.

    Stateful data (``order.datastate``): a container with ``state_dict()`` and ``load_state_dict()``
    is part of the loader's state (``"data"``); one with ``settle_changes(position)`` too has the
    changes made to it at run time (a mixture's ``set_weights``) take effect from a position no
    worker has begun reading: with the "sequential" order, the first position of the batch
    ``prefetch`` (+ ``finish_ahead``) after those handed out, settled at each ``next()``; with other
    orders, position 0 of the next fresh epoch. The same positions for every backend, worker count
    and rank, and after a resume (also elastic); process workers' copies load each new state first.

    Determinism: the batches depend only on (seed, epoch, rank, world_size) and the data (and, in
    an epoch resumed with other batching, on what the old ranks had consumed: ``load_state_dict``);
    samples that draw from ``sample_rng()`` draw the same numbers with any number of workers.

    Thread-safety: one iterator is consumed from one thread; several iterators (even at once)
    are independent. ``state_dict()`` describes the most recently created iterator.
    """

    def __init__(
        self,
        data: Any,
        batch_size: int = 1,
        *,
        shuffle: bool = False,
        drop_last: bool = False,
        collate: Callable[[list[Any]], Any] | None = None,
        seed: int | None = None,
        workers: int | str = 0,
        prefetch: int = 2,
        in_order: bool = True,
        rank: int = 0,
        world_size: int = 1,
        sampler: Iterable[int] | None = None,
        batch_sampler: Iterable[Iterable[int]] | None = None,
        order: str | EpochOrder | None = None,
        backend: str = "thread",
        timeout: float | None = None,
        worker_init: Callable[[int], Any] | None = None,
        mp_context: Any = None,
        finish_ahead: int | None = None,
        batch_ops: Sequence[Any] | None = None,
        **unknown: Any,
    ):
        if unknown:
            raise TypeError(unknown_arguments(unknown))
        self._batch_ops = checked_ops(batch_ops)
        self._batch_buffers: Any = None  # the batch ops' output buffers (OutputBuffers), kept from one epoch to the next
        self.draw_rank: int | None = None  # the rank batch_ops' draws are keyed by (None: rank); see batch_ops
        self._n = numobs(data)
        self._options = check_options(
            data, batch_size=batch_size, shuffle=shuffle, drop_last=drop_last, collate=collate, seed=seed,
            workers=workers, prefetch=prefetch, in_order=in_order, rank=rank, world_size=world_size,
            sampler=sampler, batch_sampler=batch_sampler, order=order, backend=backend, timeout=timeout,
            worker_init=worker_init, mp_context=mp_context, finish_ahead=finish_ahead,
        )  # fmt: skip
        # whether seed= was given: a loaded state of another seed is then refused, not taken (a wrapper
        # that derives the seed itself, as the torch drop-in does, sets it False)
        self.seed_given = seed is not None
        self._backend = make_backend(self._options)
        self._datastate = DataState(data, self._backend)
        o = self._options  # remote pages of the first batches: downloading from now, not from iter() (``loading.readahead``)
        elsewhere = self._backend.shares_memory or self._datastate.stateful
        self._first = FirstWindow(data, o.epoch_order, depth_of(o.prefetch, o.workers), not elsewhere)
        self._first.start(Position(), o.seed)
        weakref.finalize(self, self._first.stop)
        self._reader = make_reader(data)
        declared = self._reader.declared if collate is None else None
        self._buffers = Buffers(self.batch_size, self.prefetch + 4, self._backend.allocate, declared, self._reader.origin)
        self._next = Position()  # where the next iterator starts (after load_state_dict: mid-epoch)
        self._progress: Progress | None = None  # the most recent iterator's, kept after it is gone
        self._settler: Any = None  # ... and its settle calls (stateful data: ``order.datastate``)
        self._stats: EpochStats | None = None  # ... and its counters (see ``stats``)
        self._busy: Any = None  # ... and its worker threads' busy meter (None without threads)
        self._lock = threading.RLock()  # iter() claims epochs under it

    def __len__(self) -> int:
        """The exact number of batches this rank gets in one whole epoch (of the data as it is now);
        an iterator's ``len()`` tells what is left of its epoch (a resumed one, too)."""
        return self._options.epoch_order.num_batches(numobs(self.data))

    @property
    def spec(self) -> Spec | None:
        """The structure of this loader's batches once known: declared by the data (arrays, packed
        files) or shaped from the first batch handed out; None before (or with ``collate=``)."""
        return self._buffers.spec

    # -- the arguments, checked (``options``; read-only but the seed) --------------------------
    @property
    def options(self) -> Options:
        """The loader's arguments, checked and normalised (``loading.options.Options``)."""
        return self._options

    data = _Fixed[Any]()
    batch_size = _Fixed[int]()
    shuffle = _Fixed[bool]()
    drop_last = _Fixed[bool]()
    collate = _Fixed[Callable[[list[Any]], Any] | None]()
    workers = _Fixed[int]()
    prefetch = _Fixed[int]()
    in_order = _Fixed[bool]()
    rank = _Fixed[int]()
    world_size = _Fixed[int]()
    sampler = _Fixed[Iterable[int] | None]()
    batch_sampler = _Fixed[Iterable[Iterable[int]] | None]()
    order = _Fixed[str | EpochOrder]()
    backend = _Fixed[str]()
    timeout = _Fixed[float | None]()
    worker_init = _Fixed[Callable[[int], Any] | None]()
    mp_context = _Fixed[Any]()
    finish_ahead = _Fixed[int]()

    @property
    def batch_ops(self) -> tuple[Any, ...]:
        """The batch augmentations applied to each batch, in order (fixed once the loader is made).
        Their draws are keyed by ``rank``, or by ``draw_rank`` when set (a wrapper whose ranks shard
        the data themselves, as the torch drop-in's samplers do, sets it to the process's rank)."""
        return self._batch_ops

    @property
    def seed(self) -> int:
        """Seeds the order and ``sample_rng()``. Not fixed: the next ``iter()`` uses the seed set here
        (an integer >= 0), and ``load_state_dict`` may take a state's."""
        return self._options.seed

    @seed.setter
    def seed(self, value: int) -> None:
        self._options = replace(self._options, seed=check_int("seed", value, 0))

    # -- iteration -------------------------------------------------------------------------
    def __iter__(self, *, keep_going: bool = False) -> LoaderIterator:
        """The next epoch's iterator. Safe from several threads at once: each gets its own epoch.

        An exception raised while loading a batch (by the data or the collate) is raised by the
        ``next()`` that reaches that batch, and ends the epoch; ``loader.__iter__(keep_going=True)``
        instead goes on with the following batches at the next ``next()``, as torch's iterator
        does (the failed batch counts as handed out in ``state_dict()``). A timeout or a dead
        worker ends the epoch either way."""
        with self._lock:
            o = self._options  # one epoch's arguments and seed, read once
            start, seed = self._next, o.seed
            self._datastate.opening(start)  # a fresh epoch's changes settle at position 0, before its length is read
            self._n = numobs(o.data)  # a container may grow or shrink between epochs (a replay buffer)
            # first: a sampler (or a finisher) that fails changes nothing
            if start.deal.fresh:
                batches = o.epoch_order.batches(start.epoch, self._n, seed)
            else:  # the rest of an epoch begun with other batching (``order.resume``)
                batches = o.epoch_order.batches(start.epoch, self._n, seed, start.deal)
            finisher = finisher_of(o.data)  # may raise (no CUDA...): before anything changes too
            if self._batch_ops:
                rank = o.rank if self.draw_rank is None else self.draw_rank
                finisher = BatchOpsFinisher(self._batch_ops, seed, start.epoch, rank, finisher, self._batch_buffers)
                self._batch_buffers = finisher.buffers
            hinted = self._first.handover(start, seed, self._n)  # (batches hinted before iter(), for this start)
            total = len(batches) if isinstance(batches, list) else None
            ahead = o.prefetch + (0 if finisher is None else o.finish_ahead)  # no batch beyond has begun reading
            settle = self._datastate.settler(o.epoch_order, self._n, start, ahead)
            progress = Progress(start.epoch, start.batch, start.done, total, start.deal)
            self._next, self._progress, self._settler = Position(start.epoch + 1), progress, settle
            stop = threading.Event()  # readers see it between samples once the iterator is closed
            stats = self._stats = EpochStats(start.epoch)
            hint = hint_of(  # (shared slots: workers in other processes, whose reads the shared cache must have room for)
                o.data, self._backend.shares_memory, lambda k: k < progress.batch or k in progress.done, o.prefetch
            )
            pairs = read_ahead(todo(batches, progress), hint, depth_of(o.prefetch, o.workers), hinted)
            plans = (self._plan(indices, BatchInfo(seed, start.epoch, k, stop), stats) for k, indices in pairs)
            reading = Reading(self._reader, self._buffers, o.collate, seed)
            executor = self._backend.run(plans, reading, start.epoch, keep_going)
            if finisher is not None:
                executor = FinishingExecutor(executor, finisher, o.finish_ahead, self.shape_batch, o.timeout)
            self._busy = getattr(executor, "busy_meter", None)
            return LoaderIterator(self, executor, progress, stop, keep_going, stats, settle)

    def _plan(self, indices: Any, info: BatchInfo, stats: EpochStats) -> BatchPlan:
        stats.planned(info.batch, len(indices))
        options = self._options
        if options.collate is not None:
            mode = COLLATE
        else:
            mode = INTO if self._buffers.pool is not None else SAMPLES
        return BatchPlan(info, indices, chunk_size(len(indices), options.workers, self._reader), mode)

    def shape_batch(self, batch: Unshaped) -> Any:
        """The batch made of samples read before the buffers had a shape (called in the consumer's
        thread; the first such batch handed out shapes the buffers). A subclass may override it to
        collate such samples its own way (``slipstream.torch`` does, for samples the buffers cannot
        reproduce exactly)."""
        return self._buffers.shape(batch)

    def stats(self) -> dict[str, Any] | None:
        """How the most recent epoch's loading goes (None before the first ``iter()``): ``epoch``,
        ``batches`` and ``samples`` handed out, ``seconds`` from the first ``next()`` to the latest
        batch, ``batches_per_s``, ``samples_per_s``, ``wait_fraction`` (the share of that time the
        consumer spent inside ``next()``: near 1, training waits for data), ``worker_busy`` (the
        share of the worker threads' time spent loading) and ``us_per_sample`` (their time per
        sample by stage: "decode", "augment", "collate" as the work reports them, e.g. image
        pipelines, and "read" the rest); the last two are None with ``workers=0``. Always on;
        it costs two clock reads per batch and a few per task (see ``loading.work.stats``)."""
        stats = self._stats
        if stats is None:
            return None
        busy = self._busy
        return stats.summary(None if busy is None else busy.reading())

    # -- workers ---------------------------------------------------------------------------
    @property
    def worker_pids(self) -> list[int]:
        """The process ids of this loader's live worker processes (none with threads)."""
        return self._backend.pids

    def restart_workers(self, worker_init: Callable[[int], Any] | None = None) -> None:
        """Let the next ``iter()`` start fresh worker processes (with the data as it is then, and
        ``worker_init`` instead of the loader's when given); the current ones finish serving the
        iterators that use them, then stop. Worker threads start fresh every epoch anyway."""
        check_callable("worker_init", worker_init)
        if worker_init is not None:
            self._options = replace(self._options, worker_init=worker_init)
        self._backend.restart(worker_init)

    def close(self) -> None:
        """Stop the persistent worker processes and release the shared batch buffers (batches still
        held stay valid). A later ``iter()`` starts new workers. Idempotent."""
        self._first.stop()
        self._backend.close()
        if self._backend.shares_memory:
            self._buffers.clear()

    def __enter__(self) -> DataLoader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- state -----------------------------------------------------------------------------
    def _batching(self) -> Batching:
        o = self._options
        seed = o.seed if self.seed_given else None
        return Batching(self._n, o.world_size, o.rank, o.batch_size, o.drop_last, o.epoch_order, seed, field_names(o.data))

    def state_dict(self) -> dict[str, Any]:
        """Where the run stands: a small JSON-serializable dict (see ``load_state_dict``).

        ``epoch`` and ``batch`` say how far the most recent iterator got (even after leaving the
        loop early): batches ``0..batch-1`` of that epoch were handed out. With
        ``in_order=False`` a few later batches may have overtaken the rest; ``done_ahead`` lists
        them (at most ``prefetch``), so they are not loaded twice. ``seed``; the batching the
        epoch was dealt with (``num_observations``, ``world_size``, ``rank``, ``batch_size``,
        ``drop_last``, ``order``); ``deal``: the part of the epoch's global order consumed before
        it was dealt (nothing, unless it was resumed with other batching); ``version``. What
        identifies the data the order was drawn over: ``fields`` (data that declares field names:
        packed files and views of them) and, for ``order="quasi_random"``, ``num_pages`` and
        ``page_layout`` (a digest of ``page_starts()``). Stateful data: ``data``, its ``state_dict()``
        (and ``opened`` for an epoch begun with nothing handed out yet, ``settle_at`` for one begun
        in the sequential order: where its changes settle next, also after a resume: ``order.datastate``).
        """
        progress, settler = self._progress, self._settler
        position = self._next if progress is None else Position.after(progress)
        if progress is not None and settler is not None and not progress.finished:
            position.settle_at = settler.position(progress)  # where this run settles the data's next changes
        return {**state_dict(position, self.seed, self._batching().identity()), **self._datastate.entries(position)}

    def load_state_dict(self, state: dict[str, Any] | list[dict[str, Any]]) -> None:
        """Continue from ``state``: the next ``iter()`` yields the rest of that epoch, then the epochs after it.

        With the same batching (``world_size``, ``batch_size``, ``drop_last``) a rank's own state
        continues it exactly. Elastic resume: with other batching, or on another rank, the state of
        any one rank of the old job (they move in lockstep) has the rest of the epoch dealt afresh
        to this loader's ranks, equal batch counts each, nothing lost and nothing repeated beyond
        the new deal's padding; the following epochs are a fresh run's. With ``in_order=False``,
        or ranks that stopped at different steps, pass all old ranks' states as a list.

        The data and the order must be the state's: its length, its fields, the order and (for
        "quasi_random") the page layout; else ``ValueError`` says which differs. A loader made with
        ``seed=`` refuses a state of another seed; one made without takes the state's seed.
        ``order.resume`` says which orders can move, and how states saved before a key existed load.
        Stateful data loads ``state["data"]`` first (a list: the ranks' must be equal), and is put
        back as it was if the rest is refused; a state without ``data`` leaves the data as it is.
        """
        sets, value = self._datastate.wanted(state)
        n, undo = self._n, self._datastate.load(value) if sets else None
        try:
            if sets:
                self._n = numobs(self.data)  # (its length may follow its state)
            seed, position = resume(state, self._batching())
            position.opened, position.settle_at = opened_in(state, position), settle_at_in(state, position)
        except BaseException:
            self._n = n
            if undo is not None:
                undo()
            raise
        self.seed, self._next, self._progress, self._settler = seed, position, None, None
        if sets:
            self._datastate.changed()
        self._first.start(position, seed)  # the resumed epoch's first pages, instead of the ones hinted before

    def __repr__(self) -> str:
        return (
            f"DataLoader({self._n} observations, batch_size={self.batch_size}, shuffle={self.shuffle}, "
            f"workers={self.workers}, rank={self.rank}/{self.world_size})"
        )
