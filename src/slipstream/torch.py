"""``slipstream.torch.DataLoader``: a drop-in for ``torch.utils.data.DataLoader``, loaded by slipstream.

    from slipstream.torch import DataLoader   # instead of: from torch.utils.data import DataLoader

It takes torch's signature unchanged (``dataset, batch_size=1, shuffle=None, sampler=None,
batch_sampler=None, num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
worker_init_fn=None, multiprocessing_context=None, generator=None, *, prefetch_factor=None,
persistent_workers=False, pin_memory_device='', in_order=True``), plus keyword-only extras:

* ``backend``: None (the default: worker *processes* when ``num_workers > 0``, as torch) or
  ``"process"``; ``"thread"`` loads in worker threads instead (best when the samples' work
  releases the GIL: decoding, NumPy, I/O).
* ``device``: None or ``"cpu"`` (nothing is moved), or a CUDA device: each batch is copied there
  on a side CUDA stream one batch ahead of the consumer (``non_blocking``, ``pin_memory`` first if
  asked), so the copy overlaps the training step. A CUDA device without CUDA raises RuntimeError.
* ``seed``: None keeps torch's shuffling exactly (below). An int makes ``shuffle=True`` use
  slipstream's own permutation, a pure function of ``(seed, epoch)`` that ignores torch's RNGs, and
  seeds ``ss.sample_rng()``.

It *is* a ``torch.utils.data.DataLoader`` (a subclass), so ``isinstance`` checks, ``len()``, the
``sampler``/``batch_sampler``/``collate_fn`` attributes and argument validation (same exception
types and messages, done by torch's own constructor) are torch's.

What matches torch exactly, batch by batch:

* map-style datasets: the indices come from torch's own samplers (``self.batch_sampler``, i.e.
  ``BatchSampler(SequentialSampler | RandomSampler(generator=generator) | sampler)``, or the
  ``batch_sampler`` given), drawn in the same order from the same RNGs as torch (one base-seed draw
  per ``iter()``, then the sampler), so with ``seed=None`` even ``shuffle=True`` gives torch's
  permutation for the same ``generator`` or ``torch.manual_seed``;
* the batches equal ``default_collate``'s (types, values, dtypes, shapes, nesting): tensors,
  ndarrays, NumPy scalars (their dtype), Python ``int`` -> int64, ``float`` -> float64, ``bool``
  -> bool, strings and bytes -> the list torch gives (a tuple inside a tuple or list sample, as
  torch's ``zip`` makes), dicts (other mappings cloned as torch clones them), namedtuples, tuples
  -> lists (as torch), lists, and any nesting of those. Samples the buffers cannot reproduce
  (``None``, bfloat16 or ``requires_grad`` tensors, tensor subclasses, custom sequences, string
  arrays, ...) are collated by torch's ``default_collate`` itself, errors included;
* ``collate_fn`` receives what torch gives it: the list of samples, or ``__getitems__``'s return
  value as it is when the dataset has ``__getitems__``; ``batch_size=None`` gives
  ``collate_fn(dataset[i])`` per index (``default_convert`` by default), as torch;
* ``IterableDataset``: with ``num_workers=0`` the dataset is iterated, batched and collated as
  torch does (``batch_size=None``, ``drop_last``, ``len()``'s warning). With ``num_workers > 0``
  (processes) each worker iterates its own copy, sees ``torch.utils.data.get_worker_info()`` as
  torch's workers do (``id``, ``num_workers``, ``seed = base_seed + id``, its ``dataset`` copy),
  batches and collates in the worker, and batches are taken round-robin from the workers,
  skipping a worker that has ended: torch's order. ``persistent_workers`` keeps the same worker
  processes (and dataset copies) across epochs, as torch;
* worker processes are seeded as torch seeds them (``random``, ``torch`` and NumPy's global
  generators from ``base_seed + worker_id``), ``worker_init_fn(worker_id)`` runs in each with
  ``get_worker_info()`` set (map-style datasets too), and ``multiprocessing_context`` picks the
  start method;
* ``pin_memory=True`` pins the batches (torch's ``pin_memory`` walk) when an accelerator is
  available; without one it warns once, as torch does, and does nothing.

What differs:

* Default-collated batches of map-style datasets are written straight into a few reused NumPy
  buffers (shared memory with worker processes) and handed out as tensors viewing them
  (``torch.from_numpy``, no copy). A buffer is reused only once nothing references any tensor of
  its batch, so a batch you keep is never overwritten; dropping each batch when done lets the
  loader run without allocating, while keeping many makes it allocate new buffers.
* The fast path shapes its buffers from sample 0 (read once at the first ``iter()``: by a worker
  process with process workers, so the parent never reads the data; else in the calling thread,
  without disturbing torch's, NumPy's or Python's global RNG), and every sample
  must then match sample 0's structure, shapes and dtypes (a mismatch raises ``TypeError`` or
  ``ValueError`` naming the sample). torch decides per batch from the batch's first sample, so
  datasets whose samples change type (an ``int`` here, a ``float`` there) can be collated by
  torch where slipstream raises. Malformed batches raise in both, sometimes with other types.
* ``sampler``/``batch_sampler`` are drawn whole at the first ``next()`` of each epoch (torch
  draws them lazily), so they must be finite, and their indices must be integers in
  ``range(len(dataset))`` (passed to the dataset as Python ints).
* Map-style worker processes (and threads) persist across epochs whatever
  ``persistent_workers`` says, and are seeded once, from the first epoch's base seed; torch
  restarts and reseeds non-persistent workers every epoch. Random augmentations drawn from the
  global RNGs therefore match torch's with ``num_workers=0`` only (with workers, which worker
  loads which sample differs from torch). ``ss.sample_rng()`` gives per-sample randomness that
  is the same with any number of workers.
* ``backend="thread"``: ``get_worker_info()`` stays None in worker threads (torch's is one
  process-wide value), so an ``IterableDataset`` with ``num_workers > 0`` needs processes and
  raises ``ValueError`` here; ``worker_init_fn`` runs once per thread per epoch; samples that
  draw from the global RNGs draw from the main process's (torch's workers draw from their own).
* ``timeout`` raises ``TimeoutError`` (for an ``IterableDataset``, ``DataLoaderTimeoutError``,
  also a ``RuntimeError``, which is what torch raises); a dead worker raises ``ss.WorkerError`` (a
  ``RuntimeError``, as torch's). An exception raised while loading ends the epoch's iterator
  (torch's can be resumed past it).
* Batches of an ``IterableDataset`` come back from worker processes pickled (a copy), not
  through torch's shared-memory tensors.
* ``pin_memory_device`` is accepted and ignored (deprecated in torch); ``timeout`` is accepted
  with ``num_workers=0`` (torch fails at ``iter()``); DataPipes get no special treatment.

``close()`` (or ``with DataLoader(...) as loader:``) stops the worker processes at once; they are
also stopped when the loader is garbage collected or the interpreter exits.
"""

