"""The per-sample hot path of a batch structure: writers and settlers, made once per ``Spec``.

A *writer* ``write(storage, j, value)`` checks one observation's value (or one member of it)
against the structure and stores it at position ``j`` of the batch storage (one array or list per
leaf). A *settler* ``settle(storage, j, value, view, rows)`` completes positions after a
container's ``getobs_into`` / ``getobs_batch_into`` wrote into views of the storage and returned
``value``: members it wrote in place (``value is view``) are done, the others are written.

Both are closures over the slots, shapes, dtypes and keys the ``Spec`` decided once, so the
per-sample path does no type dispatch over the structure and builds no strings: a value that does
not fit raises ``Mismatch`` (its error type, message and the path of keys to the member), which the
``Spec`` turns into a located ``ValueError`` / ``TypeError`` only when it is raised.

The factories take plain values (slots, shapes, callables), never the spec's nodes: ``core.spec``
decides which writer each node gets.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

__all__ = ["Mismatch", "Settler", "Writer"]

Writer = Callable[[list, int, Any], None]
Settler = Callable[[list, int, Any, Any, bool], None]


class Mismatch(Exception):
    """A sample that does not fit the spec; ``Spec.write`` turns it into a located ValueError/TypeError."""

    def __init__(self, kind: type[Exception], message: str):
        super().__init__(message)
        self.kind, self.message, self.path = kind, message, []
        self.row: int | None = None  # set by a settler writing per-row values

    def located(self, where: str | int) -> Exception:
        """The error to raise, located at ``where`` (a sample index, or a description)."""
        prefix = f"sample {where}" if isinstance(where, int) else where
        return self.kind(f"{prefix}{''.join(self.path)} {self.message}")


def object_writer(slot: int) -> Writer:
    def write_object(storage: list, j: int, value: Any) -> None:
        storage[slot][j] = value

    return write_object


def array_writer(slot: int, shape: tuple[int, ...], dtype: np.dtype) -> Writer:
    scalar_type = {"b": bool, "i": int, "u": int, "f": float, "c": complex}.get(dtype.kind)
    accepts = {bool: (bool,), int: (int, bool), float: (float, int, bool), complex: (complex, float, int, bool)}.get(scalar_type, ())

    def checked(storage: list, j: int, value: Any) -> None:
        if hasattr(value, "__array__") and not isinstance(value, (np.ndarray, np.generic)):
            value = np.asarray(value)  # a tensor (torch, JAX...): checked by its dtype like an array
        found = np.shape(value)
        if found != shape:
            raise Mismatch(
                ValueError,
                f"has shape {found} but the first sample had shape {shape}: the default collate stacks "
                f"equal shapes only (pass collate= to batch variable shapes){_image_hint(found, shape)}",
            )
        # NumPy values must cast safely (int64 -> int8 could wrap, U5 -> U1 could cut); Python
        # numbers only need to fit, which NumPy checks as it stores them
        source = value.dtype if isinstance(value, (np.ndarray, np.generic)) else None
        if source is not None and not np.can_cast(source, dtype, casting="safe"):
            raise Mismatch(
                TypeError,
                f"has dtype {source} but the first sample had {dtype}; casting could lose information "
                f"(convert it in the container or pass collate=)",
            )
        target = storage[slot]
        try:
            np.copyto(target[j] if shape else target[j : j + 1], value, casting="same_kind")
        except (TypeError, OverflowError, ValueError) as exc:
            raise Mismatch(TypeError, f"cannot be stored as {dtype} like the first sample: {exc}") from None

    def write_array(storage: list, j: int, value: Any) -> None:
        # fast paths: an ndarray (or NumPy scalar) of the exact dtype and shape, or a fitting Python number
        if (type(value) is np.ndarray or isinstance(value, np.generic)) and value.dtype == dtype and value.shape == shape:
            storage[slot][j] = value
        elif not shape and type(value) in accepts:
            try:
                storage[slot][j] = value
            except OverflowError as exc:
                raise Mismatch(ValueError, f"is {value!r}, out of range for {dtype} (the first sample's type): {exc}") from None
        else:
            checked(storage, j, value)

    return write_array


def _image_hint(found: tuple[int, ...], expected: tuple[int, ...]) -> str:
    """The fix when two shapes look like images (H, W, C) or (C, H, W) with C 1 or 3 that differ:
    in channels (grayscale beside RGB) or in size; "" for other shapes."""
    if len(found) != 3 or len(expected) != 3:
        return ""
    for axis in (2, 0):  # channels last (H, W, C) or first (C, H, W)
        if found[axis] in (1, 3) and expected[axis] in (1, 3):
            if found[axis] != expected[axis]:
                if [s for k, s in enumerate(found) if k != axis] == [s for k, s in enumerate(expected) if k != axis]:
                    return (
                        "; if these are images, they mix 1 and 3 channels (grayscale and RGB): put ops.ToRGB() in the pipeline, "
                        "or pack with F.Image(channels=3)"
                    )
                return ""
            return (
                "; if these are images of several sizes, give them one in the pipeline: ss.mapfields(data, image=[ops.RandomResizedCrop(224)]) "
                "(ds.map(image=[...]) on a packed file), ops.CenterCrop or ops.Resize((h, w)) for evaluation"
            )
    return ""


def var_writer(array_slot: int, spill_slot: int, fits: Callable[[Any], bool]) -> Writer:
    """Rows that ``fit`` the buffer exactly are copied into it; others are kept aside in the spill
    leaf as ``(None, value)`` (located by ``Spec.write`` / ``settle``; see ``VarNode``)."""

    def write_var(storage: list, j: int, value: Any) -> None:
        if fits(value):
            storage[array_slot][j] = value
            storage[spill_slot][j] = None
        else:
            storage[spill_slot][j] = (None, value)

    return write_var


def dict_writer(keys: Iterable[Any], members: list[tuple[Any, Writer]]) -> Writer:
    """A mapping with exactly ``keys`` (in any order), each member written by its writer."""
    keys = dict.fromkeys(keys).keys()  # compared as a set, as ``Mapping.keys()`` compare

    def write_dict(storage: list, j: int, value: Any) -> None:
        if not isinstance(value, Mapping) or value.keys() != keys:
            found = sorted(value.keys(), key=str) if isinstance(value, Mapping) else type(value).__name__
            raise Mismatch(ValueError, f"has keys {found} but the first sample had {sorted(keys, key=str)}")
        for k, write in members:
            try:
                write(storage, j, value[k])
            except Mismatch as mismatch:
                mismatch.path.insert(0, f"[{k!r}]")
                raise

    return write_dict


def sequence_writer(kind: type, members: list[Writer]) -> Writer:
    """A tuple or list (either: the first sample's ``kind`` names it in messages) of ``len(members)``."""
    writers = list(enumerate(members))
    count = len(writers)

    def write_sequence(storage: list, j: int, value: Any) -> None:
        if not isinstance(value, (tuple, list)) or len(value) != count:
            raise Mismatch(
                ValueError, f"is a {type(value).__name__} that does not match the first sample's {kind.__name__} of {count} members"
            )
        for (k, write), v in zip(writers, value):
            try:
                write(storage, j, v)
            except Mismatch as mismatch:
                mismatch.path.insert(0, f"[{k}]")
                raise

    return write_sequence


def written(write: Writer) -> Settler:
    """A member not written in place: the value (or, with ``rows``, each row's) goes through ``write``."""

    def settle(storage: list, j: int, value: Any, view: Any, rows: bool) -> None:
        if not rows:
            write(storage, j, value)
            return
        for k, row in enumerate(value):
            try:
                write(storage, j + k, row)
            except Mismatch as mismatch:
                mismatch.row = k
                raise

    return settle


def object_settler(slot: int) -> Settler:
    def settle(storage: list, j: int, value: Any, view: Any, rows: bool) -> None:
        if rows:
            storage[slot][j : j + len(value)] = list(value)
        else:
            storage[slot][j] = value

    return settle


def array_settler(write: Writer) -> Settler:
    otherwise = written(write)

    def settle(storage: list, j: int, value: Any, view: Any, rows: bool) -> None:
        if value is not view:
            otherwise(storage, j, value, view, rows)

    return settle


def var_settler(spill_slot: int, write: Writer) -> Settler:
    otherwise = written(write)

    def settle(storage: list, j: int, value: Any, view: Any, rows: bool) -> None:
        if value is view:  # written in place, every row
            count = len(value) if rows else 1
            storage[spill_slot][j : j + count] = [None] * count
        else:
            otherwise(storage, j, value, view, rows)

    return settle


def dict_settler(members: list[tuple[Any, Settler]], write: Writer) -> Settler:
    """A mapping beside a mapping view is settled key by key; anything else is written whole."""
    otherwise = written(write)

    def settle(storage: list, j: int, value: Any, view: Any, rows: bool) -> None:
        if isinstance(value, Mapping) and isinstance(view, Mapping):
            for k, member in members:
                member(storage, j, value[k], view[k], rows)
        else:
            otherwise(storage, j, value, view, rows)

    return settle
