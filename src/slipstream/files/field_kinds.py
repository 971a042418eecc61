"""Fields of a packed file: each owns its Arrow column type, its encoder and its decoder.

``from slipstream import fields as F``; ``ss.write(path, data, fields={"image": F.Image(codec="jpeg"),
"label": F.Int()})``. A field's kind and settings are recorded in the file's schema metadata (by
name, through a registry, with a per-kind version), so a reader rebuilds the same field from the
file alone. Encoders run in parallel worker threads and are pure functions of (value, index):
the same input gives the same bytes. Decoders read the column's buffers zero-copy from the
(memory-mapped) page, and never trust them: damaged bytes raise, never crash.

The scalar, bytes, text and JSON kinds are defined here; ``F.Array``, ``F.Image`` and ``F.Tokens`` in
``slipstream.files.field_array``, ``field_image`` and ``field_tokens``, and the protocol they share (``Field``,
``Column``, ``ScalarColumn``) in ``slipstream.files.field``.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

import numpy as np

from .field import Column, Field, ScalarColumn, binary_views, field_from_spec, pyarrow_module, slice_row

__all__ = ["JSON", "Array", "Bool", "Bytes", "Field", "Float", "Image", "Int", "Text", "Tokens", "field_from_spec"]


# -- scalars (their column: files.field.ScalarColumn) ------------------------------------------
class _Scalar(Field):
    accepts: ClassVar[tuple[type, ...]] = ()
    dtype: ClassVar[Any] = None
    convert: ClassVar[type] = int

    def accept(self, value: Any, where: str) -> Any:
        """``value`` (a 0-d array unwrapped) when it is of a type this field takes, else ``TypeError``."""
        if isinstance(value, np.ndarray) and value.shape == ():
            value = value[()]
        if not isinstance(value, self.accepts):
            raise TypeError(f"{where}: {self.kind} field expects {self.expected}, got {type(value).__name__} {value!r}")
        return value

    def encode(self, value: Any, index: int, where: str) -> Any:
        return self.convert(self.accept(value, where))

    def to_arrow(self, encoded: list[Any]) -> Any:
        return pyarrow_module().array(np.asarray(encoded, dtype=self.dtype))

    def column(self, array: Any) -> Column:
        return ScalarColumn(array.to_numpy(zero_copy_only=False), self.convert)


_INT64 = (-(2**63), 2**63 - 1)


def _show_int(number: int) -> str:
    """An integer for an error message: in full, or its sign and digit count when it is huge."""
    text = str(int(number))
    sign, digits = ("-", text[1:]) if text.startswith("-") else ("", text)
    return text if len(digits) <= 40 else f"{sign}{digits[:6]}... ({len(digits)} digits)"


class Int(_Scalar):
    """A 64-bit integer per sample (Python ints and NumPy integers; not floats or bools). A value
    outside int64's range raises ``ValueError`` naming the sample, field and range."""

    kind, dtype, convert = "int", np.int64, int
    accepts = (int, np.integer)
    expected = "an integer"

    def encode(self, value: Any, index: int, where: str) -> Any:
        if isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{where}: int field expects an integer, got bool {value!r} (use F.Bool())")
        number = super().encode(value, index, where)
        if not _INT64[0] <= number <= _INT64[1]:
            raise ValueError(
                f"{where}: int field holds int64 values, -2**63..2**63-1, got {_show_int(number)}: store it with F.Text() or "
                "F.JSON() (exact), or F.Float() (rounded)"
            )
        return number

    def arrow_type(self) -> Any:
        return pyarrow_module().int64()


class Float(_Scalar):
    """A 64-bit float per sample. Values must round-trip as ``F.Array``'s do: an integer must be exact
    as a float64 (up to 2**53, and beyond only where it is), and a finite value (a NumPy longdouble)
    must not overflow to inf; either raises ``ValueError`` naming the sample and field. NaN and inf
    are stored as they are. A bool is refused (``F.Bool()``), as ``F.Int`` refuses it."""

    kind, dtype, convert = "float", np.float64, float
    accepts = (float, int, np.floating, np.integer)
    expected = "a number"

    def encode(self, value: Any, index: int, where: str) -> Any:
        if isinstance(value, (bool, np.bool_)):  # a bool is an int to Python, but 1.0 is not what was meant
            raise TypeError(f"{where}: float field expects a number, got bool {value!r} (use F.Bool())")
        value = self.accept(value, where)
        try:
            with np.errstate(over="ignore"):
                number = float(value)
        except OverflowError:
            number = float("inf")
        if isinstance(value, (int, np.integer)) and (not np.isfinite(number) or int(number) != int(value)):
            raise ValueError(
                f"{where}: float field holds float64 values, exact for integers up to 2**53, got the integer {_show_int(value)} "
                f"(it would read back as {number!r}): use F.Int() (to 2**63-1) or F.Text(), or pass float(value) to accept the rounding"
            )
        if not np.isfinite(number) and np.isfinite(value):
            raise ValueError(f"{where}: float field holds float64 values, finite up to {np.finfo(np.float64).max:.6g}, got {value!r} (it would read back as {number!r})")
        return number

    def arrow_type(self) -> Any:
        return pyarrow_module().float64()