from __future__ import annotations

import copy
import itertools
import random
import warnings
import weakref
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch
import torch.utils.data as _tud
from torch.utils.data._utils import worker as _tworker

from ._loader import DataLoader as _SSLoader

__all__ = ["DataLoader", "DataLoaderTimeoutError"]

_BACKENDS = ("process", "thread")

# NumPy dtypes that ``torch.from_numpy`` turns into the tensor dtype default_collate gives
_ARRAY_DTYPES = frozenset(
    np.dtype(t)
    for t in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
    + (np.float16, np.float32, np.float64, np.complex64, np.complex128)
)
# torch.as_tensor([np.uint64(...), ...]) raises in torch, so those scalars go to torch's collate
_SCALAR_DTYPES = _ARRAY_DTYPES - {np.dtype(np.uint64)}
_TENSOR_DTYPES = frozenset(
    (torch.bool, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.uint16, torch.uint32)
    + (torch.uint64, torch.float16, torch.float32, torch.float64, torch.complex64, torch.complex128)
)
_NO_ACCELERATOR = "'pin_memory' argument is set as true but no accelerator is found, then device pinned memory won't be used."


class DataLoaderTimeoutError(TimeoutError, RuntimeError):
    """No batch within ``timeout`` seconds (an ``IterableDataset`` in worker processes); a
    ``RuntimeError`` too, which is what torch raises."""


# -- converting slipstream's default-collated batches to torch's ------------------------------

Convert = Callable[[Any], Any]


def _as_tensor(array: np.ndarray) -> torch.Tensor:
    # zero copy: the tensor keeps the batch buffer (and so its slot) reserved while it lives
    return torch.from_numpy(array) if array.flags.writeable else torch.tensor(array)


