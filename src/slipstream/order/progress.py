"""Progress and state: how far an epoch got, as the few integers a checkpoint holds.

``Progress`` is one epoch's iterator's record of the batches handed out (``0..batch-1`` plus
``done``, the ones that overtook the rest with ``in_order=False``). ``Position`` is where the next
``iter()`` starts; ``state_dict`` turns it into the JSON-serializable dict a checkpoint stores
(``order.resume`` reads it back, on the same ranks or on another number of them). Both carry
the epoch's ``Deal`` (``order.deals``): which part of the epoch's global order was consumed before
its batches were dealt (nothing, unless the epoch was resumed on other ranks or other batching).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from .deals import FRESH, Deal

__all__ = ["STATE_VERSION", "UNSAVED", "Position", "Progress", "state_dict", "todo"]

STATE_VERSION = 2


class Progress:
    """How far one epoch's iterator got: batches ``0..batch-1`` and ``done`` were handed out."""

    __slots__ = ("epoch", "batch", "done", "total", "deal")

    def __init__(self, epoch: int, batch: int, done: frozenset[int], total: int | None, deal: Deal = FRESH):
        self.epoch, self.total, self.deal = epoch, total, deal  # total: None until a streamed epoch ends
        self.batch = batch if total is None else min(batch, total)
        self.done = set(done) if total is None else {k for k in done if k < total}

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

    def left(self) -> int:
        """Batches not handed out yet (TypeError when the order's length is unknown)."""
        if self.total is None:
            raise TypeError("len() is unknown: the sampler has no __len__")
        return self.total - self.batch - len(self.done)


class _Unsaved:
    """``Position.settle_at`` when no position was saved (the data settles nowhere in particular)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "UNSAVED"


UNSAVED: Any = _Unsaved()


class Position:
    """Where the next epoch starts: ``epoch``, dealt as ``deal`` says, with ``batch`` batches (and
    ``done``) already handed out; ``opened``: the epoch had begun (an iterator was made for it),
    even with nothing handed out yet (``order.datastate``: its opening settle is not repeated);
    ``settle_at``: where the run that saved it would have settled the data's next changes (an int,
    or None: not in this epoch), ``UNSAVED`` when the state said nothing of it (``order.datastate``)."""

    __slots__ = ("epoch", "batch", "done", "deal", "opened", "settle_at")

    def __init__(
        self, epoch: int = 0, batch: int = 0, done: frozenset[int] = frozenset(), deal: Deal = FRESH, opened: bool = False
    ):
        self.epoch, self.batch, self.done, self.deal, self.opened = epoch, batch, done, deal, opened
        self.settle_at: Any = UNSAVED

    @classmethod
    def after(cls, progress: Progress) -> Position:
        """Where an epoch's iterator has got to (the next epoch, once it finished)."""
        if progress.finished:
            return cls(progress.epoch + 1)
        return cls(progress.epoch, progress.batch, frozenset(progress.done), progress.deal, opened=True)


def todo(batches: list[np.ndarray] | Iterator[np.ndarray], progress: Progress) -> Iterator[tuple[int, np.ndarray]]:
    """The batches still to load, numbered: what was handed out before this iterator started is
    skipped (progress itself moves on as batches go out; the set is copied now)."""
    first, done = progress.batch, frozenset(progress.done)
    if isinstance(batches, list):
        return ((k, batches[k]) for k in range(first, len(batches)) if k not in done)
    return ((k, b) for k, b in enumerate(batches) if k >= first and k not in done)


def state_dict(position: Position, seed: int, identity: dict[str, Any]) -> dict[str, Any]:
    """The checkpoint of ``position``: version, seed, epoch, batch, done_ahead, deal, and
    ``identity`` (num_observations, world_size, rank, batch_size, drop_last, order; fields and,
    for "quasi_random", num_pages and page_layout: see ``order.resume``)."""
    return {
        "version": STATE_VERSION,
        "seed": seed,
        "epoch": position.epoch,
        "batch": position.batch,
        "done_ahead": sorted(position.done),
        "deal": position.deal.to_state(),
        **identity,
    }
