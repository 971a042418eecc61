"""Resume: where a loader starts from a saved state, on the same ranks or on others (elastic).

A state (``progress.state_dict``) says which epoch a rank was in, how many of its batches it had
handed out (``batch``, plus ``done_ahead`` with ``in_order=False``), how the epoch had been dealt
(``deal``) and the batching it was dealt with (``world_size``, ``rank``, ``batch_size``,
``drop_last``). Loading it into a loader with the same batching continues that rank exactly.

Elastic resume: a loader with another ``world_size`` (or ``batch_size``, ``drop_last``, or another
rank) takes the state of any one old rank: ranks of one job move in lockstep (every rank hands out
its k-th batch before any rank its (k+1)-th... as far as a checkpoint can tell: they save the same
step), so one rank's count describes them all. What every old rank handed out is worked out from
the deal (``order.deals.consumed_after``); the rest of the epoch's global order is dealt afresh to
the new ranks (equal batch counts, padded or dropped as a fresh epoch is), and later epochs are
those of a fresh run with the new batching. Lockstep does not hold with ``in_order=False`` (each
rank's overtaking batches are its own) or when ranks stopped at different steps: then pass the
states of all old ranks, as a list, and the union of what they handed out is taken.

Which orders can move: the built-in ones ("sequential", "random", "quasi_random") and a sized
sampler that gives the same global order for an epoch in both jobs (seeded by the epoch, not
sharded by rank: the loader shards it), and a sized batch sampler (its batches are dealt whole).
An order object (``order=``) or a sampler without ``__len__`` resumes only with the same batching.

What a state is refused for (``ValueError`` naming the key, both values and what to do): other
data or another order than the one its position counts in. It records ``num_observations`` and
``order``; for "quasi_random", the page layout the order was drawn over (``num_pages`` and
``page_layout``, a digest of ``page_starts()``: the same samples re-written with another page size
give another order, and resuming one in the other would repeat some samples and skip others); and
``fields``, the field names of data that declares them (a packed file, and views of one). A state
saved between epochs (nothing of its epoch handed out) resumes over any page layout: its position
depends on none. A loader made with an explicit ``seed=`` refuses a state of another seed (one made
without takes the state's). A state saved before these keys existed lacks them and is taken as it
was before: what it does not record is not checked (remove ``fields`` from a state to resume it
over other fields of the same samples).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.arguments import check_flag, check_int
from .deals import FRESH, Deal, batches_per_rank, consumed_after
from .progress import STATE_VERSION, Position

__all__ = ["Batching", "field_names", "resume"]

_EVERY = 1 << 62  # "all its batches": a rank whose state is already at the next epoch


def field_names(data: Any) -> tuple[str, ...] | None:
    """The sorted field names of ``data`` when it declares them (``fields``, a mapping of names: a
    packed file), or of the data a view reads (``data.data``: ``ss.open(p).map(...)``, obsview);
    None for data that declares none."""
    for _ in range(8):
        fields = getattr(data, "fields", None)
        if isinstance(fields, Mapping) and all(isinstance(name, str) for name in fields):
            return tuple(sorted(fields))
        data = getattr(data, "data", None)
        if data is None:
            return None
    return None


@dataclass(frozen=True)
class Batching:
    """What a loader deals an epoch with; ``order`` is the loader's epoch order (``order.epochs``);
    ``seed`` the loader's own when it was given one (None: drawn, the state's is taken); ``fields``
    the data's field names when it declares them."""

    num_observations: int
    world_size: int
    rank: int
    batch_size: int
    drop_last: bool
    order: Any
    seed: int | None = None
    fields: tuple[str, ...] | None = None

    def identity(self) -> dict[str, Any]:
        """The fields a state records of it."""
        ident = {
            "num_observations": self.num_observations, "world_size": self.world_size, "rank": self.rank,
            "batch_size": self.batch_size, "drop_last": self.drop_last, "order": self.order.kind,
        }  # fmt: skip
        layout = getattr(self.order, "layout", None)
        if callable(layout):
            ident.update(layout())
        if self.fields is not None:
            ident["fields"] = list(self.fields)
        return ident