def _keep(value: Any) -> Any:
    return value


def _plan(sample: Any, in_sequence: bool = False) -> Convert | None:
    """How to turn slipstream's default collation of samples shaped like ``sample`` into exactly
    what torch's ``default_collate`` returns; None when slipstream's buffers cannot reproduce it
    (the loader then collates with torch's ``default_collate`` itself).

    ``in_sequence``: the sample is a member of a tuple or list. torch hands strings back in the
    container it was given: the batch's list at the top and in a mapping, but ``zip``'s tuple in
    a sequence."""
    kind = type(sample)
    if kind is torch.Tensor:  # subclasses keep their own stacking rules: torch's collate
        ok = (
            sample.layout is torch.strided
            and not sample.is_nested
            and not sample.requires_grad
            and sample.device.type == "cpu"
            and sample.dtype in _TENSOR_DTYPES
            and not sample.is_conj()
            and not sample.is_neg()
        )
        return _as_tensor if ok else None
    if kind is np.ndarray or kind is np.memmap:
        return _as_tensor if sample.dtype in _ARRAY_DTYPES else None
    if isinstance(sample, (np.bool_, np.number)):
        return _as_tensor if sample.dtype in _SCALAR_DTYPES else None
    if isinstance(sample, (str, bytes)):  # np.str_ and np.bytes_ too
        return tuple if in_sequence else _keep
    if kind in (bool, int, float):
        return _as_tensor
    if isinstance(sample, Mapping):
        return _plan_mapping(sample)
    if isinstance(sample, tuple):
        members = [_plan(v, True) for v in sample]
        if any(m is None for m in members):
            return None
        if hasattr(sample, "_fields"):  # namedtuple: slipstream rebuilds the type
            return lambda batch: kind(*(m(v) for m, v in zip(members, batch)))
        return lambda batch: [m(v) for m, v in zip(members, batch)]  # torch turns tuples into lists
    if isinstance(sample, list):
        members = [_plan(v, True) for v in sample]
        if any(m is None for m in members):
            return None
        if kind is list:
            return lambda batch: [m(v) for m, v in zip(members, batch)]
        proto = copy.copy(sample)  # torch clones a list subclass and fills the clone
        for i in range(len(proto)):
            proto[i] = None

        def clone_list(batch: Any) -> Any:
            out = copy.copy(proto)
            for i, (m, v) in enumerate(zip(members, batch)):
                out[i] = m(v)
            return out

        return clone_list
    return None


def _plan_mapping(sample: Mapping) -> Convert | None:
    members = {k: _plan(v) for k, v in sample.items()}
    if any(m is None for m in members.values()):
        return None
    items = list(members.items())
    if type(sample) is dict:
        return lambda batch: {k: m(batch[k]) for k, m in items}
    kind = type(sample)
    proto: Any = None
    if isinstance(sample, MutableMapping):
        try:  # torch: clone = copy.copy(first_sample); clone.update(collated)
            proto = copy.copy(sample)
            proto.update({k: None for k in members})
        except TypeError:
            proto = None

    def clone_mapping(batch: Any) -> Any:
        values = {k: m(batch[k]) for k, m in items}
        try:
            if proto is not None:
                out = copy.copy(proto)
                out.update(values)
                return out
            return kind(values)
        except TypeError:
            return values

    return clone_mapping


# -- how slipstream sees a torch dataset -------------------------------------------------------

# The process workers' copies of the datasets, by token, for ``get_worker_info().dataset``: a copy
# registers itself when unpickled (spawn, forkserver) or is inherited with this module (fork).
_DATASETS: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
_tokens = itertools.count()


def _restore(cls: type, dataset: Any, token: int) -> Any:
    return cls(dataset, token)


class _Dataset:
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


class _ManyDataset(_Dataset):
    """... with the dataset's ``__getitems__`` (torch calls it for every batch when present)."""

    def __getitems__(self, indices: list[int]) -> Any:
        return self.dataset.__getitems__(indices)


class _BatchIntoDataset(_Dataset):
    """... keeping a packed file's vectorized reads (``getobs_batch_into``: whole chunks of a batch
    decoded into the batch buffer, the same values its ``__getitem__`` gives)."""

    def getobs_batch_into(self, buffer: Any, indices: Any) -> Any:
        return self.dataset.getobs_batch_into(buffer, indices)


class _Whole:
    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


