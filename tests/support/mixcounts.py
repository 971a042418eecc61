"""Counting what a mixture (``ss.mix``) drew: the sources of its positions, each source's running count,
and the worst deviation from the weights as run, against the interleave's bound."""

from __future__ import annotations

import numpy as np


def sources(lengths, names=None):
    """Sources named ``names`` (default s0, s1, ...) of ``lengths`` items; item j of source i is ``{"x": (i, j)}``."""
    names = names or [f"s{i}" for i in range(len(lengths))]
    return {name: [{"x": (i, j)} for j in range(n)] for i, (name, n) in enumerate(zip(names, lengths))}


def sequence(m, n=None):
    """(sources, each one's count before) of positions 0..n-1."""
    n = len(m) if n is None else n
    return m._locate(np.arange(n, dtype=np.int64))


def running_counts(src, n):
    """Row k: how many of positions 0..k each of the ``n`` sources had, given each position's source ``src``."""
    onehot = np.zeros((len(src), n), np.int64)
    onehot[np.arange(len(src)), src] = 1
    return np.cumsum(onehot, axis=0)


def worst_deviation(m, n_positions):
    """max |count - target| over every prefix and source, in items, for the weights as run (each
    segment's counts since its start against its weights since its start), and the bound."""
    src, _ = sequence(m, n_positions)
    counts = running_counts(src, len(m.names))
    _starts, segments = m._routing
    worst, bound = 0.0, 1.0
    for s, seg in enumerate(segments):
        a = seg.start
        b = min(n_positions, segments[s + 1].start if s + 1 < len(segments) else n_positions)
        if a >= b:
            continue
        piece = np.searchsorted(seg.starts, np.arange(b - a), side="right") - 1
        target = np.cumsum(seg.w[piece], axis=0)  # T * the target count after each position
        done = counts[a:b] - (counts[a - 1] if a else 0)
        worst = max(worst, float(np.abs(done * seg.T - target).max()) / seg.T)
        bound = 1 - seg.S / seg.T
    return worst, bound
