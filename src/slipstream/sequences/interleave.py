"""The interleave: which source each position of a mixture reads, as a pure function of the position
and the integer weights (``weights.Pieces``).

The rule is Tijdeman's chairman assignment (Discrete Math. 32, 1980), as an earliest-deadline-first
schedule of unit jobs. With ``n`` sources, weights ``w_i(u)`` at position ``u`` (summing to 1) and
``F_i(k) = w_i(0) + ... + w_i(k-1)`` the target count of the first ``k`` positions, source ``i``'s
``j``-th item (j = 1, 2, ...) is a job released once ``F_i(k) >= j - 1 + s`` and due before
``F_i(k)`` passes ``j - s``, with ``s = 1 / (2n - 2)`` (1/2 for one or two sources). Each position goes
to the released job with the earliest deadline (ties: the lowest source index), the deadline read
from the weights ahead (the whole schedule is known). Tijdeman proved a sequence meeting every such
window exists, even for weights that change at every position; the earliest-deadline rule finds
one whenever one exists (unit jobs, integer releases and deadlines), and some source is always
released (the lags sum to 1 after each position's weights are added, so the largest is at least
``1/n >= s``). Hence, at every prefix ``k`` and for every source,

    |count_i(k) - F_i(k)| <= 1 - 1/(2n - 2)   (< 1; 1/2 for two sources),

for constant weights, piecewise constant schedules and ramps alike; a source whose weight is 0 from
the start is never chosen. Everything is integer arithmetic: the weights are integers ``M * W_i``
summing to ``T = M * total`` with ``M = max(2, 2n - 2)``; the state before a position is, per source,
the count and the lag ``lam_i = T * F_i - T * count_i`` (bounded by ``T``), so the compiled kernel
(``slipstream.sequences._mixing.simulate``) and ``simulate_reference`` agree exactly.

A ``Segment`` is the interleave of positions ``start, start + 1, ...`` from given counts: the
mixture's up-front schedule is one segment from 0, and each weight change made at run time starts
a new one (targets restart there: counts since the change are within the same bound of the new
weights times the positions since it). Constant weights repeat with period ``total`` positions (the
lags are 0 again after it), so a one-piece segment of a total up to ``PERIOD_MAX`` keeps state only
for one period; one of a larger total (weights whose common denominator is large) is run as a
schedule's segment: a far position is simulated from 0 once, the checkpoints growing with it. The state at
every ``block_size``-th position (a checkpoint) is computed once, lazily, and a block's sources and
counts are simulated once and cached (a few blocks, least recently used): a position is found by
simulating at most one block.
"""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from ..core.optional import probe
from .weights import Pieces, margin

__all__ = ["BLOCK", "INF", "KERNEL_STATUS", "PERIODIC_BLOCK", "PERIOD_MAX", "Segment", "locate_reference", "margin", "simulate",
           "simulate_reference"]

BLOCK = 4096  # positions per checkpoint of a schedule's segment (its state grows with the positions reached)
PERIODIC_BLOCK = 512  # of a constant one (its state covers one period: finer, so a random position simulates less)
PERIOD_MAX = 1 << 24  # the longest period kept as one (constant weights of a larger total are run as a schedule's)
INF = (1 << 63) - 1
_CACHED_BLOCKS = 16
_SCATTERED = 4  # a read touching more blocks than this simulates each position's prefix, caching none
_kernel, KERNEL_STATUS = probe("slipstream.sequences._mixing", disable_env="SLIPSTREAM_NO_SEQCORE", missing="not built")
_EMPTY = np.empty(0, np.int64)
_EMPTY32 = np.empty(0, np.int32)


def _due(w: list[list[int]], starts: list[int], i: int, u: int, k: int, need: int) -> int:
    """The last position v > u by which the weights of positions u+1..v add up to ``need`` (u when
    need <= 0, INF when they never do); ``k`` is the piece of position u (or an earlier one)."""
    if need <= 0:
        return u
    m, x = len(starts), u + 1
    while k + 1 < m and starts[k + 1] <= x:
        k += 1
    while True:
        weight = w[k][i]
        end = starts[k + 1] if k + 1 < m else INF
        if weight > 0:
            steps = (need + weight - 1) // weight
            if steps <= end - x:
                return x + steps - 1
            need -= weight * (end - x)
        elif end == INF:
            return INF
        x, k = end, k + 1


