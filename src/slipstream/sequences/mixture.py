"""``Mixture``: the container ``ss.mix`` makes (see ``sequences.mix`` for what it is); its
interleave, items, weight changes and state. ``sequences.mix`` adds the batched reads.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..files.packed import checked_indices
from .interleave import Segment
from .jitter import JitterCache, jittered
from .mixstate import check_state, identity_differences
from .permute import items, source_keys
from .weights import POSITION_MAX, canonical_schedule, pieces_of

__all__ = ["JITTER_MAX", "LENGTH_MAX", "STOPS", "Mixture"]

STOPS = ("first_exhausted", "all_exhausted")
JITTER_MAX = 1 << 16
LENGTH_MAX = POSITION_MAX
_FIRST_LIMIT = 1 << 16  # the first_exhausted search's first limit


class Mixture:
    """A weighted mixture of named containers (see the module doc; made by ``ss.mix``)."""

    def __init__(self, sources: Mapping[str, Any], weights: Any, *, seed: int = 0, length: int | None = None,
                 stop: str = "first_exhausted", ramp: bool = False, jitter: int = 0):
        if not isinstance(sources, Mapping) or not sources:
            raise TypeError(f"ss.mix: sources must be a non-empty mapping of name to container, got {type(sources).__name__}")
        if any(not isinstance(name, str) for name in sources):
            raise TypeError(f"ss.mix: source names must be strings, got {[name for name in sources]}")
        self.names = tuple(sources)
        self.sources = dict(sources)
        self._data = tuple(sources.values())
        self.lengths = tuple(self._length_of(name, data) for name, data in sources.items())
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"ss.mix: seed must be an int, got {seed!r}")
        if isinstance(jitter, bool) or not isinstance(jitter, (int, np.integer)) or not (jitter == 0 or 2 <= jitter <= JITTER_MAX):
            raise ValueError(f"ss.mix: jitter must be 0 (off) or a block size 2..{JITTER_MAX}, got {jitter!r}")
        if stop not in STOPS:
            raise ValueError(f"ss.mix: stop must be one of {list(STOPS)}, got {stop!r}")
        self.seed, self.jitter, self.stop, self.ramp = int(seed), int(jitter), stop, bool(ramp)
        self._lengths, self._keys = np.array(self.lengths, np.int64), source_keys(self.seed, len(self.names))
        self._schedule = canonical_schedule(weights, self.names)
        self._first = Segment(0, np.zeros(len(self.names), np.int64), pieces_of(self._schedule, self.names, self.ramp))
        self._routing: tuple[np.ndarray, tuple[Segment, ...]] = (np.zeros(1, np.int64), (self._first,))
        self._changes: list[tuple[int, dict[str, Any]]] = []
        self._pending: dict[str, Any] | None = None
        self._lock, self._tls = threading.Lock(), threading.local()
        self._jitter: JitterCache | None = None  # once the length is known
        if length is None:
            self._len = self._stop_length()
            if self._len > LENGTH_MAX:
                raise ValueError(f"ss.mix: the stop rule {stop!r} gives a length of {self._len}, past 2**61; give length=")
        elif isinstance(length, bool) or not isinstance(length, (int, np.integer)) or not 0 <= length <= LENGTH_MAX:
            raise ValueError(f"ss.mix: length must be None or an int 0..2**61, got {length!r}")
        else:
            self._len = int(length)
        if self.jitter:
            self._jitter = JitterCache(self.jitter, self.seed, -(-self._len // self.jitter) * self.jitter)

    @staticmethod
    def _length_of(name: str, data: Any) -> int:
        try:
            n = len(data)
        except TypeError as exc:
            raise TypeError(f"ss.mix: source {name!r} must be a container (len and getitem), got {type(data).__name__}") from exc
        if n == 0:
            raise ValueError(f"ss.mix: source {name!r} is empty; every source needs at least one item")
        return int(n)

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        del state["_lock"], state["_tls"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock, self._tls = threading.Lock(), threading.local()

    def __repr__(self) -> str:
        return f"ss.mix({dict(zip(self.names, self.lengths))}, length={self._len}, seed={self.seed})"

    def __len__(self) -> int:
        return self._len

    # -- the interleave ------------------------------------------------------------------------
    def _stop_length(self) -> int:
        first, lengths = self._first, self.lengths
        active = [i for i in range(len(self.names)) if first.target_limit(i) > 0]
        if self.stop == "all_exhausted":
            for i in active:
                if first.surely_reached(i, lengths[i] - 1) is not True:
                    raise ValueError(f"ss.mix: source {self.names[i]!r} is not read whole under the weights (its weight ends "
                                     f"at 0 before its {lengths[i]} items are read); give length= or stop='first_exhausted'")
            return max(self._occurrence(i, lengths[i] - 1) for i in active) + 1
        # each source searched up to a limit that doubles until one runs out, then up to the best:
        # the search costs about the length found, whatever runs out far later (a rare source)
        best: int | None = None
        limit = _FIRST_LIMIT
        while best is None:  # a source with a positive last weight is always exhausted
            for i in active:
                found = self._occurrence(i, lengths[i], limit if best is None else best)
                best = found if best is None or (found is not None and found < best) else best
            limit *= 2
        return best

    def _occurrence(self, i: int, c: int, limit: int | None = None) -> int | None:
        """The position of source ``i``'s item number ``c`` under the up-front weights (None: not before ``limit``)."""
        if not self.jitter:
            return self._first.position_of(i, c, limit)
        # jitter moves an item within its block: search the plain interleave to the limit's block end
        p = self._first.position_of(i, c, None if limit is None else -(-limit // self.jitter) * self.jitter)
        if p is None:
            return None
        block = p - p % self.jitter
        src, count = self._locate(np.arange(block, block + self.jitter, dtype=np.int64))
        p = block + int(np.flatnonzero((src == i) & (count == c))[0])
        return None if limit is not None and p >= limit else p

    def _plain(self, routing: tuple[np.ndarray, tuple[Segment, ...]], positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        starts, segments = routing
        if len(segments) == 1:
            return segments[0].locate(positions)
        which = np.searchsorted(starts, positions, side="right") - 1
        src, count = np.empty(len(positions), np.int32), np.empty(len(positions), np.int64)
        for s in np.unique(which).tolist():
            sel = which == s
            src[sel], count[sel] = segments[s].locate(positions[sel] - segments[s].start)
        return src, count

    def _locate(self, positions: np.ndarray, routing: Any = None) -> tuple[np.ndarray, np.ndarray]:
        """(source, that source's count before) of positions (int64, any >= 0)."""
        routing = self._routing if routing is None else routing
        if not self.jitter:
            return self._plain(routing, positions)
        plain = lambda p: self._plain(routing, p)
        if self._jitter is None:
            return jittered(plain, positions, self.jitter, self.seed)
        return self._jitter.locate(plain, routing, positions)

    def _where(self, positions: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(source, index in that source) of positions."""
        src, count = self._locate(positions)
        return src, items(src, count, self._lengths, self._keys)

    def _position(self, k: Any, end: bool = False) -> int:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)):
            raise TypeError(f"ss.mix: positions are ints, got {type(k).__name__}")
        n, given = self._len, int(k)
        k = given + n if given < 0 else given
        if not 0 <= k < n + end:
            raise IndexError(f"ss.mix: position {given} is out of range for a mixture of {n} items")
        return k

    def source_of(self, k: int) -> int:
        """The index (in ``names``) of the source position ``k`` reads."""
        return int(self._locate(np.array([self._position(k)], np.int64))[0][0])

    def counts(self, k: int) -> dict[str, int]:
        """How many items each source gives in positions ``0 .. k-1`` (``0 <= k <= len``)."""
        k = self._position(k, end=True)
        block = k - k % self.jitter if self.jitter else k
        routing = self._routing
        seg = routing[1][int(np.searchsorted(routing[0], block, side="right")) - 1]
        counts = seg.counts_before(block - seg.start)
        if k > block:
            inside = self._locate(np.arange(block, k, dtype=np.int64), routing)[0]
            counts = counts + np.bincount(inside, minlength=len(self.names))
        return {name: int(c) for name, c in zip(self.names, counts)}

    def weights_at(self, k: int) -> dict[str, float]:
        """The weights in effect at position ``k`` (normalized, as the interleave runs them)."""
        k = self._position(k)
        starts, segments = self._routing
        seg = segments[int(np.searchsorted(starts, k, side="right")) - 1]
        w = seg.weights_at(k - seg.start)
        return {name: float(x) / seg.pieces.total for name, x in zip(self.names, w)}

    # -- items -----------------------------------------------------------------------------------
    @staticmethod
    def _tagged(item: Any, s: int) -> Any:
        if isinstance(item, Mapping):
            item = dict(item)
            item["source"] = s
        return item

    def __getitem__(self, k: Any) -> Any:
        src, local = self._where(np.array([self._position(k)], np.int64))
        s = int(src[0])
        return self._tagged(self._data[s][int(local[0])], s)

    def __getitems__(self, indices: Any) -> list[Any]:
        positions = self._positions(indices)
        src, local = self._where(positions)
        out: list[Any] = [None] * len(positions)
        for s in np.unique(src).tolist():
            rows = np.flatnonzero(src == s).tolist()
            data, want = self._data[s], local[rows].tolist()
            items = data.__getitems__(want) if hasattr(data, "__getitems__") else [data[j] for j in want]
            for r, item in zip(rows, items):
                out[r] = self._tagged(item, s)
        return out

    def _positions(self, indices: Any) -> np.ndarray:
        """``indices`` as int64 positions in range (negative ones from the end); ``IndexError`` else."""
        idx = np.asarray(indices)
        if idx.size == 0:
            return np.empty(0, np.int64)
        if idx.dtype.kind in "iu" and idx.ndim == 1 and 0 <= idx.min() and idx.max() < self._len:
            return idx.astype(np.int64, copy=False)
        return checked_indices(indices, self._len, "ss.mix: ", f" (a mixture of {self.names})").astype(np.int64)

    # -- weights that change, and the state ------------------------------------------------------
    def set_weights(self, weights: Mapping[str, Any]) -> None:
        """Record a weight change (a mapping naming every source); it takes effect from the
        position given to the next ``settle_changes`` (a later ``set_weights`` replaces it)."""
        if not isinstance(weights, Mapping):
            raise TypeError(f"ss.mix: set_weights takes a mapping of source name to weight, got {type(weights).__name__}")
        checked = canonical_schedule(weights, self.names)[0][1]
        with self._lock:
            self._pending = checked

    def settle_changes(self, position: int) -> bool:
        """Make the pending change hold from ``position`` (rounded up to a jitter block) on; True
        when there was one. Positions before it read as before."""
        if isinstance(position, bool) or not isinstance(position, (int, np.integer)) or not 0 <= position <= LENGTH_MAX:
            raise ValueError(f"ss.mix: settle_changes takes a position 0..2**61, got {position!r}")
        with self._lock:
            if self._pending is None:
                return False
            p = -(-int(position) // self.jitter) * self.jitter if self.jitter else int(position)
            self._routing = self._changed(self._routing, p, self._pending)
            self._changes = [c for c in self._changes if c[0] < p] + [(p, self._pending)]
            self._pending = None
        return True

    def _changed(self, routing: tuple[np.ndarray, tuple[Segment, ...]], p: int, weights: dict[str, Any]) -> tuple[np.ndarray, tuple[Segment, ...]]:
        """``routing`` with the weights ``weights`` from position ``p`` on."""
        starts, segments = routing
        seg = segments[int(np.searchsorted(starts, p, side="right")) - 1]
        base = seg.counts_before(p - seg.start)
        new = Segment(p, base, pieces_of([(0, weights)], self.names, False))
        kept = tuple(s for s in segments if s.start < p) + (new,)
        return np.array([s.start for s in kept], np.int64), kept

    def _identity(self) -> dict[str, Any]:
        return {"names": list(self.names), "lengths": list(self.lengths), "seed": self.seed,
                "schedule": [[p, dict(w)] for p, w in self._schedule], "ramp": self.ramp, "jitter": self.jitter,
                "stop": self.stop, "length": self._len}

    def state_dict(self) -> dict[str, Any]:
        """{"mixture": identity, "changes": [[position, weights], ...], "pending": weights or None}."""
        with self._lock:
            return {"mixture": self._identity(), "changes": [[p, dict(w)] for p, w in self._changes],
                    "pending": None if self._pending is None else dict(self._pending)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the changes of ``state`` (``ValueError`` naming what differs when it is another mixture's)."""
        changes, pending = check_state(state)
        differences = identity_differences(state["mixture"], self._identity())
        if differences:
            raise ValueError(f"ss.mix: the state is from another mixture: {'; '.join(differences)}")
        checked = [(p, _change(w, self.names, f"change {j}")) for j, (p, w) in enumerate(changes)]
        pending = None if pending is None else _change(pending, self.names, "pending change")
        with self._lock:
            if checked == self._changes:  # the state it has (a worker's copy is sent each change once)
                self._pending = pending
                return
        routing: tuple[np.ndarray, tuple[Segment, ...]] = (np.zeros(1, np.int64), (self._first,))
        for p, w in checked:
            routing = self._changed(routing, p, w)
        with self._lock:
            self._routing, self._changes, self._pending = routing, checked, pending


def _change(weights: Any, names: tuple[str, ...], what: str) -> dict[str, Any]:
    """A state's change weights (a mapping naming every source), checked."""
    if not isinstance(weights, Mapping):
        raise ValueError(f"ss.mix: the state's {what} must be a mapping of source name to weight, got {type(weights).__name__}")  # noqa: TRY004 - a state of other data is a ValueError (the protocol)
    return canonical_schedule(weights, names)[0][1]
