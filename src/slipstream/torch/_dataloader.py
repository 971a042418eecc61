"""The ``DataLoader`` class: torch's constructor and attributes, slipstream's loading.

``__iter__`` draws torch's base seed, then builds the epoch's source of batches:

* map-style datasets: slipstream's loader (``_maploader``, made once and kept) over the
  indices drawn from torch's sampler (or slipstream's own permutation with ``seed``), its
  default-collated batches turned into torch's by the collate plan (``_convert``) that the first
  batch's samples decide;
* ``IterableDataset``: ``Fetcher`` in this thread, or worker processes taken round-robin
  (``_iterable``);

then pins and moves the batches (``_todevice``) and wraps them in one epoch's iterator
(``_epoch``). The behaviour it promises is ``slipstream.torch``'s docstring.

The helpers read the loader's settings from a ``LoaderContext`` (``_context``) that the loader
builds at ``iter()``, ``state_dict()`` and ``load_state_dict``; torch's private attributes are read
through ``_compat``.

Checkpoints: each ``iter()`` keeps an ``EpochRecord`` (``_record``): the generators' states before
its draws (``_rngstate``), how many batches went out; ``state_dict()`` writes it out (``_state``).
``load_state_dict`` makes the next ``iter()`` draw again from the saved states (the same base seed
and sampler indices) and skip the batches handed out: slipstream's loader skips them unread
(map-style), an ``IterableDataset``'s stream is read again and they are dropped (``Skipping``;
read out of order by worker processes, each worker reads past its own batches handed out).
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

import numpy as np
import torch
import torch.utils.data as _tud

from ..loading.batchfinish import checked_ops
from ..loading.loader import DataLoader as _SSLoader
from ..loading.options import warn_scattered_reads
from ..order.datastate import is_stateful
from ..workers.pool import WorkerPool
from ._bypass import prepared_flag
from ._compat import auto_collation, index_sampler, is_iterable, reported_length
from ._context import CloseCount, LoaderContext
from ._datasets import SamplerOrder, _finishes
from ._epoch import LoaderIter, MapEpoch
from ._iterable import Fetcher, IterablePayload, Skipping, round_robin, seeded_pipe
from ._maploader import make_map_loader
from ._record import EpochRecord, SamplerDraws
from ._rngstate import generators, replayed, restart_from, states
from ._samplerepochs import check_epochs, check_readable, epoch_samplers, epochs_of, set_epochs
from ._state import Resume, build, read
from ._todevice import _NO_ACCELERATOR, _accelerator_available, _check_device, _pinned, _to_cuda, _to_device

_BACKENDS = ("process", "thread")
_T_co = TypeVar("_T_co", covariant=True)


def _draw(generator: torch.Generator | None) -> int:
    """One seed drawn as torch's iterator draws its seeds (from ``generator`` or the global RNG)."""
    return int(torch.empty((), dtype=torch.int64).random_(generator=generator).item())