def simulate_reference(w: np.ndarray, starts: np.ndarray, T: int, S: int, u0: int, u1: int, lam: np.ndarray, cnt: np.ndarray,
                       src: np.ndarray = _EMPTY32, idx: np.ndarray = _EMPTY, every: int = 0,
                       ck_lam: np.ndarray = _EMPTY, ck_cnt: np.ndarray = _EMPTY) -> None:
    """Run positions ``u0 .. u1-1`` from the state (``lam``, ``cnt``) before ``u0``, updating it in
    place. ``w``: (m, n) int64 weights summing to ``T`` per row; ``starts``: the pieces' first
    positions. Writes, when given, each position's source (``src``, int32) and that source's count
    before it (``idx``), and every ``every`` positions the state after them (rows of ``ck_lam`` and
    ``ck_cnt``, (positions // every, n))."""
    rows, first = w.tolist(), starts.tolist()
    n, la, co = len(lam), lam.tolist(), cnt.tolist()
    k = bisect.bisect_right(first, u0) - 1
    d = [_due(rows, first, i, u0 - 1, k, T - S + 1 - la[i]) for i in range(n)]
    out = len(src) > 0
    for u in range(u0, u1):
        while k + 1 < len(first) and first[k + 1] <= u:
            k += 1
        row, best = rows[k], -1
        for i in range(n):
            la[i] += row[i]
            if la[i] >= S and (best < 0 or d[i] < d[best]):
                best = i
        la[best] -= T
        if out:
            src[u - u0], idx[u - u0] = best, co[best]
        co[best] += 1
        d[best] = _due(rows, first, best, u, k, T - S + 1 - la[best])
        if every and (u + 1 - u0) % every == 0:
            r = (u + 1 - u0) // every - 1
            ck_lam[r], ck_cnt[r] = la, co
    lam[:], cnt[:] = la, co


def simulate(w: np.ndarray, starts: np.ndarray, T: int, S: int, u0: int, u1: int, lam: np.ndarray, cnt: np.ndarray,
             src: np.ndarray = _EMPTY32, idx: np.ndarray = _EMPTY, every: int = 0,
             ck_lam: np.ndarray = _EMPTY, ck_cnt: np.ndarray = _EMPTY) -> None:
    """``simulate_reference``, by the compiled kernel when it is built (the GIL released)."""
    run = simulate_reference if _kernel is None else _kernel.simulate
    run(w, starts, T, S, u0, u1, lam, cnt, src, idx, every, ck_lam, ck_cnt)


def locate_reference(w: np.ndarray, starts: np.ndarray, T: int, S: int, every: int, ck_lam: np.ndarray, ck_cnt: np.ndarray,
                     r: np.ndarray, src: np.ndarray, idx: np.ndarray) -> None:
    """The source (``src``) and that source's count before (``idx``) of positions ``r`` (ascending),
    each simulated from its checkpoint: row ``b`` of ``ck_lam``/``ck_cnt`` is the state before
    position ``b * every``."""
    blocks = r // every
    bounds = np.flatnonzero(np.diff(blocks)) + 1
    for a, z in zip([0, *bounds.tolist()], [*bounds.tolist(), len(r)]):
        b = int(blocks[a])
        size = int(r[z - 1]) + 1 - b * every
        bsrc, bidx = np.empty(size, np.int32), np.empty(size, np.int64)
        simulate_reference(w, starts, T, S, b * every, b * every + size, ck_lam[b].copy(), ck_cnt[b].copy(), bsrc, bidx)
        src[a:z], idx[a:z] = bsrc[r[a:z] - b * every], bidx[r[a:z] - b * every]


