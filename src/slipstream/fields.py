"""Fields of a packed file: each owns its Arrow column type, its encoder and its decoder.

``from slipstream import fields as F``; ``ss.write(path, data, fields={"image": F.Image(codec="jpeg"),
"label": F.Int()})``. A field's kind and settings are recorded in the file's schema metadata (by
name, through a registry, with a per-kind version), so a reader rebuilds the same field from the
file alone. Encoders run in parallel worker threads and are pure functions of (value, index):
the same input gives the same bytes. Decoders read the column's buffers zero-copy from the
(memory-mapped) page, and never trust them: damaged bytes raise, never crash.
"""

from __future__ import annotations

import json
import math
from typing import Any, ClassVar

import numpy as np

from . import _imaging

__all__ = ["Array", "Bool", "Bytes", "Field", "Float", "Image", "Int", "JSON", "Text", "field_from_spec"]


def _pa():
    try:
        import pyarrow
    except ImportError as exc:  # pragma: no cover - part of the 'files' extra
        raise ImportError("packed files need pyarrow: pip install 'slipstream[files]'") from exc
    return pyarrow


def _binary_views(array: Any) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, data) of a large_binary/large_string Arrow array, as NumPy views of its buffers."""
    buffers = array.buffers()
    offsets = np.frombuffer(buffers[1], np.int64)[array.offset : array.offset + len(array) + 1]
    data = np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    return offsets, data


def _slice(offsets: np.ndarray, data: np.ndarray, row: int) -> np.ndarray:
    return data[offsets[row] : offsets[row + 1]]


class Column:
    """One field's data in one page: ``get(row)`` decodes a sample; ``into(buffer, row)`` writes it in place.

    Damaged data raises ``ValueError`` (the dataset adds the file, sample and field to the message).
    """

    def get(self, row: int) -> Any:
        raise NotImplementedError

    def into(self, buffer: Any, row: int) -> Any:
        """Write the value into ``buffer`` when it can (returning the buffer), else return the value."""
        return self.get(row)


class Field:
    """Base class. Subclasses set ``kind`` (the registry name) and ``version``."""

    kind: ClassVar[str] = ""
    version: ClassVar[int] = 1
    _registry: ClassVar[dict[str, type[Field]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.kind:
            Field._registry[cls.kind] = cls

    def params(self) -> dict[str, Any]:
        """The settings that rebuild this field (JSON values)."""
        return {}

    def spec(self) -> dict[str, Any]:
        return {"kind": self.kind, "version": self.version, **self.params()}

    def prepare(self, value: Any, where: str) -> None:
        """Settle settings left open (a dtype, a shape) from the first sample. Runs once, before encoding."""

    def encode(self, value: Any, index: int, where: str) -> Any:
        raise NotImplementedError

    def nbytes(self, encoded: Any) -> int:
        return 8

    def arrow_type(self) -> Any:
        raise NotImplementedError

    def to_arrow(self, encoded: list[Any]) -> Any:
        return _pa().array(encoded, type=self.arrow_type())

    def column(self, array: Any) -> Column:
        raise NotImplementedError

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"F.{type(self).__name__}({args})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Field) and self.spec() == other.spec()

    __hash__ = None  # type: ignore[assignment]


def field_from_spec(spec: dict[str, Any]) -> Field:
    """The field a file's metadata describes; ``ValueError`` for an unknown kind or a newer version."""
    kind = spec.get("kind")
    cls = Field._registry.get(kind)  # type: ignore[arg-type]
    if cls is None:
        raise ValueError(f"unknown field kind {kind!r} (this slipstream knows {sorted(Field._registry)})")
    if spec.get("version", 1) > cls.version:
        raise ValueError(f"field kind {kind!r} version {spec['version']} is newer than this slipstream's ({cls.version})")
    params = {k: v for k, v in spec.items() if k not in ("kind", "version")}
    return cls(**params)


# -- scalars -----------------------------------------------------------------------------------
class _ScalarColumn(Column):
    def __init__(self, values: np.ndarray, convert: type):
        self.values, self.convert = values, convert

    def get(self, row: int) -> Any:
        return self.convert(self.values[row])

    def into(self, buffer: Any, row: int) -> Any:
        if isinstance(buffer, np.ndarray):
            buffer[...] = self.values[row]
            return buffer
        return self.get(row)


