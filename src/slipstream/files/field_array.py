"""``F.Array``: a NumPy array per sample, fixed-shape or ragged."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from ..core.nodes import ArrayLeaf, VarNode
from .field import Column, Field, binary_views, pyarrow_module, slice_row

__all__ = ["Array", "FixedColumn"]

_NATIVE = {np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.float16, np.float32, np.float64)}


class FixedColumn(Column):
    """One page of a fixed-shape array field: ``values``, the page's (rows, *shape) array, zero-copy."""

    def __init__(self, values: np.ndarray):
        self.values = values

    def get(self, row: int) -> Any:
        return self.values[row]

    def into(self, buffer: Any, row: int) -> Any:
        if isinstance(buffer, np.ndarray) and buffer.shape == self.values.shape[1:]:
            if buffer.dtype == self.values.dtype:
                buffer[...] = self.values[row]  # a plain copy (NumPy releases the GIL for large ones)
            else:
                np.copyto(buffer, self.values[row], casting="same_kind")
            return buffer
        return self.get(row)

    def batch_node(self, row: int) -> Any:
        return ArrayLeaf(self.values.shape[1:], self.values.dtype)

    def rows_into(self, target: np.ndarray, positions: list[int], rows: list[int]) -> bool:
        """Copy ``rows`` to ``target[positions]`` row by row; False when ``target`` does not fit."""
        values = self.values
        if target.dtype != values.dtype or target.shape[1:] != values.shape[1:]:
            return False
        for j, r in zip(positions, rows):
            target[j] = values[r]
        return True


class _RaggedColumn(Column):
    def __init__(self, array: Any, dtype: np.dtype, ndim: int):
        self.shapes = array.field("shape").flatten().to_numpy(zero_copy_only=False).reshape(len(array), ndim)
        self.offsets, self.data = binary_views(array.field("data"))
        self.dtype = dtype

    def get(self, row: int) -> Any:
        data = slice_row(self.offsets, self.data, row)
        shape = tuple(int(s) for s in self.shapes[row])
        if min(shape, default=0) < 0 or data.size != math.prod(shape) * self.dtype.itemsize:
            raise ValueError(f"{data.size} stored bytes cannot hold a {self.dtype} array of shape {shape}")
        return data.view(self.dtype).reshape(shape)

    def batch_node(self, row: int) -> Any:
        return VarNode(self.get(row).shape, self.dtype)  # shapes vary: a guess (checked against the bytes)


def _castable(source: np.dtype, target: np.dtype) -> bool:
    """Whether ``source`` values may be cast to ``target`` at all: within a kind (``same_kind``), and
    between signed and unsigned integers (the values are range-checked by ``_check_round_trip``)."""
    return np.can_cast(source, target, casting="same_kind") or (source.kind in "iu" and target.kind in "iu")


def _lossless(source: np.dtype, target: np.dtype) -> bool:
    """Whether every ``source`` value round-trips through ``target`` (NumPy's ``safe`` casting, less
    integers too wide for the float's mantissa, which NumPy calls safe: int64 to float64)."""
    if source.kind in "iu" and target.kind in "fc":
        bits = source.itemsize * 8 - (source.kind == "i")
        return bits <= np.finfo(target).nmant + 1
    return np.can_cast(source, target, casting="safe")


def _lost(array: np.ndarray, stored: np.ndarray) -> tuple[np.ndarray, str]:
    """Which values of ``array`` its cast ``stored`` does not keep (a bool mask), and what the stored
    dtype does hold, by the round-trip rule (see ``Array``)."""
    source, target = array.dtype, stored.dtype
    if source.kind in "iu" and target.kind in "iu":
        info = np.iinfo(target)
        return (array < info.min) | (array > info.max), f"{target} holds {info.min}..{info.max}"
    if source.kind in "iu":  # to a float or complex: every integer exactly
        values = stored.real if target.kind == "c" else stored
        bits = np.finfo(values.dtype).nmant + 1
        top = float(np.iinfo(source).max) + 1  # a power of two: above the source range once rounded up
        with np.errstate(invalid="ignore", over="ignore"):
            outside = ~np.isfinite(values) | (values >= top)
            back = np.where(outside, 0, values).astype(source)
        return outside | (back != array), f"{target} holds integers exactly up to 2**{bits} (beyond that, only some)"
    finite = np.finfo(stored.real.dtype).max
    return np.isfinite(array) & ~np.isfinite(stored), f"{target} holds finite values up to {finite:.6g} in magnitude"


def _check_round_trip(array: np.ndarray, stored: np.ndarray, where: str) -> None:
    """Refuse a cast that does not round-trip (the rule in ``Array``'s docstring): ``ValueError`` naming
    ``where``, the first value lost and what it would read back as, and how many were lost."""
    if array.size == 0 or _lossless(array.dtype, stored.dtype):
        return
    lost, holds = _lost(array, stored)
    if not lost.any():
        return
    first = tuple(int(i) for i in np.argwhere(lost)[0])
    value, became = array[first].item(), stored[first].item()
    at = f" at {list(first)}" if first else ""
    raise ValueError(
        f"{where}: array field of dtype {stored.dtype} cannot hold the {array.dtype} value {value!r}{at} "
        f"(it would read back as {became!r}; {int(lost.sum())} of {array.size} values do not fit): {holds}. "
        f"Declare a dtype that holds them (F.Array(dtype=...)) or convert the values before writing"
    )