class _WholeDataset(_Dataset):
    """... with ``__getitems__``'s return value passed whole to the user's collate_fn (torch does
    not require it to be a list of samples): slipstream sees one wrapped value and placeholders."""

    def __getitems__(self, indices: list[int]) -> list[Any]:
        return [_Whole(self.dataset.__getitems__(indices)), *([None] * (len(indices) - 1))]


class _WholeCollate:
    def __init__(self, collate_fn: Callable[[Any], Any]):
        self.collate_fn = collate_fn

    def __call__(self, samples: list[Any]) -> Any:
        parts = [s.value for s in samples if type(s) is _Whole]
        if len(parts) == 1:
            return self.collate_fn(parts[0])
        return self.collate_fn([s for part in parts for s in part])  # one batch read in chunks


class _CollateOne:
    """``batch_size=None``: torch gives ``collate_fn(dataset[i])`` (no batching)."""

    def __init__(self, collate_fn: Callable[[Any], Any]):
        self.collate_fn = collate_fn

    def __call__(self, samples: list[Any]) -> Any:
        return self.collate_fn(samples[0])


class _EpochBatches:
    """The epoch's batches of indices, drawn from torch's sampler before slipstream iterates them
    (and no ``set_epoch``: torch leaves that to the user)."""

    def __init__(self) -> None:
        self.batches: list[list[int]] = []

    def __iter__(self) -> Iterator[list[int]]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


# -- what worker processes run -----------------------------------------------------------------


def _seed_like_torch(base_seed: int, worker_id: int) -> int:
    """Seed the global RNGs as torch's worker loop does; returns the worker's seed."""
    seed = base_seed + worker_id
    random.seed(seed)
    torch.manual_seed(seed)
    generate = getattr(_tworker, "_generate_state", None)
    np.random.seed(generate(base_seed, worker_id) if generate is not None else seed % 2**32)
    return seed


def _set_torch_worker_info(worker_id: int, num_workers: int, seed: int, dataset: Any) -> None:
    _tworker._worker_info = _tworker.WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed, dataset=dataset)


class _MapWorkerInit:
    """``worker_init`` for slipstream's process workers (map-style datasets): torch's seeding and
    ``get_worker_info()``, then the user's ``worker_init_fn``."""

    def __init__(self, token: int, base_seed: int, num_workers: int, worker_init_fn: Callable[[int], Any] | None):
        self.token, self.base_seed, self.num_workers, self.worker_init_fn = token, base_seed, num_workers, worker_init_fn

    def __call__(self, worker_id: int) -> None:
        torch.set_num_threads(1)
        seed = _seed_like_torch(self.base_seed, worker_id)
        adapter = _DATASETS.get(self.token)
        _set_torch_worker_info(worker_id, self.num_workers, seed, None if adapter is None else adapter.dataset)
        if self.worker_init_fn is not None:
            self.worker_init_fn(worker_id)


class _IterablePayload:
    """What each worker process holds for an ``IterableDataset``: sent once (inherited with fork),
    so lambdas work as ``collate_fn``/``worker_init_fn`` with fork, as in torch."""

    def __init__(self, dataset: Any, collate_fn: Any, worker_init_fn: Any, batch_size: int | None, drop_last: bool):
        self.dataset, self.collate_fn, self.worker_init_fn = dataset, collate_fn, worker_init_fn
        self.batch_size, self.drop_last = batch_size, drop_last


class _Ended:
    """A worker's iterator is exhausted (torch's ``_IterableDatasetStopIteration``)."""


class _Fetcher:
    """Batches of an iterator as torch's ``_IterableDatasetFetcher`` makes them: ``batch_size``
    items (None: one item, not batched), the last batch short unless ``drop_last``, and the
    iterator not touched again once it has ended."""

    def __init__(self, iterator: Iterator[Any], batch_size: int | None, drop_last: bool, collate_fn: Callable[[Any], Any]):
        self.iterator, self.batch_size, self.drop_last, self.collate_fn = iterator, batch_size, drop_last, collate_fn
        self.ended = False

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