class _Scalar(Field):
    accepts: ClassVar[tuple[type, ...]] = ()
    dtype: ClassVar[Any] = None
    convert: ClassVar[type] = int

    def encode(self, value: Any, index: int, where: str) -> Any:
        if isinstance(value, np.ndarray) and value.shape == ():
            value = value[()]
        if not isinstance(value, self.accepts):
            raise TypeError(f"{where}: {self.kind} field expects {self.expected}, got {type(value).__name__} {value!r}")
        return self.convert(value)

    def to_arrow(self, encoded: list[Any]) -> Any:
        return _pa().array(np.asarray(encoded, dtype=self.dtype))

    def column(self, array: Any) -> Column:
        return _ScalarColumn(array.to_numpy(zero_copy_only=False), self.convert)


class Int(_Scalar):
    """A 64-bit integer per sample (Python ints and NumPy integers; not floats or bools)."""

    kind, dtype, convert = "int", np.int64, int
    accepts = (int, np.integer)
    expected = "an integer"

    def encode(self, value: Any, index: int, where: str) -> Any:
        if isinstance(value, (bool, np.bool_)):
            raise TypeError(f"{where}: int field expects an integer, got bool {value!r} (use F.Bool())")
        return super().encode(value, index, where)

    def arrow_type(self) -> Any:
        return _pa().int64()


class Float(_Scalar):
    """A 64-bit float per sample."""

    kind, dtype, convert = "float", np.float64, float
    accepts = (float, int, np.floating, np.integer)
    expected = "a number"

    def arrow_type(self) -> Any:
        return _pa().float64()


class Bool(_Scalar):
    """A boolean per sample."""

    kind, dtype, convert = "bool", np.bool_, bool
    accepts = (bool, np.bool_)
    expected = "a bool"

    def arrow_type(self) -> Any:
        return _pa().bool_()


# -- bytes, text, JSON -------------------------------------------------------------------------
class _BinaryColumn(Column):
    def __init__(self, array: Any, decode: Any):
        self.offsets, self.data = _binary_views(array)
        self.decode = decode

    def get(self, row: int) -> Any:
        return self.decode(_slice(self.offsets, self.data, row))


class Bytes(Field):
    """Arbitrary bytes per sample (bytes, bytearray, memoryview)."""

    kind = "bytes"

    def encode(self, value: Any, index: int, where: str) -> Any:
        if not isinstance(value, (bytes, bytearray, memoryview)):
            raise TypeError(f"{where}: bytes field expects bytes, got {type(value).__name__}")
        return bytes(value)

    def nbytes(self, encoded: Any) -> int:
        return len(encoded) + 8

    def arrow_type(self) -> Any:
        return _pa().large_binary()

    def column(self, array: Any) -> Column:
        return _BinaryColumn(array, lambda data: data.tobytes())


def _utf8(data: np.ndarray) -> str:
    try:
        return data.tobytes().decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"stored text is not valid UTF-8: {exc}") from None


class Text(Field):
    """A UTF-8 string per sample."""

    kind = "text"

    def encode(self, value: Any, index: int, where: str) -> Any:
        if not isinstance(value, str):
            raise TypeError(f"{where}: text field expects a str, got {type(value).__name__}")
        return value

    def nbytes(self, encoded: Any) -> int:
        return len(encoded) + 8

    def arrow_type(self) -> Any:
        return _pa().large_string()

    def column(self, array: Any) -> Column:
        return _BinaryColumn(array, _utf8)


def _json(data: np.ndarray) -> Any:
    try:
        return json.loads(_utf8(data))
    except json.JSONDecodeError as exc:
        raise ValueError(f"stored JSON does not parse: {exc}") from None


class JSON(Field):
    """Any JSON value per sample (dicts, lists, strings, numbers, booleans, None), stored as JSON text."""

    kind = "json"

    def encode(self, value: Any, index: int, where: str) -> Any:
        try:
            return json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TypeError(f"{where}: json field cannot store {type(value).__name__}: {exc}") from None

    def nbytes(self, encoded: Any) -> int:
        return len(encoded) + 8

    def arrow_type(self) -> Any:
        return _pa().large_string()

    def column(self, array: Any) -> Column:
        return _BinaryColumn(array, _json)


# -- arrays ------------------------------------------------------------------------------------
_NATIVE = {np.dtype(t) for t in (np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64, np.float16, np.float32, np.float64)}