class DataLoader(_tud.DataLoader[_T_co]):
    """``torch.utils.data.DataLoader``'s interface and output, loaded by slipstream (see
    ``slipstream.torch``'s docstring for exactly what matches torch and what differs).

    Extra keyword-only arguments: ``backend`` (None/"process" or "thread"), ``device`` (None, "cpu"
    or a CUDA device to prefetch batches to), ``seed`` (None: torch's shuffling; an int:
    slipstream's permutation of ``(seed, epoch)``, and the seed of ``ss.sample_rng()``),
    ``batch_ops`` (batch augmentations, ``MixUp``/``CutMix``/``MixUpOrCutMix``, applied in order to
    each collated batch by slipstream's loader, before the batch becomes torch's: map-style datasets only).

    ``state_dict()``/``load_state_dict(state)`` checkpoint it and resume mid-epoch exactly.
    """

    # accelerate's "already prepared?" question: warns when accelerate is about to replace the loader (``_bypass``)
    _is_accelerate_prepared = prepared_flag

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
        batch_ops: Any = None,
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
        iterable = is_iterable(self)
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
        self.batch_ops = checked_ops(batch_ops)
        if self.batch_ops and iterable:
            raise ValueError("batch_ops apply to map-style datasets only (an IterableDataset's batches are not slipstream's)")
        self.device = _check_device(device)
        self.seed = None if seed is None else int(seed)
        self._user_collate = collate_fn is not None
        self._shuffle = bool(shuffle) and not iterable
        if self._shuffle and sampler is None and batch_sampler is None:
            warn_scattered_reads(
                dataset, 'slipstream.DataLoader(..., order="quasi_random") (pages shuffled, each read once an epoch)',
                "shuffle=True reads each batch's samples from all over the data", stacklevel=3,
            )  # fmt: skip
        self._ss: _SSLoader | None = None  # map-style: the slipstream loader, made at the first iter()
        self._base_seed: int | None = None  # persistent workers: drawn once, as torch does
        self._iter_pool: Any = None  # IterableDataset, persistent workers: the process pool
        self._iter_epoch = 0
        self._warned_pin = False
        self._order: SamplerOrder | None = None  # map-style without seed's permutation: the sampler order
        self._draws = SamplerDraws()  # records (or, resumed, replays) the sampler's draws
        self._record: EpochRecord | None = None  # the most recent iter()'s
        self._resume: Resume | None = None  # a loaded state, for the next iter()
        self._epochs = 0  # the number of the next iter()'s epoch
        self._closes = CloseCount()  # close() calls: an epoch's iterator tells its workers were stopped under it

    def _context(self) -> LoaderContext:
        """This loader's settings now, for the helpers (``_context``)."""
        return LoaderContext(
            dataset=self.dataset,
            iterable=is_iterable(self),
            batch_size=self.batch_size,
            auto_collation=auto_collation(self),
            drop_last=self.drop_last,
            sampler=self.sampler,
            batch_sampler=self.batch_sampler,
            index_sampler=index_sampler(self),
            generator=self.generator,
            collate_fn=self.collate_fn,
            user_collate=self._user_collate,
            shuffle=self._shuffle,
            seed=self.seed,
            num_workers=self.num_workers,
            backend=self.backend,
            prefetch_factor=self.prefetch_factor,
            persistent_workers=self.persistent_workers,
            timeout=self.timeout,
            in_order=self.in_order,
            worker_init_fn=self.worker_init_fn,
            multiprocessing_context=self.multiprocessing_context,
            reported_length=reported_length(self),
        )

    # -- iteration ---------------------------------------------------------------------------
    def _get_iterator(self) -> Any:  # torch's hook, in case anything calls it
        return self.__iter__()

    def __iter__(self) -> LoaderIter:  # type: ignore[override]
        samplers = epoch_samplers(self)
        if self._resume is not None and self._resume.draws is not None and self._resume.draws.sampler_epochs:
            check_epochs(samplers, self._resume.draws.sampler_epochs)  # before anything changes: iter() may be called again
        resume, self._resume = self._resume, None
        draws = None if resume is None else resume.draws
        gens = generators(self)
        context = self._context()
        iterable = context.iterable
        record = EpochRecord(self._epochs, counts_pulls=not iterable and not self._prefetches_ahead())
        self._epochs += 1
        if draws is None:
            record.iter_states = states(gens)
            base_seed, shared_seed = self._draw_seeds(record)
            self._draws.replay = None
        else:  # the interrupted epoch's draws again, from the states it drew from
            record.skipped, record.iter_states = resume.batch, draws.iter  # type: ignore[union-attr]
            if self.persistent_workers and draws.drew_base_seed:
                self._base_seed = None
            with replayed(gens, draws.iter):
                base_seed, shared_seed = self._draw_seeds(record)
            self._draws.replay = draws.sampler
        record.draw_states = draws.sampler if draws is not None else states(gens)
        record.sampler_epochs = epochs_of(samplers)  # (the draw records them again when it draws)
        previous, self._record = self._record, record
        self._draws.generators, self._draws.record, self._draws.samplers = gens, record, samplers
        self._draws.replay_epochs = None if draws is None else draws.sampler_epochs
        if iterable:
            if context.num_workers == 0:
                dataset = seeded_pipe(context.dataset, shared_seed, 1, 0) if shared_seed is not None else context.dataset
                batch_size = context.batch_size if context.auto_collation else None
                source: Iterator[Any] = Fetcher(iter(dataset), batch_size, context.drop_last, context.collate_fn)
            else:  # out of order, the batches handed out are counted per worker, and each skips its own
                skips = None if resume is None else resume.worker_batches
                if skips is not None or not context.in_order:
                    record.workers = list(skips) if skips is not None else [0] * context.num_workers
                source = self._iterable_processes(context, base_seed, shared_seed, record, skips)
            if record.skipped and record.workers is None:
                source = Skipping(source, record.skipped)
        else:
            source = self._map(context, base_seed, record, previous, resume)
        if self.pin_memory:
            if _accelerator_available():
                source = _pinned(source)
            elif not self._warned_pin:
                self._warned_pin = True
                warnings.warn(_NO_ACCELERATOR, stacklevel=2)
        if self.device is not None:
            source = _to_cuda(source, self.device) if self._prefetches_ahead() else _to_device(source, self.device)
        return LoaderIter(context, source, record, closes=self._closes, owner=self)

    def _prefetches_ahead(self) -> bool:
        """The CUDA prefetcher takes a batch from the epoch before the user has the previous one.
        Not for a device stage's dataset: its batches are finished on the device ahead already, and
        taking batch k+1 would make the consumer's stream wait for it before step k (the rest of the
        batch, labels, is copied in line)."""
        return self.device is not None and self.device.type == "cuda" and not _finishes(self.dataset)

    def _draw_seeds(self, record: EpochRecord) -> tuple[int, int | None]:
        """torch's draws at ``iter()``, in torch's order: an ``IterDataPipe``'s shared seed, the base
        seed (once for persistent workers), the DataPipe's seed again with workers."""
        persistent = self.persistent_workers and self.num_workers > 0
        fresh = not (persistent and self._base_seed is not None)  # torch makes a new iterator
        pipe = isinstance(self.dataset, _tud.IterDataPipe)
        shared_seed = _draw(self.generator) if pipe and fresh else None  # torch's DataPipe seed comes first
        if fresh:  # drawn exactly as torch draws it, so later draws (the sampler's) match torch's
            self._base_seed = _draw(self.generator)
        base_seed = self._base_seed
        assert base_seed is not None
        if pipe and self.num_workers > 0:  # torch's _reset draws once more: unused at first, then the seed
            again = _draw(self.generator)
            shared_seed = again if not fresh else shared_seed
        record.drew_base_seed = fresh
        return base_seed, shared_seed

    # map-style: slipstream's loader over torch's batches
    def _map(
        self, context: LoaderContext, base_seed: int, record: EpochRecord, previous: EpochRecord | None, resume: Resume | None
    ) -> Iterator[Any]:
        fresh = self._ss is None
        loader = self._map_loader(context, base_seed)
        if not fresh and context.num_workers > 0 and context.backend == "process" and not context.persistent_workers:
            # torch starts new workers each epoch: they see the dataset as it is now, seeded anew
            loader.restart_workers(loader.worker_init.reseeded(base_seed))
        if resume is not None:
            if resume.core is not None:
                loader.load_state_dict(resume.core)
            if resume.core_behind and self._order is not None:  # move past the epoch left unfinished
                self._move_past(loader)
            core = loader.state_dict()
            record.core_inside = core["batch"] > 0 or bool(core["done_ahead"])
        elif previous is not None and previous.begun:  # slipstream's most recent epoch is still the one the user left?
            record.core_behind = not previous.finished()
        elif previous is not None and previous.core_inside and self._order is not None:
            self._move_past(loader)  # a resumed epoch left before it began: its loaded position is left too
        elif previous is not None:
            record.core_behind = previous.core_behind
        epoch = MapEpoch(loader, lambda: self._map_start(loader, record), context.timeout, record)
        if context.num_workers > 0 or self._order is None:  # torch's worker iterator draws the sampler inside
            epoch.begin()  # iter(), its single-process one at the first next() (seed's permutation draws nothing)
        return epoch

    def _move_past(self, loader: _SSLoader) -> None:
        """Move slipstream's ``loader`` past the epoch it is in (an empty one: nothing drawn or read)."""
        assert self._order is not None
        self._order.skip_next = True
        loader.__iter__().close()

    def _map_start(self, loader: _SSLoader, record: EpochRecord) -> Any:
        """slipstream's iterator for this epoch: it draws the batches from torch's sampler (see
        ``SamplerOrder``), reads nothing before the first batch (its samples shape the buffers:
        see ``_MapLoader``), and goes on past a batch that raises, as torch's does (``MapEpoch``)."""
        iterator = loader.__iter__(keep_going=True)
        if self._order is None:  # seed's permutation: as many batches as slipstream's loader makes
            record.total = len(loader)
        return iterator

    def _map_loader(self, context: LoaderContext, base_seed: int) -> _SSLoader:
        """slipstream's loader, made at the first ``iter()`` (and after ``load_state_dict``) and kept."""
        if self._ss is None:
            self._ss, self._order = make_map_loader(context, base_seed, self._draws, self.batch_ops)
        return self._ss

    # IterableDataset, in worker processes, taken round-robin
    def _iterable_processes(
        self, context: LoaderContext, base_seed: int, shared_seed: int | None, record: EpochRecord, skips: list[int] | None
    ) -> Iterator[Any]:
        persistent = context.persistent_workers
        pool = self._iter_pool if persistent else None
        if pool is None or pool.closed:
            payload = IterablePayload(
                context.dataset,
                context.collate_fn,
                context.worker_init_fn,
                context.batch_size if context.auto_collation else None,
                context.drop_last,
            )
            pool = WorkerPool(
                payload,
                context.num_workers,
                context=context.multiprocessing_context,
                seed=base_seed % 2**63,
                name="slipstream-torch",
            )
            if persistent:
                self._iter_pool = pool
                weakref.finalize(self, pool.close)
        self._iter_epoch += 1
        return round_robin(context, pool, self._iter_epoch, base_seed, shared_seed, not persistent, record, skips)

    # -- checkpoints ---------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """Where this loader stands, for a checkpoint: a JSON-serializable dict (it survives
        ``torch.save``/``torch.load`` too) describing the most recent ``iter()``'s epoch, how many
        of its batches were handed out (even after leaving the loop early), the states the epoch's
        generators had before its draws, and slipstream's loader's own state.

        Call it at any point: before the first epoch, mid-epoch, after an epoch. A new
        ``DataLoader`` built with the same arguments that gets it through ``load_state_dict``
        yields exactly the rest of that epoch, then the following epochs.
        """
        if self._resume is not None:  # loaded, not iterated since
            return dict(self._resume.state)
        context = self._context()
        return build(context, self._record, None if context.iterable else self._ss, self._base_seed)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Continue from ``state_dict`` (what ``state_dict()`` returned): the next ``iter()`` yields
        the rest of that epoch, drawn again from the same generator states (the same base seed and
        sampler indices) with the batches already handed out skipped, then the following epochs.

        The loader's own generators (``generator=``, a sampler's ``generator``) are set to their
        saved states now; torch's global generator is left as it is (see ``slipstream.torch``).
        A sampler that keeps an epoch (``DistributedSampler``: ``epoch``, ``set_epoch``) is set to
        the epoch the interrupted epoch drew at, so the rest comes from the same permutation without
        a ``set_epoch`` call; the resumed ``iter()`` raises ``ValueError`` if ``set_epoch`` moved it
        to another epoch since (call ``set_epoch`` with the saved epoch's number, or not at all).
        A mid-epoch state is refused (``ValueError``) for a sampler with ``set_epoch`` but no
        integer ``epoch`` to read it by: it could not be put back at its epoch.
        A stateful dataset (``state_dict``/``load_state_dict``: ``slipstream.order.datastate``)
        loads its state, saved in slipstream's loader's, now (its ``ValueError`` before anything changes).
        Raises TypeError if ``state_dict`` is not a dict, ValueError if it is not such a state or
        was saved by a DataLoader built with a different dataset size, batching or sampling.
        """
        resume = read(self._context(), state_dict)
        if resume.draws is not None:  # mid-epoch: its samplers' epochs must be known (before anything changes)
            check_readable(self)
        if isinstance(resume.core, dict) and "data" in resume.core and is_stateful(self.dataset):
            self.dataset.load_state_dict(resume.core["data"])  # a refusal raises now (the next iter() loads it again)
        elif resume.core is None and "data" in resume.state:  # saved before the first epoch: only here
            if not is_stateful(self.dataset):
                raise ValueError(
                    f"state holds 'data' (the state of a stateful dataset), but this loader's dataset "
                    f"({type(self.dataset).__name__}) has no state_dict/load_state_dict: resume over the dataset it was saved with"
                )
            self.dataset.load_state_dict(resume.state["data"])  # a refusal raises now, before anything changes
        self.close()  # workers seeded for another run: the next iter() starts them as the state says
        self._ss = None
        restart_from(generators(self), resume.generators)
        if resume.draws is not None and resume.draws.sampler_epochs:  # a DistributedSampler back at the epoch that drew
            set_epochs(epoch_samplers(self), resume.draws.sampler_epochs)
        self._base_seed = resume.base_seed if self.persistent_workers and self.num_workers > 0 else None
        self._epochs, self._record, self._resume = resume.epoch, None, resume

    # -- resources -----------------------------------------------------------------------------
    def close(self) -> None:
        """Stop this loader's worker processes now (a later ``iter()`` starts new ones and goes on with
        the next epoch; the ``next()`` of an epoch whose worker processes it stopped raises a
        ``RuntimeError`` saying so). Idempotent."""
        self._closes.count += 1
        if self._ss is not None:
            self._ss.close()
        pool, self._iter_pool = self._iter_pool, None
        if pool is not None:
            pool.close()

    def __enter__(self) -> DataLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