@dataclass(frozen=True)
class _Saved:
    seed: int
    epoch: int
    batch: int
    done: frozenset[int]
    deal: Deal
    world_size: int
    rank: int
    batch_size: int
    drop_last: bool

    def position(self) -> Position:
        return Position(self.epoch, self.batch, self.done, self.deal)


def resume(state: Mapping[str, Any] | Sequence[Mapping[str, Any]], here: Batching) -> tuple[int, Position]:
    """The seed and the position a loader dealt as ``here`` starts from, given one saved state or
    the states of all ranks of the old job; ``ValueError``/``TypeError`` saying what does not fit."""
    listed = not isinstance(state, Mapping)
    states = list(state) if listed and isinstance(state, Sequence) else [state]
    if not states or not all(isinstance(s, Mapping) for s in states):
        raise TypeError(f"state must be a dict from state_dict() (or a list of them, one per rank), got {type(state).__name__}")
    mine = here.identity()
    saved = [_parse(s, here, mine) for s in states]
    first = saved[0]
    for key in ("seed", "world_size", "batch_size", "drop_last"):
        if any(getattr(other, key) != getattr(first, key) for other in saved):
            raise ValueError(f"the states disagree on {key}: they must be saved by the ranks of one job at one step")
    if here.seed is not None and first.seed != here.seed:
        raise ValueError(
            f"state was saved with seed={first.seed} but this loader was made with seed={here.seed}: the order and "
            f"sample_rng() follow the seed, so make the loader with seed={first.seed} (or without seed=, to take the state's)"
        )
    if listed and sorted(s.rank for s in saved) != list(range(first.world_size)):
        ranks = sorted(s.rank for s in saved)
        raise ValueError(f"a list of states needs one per rank of the old job (ranks 0..{first.world_size - 1}), got ranks {ranks}")
    epoch = min(s.epoch for s in saved)
    current = [s for s in saved if s.epoch == epoch]
    if any(s.deal != current[0].deal for s in current):
        raise ValueError("the states disagree on deal: they must be saved by the ranks of one job at one step")
    if any(s.epoch > epoch and (s.epoch > epoch + 1 or s.batch or s.done) for s in saved):
        raise ValueError("the states are more than one epoch apart: they must be saved by the ranks of one job at one step")
    _check_counts(current, here)
    same = (first.world_size, first.batch_size, first.drop_last) == (here.world_size, here.batch_size, here.drop_last)
    if same and not listed and (first.rank == here.rank or not first.done):
        return first.seed, first.position()
    if same and listed:
        return first.seed, next(s for s in saved if s.rank == here.rank).position()
    return first.seed, _redealt(saved, epoch, here)


def _dealt(order: Any) -> bool:
    """Whether ``order`` deals a global order of known length (so it can deal the rest of one)."""
    return hasattr(order, "units") and not order.streamed


def _per_batch(order: Any, batch_size: int) -> int:
    return 1 if order.kind == "batch_sampler" else batch_size  # a batch sampler's units are its batches


def _check_counts(current: list[_Saved], here: Batching) -> None:
    """The deal fits the epoch's order, and no state counts more batches than its rank had."""
    order, old = here.order, current[0]
    if not _dealt(order):
        if not old.deal.fresh:
            raise ValueError("the state's epoch was dealt from the rest of an earlier one, but this loader's order cannot deal it")
        return
    per_batch = _per_batch(order, old.batch_size)
    count = batches_per_rank(order.units(here.num_observations), old.deal, old.world_size, per_batch, old.drop_last)
    for s in current:
        if s.batch > count:
            raise ValueError(f"state['batch'] is {s.batch}, but rank {s.rank}'s epoch {s.epoch} has {count} batches")


