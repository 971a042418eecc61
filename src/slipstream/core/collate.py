"""Batch structure and default collation.

A *spec* describes one observation: nested dicts, tuples (named too) and lists whose leaves are
either arrays (a fixed shape and dtype: NumPy arrays and scalars, Python numbers, anything with
``__array__``) or objects (strings, bytes, None, anything else). A batch of ``n`` observations has
the same nesting; each array leaf becomes one ``(n, *shape)`` array, each object leaf a list.

``default_collate(samples)`` stacks a list of observations this way. The loader uses the same spec
to preallocate reusable batch buffers (see ``_slots``) and write samples straight into them.

A container that knows which of its values can change shape or type from sample to sample (a
packed file's JSON, ragged-array and image fields) describes them with two more nodes, so the
loader's batch always equals ``default_collate`` of the same samples: a ``VarNode`` writes rows
that match its buffer in place and keeps the others aside, collating the batch from its rows when
any were kept; a ``CollatedNode`` keeps every value and collates them per batch.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

__all__ = ["ArrayLeaf", "CollatedNode", "ObjectLeaf", "Spec", "VarNode", "default_collate", "spec_of_data"]


class ArrayLeaf:
    __slots__ = ("shape", "dtype", "slot")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype):
        self.shape, self.dtype, self.slot = tuple(shape), np.dtype(dtype), -1


class ObjectLeaf:
    __slots__ = ("slot",)

    def __init__(self) -> None:
        self.slot = -1


class VarNode:
    """A value whose shape or dtype may differ per sample, given a buffer of ``shape`` and ``dtype``
    (a guess: the first sample's). Storage: the ``array`` leaf, and a ``spill`` object leaf holding,
    per row, None (the row is in the array) or ``(where, value)`` for a value that does not match the
    buffer exactly. The batch is the array when nothing was spilled, else ``default_collate`` of the
    rows: the same batch either way, as if the samples had been collated one by one."""

    __slots__ = ("array", "spill", "label", "hint")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype, hint: str = ""):
        self.array, self.spill, self.label, self.hint = ArrayLeaf(shape, dtype), ObjectLeaf(), "", hint

    def __reduce__(self) -> tuple[Any, ...]:
        return (VarNode, (self.array.shape, self.array.dtype, self.hint))  # slots and label are renumbered by Spec

    def fits(self, value: Any) -> bool:
        """Whether ``value`` can go into the buffer exactly (same shape and dtype: nothing to cast)."""
        leaf = self.array
        return isinstance(value, (np.ndarray, np.generic)) and value.dtype == leaf.dtype and value.shape == leaf.shape

    def build(self, storage: list[Any], n: int) -> Any:
        array, spill = storage[self.array.slot][:n], storage[self.spill.slot][:n]
        if all(entry is None for entry in spill):
            return array
        rows = [array[j] if entry is None else entry[1] for j, entry in enumerate(spill)]
        where = [f"row {j} of the batch" if entry is None else entry[0] for j, entry in enumerate(spill)]
        return _collate_rows(rows, where, self.label, self.hint_for(rows))

    def hint_for(self, rows: list[Any]) -> str:
        """The fix to suggest should ``rows`` not collate (a subclass may choose it by the rows)."""
        return self.hint


class CollatedNode:
    """A value whose structure may differ per sample (a JSON value: a number, list, dict, string or
    None): kept as an object per row and collated per batch by ``default_collate``'s rules."""

    __slots__ = ("leaf", "label")

    def __init__(self) -> None:
        self.leaf, self.label = ObjectLeaf(), ""

    def __reduce__(self) -> tuple[Any, ...]:
        return (CollatedNode, ())

    def build(self, storage: list[Any], n: int) -> Any:
        rows = storage[self.leaf.slot][:n]
        return _collate_rows(rows, [f"row {j} of the batch" for j in range(len(rows))], self.label)


_NODES = (VarNode, CollatedNode)
_LEAVES = (ArrayLeaf, ObjectLeaf, VarNode, CollatedNode)


def _collate_rows(rows: list[Any], where: list[Any], label: str, hint: str = "") -> Any:
    """``default_collate(rows)``, a mismatch located at ``where[j]`` and field ``label`` (``hint``
    added to the message)."""
    if not rows:
        return []
    spec = Spec.of(rows[0])
    storage = spec.allocate(len(rows))
    for j, row in enumerate(rows):
        try:
            spec._writer(storage, j, row)
        except _Mismatch as mismatch:
            at = where[j] if isinstance(where[j], str) else f"sample {where[j]}"
            message = f"{at}, field {label}{''.join(mismatch.path)}, {mismatch.message}"
            raise mismatch.kind(f"{message}; {hint}" if hint else message) from None
    return spec.build(storage)


def _python_dtype(value: Any) -> np.dtype | None:
    if isinstance(value, bool):
        return np.dtype(bool)
    if isinstance(value, int):
        return np.dtype(np.int64)
    if isinstance(value, float):
        return np.dtype(np.float64)
    if isinstance(value, complex):
        return np.dtype(np.complex128)
    return None


def _describe(value: Any) -> Any:
    """A tree of leaves mirroring ``value``'s nesting."""
    if isinstance(value, Mapping):
        return {k: _describe(v) for k, v in value.items()}
    if isinstance(value, (tuple, list)):
        children = [_describe(v) for v in value]
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            return (type(value), children)
        return (tuple if isinstance(value, tuple) else list, children)
    dtype = _python_dtype(value)
    if dtype is not None:
        return ArrayLeaf((), dtype)
    if isinstance(value, (np.str_, np.bytes_)):
        return ObjectLeaf()  # a string is an object (stacking would cut later ones to the first's width)
    if isinstance(value, (np.ndarray, np.generic)):
        if value.dtype.hasobject:
            return ObjectLeaf()
        return ArrayLeaf(value.shape, value.dtype)
    if hasattr(value, "__array__") and not isinstance(value, (str, bytes)):
        array = np.asarray(value)
        if not array.dtype.hasobject:
            return ArrayLeaf(array.shape, array.dtype)
    return ObjectLeaf()


class Spec:
    """The structure of one observation, with its leaves numbered in depth-first order."""

    def __init__(self, tree: Any):
        self.tree = tree
        self.leaves: list[ArrayLeaf | ObjectLeaf] = []
        self._number(tree)
        self.array_leaves = [leaf for leaf in self.leaves if isinstance(leaf, ArrayLeaf)]
        self.object_leaves = [leaf for leaf in self.leaves if isinstance(leaf, ObjectLeaf)]
        self._writer = _compile(tree)
        self._leaf_writers = {leaf.slot: _array_writer(leaf) for leaf in self.array_leaves}
        self._subtree_writers: dict[int, Writer] = {}
        self._var_nodes: list[VarNode] = []
        _walk_nodes(tree, self._var_nodes)

    def _number(self, node: Any, label: str = "") -> None:
        if isinstance(node, (ArrayLeaf, ObjectLeaf)):
            node.slot = len(self.leaves)
            self.leaves.append(node)
        elif isinstance(node, VarNode):
            node.label = label
            self._number(node.array)
            self._number(node.spill)
        elif isinstance(node, CollatedNode):
            node.label = label
            self._number(node.leaf)
        elif isinstance(node, dict):
            for k, child in node.items():
                self._number(child, f"{label}[{k!r}]")
        else:
            for k, child in enumerate(node[1]):
                self._number(child, f"{label}[{k}]")

    def __reduce__(self) -> tuple[Any, ...]:
        return (Spec, (self.tree,))  # the compiled writers are rebuilt on the other side

    @classmethod
    def of(cls, sample: Any) -> Spec:
        return cls(_describe(sample))

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
        except _Mismatch as mismatch:
            raise mismatch.located(where) from None
        if self._var_nodes:
            self._locate_spills(storage, j, [where])

    def build(self, storage: list[Any], n: int | None = None) -> Any:
        """The batch: ``storage`` arranged in the observation's nesting (arrays cut to ``n`` rows).
        A ``VarNode`` or ``CollatedNode`` collates its rows here (see their docstrings)."""
        if isinstance(self.tree, (ArrayLeaf, ObjectLeaf)):  # the common single-array sample, without a walk
            value = storage[0]
            return value if n is None or len(value) == n else value[:n]

        def leaf(node: ArrayLeaf | ObjectLeaf) -> Any:
            value = storage[node.slot]
            return value if n is None or len(value) == n else value[:n]

        rows = n if n is not None else len(storage[0]) if storage else 0
        return _assemble(self.tree, leaf, lambda node: node.build(storage, rows))

    def batch_views(self, storage: list[Any], a: int, b: int) -> Any:
        """A buffer for positions ``a..b-1``: row slices of the array leaves and of each ``VarNode``'s
        array (object leaves and ``CollatedNode``s are None)."""
        return _assemble(self.tree, lambda node: storage[node.slot][a:b] if isinstance(node, ArrayLeaf) else None)

    def settle_batch(self, storage: list[Any], a: int, value: Any, views: Any, indices: list[int]) -> None:
        """Complete positions ``a..a+len(indices)-1`` after ``getobs_batch_into(views, indices)``
        returned ``value``, which mirrors ``views`` down to where it holds either the view itself
        (written in place: done) or a sequence of per-row values (copied in, shape and cast checked;
        kept aside for a ``VarNode``; stored for object leaves). A mismatch raises ``ValueError`` /
        ``TypeError`` naming the sample (``indices[row]``) and the field."""
        try:
            self._settle(self.tree, storage, a, value, views, True)
        except _Mismatch as mismatch:
            row = getattr(mismatch, "row", None)
            where = f"sample {indices[row]}" if row is not None and row < len(indices) else f"samples {indices[:1]}.."
            raise mismatch.located(where) from None
        self._locate_spills(storage, a, indices)

    def views(self, storage: list[Any], j: int) -> Any:
        """A buffer for observation ``j``: views into the array leaves (object leaves are None)."""
        return _assemble(self.tree, lambda node: storage[node.slot][j, ...] if isinstance(node, ArrayLeaf) else None)

    def settle(self, storage: list[Any], j: int, value: Any, views: Any, where: str | int) -> None:
        """Complete position ``j`` after ``getobs_into(views, ...)`` returned ``value``: array leaves
        it wrote in place are done; any it returned instead are copied in (checked); object leaves
        are stored."""
        try:
            self._settle(self.tree, storage, j, value, views, False)
        except _Mismatch as mismatch:
            raise mismatch.located(where) from None
        self._locate_spills(storage, j, [where])

    def _locate_spills(self, storage: list[Any], j: int, wheres: list[Any]) -> None:
        """Name the rows ``j..`` that ``VarNode``s kept aside (for the messages of a failing collate)."""
        for node in self._var_nodes:
            spill = storage[node.spill.slot]
            for k, where in enumerate(wheres, start=j):
                entry = spill[k]
                if entry is not None and entry[0] is None:
                    spill[k] = (f"sample {where}" if isinstance(where, int) else where, entry[1])

    def _settle(self, node: Any, storage: list[Any], j: int, value: Any, view: Any, rows: bool) -> None:
        """Walk ``value`` beside ``view``; with ``rows`` each leaf holds consecutive rows from ``j``,
        and a node whose value is not a mapping like its view holds a sequence of per-row values."""
        if isinstance(node, ObjectLeaf):
            if rows:
                storage[node.slot][j : j + len(value)] = list(value)
            else:
                storage[node.slot][j] = value
        elif isinstance(node, VarNode) and value is view:  # written in place, every row
            storage[node.spill.slot][j : j + (len(value) if rows else 1)] = [None] * (len(value) if rows else 1)
        elif isinstance(node, ArrayLeaf) and value is view:
            pass
        elif isinstance(node, dict) and isinstance(value, Mapping) and isinstance(view, Mapping):
            for k, child in node.items():
                self._settle(child, storage, j, value[k], view[k], rows)
        elif not rows:
            self._node_writer(node)(storage, j, value)
        else:
            write = self._node_writer(node)
            for k, row in enumerate(value):
                try:
                    write(storage, j + k, row)
                except _Mismatch as mismatch:
                    mismatch.row = k  # type: ignore[attr-defined]
                    raise

    def _node_writer(self, node: Any) -> Writer:
        """The compiled writer of a subtree (the root's is ``_writer``; leaves' are kept)."""
        if node is self.tree:
            return self._writer
        if isinstance(node, ArrayLeaf):
            return self._leaf_writers[node.slot]
        writer = self._subtree_writers.get(id(node))
        if writer is None:
            writer = self._subtree_writers[id(node)] = _compile(node)
        return writer


def _walk_nodes(node: Any, found: list[VarNode]) -> None:
    """Collect the ``VarNode``s of a spec tree."""
    if isinstance(node, VarNode):
        found.append(node)
    elif isinstance(node, dict):
        for child in node.values():
            _walk_nodes(child, found)
    elif isinstance(node, tuple):
        for child in node[1]:
            _walk_nodes(child, found)


def _assemble(node: Any, leaf: Callable[[Any], Any], nodes: Callable[[Any], Any] | None = None) -> Any:
    """Rebuild the nesting of a spec tree with ``leaf(node)`` at each leaf, and ``nodes(node)`` at
    each ``VarNode`` / ``CollatedNode`` (without ``nodes``, they count as their array / object leaf)."""
    if isinstance(node, (ArrayLeaf, ObjectLeaf)):
        return leaf(node)
    if isinstance(node, _NODES):
        if nodes is not None:
            return nodes(node)
        return leaf(node.array if isinstance(node, VarNode) else node.leaf)
    if isinstance(node, dict):
        return {k: _assemble(child, leaf, nodes) for k, child in node.items()}
    kind, children = node
    values = [_assemble(child, leaf, nodes) for child in children]
    if kind is list:
        return values
    return kind(values) if kind is tuple else kind(*values)


Writer = Callable[[list, int, Any], None]


class _Mismatch(Exception):
    """A sample that does not fit the spec; ``Spec.write`` turns it into a located ValueError/TypeError."""

    def __init__(self, kind: type[Exception], message: str):
        super().__init__(message)
        self.kind, self.message, self.path = kind, message, []

    def located(self, where: str | int) -> Exception:
        """The error to raise, located at ``where`` (a sample index, or a description)."""
        prefix = f"sample {where}" if isinstance(where, int) else where
        return self.kind(f"{prefix}{''.join(self.path)} {self.message}")


def _compile(node: Any) -> Writer:
    """A writer for one node of a spec tree: closures, so the per-sample path does no type dispatch
    and builds no strings (a mismatch's location is assembled only when it is raised)."""
    if isinstance(node, ArrayLeaf):
        return _array_writer(node)
    if isinstance(node, (ObjectLeaf, CollatedNode)):
        slot = node.slot if isinstance(node, ObjectLeaf) else node.leaf.slot

        def write_object(storage: list, j: int, value: Any) -> None:
            storage[slot][j] = value

        return write_object
    if isinstance(node, VarNode):
        return _var_writer(node)
    if isinstance(node, dict):
        keys = node.keys()
        members = [(k, _compile(child)) for k, child in node.items()]

        def write_dict(storage: list, j: int, value: Any) -> None:
            if not isinstance(value, Mapping) or value.keys() != keys:
                found = sorted(value.keys(), key=str) if isinstance(value, Mapping) else type(value).__name__
                raise _Mismatch(ValueError, f"has keys {found} but the first sample had {sorted(keys, key=str)}")
            for k, write in members:
                try:
                    write(storage, j, value[k])
                except _Mismatch as mismatch:
                    mismatch.path.insert(0, f"[{k!r}]")
                    raise

        return write_dict
    kind, children = node
    writers = list(enumerate(_compile(child) for child in children))
    count = len(writers)

    def write_sequence(storage: list, j: int, value: Any) -> None:
        if not isinstance(value, (tuple, list)) or len(value) != count:
            raise _Mismatch(
                ValueError, f"is a {type(value).__name__} that does not match the first sample's {kind.__name__} of {count} members"
            )
        for (k, write), v in zip(writers, value):
            try:
                write(storage, j, v)
            except _Mismatch as mismatch:
                mismatch.path.insert(0, f"[{k}]")
                raise

    return write_sequence


def _array_writer(leaf: ArrayLeaf) -> Writer:
    slot, shape, dtype = leaf.slot, leaf.shape, leaf.dtype
    scalar_type = {"b": bool, "i": int, "u": int, "f": float, "c": complex}.get(dtype.kind)
    accepts = {bool: (bool,), int: (int, bool), float: (float, int, bool), complex: (complex, float, int, bool)}.get(scalar_type, ())

    def checked(storage: list, j: int, value: Any) -> None:
        if hasattr(value, "__array__") and not isinstance(value, (np.ndarray, np.generic)):
            value = np.asarray(value)  # a tensor (torch, JAX...): checked by its dtype like an array
        found = np.shape(value)
        if found != shape:
            raise _Mismatch(
                ValueError,
                f"has shape {found} but the first sample had shape {shape}: the default collate stacks "
                f"equal shapes only (pass collate= to batch variable shapes)",
            )
        # NumPy values must cast safely (int64 -> int8 could wrap, U5 -> U1 could cut); Python
        # numbers only need to fit, which NumPy checks as it stores them
        source = value.dtype if isinstance(value, (np.ndarray, np.generic)) else None
        if source is not None and not np.can_cast(source, dtype, casting="safe"):
            raise _Mismatch(
                TypeError,
                f"has dtype {source} but the first sample had {dtype}; casting could lose information "
                f"(convert it in the container or pass collate=)",
            )
        target = storage[slot]
        try:
            np.copyto(target[j] if shape else target[j : j + 1], value, casting="same_kind")
        except (TypeError, OverflowError, ValueError) as exc:
            raise _Mismatch(TypeError, f"cannot be stored as {dtype} like the first sample: {exc}") from None

    def write_array(storage: list, j: int, value: Any) -> None:
        # fast paths: an ndarray (or NumPy scalar) of the exact dtype and shape, or a fitting Python number
        if (type(value) is np.ndarray or isinstance(value, np.generic)) and value.dtype == dtype and value.shape == shape:
            storage[slot][j] = value
        elif not shape and type(value) in accepts:
            try:
                storage[slot][j] = value
            except OverflowError as exc:
                raise _Mismatch(ValueError, f"is {value!r}, out of range for {dtype} (the first sample's type): {exc}") from None
        else:
            checked(storage, j, value)

    return write_array


def _var_writer(node: VarNode) -> Writer:
    """Rows that fit the buffer exactly are copied into it; others are kept aside (see ``VarNode``)."""
    array_slot, spill_slot, fits = node.array.slot, node.spill.slot, node.fits

    def write_var(storage: list, j: int, value: Any) -> None:
        if fits(value):
            storage[array_slot][j] = value
            storage[spill_slot][j] = None
        else:
            storage[spill_slot][j] = (None, value)  # located by Spec.write / settle

    return write_var


def spec_of_data(data: Any) -> Spec | None:
    """The spec of ``data``'s observations when it is known without reading any (arrays and groups of them)."""
    tree = _array_tree(data)
    return None if tree is None else Spec(tree)


def _array_tree(data: Any) -> Any:
    if isinstance(data, np.ndarray):
        return None if data.dtype.hasobject or data.ndim == 0 else ArrayLeaf(data.shape[1:], data.dtype)
    if isinstance(data, Mapping):
        children = {k: _array_tree(v) for k, v in data.items()}
        return None if any(c is None for c in children.values()) else children
    if isinstance(data, tuple):
        children = [_array_tree(v) for v in data]
        if any(c is None for c in children):
            return None
        return (type(data), children) if hasattr(data, "_fields") else (tuple, children)
    return None


def default_collate(samples: list[Any]) -> Any:
    """Stack observations: nested dicts/tuples/lists kept, arrays and numbers stacked, other objects listed.

    Every sample must have the first sample's structure, shapes and (safely castable) dtypes;
    a mismatch raises ``ValueError``/``TypeError`` naming the sample and the field.
    """
    if not samples:
        raise ValueError("cannot collate an empty list of samples")
    spec = Spec.of(samples[0])
    storage = spec.allocate(len(samples))
    for j, sample in enumerate(samples):
        spec.write(storage, j, sample, f"sample {j}")
    return spec.build(storage)
