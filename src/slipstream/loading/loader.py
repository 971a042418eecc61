"""The DataLoader: a container, an order and an executor, composed.

``DataLoader = executor(batches of order(seed, epoch, rank, world_size) read from data)``.
Each ``iter(loader)`` starts the next epoch; ``len(loader)`` is its exact number of batches.
"""

from __future__ import annotations

import itertools
import math
import secrets
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from ..core.collate import Spec
from ..core.containers import numobs
from .executor import InlineExecutor, Job, ThreadExecutor
from ..core.orders import num_batches, permutation, quasi_random, shard, shard_batches, split_batches
from .readers import BatchInfo, Reader, collated, make_reader
from ..core.slots import SlotPool
from ..core.workerinfo import WorkerInfo, set_worker_info, worker_seed

__all__ = ["DataLoader"]

_STATE_VERSION = 1
_ORDERS = ("sequential", "random", "quasi_random")
_BACKENDS = ("thread", "process")


def _batch_name(epoch: int) -> Callable[[Any], str]:
    """How messages name batch ``k`` of ``epoch`` (None: the next one, not started yet)."""
    return lambda k: f"the next batch of epoch {epoch}" if k is None else f"batch {k} of epoch {epoch}"


def _thread_init(worker_init: Callable[[int], Any] | None, workers: int, seed: int) -> Callable[[int], None]:
    def init(k: int) -> None:
        set_worker_info(WorkerInfo(k, workers, worker_seed(seed, k), "thread"))
        if worker_init is not None:
            worker_init(k)

    return init


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


def _unknown_arguments(unknown: dict[str, Any]) -> str:
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


def _check_int(name: str, value: Any, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer >= {minimum}, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value}")
    return int(value)


def _as_indices(values: Iterable[Any], n: int, source: str) -> np.ndarray:
    """A sampler's indices as an intp array: integers only (no floats, bools or strings), all in ``[0, n)``."""
    indices = np.asarray(list(values))
    if indices.size == 0:
        return np.zeros(0, dtype=np.intp)
    if indices.ndim != 1 or indices.dtype.kind not in "iu":
        kind = f"{indices.dtype} values" if indices.ndim == 1 else f"an array of shape {indices.shape}"
        raise TypeError(f"the {source} must give integer sample indices, got {kind}")
    return _check_indices(indices.astype(np.intp, copy=False), n, source)


def _chunked(indices: Iterator[Any], n: int, batch_size: int, drop_last: bool) -> Iterator[np.ndarray]:
    """Batches of ``batch_size`` indices read from ``indices`` as they are needed (it may be endless)."""
    while True:
        chunk = list(itertools.islice(indices, batch_size))
        if not chunk or (drop_last and len(chunk) < batch_size):
            return
        yield _as_indices(chunk, n, "sampler")