class Bool(_Scalar):
    """A boolean per sample."""

    kind, dtype, convert = "bool", np.bool_, bool
    accepts = (bool, np.bool_)
    expected = "a bool"

    def arrow_type(self) -> Any:
        return pyarrow_module().bool_()


# -- bytes, text, JSON -------------------------------------------------------------------------
class _BinaryColumn(Column):
    def __init__(self, array: Any, decode: Any):
        self.offsets, self.data = binary_views(array)
        self.decode = decode

    def get(self, row: int) -> Any:
        return self.decode(slice_row(self.offsets, self.data, row))


class _Variable(Field):
    """A variable-length value per sample in one large_binary or large_string column; subclasses
    say which (``text``) and how stored bytes decode (``decode``)."""

    text: ClassVar[bool] = False

    @staticmethod
    def decode(data: np.ndarray) -> Any:
        return data.tobytes()

    def nbytes(self, encoded: Any) -> int:
        return len(encoded) + 8

    def arrow_type(self) -> Any:
        pa = pyarrow_module()
        return pa.large_string() if self.text else pa.large_binary()

    def column(self, array: Any) -> Column:
        return _BinaryColumn(array, self.decode)


class Bytes(_Variable):
    """Arbitrary bytes per sample (bytes, bytearray, memoryview)."""

    kind = "bytes"

    def encode(self, value: Any, index: int, where: str) -> Any:
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise TypeError(f"{where}: bytes field expects bytes, got {type(value).__name__}")
        return bytes(value)


def _utf8(data: np.ndarray) -> str:
    try:
        return data.tobytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"stored text is not valid UTF-8: {exc}") from None


def _surrogate(text: str) -> UnicodeEncodeError | None:
    """Why ``text`` cannot be stored as UTF-8 (a lone surrogate, as from undecodable file names), or None."""
    if text.isascii():
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        return exc
    return None


class Text(_Variable):
    """A UTF-8 string per sample. A str UTF-8 cannot hold (a lone surrogate) raises ``ValueError``."""

    kind, text, decode = "text", True, staticmethod(_utf8)

    def encode(self, value: Any, index: int, where: str) -> Any:
        if not isinstance(value, str):
            raise TypeError(f"{where}: text field expects a str, got {type(value).__name__}")
        problem = _surrogate(value)
        if problem is not None:
            bad = value[problem.start : problem.end]
            raise ValueError(
                f"{where}: text field holds UTF-8 text, got a str with the lone surrogate {bad!r} at position {problem.start}, "
                "which UTF-8 cannot encode (as os.fsdecode makes of undecodable bytes): store os.fsencode(value) with F.Bytes(), "
                "or use F.JSON(), which escapes it"
            )
        return value


def _json(data: np.ndarray) -> Any:
    try:
        return json.loads(_utf8(data))
    except json.JSONDecodeError as exc:
        raise ValueError(f"stored JSON does not parse: {exc}") from None


class JSON(_Variable):
    """Any JSON value per sample (dicts, lists, strings, numbers, booleans, None), stored as JSON text."""

    kind, text, decode = "json", True, staticmethod(_json)

    def encode(self, value: Any, index: int, where: str) -> Any:
        try:
            text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{where}: json field cannot store {type(value).__name__}: {exc}") from None
        if _surrogate(text) is not None:  # a lone surrogate: kept as a JSON escape (\udXXX), which reads back the same
            return json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
        return text


from .field_array import Array  # noqa: E402 - registered kinds, re-exported here
from .field_image import Image  # noqa: E402
from .field_tokens import Tokens  # noqa: E402
