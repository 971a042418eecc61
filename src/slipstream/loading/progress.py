"""Progress and state: how far an epoch got, as the few integers a checkpoint holds.

``Progress`` is one epoch's iterator's record of the batches handed out (``0..batch-1`` plus
``done``, the ones that overtook the rest with ``in_order=False``). ``Position`` is where the next
``iter()`` starts; ``state_dict``/``load_state`` turn it into the JSON-serializable dict a
checkpoint stores and back, checking it belongs to this loader's data and batching.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from ..core.checks import check_int

__all__ = ["STATE_VERSION", "Position", "Progress", "load_state", "state_dict", "todo"]

STATE_VERSION = 1


class Progress:
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

    def left(self) -> int:
        """Batches not handed out yet (TypeError when the order's length is unknown)."""
        if self.total is None:
            raise TypeError("len() is unknown: the sampler has no __len__")
        return self.total - self.batch - len(self.done)


class Position:
    """Where the next epoch starts: ``epoch``, with ``batch`` batches (and ``done``) already handed out."""

    __slots__ = ("epoch", "batch", "done")

    def __init__(self, epoch: int = 0, batch: int = 0, done: frozenset[int] = frozenset()):
        self.epoch, self.batch, self.done = epoch, batch, done

    @classmethod
    def after(cls, progress: Progress) -> Position:
        """Where an epoch's iterator has got to (the next epoch, once it finished)."""
        if progress.finished:
            return cls(progress.epoch + 1)
        return cls(progress.epoch, progress.batch, frozenset(progress.done))


def todo(batches: list[np.ndarray] | Iterator[np.ndarray], progress: Progress) -> Iterator[tuple[int, np.ndarray]]:
    """The batches still to load, numbered: what was handed out before this iterator started is
    skipped (progress itself moves on as batches go out; the set is copied now)."""
    first, done = progress.batch, frozenset(progress.done)
    if isinstance(batches, list):
        return ((k, batches[k]) for k in range(first, len(batches)) if k not in done)
    return ((k, b) for k, b in enumerate(batches) if k >= first and k not in done)


def state_dict(position: Position, seed: int, identity: dict[str, int]) -> dict[str, Any]:
    """The checkpoint of ``position``: version, seed, epoch, batch, done_ahead, and ``identity``
    (num_observations, world_size, rank, batch_size), checked again when it is loaded."""
    return {
        "version": STATE_VERSION,
        "seed": seed,
        "epoch": position.epoch,
        "batch": position.batch,
        "done_ahead": sorted(position.done),
        **identity,
    }


def load_state(state: Any, identity: dict[str, int]) -> tuple[int, Position]:
    """The seed and position a checkpoint holds; ValueError if it is not one of this loader's
    (a different ``identity``) or not a checkpoint at all."""
    if not isinstance(state, dict):
        raise TypeError(f"state must be a dict from state_dict(), got {type(state).__name__}")
    missing = {"version", "seed", "epoch", "batch"} - state.keys()
    if missing:
        raise ValueError(f"state lacks {sorted(missing)}: expected the dict that state_dict() returned")
    if state["version"] != STATE_VERSION:
        raise ValueError(f"state version {state['version']} is not supported (expected {STATE_VERSION})")
    for key, value in identity.items():
        if key in state and state[key] != value:
            raise ValueError(f"state was saved with {key}={state[key]} but this loader has {key}={value}")
    seed = check_int("state['seed']", state["seed"], 0)
    epoch = check_int("state['epoch']", state["epoch"], 0)
    batch = check_int("state['batch']", state["batch"], 0)
    done = frozenset(check_int("state['done_ahead'][k]", k, batch + 1) for k in state.get("done_ahead", []))
    return seed, Position(epoch, batch, done)