class Array(Field):
    """A NumPy array per sample: fixed ``shape`` (stored as an Arrow fixed-size list), or ragged
    when ``shape`` is None (each sample keeps its own shape; no padding). ``dtype`` and, for
    ragged arrays, the number of dimensions are taken from the first sample when not given.
    Any numeric dtype, float16 and bool included; values are stored little-endian.

    Values of another dtype are cast to ``dtype`` within a kind (``same_kind``: never float to int;
    signed and unsigned integers are one kind here), and a cast must round-trip: integers must fit
    the stored integer range (``[0, 5]`` fits uint8, -1 does not), and integers stored as
    floats must stay exact (int64 1000 in int8, 70000 in int16, 2**24 + 1 in float32 raise
    ``ValueError`` naming the sample, field, value and range). A narrower float rounds as floats do
    (float64 to float32 keeps about 7 digits) but may not overflow: a finite value that would become
    inf (1e6 in float16) raises; NaN and inf stay as they are.

    Decoded arrays are read-only views into the file's pages (copy one to modify it).
    """

    kind = "array"

    def __init__(self, dtype: Any = None, shape: tuple[int, ...] | list[int] | None = None, ndim: int | None = None):
        self.dtype = None if dtype is None else np.dtype(dtype)
        if self.dtype is not None and (self.dtype.hasobject or self.dtype.kind not in "biufc"):
            raise TypeError(f"F.Array stores numeric or bool dtypes, got {self.dtype}")
        self.shape = None if shape is None else tuple(int(s) for s in shape)
        self.ndim = len(self.shape) if self.shape is not None else ndim

    def params(self) -> dict[str, Any]:
        return {
            "dtype": None if self.dtype is None else self.dtype.newbyteorder("<").str,
            "shape": None if self.shape is None else list(self.shape),
            "ndim": self.ndim,
        }

    def prepare(self, value: Any, where: str) -> None:
        array = np.asarray(value)
        if self.dtype is None:
            if array.dtype.hasobject or array.dtype.kind not in "biufc":
                raise TypeError(f"{where}: F.Array stores numeric or bool arrays, got dtype {array.dtype}")
            self.dtype = array.dtype
        if self.ndim is None:
            self.ndim = array.ndim
        self.dtype = self.dtype.newbyteorder("<") if self.dtype.byteorder == ">" else self.dtype

    def _storage(self) -> np.dtype:
        return self.dtype if self.dtype in _NATIVE else np.dtype(np.uint8)

    def encode(self, value: Any, index: int, where: str) -> Any:
        array = np.asarray(value)
        if array.dtype.hasobject or array.dtype.kind not in "biufc":
            raise TypeError(f"{where}: array field expects a numeric array, got dtype {array.dtype}")
        if not _castable(array.dtype, self.dtype):
            raise TypeError(f"{where}: array field of dtype {self.dtype} cannot store {array.dtype} without losing information")
        if self.shape is not None and array.shape != self.shape:
            raise ValueError(f"{where}: array field expects shape {self.shape}, got {array.shape} (use F.Array(shape=None) for ragged arrays, F.Tokens() for token ids)")
        if self.shape is None and array.ndim != self.ndim:
            raise ValueError(f"{where}: ragged array field has {self.ndim} dimensions, got shape {array.shape}")
        with np.errstate(over="ignore", invalid="ignore"):  # a lossy cast is refused just below
            stored = np.ascontiguousarray(array, dtype=self.dtype.newbyteorder("<"))
        _check_round_trip(array, stored, where)
        data = stored.view(self._storage()).reshape(-1)
        return data if self.shape is not None else (array.shape, data)

    def nbytes(self, encoded: Any) -> int:
        return encoded.nbytes if self.shape is not None else encoded[1].nbytes + 8 * (self.ndim + 1)

    def _size(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize // self._storage().itemsize  # type: ignore[arg-type]

    def arrow_type(self) -> Any:
        pa = pyarrow_module()
        if self.shape is not None:
            return pa.list_(pa.from_numpy_dtype(self._storage()), self._size())
        return pa.struct([("shape", pa.list_(pa.int64(), self.ndim)), ("data", pa.large_binary())])

    def to_arrow(self, encoded: list[Any]) -> Any:
        pa = pyarrow_module()
        if self.shape is not None:
            size = self._size()
            if size == 0:
                return pa.array([[]] * len(encoded), type=self.arrow_type())
            flat = np.concatenate(encoded) if encoded else np.zeros(0, self._storage())
            return pa.FixedSizeListArray.from_arrays(pa.array(flat), size)
        shapes = np.array([s for s, _ in encoded], dtype=np.int64).reshape(-1)
        shape_array = pa.FixedSizeListArray.from_arrays(pa.array(shapes), self.ndim) if self.ndim else pa.array([[]] * len(encoded), type=pa.list_(pa.int64(), 0))
        data = pa.array([d.tobytes() for _, d in encoded], type=pa.large_binary())
        return pa.StructArray.from_arrays([shape_array, data], names=["shape", "data"])

    def column(self, array: Any) -> Column:
        if self.shape is None:
            return _RaggedColumn(array, self.dtype, self.ndim)  # type: ignore[arg-type]
        values = array.flatten().to_numpy(zero_copy_only=False) if self._size() else np.zeros(0, self._storage())
        return FixedColumn(values.view(self.dtype).reshape(len(array), *self.shape))