def _check_indices(indices: np.ndarray, n: int, source: str) -> np.ndarray:
    """``indices`` if all lie in ``[0, n)``; else an IndexError naming the first bad one."""
    if len(indices) and (indices.min() < 0 or indices.max() >= n):
        bad = int(indices[np.argmax((indices < 0) | (indices >= n))])
        raise IndexError(f"the {source} gave sample index {bad}, out of range for {n} observations")
    return indices


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
        backend: "thread" (the default: best when the work releases the GIL: decoding, NumPy,
            I/O, packed files) or "process" (pure-Python samples: tokenizers, PIL chains, dict
            juggling). Process workers get the data once (inherited with the "fork" start method,
            pickled once otherwise), persist across epochs until ``close()``, and write batches
            into shared-memory buffers that the consumer receives without a copy; a worker that
            dies raises ``WorkerError`` naming its pid and signal or exit code.
        timeout: seconds to wait for one batch before raising ``TimeoutError`` (None: no limit). It
            applies with ``workers > 0``; with ``workers=0`` the batch loads in your own thread.
        worker_init: ``f(worker_id)`` run once in each worker before it loads anything (process
            workers: once per process; thread workers: once per thread, i.e. per epoch). Nothing is
            read before the workers start. ``ss.worker_info()`` tells a worker which it is.
        mp_context: the process start method: None (the platform's default, as torch does),
            "fork", "spawn", "forkserver", or a ``multiprocessing`` context.
        prefetch: batches loaded ahead of the consumer (with ``workers > 0``).
        in_order: False lets a finished batch overtake one that is still loading.
        rank, world_size: this process's share of each epoch (see ``_orders`` for padding).
        sampler: an iterable of indices, re-iterated each epoch (``set_epoch(epoch)`` is called
            when it has one); excludes ``shuffle``. A sized one is drawn whole each epoch; one
            without ``__len__`` (even endless) is read as the batches are loaded, and then
            ``len(loader)`` raises ``TypeError`` and ``world_size`` must be 1.
        batch_sampler: an iterable of index lists (sized or not, likewise); excludes batch_size,
            shuffle, sampler, drop_last.
        order: "sequential", "random" (what ``shuffle=True`` means) or "quasi_random": pages of a
            packed file in random order, samples shuffled within a window of 8 pages, so an epoch
            reads each page about once (see ``_orders.quasi_random``); works with rank sharding.

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

    Determinism: the batches depend only on (seed, epoch, rank, world_size) and the data; samples
    that draw from ``sample_rng()`` draw the same numbers with any number of workers.

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
        workers: int = 0,
        prefetch: int = 2,
        in_order: bool = True,
        rank: int = 0,
        world_size: int = 1,
        sampler: Iterable[int] | None = None,
        batch_sampler: Iterable[Iterable[int]] | None = None,
        order: str | None = None,
        backend: str = "thread",
        timeout: float | None = None,
        worker_init: Callable[[int], Any] | None = None,
        mp_context: Any = None,
        **unknown: Any,
    ):
        if unknown:
            raise TypeError(_unknown_arguments(unknown))
        self._n = numobs(data)
        self.batch_size = _check_int("batch_size", batch_size, 1)
        self.workers = _check_int("workers", workers, 0)
        self.prefetch = _check_int("prefetch", prefetch, 1)
        self.world_size = _check_int("world_size", world_size, 1)
        self.rank = _check_int("rank", rank, 0)
        if self.rank >= self.world_size:
            raise ValueError(f"rank must be < world_size ({self.world_size}), got {self.rank}")
        if seed is not None:
            seed = _check_int("seed", seed, 0)
        for name, flag in (("shuffle", shuffle), ("drop_last", drop_last), ("in_order", in_order)):
            if not isinstance(flag, (bool, np.bool_)):
                raise TypeError(f"{name} must be True or False, got {flag!r}")
        if collate is not None and not callable(collate):
            raise TypeError(f"collate must be a callable or None, got {type(collate).__name__}")
        if order is None:
            order = "random" if shuffle else "sequential"
        if order not in _ORDERS:
            raise ValueError(f"order must be one of {sorted(_ORDERS)}, got {order!r}")
        if shuffle and order != "random":
            raise ValueError(f"shuffle=True asks for order='random' but order={order!r} was given")
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
        self._streamed = source is not None and not hasattr(source, "__len__")
        if self._streamed and world_size > 1:
            raise ValueError(
                f"a {'batch_sampler' if batch_sampler is not None else 'sampler'} without __len__ is read as it goes, "
                "which cannot be shared out between ranks: give it __len__, or shard it yourself with world_size=1"
            )
        if backend not in _BACKENDS:
            raise ValueError(f"backend must be one of {list(_BACKENDS)}, got {backend!r}")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not timeout > 0):
            raise ValueError(f"timeout must be None or a number of seconds > 0, got {timeout!r}")
        if worker_init is not None and not callable(worker_init):
            raise TypeError(f"worker_init must be a callable or None, got {type(worker_init).__name__}")
        self.backend, self.timeout, self.worker_init, self.mp_context = backend, timeout, worker_init, mp_context
        self._processes: Any = None  # the persistent WorkerPool (backend="process"), made at the first iter()
        self._processes_seed: int | None = None
        self.data = data
        self.shuffle, self.drop_last, self.in_order = order == "random", bool(drop_last), bool(in_order)
        self.order = order
        self.collate = collate
        self.sampler, self.batch_sampler = sampler, batch_sampler
        self.seed = secrets.randbits(63) if seed is None else seed
        self._reader: Reader = make_reader(data)
        self._pool: SlotPool | None = None
        if self._reader.spec is not None and collate is None:
            self._pool = self._slot_pool(self._reader.spec)
        self._epoch = 0  # the epoch the next iterator starts
        self._skip = 0  # batches of that epoch already consumed (after load_state_dict)...
        self._done: frozenset[int] = frozenset()  # ...and those consumed beyond them out of order
        self._progress: _Progress | None = None  # the most recent iterator's, kept after it is gone
        self._lock = threading.RLock()  # iter() claims epochs and shapes the buffers under it

    # -- orders ----------------------------------------------------------------------------
    def _batches(self, epoch: int) -> list[np.ndarray] | Iterator[np.ndarray]:
        """The epoch's batches: a list, or (a sampler without ``__len__``, perhaps endless) an
        iterator that reads the sampler as the batches are started."""
        if self.batch_sampler is not None:
            if hasattr(self.batch_sampler, "set_epoch"):
                self.batch_sampler.set_epoch(epoch)
            if self._streamed:
                return (_as_indices(b, self._n, "batch_sampler") for b in self.batch_sampler)
            batches = [_as_indices(b, self._n, "batch_sampler") for b in self.batch_sampler]
            return shard_batches(batches, self.rank, self.world_size)
        if self.sampler is not None:
            if hasattr(self.sampler, "set_epoch"):
                self.sampler.set_epoch(epoch)
            if self._streamed:
                return _chunked(iter(self.sampler), self._n, self.batch_size, self.drop_last)
            order = _as_indices(self.sampler, self._n, "sampler")
        elif self.order == "random":
            order = permutation(self._n, self.seed, epoch)
        elif self.order == "quasi_random":
            order = _check_indices(quasi_random(self.data.page_starts(), self._n, self.seed, epoch), self._n, "page_starts()")
        else:
            order = np.arange(self._n, dtype=np.intp)
        return split_batches(shard(order, self.rank, self.world_size, self.drop_last), self.batch_size, self.drop_last)

    def __len__(self) -> int:
        """The exact number of batches this rank gets in one epoch (of the data as it is now)."""
        if self._streamed:
            raise TypeError("len() is unknown: the sampler has no __len__ (it is read as the batches are loaded)")
        if self.batch_sampler is not None:
            return math.ceil(len(self.batch_sampler) / self.world_size)  # type: ignore[arg-type]
        n = len(self.sampler) if self.sampler is not None else numobs(self.data)  # type: ignore[arg-type]
        share = n // self.world_size if self.drop_last else math.ceil(n / self.world_size)
        return num_batches(share, self.batch_size, self.drop_last)

    # -- jobs ------------------------------------------------------------------------------
    def _chunk(self, n: int) -> int:
        if self.workers == 0 or self._reader.batched:
            return max(n, 1)
        if self._reader.vectorized:
            return max(1, math.ceil(n / self.workers))
        return max(1, math.ceil(n / (4 * self.workers)))

    def _empty_batch(self, indices: np.ndarray, info: BatchInfo, job: Job) -> Job | None:
        """``job`` failed with the error of an empty batch, when ``indices`` is one and the collate is
        the default (``default_collate([])`` refuses it too; one rule whether or not the buffers have
        a shape yet). It is that batch's own error: the epoch goes on past it with ``keep_going``."""
        if len(indices) or self.collate is not None:
            return None
        job.fail(0, ValueError(
            f"slipstream: {info} is empty (the batch_sampler gave no indices): the default collate needs a "
            "sample; drop empty batches from the sampler, or pass collate= to make something of them"
        ))
        return job

    def _job(self, indices: np.ndarray, info: BatchInfo) -> Job:
        empty = self._empty_batch(indices, info, Job([], lambda: None, tag=info.batch))
        if empty is not None:
            return empty
        reader, n, k = self._reader, len(indices), info.batch
        step = self._chunk(n)
        starts = range(0, n, step) if n else range(0)
        pool = self._pool
        if pool is not None:  # the default collate: straight into a reused buffer
            storage = pool.acquire(n)
            tasks = [(lambda a=a: reader.read(storage, a, indices[a : a + step], info)) for a in starts]
            return Job(tasks, lambda: pool.spec.build(storage, n), tag=k)
        parts: list[list[Any]] = [[] for _ in starts]

        def fetch(p: int, a: int) -> None:
            parts[p] = reader.samples(indices[a : a + step], info)

        collate = self.collate
        if collate is None:  # the default collate, before the buffers have a shape: see _shape
            return Job([(lambda p=p, a=a: fetch(p, a)) for p, a in enumerate(starts)], lambda: _Unshaped(_join(parts), indices, info), tag=k)
        return Job([(lambda p=p, a=a: fetch(p, a)) for p, a in enumerate(starts)], lambda: collated(collate, _join(parts), info), tag=k)

    def _publish(self, pool: SlotPool) -> None:
        """Make ``pool`` the loader's batch buffers, unless it has some already (once per loader)."""
        with self._lock:
            if self._pool is None:
                self._reader.spec = pool.spec  # before the pool is published: in-place reads need it
                self._pool = pool

    def _shape(self, unshaped: _Unshaped) -> Any:
        """The batch of samples read before the buffers had a shape: written into a buffer shaped
        from the first of them (in the consumer's thread, so the first batch handed out decides).
        The buffers become the loader's only once the whole batch fits them: a batch that fails
        shapes nothing (the next one handed out does)."""
        samples, indices = unshaped.samples, unshaped.indices
        pool = self._pool
        fresh = pool is None
        if fresh:
            pool = self._slot_pool(Spec.of(samples[0]))  # (never empty: see _empty_batch)
        storage = pool.acquire(len(samples))
        for j, (i, sample) in enumerate(zip(indices.tolist(), samples)):
            pool.spec.write(storage, j, sample, f"sample {i} ({unshaped.info})")
        if fresh:
            self._publish(pool)
        return pool.spec.build(storage, len(samples))

    @property
    def _remote(self) -> bool:
        return self.backend == "process" and self.workers > 0

    def _slot_pool(self, spec: Spec) -> SlotPool:
        if not self._remote:
            return SlotPool(spec, self.batch_size, capacity=self.prefetch + 4)
        from .procexec import shared_arrays

        self._spec_key = secrets.randbits(62)
        return SlotPool(spec, self.batch_size, capacity=self.prefetch + 4, allocate=shared_arrays)

    # -- process workers -------------------------------------------------------------------
    def _worker_pool(self) -> Any:
        """The persistent process pool: started at the first iter(), replaced if it broke."""
        from .procexec import LoaderPayload
        from ..workers.pool import WorkerPool

        pool = self._processes
        if pool is not None and (pool.closed or self._processes_seed != self.seed):
            self.close()
            pool = None
        if pool is None:
            pool = WorkerPool(
                LoaderPayload(self.data, self.collate),
                self.workers,
                context=self.mp_context,
                worker_init=self.worker_init,
                seed=self.seed,
                name="slipstream",
                timeout=self.timeout,
            )
            self._processes, self._processes_seed = pool, self.seed
            self._close_processes = weakref.finalize(self, pool.retire)  # its iterators hold the loader anyway
        return pool

    def _remote_job(self, indices: np.ndarray, info: BatchInfo) -> Any:
        from .procexec import RemoteJob, collate_task, read_task, samples_task

        empty = self._empty_batch(indices, info, RemoteJob(info.batch, [], None, lambda results: None))
        if empty is not None:
            return empty
        n, k = len(indices), info.batch
        args = (info.seed, info.epoch, k)
        slots = self._pool
        if slots is None and self.collate is not None:  # the user's collate runs in the worker, on the whole batch
            return RemoteJob(k, [(collate_task, (indices, *args), {})], None, lambda results: results[0])
        step = self._chunk(n)
        starts = list(range(0, n, step)) if n else []
        if slots is None:  # the default collate, before the buffers have a shape: see _shape
            calls = [(samples_task, (indices[a : a + step], *args), {}) for a in starts]
            return RemoteJob(k, calls, None, lambda results: _Unshaped(_join(results), indices, info))
        storage = slots.acquire(n)
        spec, segment = slots.spec, storage.segment
        extras = {"objects": [(self._spec_key, spec)], "segments": [segment]}
        where = (self._spec_key, segment.key, storage.offsets, storage.rows)
        calls = [(read_task, (*where, a, indices[a : a + step], *args), extras) for a in starts]

        def finish(results: list[Any]) -> Any:
            for a, objects in zip(starts, results):
                for slot, values in (objects or {}).items():
                    storage[slot][a : a + len(values)] = values
            return spec.build(storage, n)

        return RemoteJob(k, calls, storage, finish)

    def _release_workers(self) -> None:
        """Let the next ``iter()`` start fresh worker processes (with the data as it is then); the
        current ones finish serving the iterators that use them, then stop."""
        pool, self._processes = self._processes, None
        if pool is not None:
            self._close_processes.detach()
            pool.retire()

    def close(self) -> None:
        """Stop the persistent worker processes and release the shared batch buffers (batches still
        held stay valid). A later ``iter()`` starts new workers. Idempotent."""
        pool, self._processes = self._processes, None
        if pool is not None:
            self._close_processes.detach()
            pool.close()
        if self._remote and self._pool is not None:
            self._pool.clear()

    def __enter__(self) -> DataLoader:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _jobs(self, batches: list[np.ndarray], progress: _Progress, stop: threading.Event) -> Iterator[Job]:
        return (self._job(b, BatchInfo(self.seed, progress.epoch, k, stop)) for k, b in self._todo(batches, progress))

    @staticmethod
    def _todo(batches: list[np.ndarray] | Iterator[np.ndarray], progress: _Progress) -> Iterator[tuple[int, np.ndarray]]:
        """The batches still to load, numbered: what was handed out before this iterator started is
        skipped (progress itself moves on as batches go out; the set is copied now)."""
        first, done = progress.batch, frozenset(progress.done)
        if isinstance(batches, list):
            return ((k, batches[k]) for k in range(first, len(batches)) if k not in done)
        return ((k, b) for k, b in enumerate(batches) if k >= first and k not in done)

    # -- iteration and state ---------------------------------------------------------------
    def __iter__(self, *, keep_going: bool = False) -> _LoaderIterator:
        """The next epoch's iterator. Safe from several threads at once: each gets its own epoch.

        An exception raised while loading a batch (by the data or the collate) is raised by the
        ``next()`` that reaches that batch, and ends the epoch; ``loader.__iter__(keep_going=True)``
        instead goes on with the following batches at the next ``next()``, as torch's iterator does
        (the failed batch counts as handed out in ``state_dict()``). A timeout or a dead worker
        ends the epoch either way."""
        with self._lock:
            self._n = numobs(self.data)  # a container may grow or shrink between epochs (a replay buffer)
            epoch = self._epoch
            batches = self._batches(epoch)  # first: a sampler that fails leaves the loader's state as it was
            progress = _Progress(epoch, self._skip, self._done, len(batches) if isinstance(batches, list) else None)
            self._epoch, self._skip, self._done = epoch + 1, 0, frozenset()
            self._progress = progress
            stop = threading.Event()  # readers see it between samples once the iterator is closed
            return _LoaderIterator(self, self._executor(batches, progress, stop, keep_going), progress, stop, keep_going)

    def _executor(
        self, batches: list[np.ndarray] | Iterator[np.ndarray], progress: _Progress, stop: threading.Event, keep_going: bool = False
    ) -> Any:
        epoch = progress.epoch
        if self._remote:
            from .procexec import ProcessExecutor

            pool = self._worker_pool()
            remote = (self._remote_job(b, BatchInfo(self.seed, epoch, k, stop)) for k, b in self._todo(batches, progress))
            return ProcessExecutor(pool, remote, self.prefetch, self.in_order, self.timeout, _batch_name(epoch), keep_going)
        jobs = self._jobs(batches, progress, stop)
        if self.workers == 0:
            return InlineExecutor(jobs, keep_going)
        else:
            executor: Any = ThreadExecutor(
                jobs,
                self.workers,
                self.prefetch,
                self.in_order,
                name=f"slipstream-e{epoch}",
                init=_thread_init(self.worker_init, self.workers, self.seed),
                timeout=self.timeout,
                describe=_batch_name(epoch),
                keep_going=keep_going,
            )
        return executor

    def state_dict(self) -> dict[str, Any]:
        """Where the run stands: a small JSON-serializable dict (see ``load_state_dict``).

        ``epoch`` and ``batch`` say how far the most recent iterator got (even after leaving the
        loop early): batches ``0..batch-1`` of that epoch were handed out. With
        ``in_order=False`` a few later batches may have overtaken the rest; ``done_ahead`` lists
        them (at most ``prefetch``), so they are not loaded twice.
        """
        progress = self._progress
        if progress is None:
            epoch, batch, done = self._epoch, self._skip, self._done
        elif progress.finished:
            epoch, batch, done = progress.epoch + 1, 0, frozenset()
        else:
            epoch, batch, done = progress.epoch, progress.batch, frozenset(progress.done)
        return {
            "version": _STATE_VERSION,
            "seed": self.seed,
            "epoch": epoch,
            "batch": batch,
            "done_ahead": sorted(done),
            "num_observations": self._n,
            "world_size": self.world_size,
            "rank": self.rank,
            "batch_size": self.batch_size,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Continue from ``state``: the next ``iter()`` yields the rest of that epoch, then the epochs after it.

        The loader must be built over the same data with the same batching and sharding; any
        difference the state can detect raises ``ValueError``.
        """
        if not isinstance(state, dict):
            raise TypeError(f"state must be a dict from state_dict(), got {type(state).__name__}")
        missing = {"version", "seed", "epoch", "batch"} - state.keys()
        if missing:
            raise ValueError(f"state lacks {sorted(missing)}: expected the dict that state_dict() returned")
        if state["version"] != _STATE_VERSION:
            raise ValueError(f"state version {state['version']} is not supported (expected {_STATE_VERSION})")
        mine = {"num_observations": self._n, "world_size": self.world_size, "rank": self.rank, "batch_size": self.batch_size}
        for key, value in mine.items():
            if key in state and state[key] != value:
                raise ValueError(f"state was saved with {key}={state[key]} but this loader has {key}={value}")
        self.seed = _check_int("state['seed']", state["seed"], 0)
        self._epoch = _check_int("state['epoch']", state["epoch"], 0)
        self._skip = _check_int("state['batch']", state["batch"], 0)
        self._done = frozenset(_check_int("state['done_ahead'][k]", k, self._skip + 1) for k in state.get("done_ahead", []))
        self._progress = None

    def __repr__(self) -> str:
        return (
            f"DataLoader({self._n} observations, batch_size={self.batch_size}, shuffle={self.shuffle}, "
            f"workers={self.workers}, rank={self.rank}/{self.world_size})"
        )


class _Progress:
    """How far one epoch's iterator got: batches ``0..batch-1`` and ``done`` were handed out."""

    __slots__ = ("epoch", "batch", "done", "total")

    def __init__(self, epoch: int, batch: int, done: frozenset[int], total: int | None):
        self.epoch, self.total = epoch, total  # total: None until a streamed epoch ends
        self.batch = batch if total is None else min(batch, total)
        self.done = set(done)

    @property
    def finished(self) -> bool:
        return self.total is not None and self.batch >= self.total

    def ended(self) -> None:
        """The epoch's iterator ran out: every batch was handed out."""
        if self.total is None:
            self.total = self.batch

    def handed_out(self, k: int) -> None:
        if k == self.batch:
            self.batch += 1
            while self.batch in self.done:
                self.done.discard(self.batch)
                self.batch += 1
        else:
            self.done.add(k)


def _shut(stop: threading.Event, executor: Any) -> None:
    stop.set()  # readers stop between samples
    executor.close()


class _Unshaped:
    """A batch's samples, read before the loader's buffers had a shape (see ``DataLoader._shape``)."""

    __slots__ = ("samples", "indices", "info")

    def __init__(self, samples: list[Any], indices: np.ndarray, info: BatchInfo):
        self.samples, self.indices, self.info = samples, indices, info


def _join(parts: list[list[Any]]) -> list[Any]:
    return [s for part in parts for s in part]


class _LoaderIterator:
    """One epoch of a loader. Stops its workers on ``close()``, exhaustion, an error, or garbage collection.

    It holds its loader: a loader nobody else references lives (with its worker processes and
    buffers) as long as one of its iterators does."""

    def __init__(self, loader: DataLoader, executor: Any, progress: _Progress, stop: threading.Event, keep_going: bool = False):
        self._loader = loader
        self._keep_going = keep_going
        self._executor = executor
        self._progress = progress
        self._close = weakref.finalize(self, _shut, stop, executor)
        self._close.atexit = False  # the executors' own exit hook stops them without long waits

    @property
    def epoch(self) -> int:
        return self._progress.epoch

    def __iter__(self) -> _LoaderIterator:
        return self

    def __next__(self) -> Any:
        executor = self._executor
        try:
            batch = next(executor)
        except StopIteration:
            self._progress.ended()
            self._close()
            raise
        except BaseException:
            tag, executor.failed_tag = executor.failed_tag, None
            self._failed(tag)
            raise
        if type(batch) is _Unshaped:
            try:
                batch = self._loader._shape(batch)
            except BaseException:
                self._failed(executor.last_tag)
                raise
        self._progress.handed_out(executor.last_tag)
        return batch

    def _failed(self, tag: Any) -> None:
        """A ``next()`` is raising: the epoch ends, unless this iterator keeps going and the error
        is batch ``tag``'s own (None: it is not); then that batch counts as handed out."""
        if self._keep_going and tag is not None:
            self._progress.handed_out(tag)
        else:
            self._close()

    def __len__(self) -> int:
        """Batches left in this epoch (TypeError when the sampler has no ``__len__``)."""
        progress = self._progress
        if progress.total is None:
            raise TypeError("len() is unknown: the sampler has no __len__")
        return progress.total - progress.batch - len(progress.done)

    def close(self) -> None:
        """Stop loading: background threads exit (a sample already being read finishes first)."""
        self._close()

    def __enter__(self) -> _LoaderIterator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
