"""``F.Tokens``: a 1-d integer array per sample (token ids), stored as Arrow ``list<int>``.

The column is what Arrow tools expect of token documents: ``list<item: int32>`` (or uint16,
uint32, ...; ``large_list`` with ``large=True``), so pyarrow, polars and Hugging Face ``datasets``
read it as a list of integers per row, and the length of every document comes from the offsets
without reading a token. ``TokensColumn`` gives a page's ``offsets`` and ``values`` as NumPy
arrays over the page's buffers.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.errors import CorruptFileError
from ..core.nodes import VarNode
from .field import Column, Field, pyarrow_module

__all__ = ["TOKEN_DTYPES", "Tokens", "TokensColumn", "checked_list", "list_views", "token_ids"]

TOKEN_DTYPES = tuple(np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64))
_INT32_MAX = 2**31 - 1
_HINT = "token documents vary in length: pack them into fixed-length rows (ss.pack) or pass collate= to the loader"


def _token_dtype(dtype: Any, what: str) -> np.dtype:
    """``dtype`` as a little-endian integer dtype F.Tokens stores; ``TypeError`` otherwise."""
    found = np.dtype(dtype)
    native = found.newbyteorder("=") if found.byteorder in "<>" else found
    if native not in TOKEN_DTYPES:
        raise TypeError(f"{what}: F.Tokens stores integer token ids ({', '.join(str(d) for d in TOKEN_DTYPES)}), got dtype {found}")
    return native.newbyteorder("<")


def token_ids(value: Any, where: str, expects: str = "expected") -> np.ndarray:
    """``value`` as a 1-d integer array, not yet cast (an ndarray as it is; ``[]`` and ``()`` as
    int64). Anything else is a ``TypeError`` / ``ValueError`` that starts ``"{where}: {expects}"``:
    strings, bytes, mappings and scalars, values NumPy cannot make an array of, other shapes, and
    non-integer dtypes (floats and bools are refused, never cast)."""
    if isinstance(value, np.ndarray):
        array = value
    else:
        if isinstance(value, (str, bytes, dict)) or np.isscalar(value):
            raise TypeError(f"{where}: {expects} a 1-d array of integer token ids, got {type(value).__name__} {value!r:.80}")
        try:
            array = np.asarray(value)
        except (OverflowError, ValueError, TypeError) as exc:
            raise TypeError(f"{where}: {expects} a 1-d array of integer token ids, got {type(value).__name__}: {exc}") from None
        if array.size == 0 and array.ndim == 1 and isinstance(value, (list, tuple)):
            array = np.zeros(0, np.int64)  # [] is float64 to NumPy; no values to check
    if array.ndim != 1:
        raise ValueError(f"{where}: {expects} a 1-d array of token ids, got shape {array.shape}")
    if array.dtype.kind not in "iu":
        what = "Python ints beyond int64" if array.dtype.hasobject else f"dtype {array.dtype}"
        raise TypeError(f"{where}: {expects} integer token ids, got {what} (floats and bools are refused, never cast)")
    return array


def list_views(array: Any, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    """(offsets int64, values) of an Arrow list or large_list array of ``dtype`` integers, over its
    buffers (offsets are converted to int64 when stored as int32): row ``r`` is
    ``values[offsets[r]:offsets[r+1]]``. ``ValueError`` when the offsets cannot be right (damage: not
    starting at 0 or above, decreasing, or past the values), so no row reads outside ``values``."""
    buffers = array.buffers()
    if len(buffers) < 4 or buffers[1] is None:
        raise ValueError(f"a list column of {len(array)} rows has no offsets buffer")
    pa = pyarrow_module()
    width = np.int64 if pa.types.is_large_list(array.type) else np.int32
    n = len(array)
    try:
        raw = np.frombuffer(buffers[1], width, count=array.offset + n + 1)[array.offset :]
    except ValueError:
        raise ValueError(f"the offsets buffer of {n} rows holds {buffers[1].size} bytes, fewer than {n + 1} offsets") from None
    child = array.values
    stored = child.offset + len(child)
    if buffers[3] is None:
        values = np.zeros(0, dtype)
    else:
        try:
            values = np.frombuffer(buffers[3], dtype, count=stored)[child.offset :]
        except ValueError:
            raise ValueError(f"the values buffer holds {buffers[3].size} bytes, fewer than its {stored} {dtype} values") from None
    offsets = raw.astype(np.int64, copy=False)
    if offsets.size and (offsets[0] < 0 or offsets[-1] > values.size or (n and (np.diff(offsets) < 0).any())):
        raise ValueError(f"the offsets of {n} token rows do not fit their {values.size} values (first {int(offsets[0])}, last {int(offsets[-1])})")
    return offsets, values


def checked_list(array: Any, dtype: Any, path: Any, where: str) -> Any:
    """``array`` (an Arrow list column of ``dtype`` integers) once ``list_views`` finds its offsets
    inside its values, for readers that go through them unchecked (``datasets``); ``CorruptFileError``
    naming ``path`` and ``where`` otherwise."""
    try:
        list_views(array, np.dtype(dtype))
    except ValueError as exc:
        raise CorruptFileError(path, f"{where}: {exc}") from None
    return array


class TokensColumn(Column):
    """One page of a tokens field: ``offsets`` (int64, rows + 1, checked: non-decreasing, inside
    ``values``) and ``values`` (1-d, the field's dtype, read-only, over the page's buffer); row
    ``r`` is ``values[offsets[r]:offsets[r+1]]``."""

    def __init__(self, array: Any, dtype: np.dtype):
        self.offsets, self.values = list_views(array, dtype)
        if self.values.flags.writeable:
            self.values = self.values.view()
            self.values.flags.writeable = False

    def lengths(self) -> np.ndarray:
        """Tokens per row (int64), from the offsets alone."""
        return np.diff(self.offsets)

    def get(self, row: int) -> Any:
        return self.values[self.offsets[row] : self.offsets[row + 1]]

    def into(self, buffer: Any, row: int) -> Any:
        tokens = self.get(row)
        if isinstance(buffer, np.ndarray) and buffer.shape == tokens.shape and buffer.dtype == tokens.dtype:
            buffer[...] = tokens
            return buffer
        return tokens

    def batch_node(self, row: int) -> Any:
        return VarNode(self.get(row).shape, self.values.dtype, _HINT)  # lengths vary: batches stack only equal lengths


class Tokens(Field):
    """A 1-d array of integer token ids per sample (a NumPy integer array, a list or tuple of
    ints, or anything ``np.asarray`` reads as one, such as a tensor), stored as Arrow
    ``list<dtype>`` (``large_list`` when ``large``). ``dtype``: int8 .. int64 or uint8 .. uint64
    (uint16 for vocabularies under 65536 tokens, int32 or uint32 above); when None, the first
    sample's dtype if it is a NumPy integer array, else int32 (what Hugging Face ``datasets``
    stores ``input_ids`` as; also when the first sample is no token ids: it is refused, or left
    out with ``on_error="skip"``, as any other). ``large``: int64 offsets (``large_list``), for
    pages of more than 2**31 - 1 tokens; None means int32 offsets, as Arrow tools expect of
    lists, unless the first sample alone needs more.

    Values are checked, never wrapped: floats, bools, 0-d or 2-d arrays, and integers outside
    ``dtype``'s range raise naming the sample and field. Decoded values are read-only views into
    the file's pages.
    """

    kind = "tokens"

    def __init__(self, dtype: Any = None, large: bool | None = None):
        self.dtype = None if dtype is None else _token_dtype(dtype, "F.Tokens(dtype=...)")
        if large is not None and not isinstance(large, (bool, np.bool_)):
            raise TypeError(f"F.Tokens(large=...) takes True, False or None, got {large!r}")
        self.large = None if large is None else bool(large)

    def params(self) -> dict[str, Any]:
        return {"dtype": None if self.dtype is None else self.dtype.str, "large": bool(self.large)}

    def storage_dtype(self) -> np.dtype:
        """The dtype the column holds: ``dtype``, or int32 while it is unsettled (a write of no samples)."""
        return self.dtype if self.dtype is not None else np.dtype("<i4")

    def prepare(self, value: Any, where: str) -> None:
        try:
            array = token_ids(value, where, "tokens field expects")
        except (TypeError, ValueError):  # not token ids: encode refuses the sample itself (on_error="skip" leaves it out)
            array = None
        if self.dtype is None:
            typed = array is not None and (isinstance(value, np.ndarray) or hasattr(value, "dtype"))
            self.dtype = _token_dtype(array.dtype, where) if typed else np.dtype("<i4")  # type: ignore[union-attr]
        if self.large is None:
            self.large = array is not None and array.size > _INT32_MAX

    def encode(self, value: Any, index: int, where: str) -> Any:
        array = token_ids(value, where, "tokens field expects")
        target = self.dtype
        if array.dtype == target:
            return np.ascontiguousarray(array)
        if array.size and not np.can_cast(array.dtype, target, casting="safe"):
            info = np.iinfo(target)
            low, high = array.min(), array.max()
            if low < info.min or high > info.max:
                bad = low if low < info.min else high
                outside = int(np.count_nonzero((array < info.min) | (array > info.max)))
                first = int(np.flatnonzero((array < info.min) | (array > info.max))[0])
                raise ValueError(
                    f"{where}: tokens field of dtype {target} holds {info.min}..{info.max}, got the token id {int(bad)} "
                    f"({outside} of {array.size} ids outside; the first at position {first}): declare F.Tokens(dtype=...) wide enough"
                )
        return np.ascontiguousarray(array, dtype=target)

    def nbytes(self, encoded: Any) -> int:
        return encoded.nbytes + (8 if self.large else 4)

    def arrow_type(self) -> Any:
        pa = pyarrow_module()
        item = pa.from_numpy_dtype(self.storage_dtype())
        return pa.large_list(item) if self.large else pa.list_(item)

    def to_arrow(self, encoded: list[Any]) -> Any:
        pa = pyarrow_module()
        lengths = np.fromiter((e.size for e in encoded), np.int64, count=len(encoded))
        offsets = np.zeros(len(encoded) + 1, np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if not self.large and offsets[-1] > _INT32_MAX:
            raise ValueError(
                f"a page of {len(encoded)} token documents holds {int(offsets[-1])} tokens, more than list<> int32 offsets reach "
                "(2**31 - 1): write with F.Tokens(large=True), or a smaller page_size"
            )
        values = np.concatenate(encoded) if encoded else np.zeros(0, self.storage_dtype())
        values = values.astype(self.storage_dtype(), copy=False)
        if self.large:
            return pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values), type=self.arrow_type())
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values), type=self.arrow_type())

    def column(self, array: Any) -> Column:
        return TokensColumn(array, self.storage_dtype())
