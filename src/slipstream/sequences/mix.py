"""``ss.mix``: a weighted mixture of named containers, itself a container.

Position ``k`` of ``ss.mix({"web": web, "code": code}, {"web": 0.7, "code": 0.3}, seed=0)`` is a
pure function of ``k``, the weights and the seed: the interleave (``sequences.interleave``) picks the
source, with exact proportions (over the first ``k`` positions each source's count is within
``1 - 1/(2n - 2)`` of its weight's sum over those positions, for constant weights and schedules;
within ``1 - 1/(4n - 4)`` of a linear ramp's integral, see ``sequences.weights`` for weights too
fine to run exactly), and the source's count before ``k`` picks the item: source ``s`` is read in the seeded
permutation of pass ``count // len(s)`` (``sequences.permute``), a fresh order on each pass. Dict items
get ``"source"``: the source's index in ``mix.names`` (replacing any such key).

Length: ``length`` items, or with ``length=None`` what ``stop`` says of the up-front weights:
``"first_exhausted"`` ends just before any source would start its second pass, ``"all_exhausted"``
once every source with a positive weight has been read whole (later passes repeat in new orders).

Weights change two ways: a schedule given up front, and ``set_weights(mapping)`` at run time. A
runtime change is pending until ``settle_changes(position)`` (the loader calls it, see the
stateful-data protocol of ``loading``) makes it hold from ``position`` on (rounded up to a jitter
block): positions before it never change; from it the new weights are constant, the interleave's
targets restarting there (counts since the change within the bound of the new weights times the
positions since it). ``len()`` never changes. ``state_dict()`` holds the mixture's identity, the
settled changes and the pending one; ``load_state_dict`` checks the identity and restores them.
Settling swaps immutable routing tables, so readers in other threads may read positions before the
change meanwhile.

Batches: a mixture of NumPy arrays of one row shape and dtype (``ArrayMixture``) reads a batch as one
gather per source into the batch; one of sources that read batches into buffers (``getobs_batch_into``
and ``batch_spec``: ``ss.pack``, packed files; ``BatchedMixture``) as one batched read per source;
any other through ``__getitems__``, grouped by source. The interleave's cost per item is under 1 us
read in order (a cached block of positions), a few us at scattered positions for constant weights
of a common denominator up to ``interleave.PERIOD_MAX`` (each simulated from its checkpoint, at most
``interleave.PERIODIC_BLOCK`` positions), some 15 us for schedules, ramps and constant weights of a
larger denominator (at most ``interleave.BLOCK``), whose first read far on also simulates the way there.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ..core.spec import ArrayLeaf, Spec
from ..files.shards import scatter_rows
from .mixture import Mixture

__all__ = ["ArrayMixture", "BatchedMixture", "Mixture", "mix"]


class BatchedMixture(Mixture):
    """A mixture of sources that read batches into buffers (``getobs_batch_into`` and ``batch_spec``):
    a batch is one batched read per source into its run of a scratch batch (kept per thread: a
    fresh one would cost its page faults at every batch), then one copy per field into place."""

    def _scratch(self, buffer: dict[str, Any], names: list[str]) -> dict[str, np.ndarray | None]:
        cache = self._tls.__dict__.setdefault("scratch", {})
        out: dict[str, np.ndarray | None] = {}
        for name in names:
            target = buffer[name]
            if not isinstance(target, np.ndarray):
                out[name] = None
                continue
            kept = cache.get(name)
            if kept is None or kept.shape != target.shape or kept.dtype != target.dtype:
                kept = cache[name] = np.empty(target.shape, target.dtype)
            out[name] = kept
        return out

    def batch_spec(self) -> Spec | None:
        """The sources' batch structure (when they all declare one, alike) with ``"source"`` added."""
        specs = [data.batch_spec() for data in self._data]
        if any(spec is None for spec in specs) or len({_spec_key(spec) for spec in specs}) != 1:
            return None
        tree = specs[0].tree
        if not isinstance(tree, dict):
            return None
        tree["source"] = ArrayLeaf((), np.dtype(np.int64))
        return Spec(tree)

    def getobs_batch_into(self, buffer: Any, indices: Any) -> dict[str, Any]:
        """Read positions ``indices`` into ``buffer`` (a dict of per-field arrays, one row per index,
        or None where a field cannot be written in place); returns what a packed file's
        ``getobs_batch_into`` returns, ``"source"`` included."""
        positions = self._positions(indices)
        src, local = self._where(positions)
        if not isinstance(buffer, dict):
            raise TypeError(f"ss.mix: getobs_batch_into takes a dict of per-field arrays, got {type(buffer).__name__}")
        names = [name for name in buffer if name != "source"]
        counts = np.bincount(src, minlength=len(self._data))
        present = np.flatnonzero(counts).tolist()
        if len(present) <= 1:  # one source: it reads straight into the batch
            value = self._data[present[0]].getobs_batch_into({name: buffer[name] for name in names}, local) if present else {}
            out = {name: value[name] if present else buffer[name] for name in names}
        else:  # each source reads into its run of a scratch batch in source order, then one permuting copy per field
            order = np.argsort(src, kind="stable")
            scratch = self._scratch(buffer, names)
            parts, a = [], 0
            for s in present:
                rows, b = order[a:a + counts[s]], a + int(counts[s])
                views = {name: None if scratch[name] is None else scratch[name][a:b] for name in names}
                parts.append((rows, views, self._data[s].getobs_batch_into(views, local[rows])))
                a = b
            out = {}
            for name in names:
                target = buffer[name]
                if isinstance(target, np.ndarray) and all(value[name] is views[name] for _, views, value in parts):
                    target[order] = scratch[name]
                    out[name] = target
                else:  # rows given back may be views of the scratch: it is not used again
                    self._tls.scratch.pop(name, None)
                    out[name] = scatter_rows(target, len(positions), [(rows, value[name]) for rows, _, value in parts])
        target = buffer.get("source")
        if isinstance(target, np.ndarray) and target.shape == (len(positions),):
            target[...] = src
            out["source"] = target
        else:
            out["source"] = src.astype(np.int64).tolist()
        return out