def _redealt(saved: list[_Saved], epoch: int, here: Batching) -> Position:
    """The rest of the old ranks' epoch ``epoch``, as one deal for ``here``'s ranks."""
    order = here.order
    if not _dealt(order):
        raise ValueError(
            f"this state was saved with world_size={saved[0].world_size}, rank={saved[0].rank}, batch_size="
            f"{saved[0].batch_size}, drop_last={saved[0].drop_last}; this loader has world_size={here.world_size}, "
            f"rank={here.rank}, batch_size={here.batch_size}, drop_last={here.drop_last}: only the built-in orders and "
            "sized samplers can resume with other batching (an order object or a sampler without __len__ decides its "
            "own batches)"
        )
    handed: int | dict[int, tuple[int, frozenset[int]]]
    if len(saved) == 1 and saved[0].world_size == 1:  # the whole job's state, overtaking batches and all
        handed = {0: (saved[0].batch, saved[0].done)}
    elif len(saved) == 1:
        if saved[0].done:
            raise ValueError(
                f"this state of rank {saved[0].rank} lists batches that overtook the rest (in_order=False), which differ "
                "from rank to rank: to resume on other ranks or batching, pass the states of all ranks as a list"
            )
        handed = saved[0].batch
    else:
        handed = {s.rank: (s.batch, s.done) if s.epoch == epoch else (_EVERY, frozenset()) for s in saved}
    old = next(s for s in saved if s.epoch == epoch)
    units = order.units(here.num_observations)
    deal = consumed_after(units, old.deal, old.world_size, _per_batch(order, old.batch_size), old.drop_last, handed)
    if units and deal.consumed >= units:  # all of it was handed out: the next epoch
        return Position(epoch + 1)
    return Position(epoch, 0, frozenset(), deal)


_HINTS = {
    "num_pages": (
        "a quasi_random order is drawn over the data's pages, so over these pages (the same samples written with "
        "another page size, or other data) its position would repeat some samples and skip others: resume over the "
        "data it was saved with (a state saved between epochs resumes over any page layout)"
    ),
    "fields": (
        "this is other data than the state's: resume over the data it was saved with (to resume over other fields "
        "of the same samples, remove 'fields' from the state)"
    ),
}
_HINTS["page_layout"] = _HINTS["num_pages"]
_PAGES = ("num_pages", "page_layout")


def _check_identity(state: Mapping[str, Any], mine: dict[str, Any], saved: _Saved) -> None:
    """``ValueError`` for a state saved over other data or another order than ``mine`` describes
    (the keys a state lacks are not checked: see the module doc)."""
    between = not saved.batch and not saved.done and saved.deal.fresh  # nothing of its epoch handed out
    for key in ("num_observations", "order", "fields", *_PAGES):
        if key not in state or state[key] == mine.get(key):
            continue
        hint = f": {_HINTS[key]}" if key in _HINTS else ""
        if key in _PAGES:
            if between:
                continue  # its position holds over any pages
            saved_pages = f"num_pages={state.get('num_pages')!r}, page_layout={state.get('page_layout')!r}"
            mine_pages = f"num_pages={mine.get('num_pages')!r}, page_layout={mine.get('page_layout')!r}"
            raise ValueError(f"state was saved with {saved_pages} but this loader's data has {mine_pages}{hint}")
        raise ValueError(f"state was saved with {key}={state[key]!r} but this loader has {key}={mine.get(key)!r}{hint}")


def _parse(state: Mapping[str, Any], here: Batching, mine: dict[str, Any]) -> _Saved:
    missing = {"version", "seed", "epoch", "batch"} - state.keys()
    if missing:
        raise ValueError(f"state lacks {sorted(missing)}: expected the dict that state_dict() returned")
    version = state["version"]
    if version not in (1, STATE_VERSION):
        raise ValueError(f"state version {version} is not supported (expected {STATE_VERSION} or 1)")
    batch = check_int("state['batch']", state["batch"], 0)
    world_size = check_int("state['world_size']", state.get("world_size", here.world_size), 1)
    rank = check_int("state['rank']", state.get("rank", here.rank), 0)
    if rank >= world_size:
        raise ValueError(f"state['rank'] is {rank}, not a rank of its world_size {world_size}")
    parsed = _Saved(
        seed=check_int("state['seed']", state["seed"], 0),
        epoch=check_int("state['epoch']", state["epoch"], 0),
        batch=batch,
        done=frozenset(check_int("state['done_ahead'][k]", k, batch + 1) for k in state.get("done_ahead", [])),
        deal=Deal.from_state(state["deal"]) if "deal" in state else FRESH,
        world_size=world_size,
        rank=rank,
        batch_size=check_int("state['batch_size']", state.get("batch_size", here.batch_size), 1),
        drop_last=check_flag("state['drop_last']", state.get("drop_last", here.drop_last)),
    )
    _check_identity(state, mine, parsed)
    return parsed