class _FixedColumn(Column):
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
        self.offsets, self.data = _binary_views(array.field("data"))
        self.dtype = dtype

    def get(self, row: int) -> Any:
        data = _slice(self.offsets, self.data, row)
        shape = tuple(int(s) for s in self.shapes[row])
        if data.size != math.prod(shape) * self.dtype.itemsize:
            raise ValueError(f"{data.size} stored bytes cannot hold a {self.dtype} array of shape {shape}")
        return data.view(self.dtype).reshape(shape)


class Array(Field):
    """A NumPy array per sample: fixed ``shape`` (stored as an Arrow fixed-size list), or ragged
    when ``shape`` is None (each sample keeps its own shape; no padding). ``dtype`` and, for
    ragged arrays, the number of dimensions are taken from the first sample when not given.
    Any numeric dtype, float16 and bool included; values are stored little-endian.

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
        if not np.can_cast(array.dtype, self.dtype, casting="same_kind"):
            raise TypeError(f"{where}: array field of dtype {self.dtype} cannot store {array.dtype} without losing information")
        if self.shape is not None and array.shape != self.shape:
            raise ValueError(f"{where}: array field expects shape {self.shape}, got {array.shape} (use F.Array(shape=None) for ragged arrays)")
        if self.shape is None and array.ndim != self.ndim:
            raise ValueError(f"{where}: ragged array field has {self.ndim} dimensions, got shape {array.shape}")
        data = np.ascontiguousarray(array, dtype=self.dtype.newbyteorder("<")).view(self._storage()).reshape(-1)
        return data if self.shape is not None else (array.shape, data)

    def nbytes(self, encoded: Any) -> int:
        return encoded.nbytes if self.shape is not None else encoded[1].nbytes + 8 * (self.ndim + 1)

    def _size(self) -> int:
        return math.prod(self.shape) * self.dtype.itemsize // self._storage().itemsize  # type: ignore[arg-type]

    def arrow_type(self) -> Any:
        pa = _pa()
        if self.shape is not None:
            return pa.list_(pa.from_numpy_dtype(self._storage()), self._size())
        return pa.struct([("shape", pa.list_(pa.int64(), self.ndim)), ("data", pa.large_binary())])

    def to_arrow(self, encoded: list[Any]) -> Any:
        pa = _pa()
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
        return _FixedColumn(values.view(self.dtype).reshape(len(array), *self.shape))


# -- images ------------------------------------------------------------------------------------
_CODE_NAMES = {code: name for name, code in _imaging.CODECS.items()}


class _ImageColumn(Column):
    def __init__(self, array: Any):
        self.codes = array.field("codec").to_numpy(zero_copy_only=False)
        self.heights = array.field("height").to_numpy(zero_copy_only=False)
        self.widths = array.field("width").to_numpy(zero_copy_only=False)
        self.channels = array.field("channels").to_numpy(zero_copy_only=False)
        self.offsets, self.data = _binary_views(array.field("data"))

    def shape(self, row: int) -> tuple[int, int, int]:
        return int(self.heights[row]), int(self.widths[row]), int(self.channels[row])

    def codec(self, row: int) -> str:
        name = _CODE_NAMES.get(int(self.codes[row]))
        if name is None:
            raise ValueError(f"unknown image codec code {int(self.codes[row])}")
        return name

    def encoded(self, row: int) -> np.ndarray:
        """The stored bytes of the image, zero-copy (a read-only uint8 view into the page)."""
        return _slice(self.offsets, self.data, row)

    def get(self, row: int) -> Any:
        return _imaging.decode(self.codec(row), self.encoded(row), self.shape(row))

    def into(self, buffer: Any, row: int) -> Any:
        if isinstance(buffer, np.ndarray) and buffer.shape == self.shape(row):
            return _imaging.decode(self.codec(row), self.encoded(row), self.shape(row), out=buffer)
        return self.get(row)


class Image(Field):
    """A uint8 image per sample, (height, width, channels) with 1 (grayscale) or 3 (RGB) channels.

    ``codec``: "raw", "jpeg", "png" or "qoi". ``max_side`` / ``min_side`` downscale at write time
    (area interpolation, never upscaling) so the longer side is at most ``max_side`` and the shorter
    at most ``min_side``. ``policy``: None (every image uses ``codec``), "smart" (only images whose
    raw size exceeds ``threshold`` bytes are compressed, the rest stored raw) or "proportion" (a
    fraction ``proportion`` of images, chosen by a seeded coin per sample index, is compressed).
    Input: a uint8 array, a PIL image, or encoded JPEG/PNG/QOI bytes; JPEG bytes that need no
    resize and are to be stored as JPEG are kept as they are (no second lossy encode).
    """

    kind = "image"

    def __init__(
        self,
        codec: str = "raw",
        quality: int = 90,
        max_side: int | None = None,
        min_side: int | None = None,
        policy: str | None = None,
        threshold: int = 1 << 18,
        proportion: float = 0.5,
        seed: int = 0,
    ):
        if codec not in _imaging.CODECS:
            raise ValueError(f"unknown image codec {codec!r}; expected one of {sorted(_imaging.CODECS)}")
        if policy not in (None, "smart", "proportion"):
            raise ValueError(f"policy must be None, 'smart' or 'proportion', got {policy!r}")
        if not 1 <= int(quality) <= 100:
            raise ValueError(f"quality must be in 1..100, got {quality}")
        for name, side in (("max_side", max_side), ("min_side", min_side)):
            if side is not None and int(side) < 1:
                raise ValueError(f"{name} must be >= 1 or None, got {side}")
        if not 0.0 <= float(proportion) <= 1.0:
            raise ValueError(f"proportion must be in [0, 1], got {proportion}")
        self.codec, self.quality, self.max_side, self.min_side = codec, int(quality), max_side, min_side
        self.policy, self.threshold, self.proportion, self.seed = policy, int(threshold), float(proportion), int(seed)

    def params(self) -> dict[str, Any]:
        return {
            "codec": self.codec,
            "quality": self.quality,
            "max_side": self.max_side,
            "min_side": self.min_side,
            "policy": self.policy,
            "threshold": self.threshold,
            "proportion": self.proportion,
            "seed": self.seed,
        }

    def _codec_for(self, index: int, raw_size: int) -> str:
        if self.policy == "smart":
            return self.codec if raw_size > self.threshold else "raw"
        if self.policy == "proportion":
            coin = np.random.Generator(np.random.PCG64(np.random.SeedSequence(self.seed, spawn_key=(3, index)))).random()
            return self.codec if coin < self.proportion else "raw"
        return self.codec

    def encode(self, value: Any, index: int, where: str) -> Any:
        if isinstance(value, (bytes, bytearray, memoryview)) and _imaging.sniff(value) == "jpeg":
            try:
                header = _imaging.jpeg_header(bytes(value))
            except ValueError as exc:
                raise ValueError(f"{where}: the JPEG bytes do not decode: {exc}") from exc
            if header is not None:
                height, width, channels = header
                fits = _imaging.target_size(height, width, self.max_side, self.min_side) == (height, width)
                if fits and self._codec_for(index, height * width * channels) == "jpeg":
                    _imaging.verify_jpeg(value, where)  # stored as it is: make sure it decodes
                    return (_imaging.CODECS["jpeg"], height, width, channels, bytes(value))
        image = _imaging.as_image(value, where)
        height, width = _imaging.target_size(image.shape[0], image.shape[1], self.max_side, self.min_side)
        image = _imaging.resize_area(image, height, width)
        codec = self._codec_for(index, image.size)
        return (_imaging.CODECS[codec], height, width, image.shape[2], _imaging.encode(codec, image, self.quality))

    def nbytes(self, encoded: Any) -> int:
        return len(encoded[4]) + 24

    def arrow_type(self) -> Any:
        pa = _pa()
        return pa.struct(
            [("codec", pa.int8()), ("height", pa.int32()), ("width", pa.int32()), ("channels", pa.int8()), ("data", pa.large_binary())]
        )

    def to_arrow(self, encoded: list[Any]) -> Any:
        pa = _pa()
        columns = list(zip(*encoded)) if encoded else [[], [], [], [], []]
        arrays = [
            pa.array(np.asarray(columns[0], np.int8)),
            pa.array(np.asarray(columns[1], np.int32)),
            pa.array(np.asarray(columns[2], np.int32)),
            pa.array(np.asarray(columns[3], np.int8)),
            pa.array(list(columns[4]), type=pa.large_binary()),
        ]
        return pa.StructArray.from_arrays(arrays, names=["codec", "height", "width", "channels", "data"])

    def column(self, array: Any) -> Column:
        return _ImageColumn(array)