class ArrayMixture(Mixture):
    """A mixture of NumPy arrays of one row shape and dtype: a batch is one gather per source
    straight into the batch's rows (items are the arrays' rows, as indexing gives them)."""

    def batch_spec(self) -> Spec:
        """One array leaf: the sources' row shape and dtype."""
        first = self._data[0]
        return Spec(ArrayLeaf(first.shape[1:], first.dtype))

    def getobs_batch_into(self, buffer: Any, indices: Any) -> Any:
        """Read positions ``indices`` into ``buffer`` (an array of one row per index, or None);
        returns the buffer, or a new array when it is not one of that shape and dtype."""
        positions = self._positions(indices)
        src, local = self._where(positions)
        first = self._data[0]
        if not (isinstance(buffer, np.ndarray) and buffer.shape == (len(positions), *first.shape[1:]) and buffer.dtype == first.dtype):
            buffer = np.empty((len(positions), *first.shape[1:]), first.dtype)
        counts = np.bincount(src, minlength=len(self._data))
        for s in np.flatnonzero(counts).tolist():
            if counts[s] == len(positions):
                np.take(self._data[s], local, axis=0, out=buffer)
                break
            rows = src == s
            buffer[rows] = self._data[s][local[rows]]
        return buffer


def _spec_key(spec: Spec) -> tuple[Any, ...]:
    """What two sources' batch structures must share for one buffer to hold both."""
    def node(n: Any) -> tuple[Any, ...]:
        leaf = getattr(n, "array", n)
        return (type(n).__name__, getattr(leaf, "shape", None), str(getattr(leaf, "dtype", "")))
    return (spec.structure, tuple(node(n) for n in spec.nodes))


def mix(sources: Mapping[str, Any], weights: Any, *, seed: int = 0, length: int | None = None,
        stop: str = "first_exhausted", ramp: bool = False, jitter: int = 0) -> Mixture:
    """A weighted mixture of the named containers ``sources`` (see the module doc).

    ``weights``: ``{name: weight}`` (every source named, weights >= 0, relative) or a schedule
    ``[(position, {name: weight}), ...]`` starting at 0, piecewise constant or, ``ramp=True``,
    linear between its points. ``seed`` keys the sources' permutations (and the jitter);
    ``length`` (or ``stop``) bounds the mixture; ``jitter``: 0 (off) or a block size inside which
    the interleave's order is shuffled, counts at block boundaries kept exact.
    """
    kind: type[Mixture] = Mixture
    if isinstance(sources, Mapping) and sources:
        data = list(sources.values())
        if all(isinstance(d, np.ndarray) and d.ndim >= 1 and d.shape[1:] == data[0].shape[1:] and d.dtype == data[0].dtype
               and not d.dtype.hasobject for d in data):
            kind = ArrayMixture
        elif all(callable(getattr(d, name, None)) for d in data for name in ("getobs_batch_into", "batch_spec")):
            kind = BatchedMixture
    return kind(sources, weights, seed=seed, length=length, stop=stop, ramp=ramp, jitter=jitter)
