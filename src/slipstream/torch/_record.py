"""How far one epoch of a ``DataLoader`` got, and what it drew: the facts its ``state_dict()`` states.

* ``EpochRecord``: plain data the loader holds for its most recent ``iter()``. The epoch's iterators
  write to it (``LoaderIter``: batches handed to the user, the end; ``MapEpoch``: slipstream's
  epoch started, batches taken from it) and never the other way round, so an iterator the user drops
  is still collected (and its workers stopped).
* ``SamplerDraws``: what the epoch order calls around its sampler's draw: it keeps the generators'
  states from before the draw in the record, or, for a resumed epoch, makes the draw again from the
  states the checkpoint kept. It holds no reference to the loader (the loader's slipstream loader
  holds it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import torch

from ._rngstate import replayed, restart_from, states
from ._samplerepochs import check_epochs, epochs_of

_T = TypeVar("_T")


@dataclass
class EpochRecord:
    """One epoch's progress and draws.

    ``skipped`` batches were handed out before a checkpoint this epoch resumed from; ``handed`` is
    what this iterator handed to the user; ``pulled`` (map-style) what it took from slipstream's
    loader (a batch whose loading raised, where the epoch went on, included). ``core_states``
    (``counts_pulls`` False, i.e. the CUDA prefetcher takes a batch ahead) holds slipstream's state
    after each of the last few batches taken, by number taken. ``workers`` (an ``IterableDataset``
    read out of order by worker processes) counts the batches taken from each worker, from the
    epoch's start (``pulled`` counts them in this iterator). ``core_behind``: the epoch has not
    begun and slipstream's most recent epoch (an earlier one) was left unfinished; ``core_inside``:
    a resumed epoch whose slipstream loader was loaded part-way into it (left before it begins, the
    loader must move past that position before the next epoch).
    """

    epoch: int
    counts_pulls: bool
    skipped: int = 0
    handed: int = 0
    pulled: int = 0
    ended: bool = False
    begun: bool = False
    total: int | None = None
    core_behind: bool = False  # not begun, and slipstream's most recent epoch was left unfinished
    core_inside: bool = False  # resumed: slipstream's loader was loaded part-way into this epoch
    core_states: dict[int, Any] = field(default_factory=dict)
    iter_states: dict[str, torch.Tensor] = field(default_factory=dict)
    draw_states: dict[str, torch.Tensor] = field(default_factory=dict)
    drew_base_seed: bool = True
    sampler_epochs: dict[str, int] = field(default_factory=dict)  # the epochs of the samplers that keep one, at the draw
    workers: list[int] | None = None  # IterableDataset out of order: batches taken from each worker
    worker_pulls: list[int] = field(default_factory=list)  # the workers of the latest batches taken

    def from_worker(self, worker: int) -> None:
        """One more batch taken from ``worker`` (an ``IterableDataset`` read out of order)."""
        assert self.workers is not None
        self.workers[worker] += 1
        self.pulled += 1
        self.worker_pulls.append(worker)
        del self.worker_pulls[:-4]  # the prefetcher is one batch ahead

    def worker_batches(self) -> list[int] | None:
        """Each worker's batches handed out (counting from the epoch's start): those taken, less
        the ones a prefetcher holds; None unless the epoch counts them."""
        if self.workers is None:
            return None
        counts = list(self.workers)
        held = self.pulled - self.handed  # taken from the workers, not handed to the user yet
        for worker in self.worker_pulls[len(self.worker_pulls) - held :] if held > 0 else ():
            counts[worker] -= 1
        return counts

    def handed_out(self) -> int:
        """Batches of this epoch the user has had (counting from the epoch's start)."""
        return self.skipped + (self.pulled if self.counts_pulls else self.handed)

    def finished(self) -> bool:
        """Every batch of the epoch was handed out (its iterator ran out, or as many as it has)."""
        return self.ended or (self.total is not None and self.handed_out() >= self.total)

    def took(self, core: Any) -> None:
        """One more batch taken from slipstream's loader ``core``."""
        self.pulled += 1
        if not self.counts_pulls:
            self.core_states[self.pulled] = core.state_dict()
            self.core_states.pop(self.pulled - 4, None)  # the prefetcher is one batch ahead

    def core_state(self, core: Any) -> Any:
        """slipstream's state at the batch the user has reached (``core``: slipstream's loader). With
        the CUDA prefetcher, the position is the snapshot taken when that batch was pulled, and a
        stateful dataset's state (``"data"``) the live one: a change made since the pull (pending
        until the next epoch's start, as the drop-in's orders settle) is in the checkpoint."""
        if self.begun and not self.counts_pulls:
            state = self.core_states[self.handed]
            if "data" in state:
                state = {**state, "data": core.state_dict()["data"]}
            return state
        return core.state_dict()


class SamplerDraws:
    """Called around each epoch's sampler draw (``draw(lazy)``: the batches, drawn at once unless
    ``lazy``). The loader sets ``record``, ``generators``, ``samplers`` (those that keep an epoch:
    ``_samplerepochs``) and, for a resumed epoch, ``replay`` and ``replay_epochs`` before the epoch
    starts. A resumed epoch whose sampler was moved to another epoch since raises ``ValueError``."""

    def __init__(self) -> None:
        self.record: EpochRecord | None = None
        self.generators: dict[str, torch.Generator] = {}
        self.samplers: dict[str, Any] = {}
        self.replay: dict[str, torch.Tensor] | None = None
        self.replay_epochs: dict[str, int] | None = None

    def __call__(self, draw: Callable[[], _T], lazy: bool) -> _T:
        replay, self.replay = self.replay, None
        replay_epochs, self.replay_epochs = self.replay_epochs, None
        if replay is not None and replay_epochs:
            check_epochs(self.samplers, replay_epochs)  # set_epoch called between iter() and the draw
        epochs = epochs_of(self.samplers)
        before = replay if replay is not None else states(self.generators)
        if replay is None:
            drawn = draw()
        elif lazy:  # drawn as the batches are loaded: the private generators restart from their states
            restart_from(self.generators, replay)
            drawn = draw()
        else:
            with replayed(self.generators, replay):
                drawn = draw()
        record = self.record
        if record is not None:
            record.draw_states, record.sampler_epochs = before, epochs
            if isinstance(drawn, list):
                record.total = len(drawn)
        return drawn