def _iterable_begin(state: Any, epoch: int, base_seed: int) -> None:
    """Start an epoch in this worker: set up the worker (first time only), then ``iter(dataset)``."""
    payload: _IterablePayload = state.payload
    cache = state.cache
    cache.pop("iterator", None)
    if "torch-worker" not in cache:  # once per process: persistent workers are set up once, as in torch
        cache["torch-worker"] = True
        torch.set_num_threads(1)
        seed = _seed_like_torch(base_seed, state.id)
        _set_torch_worker_info(state.id, state.num_workers, seed, payload.dataset)
        if payload.worker_init_fn is not None:
            payload.worker_init_fn(state.id)
    cache["iterator"] = (epoch, _Fetcher(iter(payload.dataset), payload.batch_size, payload.drop_last, payload.collate_fn))


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


# -- the parent's helpers ------------------------------------------------------------------------


@contextmanager
def _rng_untouched() -> Iterator[None]:
    """Run a read that torch would not do (shaping buffers from sample 0) without moving the global
    RNGs, so the samplers and samples that follow draw what they would draw under torch."""
    torch_state = torch.random.get_rng_state()
    py_state = random.getstate()
    np_state = np.random.get_state()
    try:
        yield
    finally:
        torch.random.set_rng_state(torch_state)
        random.setstate(py_state)
        np.random.set_state(np_state)


def _accelerator_available() -> bool:
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and hasattr(accelerator, "is_available"):
        return bool(accelerator.is_available())
    return torch.cuda.is_available()


def _pin(batch: Any) -> Any:
    return _tud._utils.pin_memory.pin_memory(batch)


def _move(batch: Any, device: torch.device) -> Any:
    """``batch`` with every tensor copied to ``device`` (non-blocking), in the same nesting."""
    if isinstance(batch, torch.Tensor):
        return batch.to(device, non_blocking=True)
    if isinstance(batch, (str, bytes)):
        return batch
    if isinstance(batch, Mapping):
        values = {k: _move(v, device) for k, v in batch.items()}
        if type(batch) is dict:
            return values
        try:
            out = copy.copy(batch)
            out.update(values)  # type: ignore[attr-defined]
            return out
        except (TypeError, AttributeError):
            return values
    if isinstance(batch, tuple):
        moved = [_move(v, device) for v in batch]
        return type(batch)(*moved) if hasattr(batch, "_fields") else type(batch)(moved)
    if isinstance(batch, list):
        return [_move(v, device) for v in batch]
    return batch


def _tensors(batch: Any) -> Iterator[torch.Tensor]:
    if isinstance(batch, torch.Tensor):
        yield batch
    elif isinstance(batch, Mapping):
        for v in batch.values():
            yield from _tensors(v)
    elif isinstance(batch, (list, tuple)):
        for v in batch:
            yield from _tensors(v)


def _to_cuda(source: Iterator[Any], device: torch.device) -> Iterator[Any]:
    """Copy each batch to ``device`` on a side stream, one batch ahead of the consumer.

    The copy of batch ``k+1`` is queued on the side stream before batch ``k`` is handed out, so it
    overlaps the consumer's work on ``k``. Before a batch is handed out, the consumer's current
    stream waits for the side stream (a GPU-side wait, no host sync), and each of its tensors is
    ``record_stream``-ed on the consumer's stream, so the caching allocator does not reuse its
    memory while work queued on that stream may still read it. The host batch is kept until its
    copy has finished (an event), so a reused host buffer is never overwritten mid-copy.
    """
    stream = torch.cuda.Stream(device=device)

    def issue(host: Any) -> tuple[Any, Any, Any]:
        with torch.cuda.stream(stream):
            moved = _move(host, device)
            done = torch.cuda.Event()
            done.record(stream)
        return host, moved, done

    try:
        try:
            ahead = issue(next(source))
        except StopIteration:
            return
        while True:
            host, moved, done = ahead
            current = torch.cuda.current_stream(device)
            current.wait_stream(stream)
            for tensor in _tensors(moved):
                if tensor.device.type == "cuda":
                    tensor.record_stream(current)
            try:
                ahead = issue(next(source))
            except StopIteration:
                ahead = None
            done.synchronize()  # the copy out of ``host`` is complete: its buffer may be reused
            del host
            yield moved
            if ahead is None:
                return
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()


def _to_device(source: Iterator[Any], device: torch.device) -> Iterator[Any]:
    try:
        for batch in source:
            yield _move(batch, device)
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()


def _pinned(source: Iterator[Any]) -> Iterator[Any]:
    try:
        for batch in source:
            yield _pin(batch)
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()