class Segment:
    """The interleave from position ``start`` on, under ``pieces`` (relative to ``start``), the
    sources' counts being ``base`` before it. Positions given to its methods are relative."""

    def __init__(self, start: int, base: Any, pieces: Pieces):
        n = pieces.weights.shape[1]
        M = margin(n)
        self.start, self.base, self.pieces, self.n = int(start), np.array(base, np.int64), pieces, n
        self.T, self.S = M * pieces.total, pieces.total
        self.w = np.ascontiguousarray(pieces.weights * M, np.int64)
        self.starts = np.ascontiguousarray(pieces.starts, np.int64)
        self.period = pieces.total if len(self.starts) == 1 and pieces.total <= PERIOD_MAX else 0
        self.block_size = PERIODIC_BLOCK if self.period else BLOCK
        self._based = bool(self.base.any())
        self._setup()

    def _setup(self) -> None:
        self._lock = threading.Lock()  # extends the checkpoints
        self._cache_lock = threading.Lock()
        self._ck_lam = np.zeros((1, self.n), np.int64)
        self._ck_cnt = np.zeros((1, self.n), np.int64)
        self._ck_size = 1
        self._blocks: OrderedDict[int, tuple[np.ndarray, np.ndarray]] = OrderedDict()

    def __getstate__(self) -> dict[str, Any]:
        return {key: self.__dict__[key] for key in ("start", "base", "pieces", "n", "T", "S", "w", "starts", "period", "block_size", "_based")}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._setup()

    # -- state -----------------------------------------------------------------------------------
    def _extend(self, b: int) -> None:
        """Checkpoints up to block ``b`` (the first call for a far block simulates the way there)."""
        with self._lock:
            size = self._ck_size
            if b < size:
                return
            if b >= len(self._ck_lam):
                grown = max(b + 1, 2 * len(self._ck_lam))
                lam, cnt = np.zeros((grown, self.n), np.int64), np.zeros((grown, self.n), np.int64)
                lam[:size], cnt[:size] = self._ck_lam[:size], self._ck_cnt[:size]
                self._ck_lam, self._ck_cnt = lam, cnt  # readers holding the old arrays still read valid rows
            lam, cnt = self._ck_lam[size - 1].copy(), self._ck_cnt[size - 1].copy()
            simulate(self.w, self.starts, self.T, self.S, (size - 1) * self.block_size, b * self.block_size, lam, cnt, _EMPTY32, _EMPTY,
                     self.block_size, self._ck_lam[size:b + 1], self._ck_cnt[size:b + 1])
            self._ck_size = b + 1

    def checkpoint(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        """(lags, counts) before position ``b * self.block_size`` (copies; counts relative to this segment)."""
        if b >= self._ck_size:
            self._extend(b)
        return self._ck_lam[b].copy(), self._ck_cnt[b].copy()

    def _block_length(self, b: int) -> int:
        return min(self.block_size, self.period - b * self.block_size) if self.period else self.block_size

    def block(self, b: int) -> tuple[np.ndarray, np.ndarray]:
        """Block ``b``'s sources (int32) and each one's count before it (relative counts)."""
        with self._cache_lock:
            cached = self._blocks.get(b)
            if cached is not None:
                self._blocks.move_to_end(b)
                return cached
        lam, cnt = self.checkpoint(b)
        size = self._block_length(b)
        src, idx = np.empty(size, np.int32), np.empty(size, np.int64)
        simulate(self.w, self.starts, self.T, self.S, b * self.block_size, b * self.block_size + size, lam, cnt, src, idx)
        src.flags.writeable = idx.flags.writeable = False
        with self._cache_lock:
            self._blocks[b] = (src, idx)
            while len(self._blocks) > _CACHED_BLOCKS:
                self._blocks.popitem(last=False)
        return src, idx

    # -- reading ---------------------------------------------------------------------------------
    def _frame(self, u: np.ndarray) -> tuple[np.ndarray | None, np.ndarray]:
        """(whole periods, or None for none, and position within the period) of relative positions ``u``."""
        if self.period and len(u) and u.max() >= self.period:
            return np.divmod(u, self.period)
        return None, u

    def locate(self, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(source int32, that source's global count before the position) of relative positions ``u``."""
        q, r = self._frame(np.asarray(u, np.int64))
        size = self.block_size
        first, last = (int(r.min()) // size, int(r.max()) // size) if len(r) else (0, 0)
        if first == last:  # the common case: positions read in order
            s, c = self.block(first)
            j = r - first * size if first else r
            src, count = s[j], c[j]
        else:
            src, count = self._locate_blocks(r, first, last)
        if self._based:
            count += self.base[src]
        if q is not None:
            count += q * self.pieces.weights[0][src]
        return src, count

    def _locate_blocks(self, r: np.ndarray, first: int, last: int) -> tuple[np.ndarray, np.ndarray]:
        size = self.block_size
        blocks = r // size
        touched = np.unique(blocks).tolist()
        src, count = np.empty(len(r), np.int32), np.empty(len(r), np.int64)
        if len(touched) > _SCATTERED:  # scattered positions: each simulated from its checkpoint, nothing cached
            self._extend(last)
            order = np.argsort(r, kind="stable")
            s, c = np.empty(len(r), np.int32), np.empty(len(r), np.int64)
            rows = self._ck_size
            run = locate_reference if _kernel is None else _kernel.locate
            run(self.w, self.starts, self.T, self.S, size, self._ck_lam[:rows], self._ck_cnt[:rows], r[order], s, c)
            src[order], count[order] = s, c
            return src, count
        for b in touched:
            sel = blocks == b
            s, c = self.block(b)
            j = r[sel] - b * size
            src[sel], count[sel] = s[j], c[j]
        return src, count

    def counts_before(self, u: int) -> np.ndarray:
        """Every source's global count before relative position ``u``."""
        q, r = (divmod(u, self.period) if self.period else (0, u))
        b = r // self.block_size
        counts = self.checkpoint(b)[1]
        if r > b * self.block_size:
            counts += np.bincount(self.block(b)[0][: r - b * self.block_size], minlength=self.n)
        return counts + self.base + (q * self.pieces.weights[0] if self.period else 0)

    def weights_at(self, u: int) -> np.ndarray:
        """The integer weights (summing to ``pieces.total``) at relative position ``u``."""
        return self.pieces.weights[int(np.searchsorted(self.starts, u, side="right")) - 1]

    # -- where a source's items fall ---------------------------------------------------------------
    def target_limit(self, i: int) -> float:
        """``T`` times source ``i``'s target count over all positions (inf when it never stops growing)."""
        if self.w[-1, i] > 0:
            return float("inf")
        lengths = np.diff(self.starts)
        return int(sum(int(a) * int(b) for a, b in zip(self.w[:-1, i], lengths)))

    def surely_reached(self, i: int, c: int) -> bool | None:
        """True when source ``i``'s item with relative count ``c`` is surely read (its deadline is
        finite), False when it never is (never released), None when that depends on the others."""
        limit = self.target_limit(i)
        if limit >= self.T * (c + 1) - self.S + 1:
            return True
        return False if limit < self.T * c + self.S else None

    def position_of(self, i: int, c: int, limit: int | None = None) -> int | None:
        """The relative position at which source ``i`` reads its item with relative count ``c``;
        None when that is at or past ``limit``, or never."""
        if self.period:
            per = int(self.pieces.weights[0][i])
            if per == 0:
                return None
            q, c = divmod(c, per)
            self._extend((self.period - 1) // self.block_size)
            last = (self.period - 1) // self.block_size
        else:
            sure = self.surely_reached(i, c)
            if sure is False:
                return None
            if sure is None and limit is None:
                raise ValueError(f"source {i}'s item {c} may never be read: give a limit")
            q, last = 0, self._ck_size - 1
            while self._ck_cnt[last, i] <= c:
                if limit is not None and last * self.block_size >= limit:
                    return None
                self._extend(last + max(64, last))
                last = self._ck_size - 1
        b = int(np.searchsorted(self._ck_cnt[: last + 1, i], c, side="right")) - 1
        src, idx = self.block(b)
        j = int(np.flatnonzero((src == i) & (idx == c))[0])
        position = q * self.period + b * self.block_size + j
        return None if limit is not None and position >= limit else position
