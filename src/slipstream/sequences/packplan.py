"""Packing plans: which document pieces make each packed row.

* ``concat_plan``: documents in a seeded order (or the stored one), concatenated; row ``k`` is
  tokens ``k*length .. (k+1)*length - 1`` of the concatenation, found by a binary search over the
  cumulative lengths (``cum``), so the plan is one int64 per document (two with a seeded order).
* ``bins_plan``: best-fit or first-fit decreasing bin packing of the documents (or of their pieces:
  see ``too_long``), row ``k`` being bin ``k``. The plan is CSR: ``bin_offsets`` (rows + 1) and
  ``bin_items`` (one int64 per piece); item ``i < documents`` is document ``i`` from its first
  token, item ``documents + j`` is document ``extra_doc[j]`` from token ``extra_start[j]``, and each
  piece is at most ``length`` tokens. Empty documents hold no tokens and are in no row.

A plan is a pure function of (lengths, length, method, seed, too_long): the seed only shuffles
the pieces before a stable sort by decreasing length (``shuffled``: a seeded Feistel bijection,
computed on the fly, no permutation array), so it decides among pieces of equal length and
nothing else (seed None: their stored order). The compiled planner
(``_packing.plan``) and the reference here (``bins_reference``, pure Python) give identical
plans; ``SLIPSTREAM_NO_SEQCORE=1`` selects the reference.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..core import streams
from ..core.optional import probe

__all__ = [
    "METHODS",
    "TOO_LONG",
    "BinsPlan",
    "ConcatPlan",
    "bins_plan",
    "bins_reference",
    "concat_plan",
    "kernels",
    "seeded_rng",
    "shuffle_keys",
    "shuffled",
]

METHODS = ("concat", "best_fit", "first_fit")
TOO_LONG = ("split", "truncate", "error")
MAX_BIN_LENGTH = 2**24  # the bins planners keep a table per remaining capacity


def kernels() -> tuple[Any, str]:
    """The compiled packing module (or None) and why."""
    return probe("slipstream.sequences._packing", disable_env="SLIPSTREAM_NO_SEQCORE", missing="not built")


def seeded_rng(seed: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(streams.PACK,))))


def shuffle_keys(seed: int) -> np.ndarray:
    """The 4 round keys (uint64) of the tie-breaking shuffle of ``seed``."""
    return np.random.SeedSequence(seed, spawn_key=(streams.PACK, 1)).generate_state(4, np.uint64)


def _mix64(z: np.ndarray) -> np.ndarray:
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def shuffled(n: int, keys: np.ndarray) -> np.ndarray:
    """The seeded shuffle of 0..n-1 (int64) that ``_packing.plan`` computes on the fly: position k
    holds a 4-round Feistel bijection of [0, 4**half) (4**half >= n) of k, walked until below n."""
    half = 1
    while half < 31 and 4**half < n:
        half += 1
    mask, shift = np.uint64((1 << half) - 1), np.uint64(half)

    def encrypt(x: np.ndarray) -> np.ndarray:
        left, right = x >> shift, x & mask
        for key in keys:
            left, right = right, left ^ (_mix64(right ^ key) & mask)
        return (left << shift) | right

    with np.errstate(over="ignore"):
        out = encrypt(np.arange(n, dtype=np.uint64))
        walk = np.flatnonzero(out >= n)
        while walk.size:
            out[walk] = encrypt(out[walk])
            walk = walk[out[walk] >= n]
    return out.astype(np.int64)


@dataclass
class ConcatPlan:
    cum: np.ndarray  # int64 (documents + 1,): tokens before the j-th document of the order
    order: np.ndarray | None  # int64 (documents,): the j-th document; None: the stored order
    rows: int

    def arrays(self) -> tuple[np.ndarray, ...]:
        return (self.cum,) if self.order is None else (self.cum, self.order)


@dataclass
class BinsPlan:
    bin_offsets: np.ndarray  # int64 (rows + 1,)
    bin_items: np.ndarray  # int64 (pieces,)
    extra_doc: np.ndarray  # int64: the document of each piece after a document's first
    extra_start: np.ndarray  # int64: that piece's first token in its document
    rows: int
    info: dict[str, int] = field(default_factory=dict)  # split documents, truncated tokens


def concat_plan(lengths: np.ndarray, length: int, seed: int | None) -> ConcatPlan:
    """The concatenation of the documents in ``seed``'s order (None: the stored order)."""
    order = None if seed is None else seeded_rng(seed).permutation(lengths.size).astype(np.int64)
    cum = np.zeros(lengths.size + 1, np.int64)
    np.cumsum(lengths if order is None else lengths[order], out=cum[1:])
    total = int(cum[-1])
    return ConcatPlan(cum, order, -(-total // length))


def _pieces(
    lengths: np.ndarray, length: int, too_long: str, name: str
) -> tuple[np.ndarray | None, np.ndarray, np.ndarray, np.ndarray, dict[str, int]]:
    """(ids, sizes, extra_doc, extra_start, info): the pieces to pack, in stored order (documents,
    then the pieces after the first of each long document); ids None: item k is piece k."""
    n = lengths.size
    long = np.flatnonzero(lengths > length)
    if long.size and too_long == "error":
        d = int(long[0])
        raise ValueError(
            f"{name}: document {d} has {int(lengths[d])} tokens, more than length={length} "
            f"({long.size} documents do); too_long='split' cuts such documents into pieces, 'truncate' keeps their first {length} tokens"
        )
    empty = int(np.count_nonzero(lengths == 0))
    info = {"long_documents": int(long.size), "truncated_tokens": 0, "empty_documents": empty}
    extra_doc = extra_start = np.zeros(0, np.int64)
    if too_long == "truncate":
        info["truncated_tokens"] = int((lengths[long] - length).sum())
    elif long.size:
        more = (lengths[long] + length - 1) // length - 1  # pieces after the first
        extra_doc = np.repeat(long, more).astype(np.int64)
        first_extra = np.concatenate([[0], np.cumsum(more)[:-1]])
        extra_start = (np.arange(extra_doc.size, dtype=np.int64) - np.repeat(first_extra, more) + 1) * length
    sizes = np.empty(n + extra_doc.size, np.int64)
    np.minimum(lengths, length, out=sizes[:n])
    np.minimum(lengths[extra_doc] - extra_start, length, out=sizes[n:])
    if not empty:
        return None, sizes, extra_doc, extra_start, info
    kept = sizes > 0  # empty documents are in no row
    return np.flatnonzero(kept).astype(np.int64), sizes[kept], extra_doc, extra_start, info


def max_bins(sizes: np.ndarray, length: int) -> int:
    """A bound on the bins of any any-fit packing: all but one are more than half full."""
    return int(min(sizes.size, 2 * int(sizes.sum()) // length + 2))


def bins_plan(
    lengths: np.ndarray, length: int, method: str, seed: int | None, too_long: str, name: str, compiled: Any = None
) -> BinsPlan:
    """The best-fit / first-fit decreasing plan of documents of ``lengths`` into rows of ``length``
    (``compiled``: the ``_packing`` module, or None for the reference)."""
    if length > MAX_BIN_LENGTH:
        raise ValueError(f"ss.pack(method={method!r}) packs rows of at most {MAX_BIN_LENGTH} tokens, got length={length}")
    ids, sizes, extra_doc, extra_start, info = _pieces(lengths, length, too_long, name)
    keys = np.zeros(0, np.uint64) if seed is None else shuffle_keys(seed)
    bound = max_bins(sizes, length)
    if compiled is not None:
        offsets = np.empty(bound + 1, np.int64)
        items = np.empty(sizes.size, np.int64)
        rows = compiled.plan(
            sizes, np.zeros(0, np.int64) if ids is None else ids, keys, length, METHODS.index(method) - 1, bound, offsets, items
        )
        offsets = offsets[: rows + 1].copy()
    else:
        offsets, items = bins_reference(sizes, ids, None if seed is None else shuffled(sizes.size, keys), length, method)
        rows = offsets.size - 1
    return BinsPlan(offsets, items, extra_doc, extra_start, int(rows), info)


def bins_reference(
    sizes: np.ndarray, ids: np.ndarray | None, shuffle: np.ndarray | None, length: int, method: str
) -> tuple[np.ndarray, np.ndarray]:
    """(bin_offsets, bin_items): the plan ``_packing.plan`` makes, in Python: the items in
    decreasing size, equal sizes in ``shuffle``'s order (None: their own), best fit taking the bin
    most recently left at the chosen capacity, first fit the lowest-numbered bin that fits."""
    shuffled = np.arange(sizes.size) if shuffle is None else shuffle
    order = shuffled[np.argsort(-sizes[shuffled], kind="stable")]
    sized = sizes[order].tolist()
    bin_of = _best_fit(sized, length) if method == "best_fit" else _first_fit(sized, length, max_bins(sizes, length))
    bins = np.asarray(bin_of, np.int64)
    rows = int(bins.max()) + 1 if bins.size else 0
    placed = np.argsort(bins, kind="stable")
    offsets = np.zeros(rows + 1, np.int64)
    np.cumsum(np.bincount(bins, minlength=rows), out=offsets[1:])
    items = order[placed] if ids is None else ids[order[placed]]
    return offsets, items.astype(np.int64)


def _best_fit(sizes: list[int], length: int) -> list[int]:
    stacks: dict[int, list[int]] = {}  # remaining capacity -> bins left with it, most recent last
    capacities: list[int] = []  # the capacities with bins, sorted
    bin_of, bins = [], 0
    for s in sizes:
        i = bisect.bisect_left(capacities, s)
        if i == len(capacities):
            b, rest = bins, length - s
            bins += 1
        else:
            c = capacities[i]
            stack = stacks[c]
            b, rest = stack.pop(), c - s
            if not stack:
                del capacities[i], stacks[c]
        if rest > 0:
            stack = stacks.get(rest)
            if stack is None:
                stacks[rest] = [b]
                bisect.insort(capacities, rest)
            else:
                stack.append(b)
        bin_of.append(b)
    return bin_of


def _first_fit(sizes: list[int], length: int, bound: int) -> list[int]:
    leaves = 1
    while leaves < max(bound, 1):
        leaves *= 2
    tree = [length] * (2 * leaves)  # max remaining capacity under each node; unopened bins hold all of it
    bin_of = []
    for s in sizes:
        node = 1
        while node < leaves:
            node = 2 * node if tree[2 * node] >= s else 2 * node + 1
        bin_of.append(node - leaves)
        tree[node] -= s
        node //= 2
        while node:
            tree[node] = max(tree[2 * node], tree[2 * node + 1])
            node //= 2
    return bin_of
