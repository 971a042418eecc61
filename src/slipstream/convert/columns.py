"""Table columns as fields: how one Arrow (or Hugging Face) column becomes one slipstream field and
its values, row by row (images stored as structs or bytes, arrays, strings, lists of integers as
token documents, other nested values as JSON)."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..files import field_kinds as F
from ..files.field import Field
from ..files.field import pyarrow_module as _pa
from ..files.field_tokens import list_views
from ..images.encoded import codecs as _imaging
from .source import ConvertError

__all__ = ["Column", "first_null", "hf_column", "null_error"]


@dataclass
class Column:
    """How one table column becomes one field: ``values(array, first_row)`` -> a value per row."""

    name: str
    field: Field
    values: Callable[[Any, int], Any]
    class_names: list[str] | None = None  # a Hugging Face ClassLabel's names


def null_error(where: Path, column: str, row: int, hint: str = "") -> ConvertError:
    return ConvertError(f"{where}: column {column!r} is null at row {row}; packed files hold no nulls: fill or drop them first{hint}")


def first_null(array: Any) -> int:
    return int(np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False))[0])


def plain(array: Any) -> Any:
    pa = _pa()
    return array.dictionary_decode() if pa.types.is_dictionary(array.type) else array


def numpy_values(array: Any, first_row: int) -> Any:
    return plain(array).to_numpy(zero_copy_only=False)


def list_values(array: Any, first_row: int) -> Any:
    return plain(array).to_pylist()


def is_image_struct(typ: Any) -> bool:
    pa = _pa()
    if not pa.types.is_struct(typ):
        return False
    names = {typ.field(i).name for i in range(typ.num_fields)}
    return "bytes" in names and "path" in names and is_binary(typ.field("bytes").type)


def is_binary(typ: Any) -> bool:
    pa = _pa()
    checks = [pa.types.is_binary, pa.types.is_large_binary, pa.types.is_fixed_size_binary, getattr(pa.types, "is_binary_view", None)]
    return any(check is not None and check(typ) for check in checks)


def is_string(typ: Any) -> bool:
    pa = _pa()
    checks = [pa.types.is_string, pa.types.is_large_string, getattr(pa.types, "is_string_view", None)]
    return any(check is not None and check(typ) for check in checks)


def is_nested(typ: Any) -> bool:
    pa = _pa()
    checks = [pa.types.is_list, pa.types.is_large_list, pa.types.is_fixed_size_list, pa.types.is_struct, pa.types.is_map]
    checks.append(getattr(pa.types, "is_list_view", None))
    checks.append(getattr(pa.types, "is_large_list_view", None))
    return any(check is not None and check(typ) for check in checks)


class ImageStructValues:
    """Values of a Hugging Face image struct {bytes, path}: the bytes, else the file at ``path``
    (relative paths under ``base``). A class, not a closure, so a source pickles for worker processes."""

    def __init__(self, where: Path, name: str, base: Path):
        self.where, self.name, self.base = where, name, base

    def __call__(self, array: Any, first_row: int) -> list[Any]:
        out = []
        for k, (data, file) in enumerate(zip(array.field("bytes").to_pylist(), array.field("path").to_pylist())):
            if data is None:
                candidate = Path(file) if file else None
                if candidate is not None and not candidate.is_absolute():
                    candidate = self.base / candidate
                if candidate is None or not candidate.is_file():
                    hint = f" (its image has no bytes, and its path {file!r} is not a file)" if file else ""
                    raise null_error(self.where, self.name, first_row + k, hint)
                data = candidate.read_bytes()
            out.append(data)
        return out


def json_values(array: Any, first_row: int) -> list[Any]:
    """Values of a Hugging Face ``Json`` column (JSON text, in an extension array or as strings), decoded."""
    storage = getattr(array, "storage", array)
    return [json.loads(text) for text in plain(storage).to_pylist()]


class TokenValues:
    """Values of an Arrow list (or large_list) of integers, as ``F.Tokens`` stores them: per record
    batch, the offsets and values buffers read as NumPy arrays, each row a view of its tokens (no
    per-token Python). A null token inside a list raises naming the column and row."""

    def __init__(self, where: Path, name: str, dtype: np.dtype):
        self.where, self.name, self.dtype = where, name, dtype

    def __call__(self, array: Any, first_row: int) -> list[np.ndarray]:
        if array.flatten().null_count:
            nulls = array.flatten().is_null().to_numpy(zero_copy_only=False)
            lengths = np.diff(np.asarray(array.offsets, dtype=np.int64))
            row = int(np.searchsorted(np.cumsum(lengths), int(np.flatnonzero(nulls)[0]), side="right"))
            raise null_error(self.where, self.name, first_row + row, " (a null token inside its list)")
        offsets, values = list_views(array, self.dtype)
        return [values[start:stop] for start, stop in zip(offsets[:-1].tolist(), offsets[1:].tolist())]


def token_list(typ: Any) -> Any:
    """The ``F.Tokens`` that holds an Arrow type when it is a list or large_list of integers, else None."""
    pa = _pa()
    if (pa.types.is_list(typ) or pa.types.is_large_list(typ)) and pa.types.is_integer(typ.value_type):
        return F.Tokens(dtype=typ.value_type.to_pandas_dtype(), large=pa.types.is_large_list(typ))
    return None


class ArrayValues:
    """Values of a Hugging Face ArrayND column: one NumPy array of ``dtype`` per row."""

    def __init__(self, dtype: np.dtype):
        self.dtype = dtype

    def __call__(self, array: Any, first_row: int) -> list[np.ndarray]:
        return [np.asarray(v, dtype=self.dtype) for v in array.to_pylist()]


def arrow_column(where: Path, name: str, typ: Any, first: Callable[[], Any], image: F.Image, base: Path | None = None) -> Column:
    """The field for a column from its Arrow type (``first()`` gives its first values, to sniff image
    bytes; ``base``: the folder relative image paths are under, default ``where``'s)."""
    pa = _pa()
    value_type = typ.value_type if pa.types.is_dictionary(typ) else typ
    if pa.types.is_boolean(value_type):
        return Column(name, F.Bool(), numpy_values)
    if pa.types.is_integer(value_type):
        return Column(name, F.Int(), numpy_values)
    if pa.types.is_floating(value_type):
        return Column(name, F.Float(), numpy_values)
    if is_string(value_type):
        return Column(name, F.Text(), list_values)
    if is_binary(value_type):
        sample = next((v for v in plain(first()).to_pylist() if v is not None), None)
        if sample is not None and _imaging.sniff(sample) is not None:
            return Column(name, copy.deepcopy(image), list_values)
        return Column(name, F.Bytes(), list_values)
    if is_image_struct(value_type):
        base = base if base is not None else (where.parent if where.is_file() else where)
        return Column(name, copy.deepcopy(image), ImageStructValues(where, name, base))
    tokens = token_list(value_type)
    if tokens is not None:
        return Column(name, tokens, TokenValues(where, name, np.dtype(tokens.dtype)))
    if is_nested(value_type):
        return Column(name, F.JSON(), list_values)
    raise ConvertError(
        f"{where}: column {name!r} has Arrow type {typ}, which no slipstream field holds "
        "(integers, floats, bools, strings, binary, lists and structs can be converted): cast or drop it first"
    )


_HF_ARRAYS = {"Array2D": 2, "Array3D": 3, "Array4D": 4, "Array5D": 5}
_HF_UNSUPPORTED = ("Audio", "Video", "Pdf", "Nifti")


def hf_column(where: Path, name: str, feature: Any, typ: Any, first: Callable[[], Any], image: F.Image, base: Path | None = None) -> Column:
    """The field for a column from its Hugging Face feature (the Arrow type where the feature says
    no more); ``base``: the folder relative image paths are under (default ``where``'s)."""
    kind = feature.get("_type") if isinstance(feature, dict) else None
    if kind == "Image":
        if not is_image_struct(typ) and not is_binary(typ):
            raise ConvertError(f"{where}: column {name!r} is an Image feature stored as {typ}, expected a struct of bytes and path")
        if is_binary(typ):
            return Column(name, copy.deepcopy(image), list_values)
        base = base if base is not None else (where if where.is_dir() else where.parent)
        return Column(name, copy.deepcopy(image), ImageStructValues(where, name, base))
    if kind == "Json":
        return Column(name, F.JSON(), json_values)
    if kind == "ClassLabel":
        names = feature.get("names")
        valid = isinstance(names, list) and all(isinstance(n, str) for n in names)
        return Column(name, F.Int(), numpy_values, names if valid else None)
    if kind in _HF_ARRAYS:
        dtype = np.dtype(feature.get("dtype", "float32"))
        shape = feature.get("shape")
        if not isinstance(shape, list) or len(shape) != _HF_ARRAYS[kind]:
            raise ConvertError(f"{where}: column {name!r}: the {kind} feature has shape {shape!r}")
        fixed = all(isinstance(s, int) and s >= 0 for s in shape)
        array_field = F.Array(dtype=dtype, shape=shape) if fixed else F.Array(dtype=dtype, ndim=len(shape))
        return Column(name, array_field, ArrayValues(dtype))
    if kind in _HF_UNSUPPORTED:
        raise ConvertError(
            f"{where}: column {name!r} is a Hugging Face {kind} feature, which slipstream does not convert: drop the column first"
        )
    return arrow_column(where, name, typ, first, image, base)