class _LoaderIter(Iterator[Any]):
    """One epoch of a ``DataLoader``: ``next()``, ``len()`` (as torch's iterator) and ``close()``."""

    def __init__(self, loader: DataLoader, source: Iterator[Any]):
        self._loader = loader
        self._source = source
        self._yielded = 0
        self._iterable = loader._dataset_kind == _tud.dataloader._DatasetKind.Iterable
        self._len_called = loader._IterableDataset_len_called

    def __iter__(self) -> _LoaderIter:
        return self

    def __next__(self) -> Any:
        batch = next(self._source)
        self._yielded += 1
        if self._iterable and self._len_called is not None and self._yielded > self._len_called:
            message = (
                f"Length of IterableDataset {self._loader.dataset} was reported to be {self._len_called}"
                f"(when accessing len(dataloader)), but {self._yielded} samples have been fetched. "
            )
            if self._loader.num_workers > 0:
                message += (
                    "For multiprocessing data-loading, this could be caused by not properly configuring the "
                    "IterableDataset replica at each worker. Please see "
                    "https://pytorch.org/docs/stable/data.html#torch.utils.data.IterableDataset for examples."
                )
            warnings.warn(message, stacklevel=2)
        return batch

    def __len__(self) -> int:
        return len(self._loader._index_sampler)

    def close(self) -> None:
        """Stop this epoch's loading now (workers stay for the next epoch where they persist)."""
        close = getattr(self._source, "close", None)
        if close is not None:
            close()

    def __enter__(self) -> _LoaderIter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# -- the loader ----------------------------------------------------------------------------------


