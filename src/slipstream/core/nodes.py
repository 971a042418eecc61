"""The leaf nodes of a batch structure (``core.spec.Spec``): what one leaf of a sample is, and
where its batch is stored.

* ``ArrayLeaf``: a fixed shape and dtype; stored as one ``(n, *shape)`` array.
* ``ObjectLeaf``: anything else (strings, bytes, None, objects); stored as a list.
* ``VarNode``: a value whose shape or dtype may change per sample (an image or ragged-array
  field); an array leaf for the rows that fit plus an object leaf for those kept aside.
* ``CollatedNode``: a value whose structure may change per sample (a JSON field); an object
  leaf, collated per batch.

``leaf_of(value)`` describes one leaf value of a sample (as ``default_collate`` treats it). The
``Spec`` numbers the storage leaves (``slot``) and labels the nodes with their field; the nodes'
``build`` collate their rows with the function the ``Spec`` hands them (``default_collate`` with
located errors), so this module does not depend on the spec.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

__all__ = ["ArrayLeaf", "CollatedNode", "Node", "ObjectLeaf", "VarNode", "leaf_of"]

# collate(rows, where, label, hint=""): default_collate of ``rows``, a mismatch located at where[j] and field label
CollateRows = Callable[..., Any]


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

    def build(self, storage: list[Any], n: int, collate: CollateRows) -> Any:
        array, spill = storage[self.array.slot][:n], storage[self.spill.slot][:n]
        if all(entry is None for entry in spill):
            return array
        rows = [array[j] if entry is None else entry[1] for j, entry in enumerate(spill)]
        where = [f"row {j} of the batch" if entry is None else entry[0] for j, entry in enumerate(spill)]
        return collate(rows, where, self.label, self.hint_for(rows))

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

    def build(self, storage: list[Any], n: int, collate: CollateRows) -> Any:
        rows = storage[self.leaf.slot][:n]
        return collate(rows, [f"row {j} of the batch" for j in range(len(rows))], self.label)


Node = ArrayLeaf | ObjectLeaf | VarNode | CollatedNode




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


def leaf_of(value: Any) -> ArrayLeaf | ObjectLeaf:
    """The leaf node describing one leaf value of a sample."""
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
