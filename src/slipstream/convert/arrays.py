"""Conversion sources from NumPy: a ``.npy`` file (one field ``data``) or a ``.npz`` file (one field per key).

Arrays are memory-mapped (``.npz`` members too, when stored uncompressed), so large ones are not copied.
"""

from __future__ import annotations

import struct
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from ..files import field_kinds as F
from ..files.field import Field
from .source import ConvertError, Source

__all__ = ["npy_source", "npz_source"]


def _array_field(path: Path, name: str, array: np.ndarray) -> Field:
    if array.ndim == 0:
        raise ConvertError(f"{path}: array {name!r} is 0-d (a single value); samples are taken along axis 0")
    kind = array.dtype.kind
    if array.ndim == 1:
        if kind == "b":
            return F.Bool()
        if kind in "iu":
            return F.Int()
        if kind == "f":
            return F.Float()
        if kind == "c":
            return F.Array(dtype=array.dtype, shape=())
        if kind == "U":
            return F.Text()
        if kind == "S":
            return F.Bytes()
    elif kind in "biufc":
        return F.Array(dtype=array.dtype, shape=array.shape[1:])
    raise ConvertError(
        f"{path}: array {name!r} has dtype {array.dtype} and shape {array.shape}; "
        "can convert numeric and bool arrays (and 1-d string arrays)"
    )


class _ArraySamples:
    """Equal-length arrays as a container of ``{name: array[i]}`` samples (read lazily, in ss.write's workers).
    ``source`` (the file it came from, an absolute path: a worker may run in another folder) makes
    it pickle as that path: a worker process maps the file again instead of receiving a copy of
    every array."""

    def __init__(self, arrays: dict[str, np.ndarray], source: Path | None = None):
        self.arrays, self.source = arrays, source
        self.n = len(next(iter(arrays.values())))

    def __reduce__(self) -> tuple[Any, ...]:
        if self.source is None:
            return (_ArraySamples, (self.arrays,))
        return (_reopened, (self.source,))

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> dict[str, Any]:
        return {name: array[index] for name, array in self.arrays.items()}


def _load_npy(path: Path) -> np.ndarray:
    try:
        return np.load(path, mmap_mode="r", allow_pickle=False)
    except ValueError as exc:  # object arrays, damaged headers
        raise ConvertError(f"{path}: cannot read the array: {exc}") from None


def npy_source(path: Path) -> Source:
    array = _load_npy(path)
    fields = {"data": _array_field(path, "data", array)}
    return Source(".npy file", path, _ArraySamples({"data": array}, path.absolute()), fields)


def _npz_member_memmap(path: Path, info: zipfile.ZipInfo) -> np.ndarray | None:
    """An uncompressed ``.npz`` member memory-mapped in place (None when it cannot be)."""
    if info.compress_type != zipfile.ZIP_STORED or info.flag_bits & 0x1:  # compressed or encrypted
        return None
    with open(path, "rb") as handle:
        handle.seek(info.header_offset)
        local = handle.read(30)
        if len(local) != 30 or local[:4] != b"PK\x03\x04":
            return None
        name_length, extra_length = struct.unpack("<HH", local[26:30])
        handle.seek(info.header_offset + 30 + name_length + extra_length)
        try:
            version = np.lib.format.read_magic(handle)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(handle)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(handle)
            else:
                return None
        except ValueError:
            return None
        offset = handle.tell()
    if dtype.hasobject or 0 in shape:
        return None
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape, order="F" if fortran else "C")


def npz_source(path: Path) -> Source:
    try:
        archive = zipfile.ZipFile(path)
    except zipfile.BadZipFile as exc:
        raise ConvertError(f"{path}: not a .npz archive: {exc}") from None
    with archive:
        members = [info for info in archive.infolist() if info.filename.endswith(".npy")]
    if not members:
        raise ConvertError(f"{path}: the .npz archive holds no arrays")
    arrays: dict[str, np.ndarray] = {}
    loaded = None
    for info in members:
        name = info.filename[: -len(".npy")]
        array = _npz_member_memmap(path, info)
        if array is None:  # compressed: read into memory
            if loaded is None:
                loaded = np.load(path, allow_pickle=False)
            try:
                array = loaded[name]
            except ValueError as exc:
                raise ConvertError(f"{path}: cannot read array {name!r}: {exc}") from None
        arrays[name] = array
    fields = {name: _array_field(path, name, array) for name, array in arrays.items()}
    lengths = {name: len(array) for name, array in arrays.items()}
    if len(set(lengths.values())) > 1:
        listed = ", ".join(f"{name!r} has {n}" for name, n in lengths.items())
        raise ConvertError(f"{path}: the arrays must have equal lengths on axis 0 (one sample per row), but {listed}")
    return Source(".npz file", path, _ArraySamples(arrays, path.absolute()), fields)


def _reopened(path: Path) -> _ArraySamples:
    """The samples of the ``.npy`` / ``.npz`` file ``path``, opened again (how they unpickle)."""
    return (npy_source(path) if path.suffix.lower() == ".npy" else npz_source(path)).data