class DataLoader(_tud.DataLoader):
    """``torch.utils.data.DataLoader``'s interface and output, loaded by slipstream (see the module
    docstring for exactly what matches torch and what differs).

    Extra keyword-only arguments: ``backend`` (None/"process" or "thread"), ``device`` (None, "cpu"
    or a CUDA device to prefetch batches to), ``seed`` (None: torch's shuffling; an int:
    slipstream's permutation of ``(seed, epoch)``, and the seed of ``ss.sample_rng()``).
    """

    def __init__(
        self,
        dataset: Any,
        batch_size: int | None = 1,
        shuffle: bool | None = None,
        sampler: Iterable[Any] | None = None,
        batch_sampler: Iterable[list[Any]] | None = None,
        num_workers: int = 0,
        collate_fn: Callable[[Any], Any] | None = None,
        pin_memory: bool = False,
        drop_last: bool = False,
        timeout: float = 0,
        worker_init_fn: Callable[[int], Any] | None = None,
        multiprocessing_context: Any = None,
        generator: torch.Generator | None = None,
        *,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        pin_memory_device: str = "",
        in_order: bool = True,
        backend: str | None = None,
        device: str | int | torch.device | None = None,
        seed: int | None = None,
    ):
        super().__init__(
            dataset,
            batch_size,
            shuffle,
            sampler,
            batch_sampler,
            num_workers,
            collate_fn,
            pin_memory,
            drop_last,
            timeout,
            worker_init_fn,
            multiprocessing_context,
            generator,
            prefetch_factor=prefetch_factor,
            persistent_workers=persistent_workers,
            pin_memory_device=pin_memory_device,
            in_order=in_order,
        )
        if backend is not None and backend not in _BACKENDS:
            raise ValueError(f"backend must be None, 'process' or 'thread', got {backend!r}")
        chosen = backend or "process"
        iterable = self._dataset_kind == _tud.dataloader._DatasetKind.Iterable
        if num_workers > 0 and chosen == "thread":
            if iterable:
                raise ValueError(
                    "an IterableDataset with num_workers > 0 needs backend='process': each worker iterates "
                    "its own copy and tells which it is through torch.utils.data.get_worker_info(), one "
                    "process-wide value that worker threads cannot tell apart"
                )
            if multiprocessing_context is not None:
                raise ValueError("multiprocessing_context is for backend='process'; backend='thread' starts no processes")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0):
            raise ValueError(f"seed must be None or an integer >= 0, got {seed!r}")
        self.backend = chosen
        self.device = _check_device(device)
        self.seed = None if seed is None else int(seed)
        self._user_collate = collate_fn is not None
        self._shuffle = bool(shuffle) and not iterable
        self._ss: _SSLoader | None = None  # map-style: the slipstream loader, made at the first iter()
        self._convert: Convert = _keep
        self._epoch_batches = _EpochBatches()
        self._base_seed: int | None = None  # persistent workers: drawn once, as torch does
        self._iter_pool: Any = None  # IterableDataset, persistent workers: the process pool
        self._iter_epoch = 0
        self._warned_pin = False

    # -- iteration ---------------------------------------------------------------------------
    def _get_iterator(self) -> Any:  # torch's hook, in case anything calls it
        return self.__iter__()

    def __iter__(self) -> _LoaderIter:  # type: ignore[override]
        persistent = self.persistent_workers and self.num_workers > 0
        if persistent and self._base_seed is not None:
            base_seed = self._base_seed
        else:  # drawn exactly as torch draws it, so later draws (the sampler's) match torch's
            base_seed = int(torch.empty((), dtype=torch.int64).random_(generator=self.generator).item())
            self._base_seed = base_seed
        if self._dataset_kind == _tud.dataloader._DatasetKind.Iterable:
            if self.num_workers == 0:
                source: Iterator[Any] = self._iterable_inline(iter(self.dataset))
            else:
                source = self._iterable_processes(base_seed)
        else:
            source = self._map(base_seed)
        if self.pin_memory:
            if _accelerator_available():
                source = _pinned(source)
            elif not self._warned_pin:
                self._warned_pin = True
                warnings.warn(_NO_ACCELERATOR, stacklevel=2)
        if self.device is not None:
            source = _to_cuda(source, self.device) if self.device.type == "cuda" else _to_device(source, self.device)
        return _LoaderIter(self, source)

    # map-style: slipstream's loader over torch's batches
    def _map(self, base_seed: int) -> Iterator[Any]:
        loader = self._map_loader(base_seed)
        if not (self.seed is not None and self._shuffle):
            if self._auto_collation:
                self._epoch_batches.batches = [list(b) for b in self.batch_sampler]  # type: ignore[union-attr]
            else:
                self._epoch_batches.batches = [[i] for i in self.sampler]
        try:
            with _rng_untouched():  # the first iter() reads sample 0 to shape the batch buffers
                it = iter(loader)
        finally:
            self._epoch_batches.batches = []
        convert = self._convert
        try:
            if convert is _keep:
                yield from it
            else:
                for batch in it:
                    yield convert(batch)
        finally:
            it.close()

    def _map_loader(self, base_seed: int) -> _SSLoader:
        if self._ss is None:
            self._ss = self._make_map_loader(base_seed)
        return self._ss

    def _make_map_loader(self, base_seed: int) -> _SSLoader:
        dataset = self.dataset
        processes = self.num_workers > 0 and self.backend == "process"
        many = bool(getattr(dataset, "__getitems__", None))
        collate: Callable[[list[Any]], Any] | None
        adapter: type[_Dataset] | None = None
        if not self._auto_collation:  # batch_size=None: collate_fn(dataset[i]), no __getitems__
            collate = _CollateOne(self.collate_fn)
            adapter = _Dataset if (processes or many or isinstance(dataset, (tuple, Mapping))) else None
        elif self._user_collate:
            collate = self.collate_fn
            if many:
                adapter, collate = _WholeDataset, _WholeCollate(self.collate_fn)
        else:
            collate = None
            if len(dataset) > 0 and not processes:  # type: ignore[arg-type]  (processes: read in a worker, below)
                with _rng_untouched():
                    sample = dataset.__getitems__([0])[0] if many else dataset[0]  # type: ignore[index]
                plan = _plan(sample)
                del sample
                if plan is None:
                    collate = self.collate_fn  # torch's default_collate, exactly
                else:
                    self._convert = plan
        if adapter is None and (processes or isinstance(dataset, (tuple, Mapping))):
            if hasattr(dataset, "getobs_batch_into") and not many:
                adapter = _BatchIntoDataset
            else:
                adapter = _ManyDataset if many else _Dataset
        token = next(_tokens)
        data = dataset if adapter is None else adapter(dataset, token)
        if self.seed is not None:
            ss_seed = self.seed
        else:  # reproducible under torch.manual_seed / a seeded generator, drawing nothing from them
            source = self.generator if self.generator is not None else torch.default_generator
            ss_seed = source.initial_seed() % 2**63
        kwargs: dict[str, Any] = {"collate": collate, "seed": ss_seed, "in_order": self.in_order}
        if self.seed is not None and self._shuffle:  # slipstream's own permutation of (seed, epoch)
            kwargs.update(batch_size=self.batch_size or 1, shuffle=True, drop_last=self.drop_last)
        else:
            kwargs.update(batch_sampler=self._epoch_batches)
        if self.num_workers > 0:
            kwargs.update(
                workers=self.num_workers,
                prefetch=self.prefetch_factor if self.prefetch_factor is not None else 2,
                backend=self.backend,
                timeout=self.timeout or None,
            )
            if processes:
                kwargs.update(
                    worker_init=_MapWorkerInit(token, base_seed, self.num_workers, self.worker_init_fn),
                    mp_context=self.multiprocessing_context,
                )
            elif self.worker_init_fn is not None:
                kwargs.update(worker_init=self.worker_init_fn)
        loader = _SSLoader(data, **kwargs)
        if processes and collate is None and len(dataset) > 0:  # type: ignore[arg-type]
            # the parent never reads the data: sample 0 comes from a worker (after worker_init_fn), as
            # a dataset that opens files lazily or in worker_init_fn needs
            plan = _plan(loader._sample_zero())
            if plan is None:  # not one the buffers reproduce: torch's default_collate, in the workers
                loader.close()
                loader = _SSLoader(data, **{**kwargs, "collate": self.collate_fn})
            else:
                self._convert = plan
        return loader

    # IterableDataset, in this thread
    def _iterable_inline(self, iterator: Iterator[Any]) -> Iterator[Any]:
        fetcher = _Fetcher(iterator, self.batch_size if self._auto_collation else None, self.drop_last, self.collate_fn)
        while True:
            try:
                batch = fetcher.fetch()
            except StopIteration:
                return
            yield batch

    # IterableDataset, in worker processes, taken round-robin
    def _iterable_processes(self, base_seed: int) -> Iterator[Any]:
        from ._procpool import WorkerPool

        persistent = self.persistent_workers
        pool = self._iter_pool if persistent else None
        if pool is None or pool.closed:
            payload = _IterablePayload(
                self.dataset,
                self.collate_fn,
                self.worker_init_fn,
                self.batch_size if self._auto_collation else None,
                self.drop_last,
            )
            pool = WorkerPool(
                payload,
                self.num_workers,
                context=self.multiprocessing_context,
                seed=base_seed % 2**63,
                name="slipstream-torch",
            )
            if persistent:
                self._iter_pool = pool
                weakref.finalize(self, pool.close)
        self._iter_epoch += 1
        return self._round_robin(pool, self._iter_epoch, base_seed, not persistent)

    def _round_robin(self, pool: Any, epoch: int, base_seed: int, own_pool: bool) -> Iterator[Any]:
        k = self.num_workers
        ahead = self.prefetch_factor if self.prefetch_factor is not None else 2
        timeout = self.timeout or None
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
                raise DataLoaderTimeoutError(f"DataLoader timed out after {self.timeout} seconds") from None

        try:
            for w in range(k):
                begins.add(send(w, _iterable_begin, epoch, base_seed))
                for _ in range(ahead):
                    send(w, _iterable_next, epoch)
            active = [True] * k
            w = 0
            while any(active):
                if self.in_order:
                    if not active[w]:
                        w = (w + 1) % k
                        continue
                    ticket = queues[w][0]
                    ticket, ok, value = wait({ticket})
                else:
                    ticket, ok, value = wait(set(owner))
                    w = owner[ticket]
                queues[w].remove(ticket)
                del owner[ticket]
                if not ok:
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
                w = (w + 1) % k
                yield value
        finally:
            if own_pool:
                pool.close()
            elif owner and not pool.closed:
                pool.discard(list(owner))

    # -- resources -----------------------------------------------------------------------------
    def close(self) -> None:
        """Stop this loader's worker processes now (a later ``iter()`` starts new ones). Idempotent."""
        loader, self._ss = self._ss, None
        if loader is not None:
            loader.close()
        pool, self._iter_pool = self._iter_pool, None
        if pool is not None:
            pool.close()

    def __enter__(self) -> DataLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _check_device(device: str | int | torch.device | None) -> torch.device | None:
    if device is None:
        return None
    try:
        chosen = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device must be None, 'cpu' or a CUDA device such as 'cuda:0', got {device!r}: {exc}") from None
    if chosen.type == "cpu":
        return None
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            f"device={device!r} asks for CUDA, but torch.cuda.is_available() is False (no GPU, or a CPU-only "
            "build of torch); pass device=None or 'cpu'"
        )
    return chosen
