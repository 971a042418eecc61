"""Deals: how the rest of an epoch's global order is dealt to ranks, and what a deal consumed.

An epoch has one *global order* of ``n`` units (the samples of a permutation or a sampler, or the
batches of a batch sampler), the same for every rank. A ``Deal`` records which positions of that
order were consumed before it was dealt: a prefix ``consumed`` and a few ``extra`` positions beyond
it (batches that overtook the rest with ``in_order=False``). ``deal_positions`` deals the rest (the
positions not consumed, in order) to ``world_size`` ranks as ``order.orders`` deals a whole epoch:
cut to a multiple of ``world_size`` (``drop_last``) or padded by repeating the global order from
its start, rank ``r`` taking every ``world_size``-th position from ``r``, cut into batches of
``per_batch``. The fresh deal (nothing consumed) gives exactly ``order.orders``' batches.

``consumed_after`` is the heart of elastic resume: given how many batches each rank of a deal had
handed out (ranks move in lockstep, so one count describes them all; or one count per rank), it
returns the deal of what is left: the positions consumed so far are the old deal's, plus every
position of the batches handed out. Dealing that to any number of ranks loses nothing and repeats
nothing beyond the padding of the new deal; dealt to the same ranks with the same batching it gives
exactly the batches the old ranks had left (``tests/order/test_deals.py`` checks both as properties).
"""

from __future__ import annotations

import base64
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from .orders import num_batches

__all__ = ["FRESH", "Deal", "batches_per_rank", "consumed_after", "deal_positions"]


class Deal:
    """Positions ``[0, consumed)`` and ``extra`` (sorted, all ``>= consumed``) of the global order
    were consumed before this deal."""

    __slots__ = ("consumed", "extra")

    def __init__(self, consumed: int = 0, extra: Any = ()):
        self.consumed = int(consumed)
        extra = np.asarray(extra, dtype=np.intp)
        self.extra = extra if len(extra) < 2 or bool((extra[1:] > extra[:-1]).all()) else np.unique(extra)
        if len(self.extra) and self.extra[0] < self.consumed:
            raise ValueError(f"extra positions must lie beyond the consumed prefix {self.consumed}, got {self.extra[0]}")

    @property
    def fresh(self) -> bool:
        return self.consumed == 0 and not len(self.extra)

    def left(self, n: int) -> int:
        """How many positions of an order of ``n`` units are not consumed (``ValueError`` when the deal
        reaches past the order)."""
        reach = max(self.consumed, int(self.extra[-1]) + 1 if len(self.extra) else 0)
        if reach > n:
            raise ValueError(
                f"the resumed state had consumed positions up to {reach} of the epoch's order, but it has "
                f"{n} (the sampler or the data changed since the state was saved)"
            )
        return n - self.consumed - len(self.extra)

    def rest(self, n: int) -> np.ndarray:
        """The positions of an order of ``n`` units not consumed, in order."""
        self.left(n)
        rest = np.arange(self.consumed, n, dtype=np.intp)
        return np.setdiff1d(rest, self.extra, assume_unique=True) if len(self.extra) else rest

    def to_state(self) -> dict[str, Any]:
        """``{"consumed": int, "extra": str}``: the extra positions as a bitmap (base64 of packed
        bits, bit ``i`` for position ``consumed + i``): small however they are spread."""
        if not len(self.extra):
            return {"consumed": self.consumed, "extra": ""}
        window = np.zeros(int(self.extra[-1]) + 1 - self.consumed, dtype=bool)
        window[self.extra - self.consumed] = True
        return {"consumed": self.consumed, "extra": base64.b64encode(np.packbits(window).tobytes()).decode("ascii")}

    @classmethod
    def from_state(cls, state: Any) -> Deal:
        consumed = state.get("consumed") if isinstance(state, Mapping) else None
        if not isinstance(consumed, int) or isinstance(consumed, bool) or consumed < 0:
            raise ValueError(f"state['deal'] must be a dict with an integer 'consumed' >= 0, got {state!r}")
        bits = state.get("extra", "")
        try:
            window = np.unpackbits(np.frombuffer(base64.b64decode(bits, validate=True), dtype=np.uint8))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"state['deal']['extra'] must be the base64 text of a bitmap, as state_dict() writes it ({exc})") from None
        return cls(consumed, np.flatnonzero(window) + consumed)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Deal) and self.consumed == other.consumed and np.array_equal(self.extra, other.extra)

    def __hash__(self) -> int:
        return hash((self.consumed, tuple(self.extra)))

    def __repr__(self) -> str:
        extra = f" and {len(self.extra)} more" if len(self.extra) else ""
        return f"Deal(consumed {self.consumed}{extra})"


FRESH = Deal()


def _dealt(n: int, deal: Deal, world_size: int, drop_last: bool) -> np.ndarray:
    """The rest of the order, cut or padded to a multiple of ``world_size``: rank ``r`` takes
    every ``world_size``-th position from ``r``."""
    rest = deal.rest(n)
    r = len(rest)
    total = (r // world_size) * world_size if drop_last else math.ceil(r / world_size) * world_size
    if total > r:  # pad by repeating the global order from its start (cyclically, if n < the padding)
        return np.concatenate([rest, np.arange(total - r, dtype=np.intp) % n])
    return rest[:total]


def batches_per_rank(n: int, deal: Deal, world_size: int, per_batch: int, drop_last: bool) -> int:
    """How many batches each rank gets of the rest of an order of ``n`` units."""
    r = deal.left(n)
    return num_batches(r // world_size if drop_last else math.ceil(r / world_size), per_batch, drop_last)


def deal_positions(n: int, deal: Deal, rank: int, world_size: int, per_batch: int, drop_last: bool) -> list[np.ndarray]:
    """Rank ``rank``'s batches of the rest of an order of ``n`` units: positions into the order."""
    share = _dealt(n, deal, world_size, drop_last)[rank::world_size]
    return [share[k * per_batch : (k + 1) * per_batch] for k in range(num_batches(len(share), per_batch, drop_last))]


def consumed_after(
    n: int,
    deal: Deal,
    world_size: int,
    per_batch: int,
    drop_last: bool,
    handed_out: Mapping[int, tuple[int, frozenset[int]]] | int,
) -> Deal:
    """The deal of what is left once the ranks of ``deal`` handed out their first batches.

    ``handed_out`` is one count of batches for every rank (lockstep), or per rank ``(count,
    done_ahead)``; a count past a rank's last batch means all of them.
    """
    consumed = np.zeros(n, dtype=bool)
    consumed[: deal.consumed] = True
    consumed[deal.extra] = True
    dealt = _dealt(n, deal, world_size, drop_last)
    batches = num_batches(len(dealt) // world_size, per_batch, drop_last)
    # the k-th position of a rank's share lies at k * world_size + rank of ``dealt``: its batch is k // per_batch
    batch_of = np.arange(len(dealt)) // (world_size * per_batch)
    if isinstance(handed_out, int):
        consumed[dealt[batch_of < min(handed_out, batches)]] = True
    else:
        for rank in range(world_size):
            count, done = handed_out.get(rank, (0, frozenset()))
            mine = batch_of[rank::world_size]
            taken = (mine < min(count, batches)) | (np.isin(mine, [k for k in done if k < batches]))
            consumed[dealt[rank::world_size][taken]] = True
    free = np.flatnonzero(~consumed)
    prefix = int(free[0]) if len(free) else n
    return Deal(prefix, np.flatnonzero(consumed[prefix:]) + prefix)
