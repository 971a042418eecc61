"""The batch structure: ``Spec``, the shape of one observation and of its batches.

A spec describes one observation as a nested sample (``core.nested``'s rule: dicts and other
mappings, tuples, namedtuples and lists are nodes) whose leaves are either arrays (a fixed shape and
dtype: NumPy arrays and scalars, Python numbers, anything with ``__array__``) or objects (strings,
bytes, None, anything else). A batch of ``n`` observations has the same nesting; each array leaf
becomes one ``(n, *shape)`` array, each object leaf a list.

The structure is decided once per spec (``nested.flatten``: the leaf nodes in depth-first order
and the ``Structure`` that rebuilds the nesting); the per-sample path then runs the writers and
settlers compiled from it (``core.samplewriters``) and rebuilds views with the structure's precompiled
``unflatten``, never a generic walk of the sample.

Contract: ``Spec.write`` / ``settle`` / ``settle_batch`` accept exactly what ``default_collate``
accepts (the first sample's structure, shapes, safely castable dtypes) and raise a ``ValueError``
or ``TypeError`` naming the sample and field otherwise; ``Spec.build`` returns what
``default_collate`` returns for the same samples.

The leaf nodes are ``core.nodes``'s. A container that knows which of its values can change shape or type from sample to sample (a
packed file's JSON, ragged-array and image fields) describes them with two more leaf nodes, so the
loader's batch always equals ``default_collate`` of the same samples: a ``VarNode`` writes rows
that match its buffer in place and keeps the others aside, collating the batch from its rows when
any were kept; a ``CollatedNode`` keeps every value and collates them per batch.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from . import samplewriters as w
from .containers import flatten_group
from .nested import Structure, flatten
from .nodes import ArrayLeaf, CollatedNode, Node, ObjectLeaf, VarNode, leaf_of

__all__ = ["ArrayLeaf", "CollatedNode", "ObjectLeaf", "Spec", "VarNode", "spec_of_data"]


def collate_rows(rows: list[Any], where: list[Any], label: str, hint: str = "") -> Any:
    """``default_collate(rows)``, a mismatch located at ``where[j]`` and field ``label`` (``hint``
    added to the message)."""
    if not rows:
        return []
    spec = Spec.of(rows[0])
    storage = spec.allocate(len(rows))
    for j, row in enumerate(rows):
        try:
            spec._writer(storage, j, row)
        except w.Mismatch as mismatch:
            at = where[j] if isinstance(where[j], str) else f"sample {where[j]}"
            message = f"{at}, field {label}{''.join(mismatch.path)}, {mismatch.message}"
            raise mismatch.kind(f"{message}; {hint}" if hint else message) from None
    return spec.build(storage)


class Spec:
    """The structure of one observation: ``structure`` (the nesting) and ``nodes`` (its leaf nodes,
    depth first); ``leaves`` are the storage leaves (array and object), numbered in that order.
    ``Spec(tree)`` takes a nested tree of nodes (``{"image": VarNode(...), "label": ArrayLeaf(...)}``)."""

    def __init__(self, tree: Any):
        nodes, structure = flatten(tree)
        self._setup(structure, nodes)

    @classmethod
    def from_nodes(cls, structure: Structure, nodes: list[Node]) -> Spec:
        """The spec of ``structure`` with ``nodes`` at its leaves (no tree built)."""
        spec = cls.__new__(cls)
        spec._setup(structure, list(nodes))
        return spec

    @classmethod
    def of(cls, sample: Any) -> Spec:
        values, structure = flatten(sample)
        return cls.from_nodes(structure, [leaf_of(value) for value in values])

    def _setup(self, structure: Structure, nodes: list[Node]) -> None:
        self.structure, self.nodes = structure, nodes
        self.leaves: list[ArrayLeaf | ObjectLeaf] = []
        self._var_nodes: list[VarNode] = []
        labelled = any(isinstance(node, (VarNode, CollatedNode)) for node in nodes)
        paths = structure.paths() if labelled else [()] * len(nodes)
        for node, path in zip(nodes, paths):
            if isinstance(node, (ArrayLeaf, ObjectLeaf)):
                self._number(node)
                continue
            node.label = "".join(f"[{k!r}]" for k in path)  # a key's repr, an index's digits
            if isinstance(node, VarNode):
                self._number(node.array)
                self._number(node.spill)
                self._var_nodes.append(node)
            else:
                self._number(node.leaf)
        self.array_leaves = [leaf for leaf in self.leaves if isinstance(leaf, ArrayLeaf)]
        self.object_leaves = [leaf for leaf in self.leaves if isinstance(leaf, ObjectLeaf)]
        # what the per-sample and per-batch paths need, decided here once
        self._writer, _ = _compile(structure, iter(nodes), settlers=False)
        self._settler: w.Settler | None = None  # compiled on first use (containers with getobs_into)
        self._view_slots = [_array_slot(node) for node in nodes]  # -1: None in a view
        self._single = structure.type is None and isinstance(nodes[0], (ArrayLeaf, ObjectLeaf))

    def _number(self, leaf: ArrayLeaf | ObjectLeaf) -> None:
        leaf.slot = len(self.leaves)
        self.leaves.append(leaf)

    @property
    def tree(self) -> Any:
        """The nested tree of nodes (a new one each time: the spec itself keeps ``structure`` and ``nodes``)."""
        return self.structure.unflatten(self.nodes)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Spec.from_nodes, (self.structure, self.nodes))  # the compiled writers are rebuilt on the other side

    def allocate(self, n: int) -> list[Any]:
        """Fresh storage for ``n`` observations: one array or list per leaf, in leaf order."""
        return [
            np.empty((n, *leaf.shape), leaf.dtype) if isinstance(leaf, ArrayLeaf) else [None] * n
            for leaf in self.leaves
        ]

    def write(self, storage: list[Any], j: int, value: Any, where: str | int) -> None:
        """Write observation ``value`` at position ``j`` of ``storage``, checking it against the spec.

        Shapes must match exactly and casts must be safe or same-kind, so a float never lands
        silently in an int buffer; a mismatch raises ``ValueError``/``TypeError`` naming ``where``.
        """
        try:
            self._writer(storage, j, value)
        except w.Mismatch as mismatch:
            raise mismatch.located(where) from None
        if self._var_nodes:
            self._locate_spills(storage, j, [where])

    def build(self, storage: list[Any], n: int | None = None) -> Any:
        """The batch: ``storage`` arranged in the observation's nesting (arrays cut to ``n`` rows).
        A ``VarNode`` or ``CollatedNode`` collates its rows here (see their docstrings)."""
        if self._single:  # the common single-array sample
            value = storage[0]
            return value if n is None or len(value) == n else value[:n]
        rows = n if n is not None else len(storage[0]) if storage else 0
        values = []
        for node in self.nodes:
            if isinstance(node, (ArrayLeaf, ObjectLeaf)):
                value = storage[node.slot]
                values.append(value if n is None or len(value) == n else value[:n])
            else:
                values.append(node.build(storage, rows, collate_rows))
        return self.structure.unflatten(values)

    def batch_views(self, storage: list[Any], a: int, b: int) -> Any:
        """A buffer for positions ``a..b-1``: row slices of the array leaves and of each ``VarNode``'s
        array (object leaves and ``CollatedNode``s are None)."""
        return self.structure.unflatten([storage[s][a:b] if s >= 0 else None for s in self._view_slots])

    def views(self, storage: list[Any], j: int) -> Any:
        """A buffer for observation ``j``: views into the array leaves (object leaves are None)."""
        if self._single:  # the common single-array sample, without a rebuild
            s = self._view_slots[0]
            return storage[s][j, ...] if s >= 0 else None
        return self.structure.unflatten([storage[s][j, ...] if s >= 0 else None for s in self._view_slots])

    def settle_batch(self, storage: list[Any], a: int, value: Any, views: Any, indices: list[int]) -> None:
        """Complete positions ``a..a+len(indices)-1`` after ``getobs_batch_into(views, indices)``
        returned ``value``, which mirrors ``views`` down to where it holds either the view itself
        (written in place: done) or a sequence of per-row values (copied in, shape and cast checked;
        kept aside for a ``VarNode``; stored for object leaves). A mismatch raises ``ValueError`` /
        ``TypeError`` naming the sample (``indices[row]``) and the field."""
        try:
            self._settle(storage, a, value, views, True)
        except w.Mismatch as mismatch:
            row = mismatch.row
            where = f"sample {indices[row]}" if row is not None and row < len(indices) else f"samples {indices[:1]}.."
            raise mismatch.located(where) from None
        self._locate_spills(storage, a, indices)

    def settle(self, storage: list[Any], j: int, value: Any, views: Any, where: str | int) -> None:
        """Complete position ``j`` after ``getobs_into(views, ...)`` returned ``value``: array leaves
        it wrote in place are done; any it returned instead are copied in (checked); object leaves
        are stored."""
        try:
            self._settle(storage, j, value, views, False)
        except w.Mismatch as mismatch:
            raise mismatch.located(where) from None
        self._locate_spills(storage, j, [where])

    def _settle(self, storage: list[Any], j: int, value: Any, views: Any, rows: bool) -> None:
        settle = self._settler
        if settle is None:
            settle = self._settler = _compile(self.structure, iter(self.nodes), settlers=True)[1]
        settle(storage, j, value, views, rows)

    def _locate_spills(self, storage: list[Any], j: int, wheres: list[Any]) -> None:
        """Name the rows ``j..`` that ``VarNode``s kept aside (for the messages of a failing collate)."""
        for node in self._var_nodes:
            spill = storage[node.spill.slot]
            for k, where in enumerate(wheres, start=j):
                entry = spill[k]
                if entry is not None and entry[0] is None:
                    spill[k] = (f"sample {where}" if isinstance(where, int) else where, entry[1])


def _array_slot(node: Node) -> int:
    """The slot a view shows for ``node`` (an array leaf's, a ``VarNode``'s array), else -1."""
    if isinstance(node, ArrayLeaf):
        return node.slot
    return node.array.slot if isinstance(node, VarNode) else -1


def _compile(s: Structure, nodes: Iterator[Node], settlers: bool) -> tuple[w.Writer, w.Settler | None]:
    """The writer (and with ``settlers`` the settler) of a structure whose leaf nodes come from ``nodes``."""
    if s.type is None:
        node = next(nodes)
        if isinstance(node, ArrayLeaf):
            write = w.array_writer(node.slot, node.shape, node.dtype)
            return write, w.array_settler(write) if settlers else None
        if isinstance(node, ObjectLeaf):
            return w.object_writer(node.slot), w.object_settler(node.slot) if settlers else None
        if isinstance(node, VarNode):
            write = w.var_writer(node.array.slot, node.spill.slot, node.fits)
            return write, w.var_settler(node.spill.slot, write) if settlers else None
        write = w.object_writer(node.leaf.slot)  # a CollatedNode
        return write, w.written(write) if settlers else None
    members = [_compile(child, nodes, settlers) for child in s.children]
    if s.type is dict:
        write = w.dict_writer(s.keys, list(zip(s.keys, (m[0] for m in members))))
        return write, w.dict_settler(list(zip(s.keys, (m[1] for m in members))), write) if settlers else None
    write = w.sequence_writer(s.type, [m[0] for m in members])
    return write, w.written(write) if settlers else None


def spec_of_data(data: Any) -> Spec | None:
    """The spec of ``data``'s observations when it is known without reading any: a NumPy array, or a
    group (tuples and mappings, nested; lists are containers, never groups) of arrays."""
    arrays, structure = flatten_group(data)
    if not all(isinstance(a, np.ndarray) and not a.dtype.hasobject and a.ndim > 0 for a in arrays):
        return None
    return Spec.from_nodes(structure, [ArrayLeaf(a.shape[1:], a.dtype) for a in arrays])
