"""The field protocol of packed files: a field owns its Arrow column type, encoder and decoder.

``Field`` subclasses register themselves by ``kind`` (the name written into a file's schema
metadata, with a per-kind ``version``); ``field_from_spec`` rebuilds a field from that metadata.
A ``Column`` is one field's data in one page, read zero-copy from the page's Arrow buffers;
``ScalarColumn`` the column of the one-number-per-sample fields (``F.Int``, ``F.Float``, ``F.Bool``).
``pyarrow_module()`` is pyarrow, or the ``ImportError`` that says how to install it.
"""

from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from ..core.errors import CorruptFileError
from ..core.nodes import ArrayLeaf, CollatedNode
from ..core.optional import require

__all__ = ["Column", "Field", "ScalarColumn", "binary_views", "checked_binary", "field_from_spec", "pyarrow_module", "slice_row"]


def pyarrow_module() -> Any:
    """pyarrow (``ImportError`` with the install hint when it is missing)."""
    return require("pyarrow", extra="files", purpose="packed files need pyarrow")


def binary_views(array: Any) -> tuple[np.ndarray, np.ndarray]:
    """(offsets, data) of a large_binary/large_string Arrow array, as NumPy views of its buffers;
    ``ValueError`` when the offsets cannot be right (damage), so every row slices inside ``data``."""
    buffers = array.buffers()
    offsets = np.frombuffer(buffers[1], np.int64)[array.offset : array.offset + len(array) + 1]
    data = np.frombuffer(buffers[2], np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
    if len(offsets) != len(array) + 1 or (len(offsets) and (offsets[0] < 0 or offsets[-1] > data.size or (np.diff(offsets) < 0).any())):
        raise ValueError(f"the offsets of {len(array)} values do not fit their {data.size} bytes")
    return offsets, data


def checked_binary(array: Any, path: Any, where: str) -> Any:
    """``array`` (a large_binary/large_string Arrow column) once ``binary_views`` finds its offsets
    inside its data, for readers that go through them unchecked (``datasets``); ``CorruptFileError``
    naming ``path`` and ``where`` otherwise."""
    try:
        binary_views(array)
    except ValueError as exc:
        raise CorruptFileError(path, f"{where}: {exc}") from None
    return array


def slice_row(offsets: np.ndarray, data: np.ndarray, row: int) -> np.ndarray:
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

    def batch_node(self, row: int) -> Any:
        """How a batch holds this field's values (a ``_collate`` spec node), ``row``'s value being a
        typical one: by default every value is kept and the batch collated by ``default_collate``'s
        rules, right whatever the values' types and shapes."""
        return CollatedNode()


class ScalarColumn(Column):
    """One page of a scalar field: ``values``, the page's 1-d NumPy array, read back as ``convert`` (int, float or bool)."""

    def __init__(self, values: np.ndarray, convert: type):
        self.values, self.convert = values, convert

    def get(self, row: int) -> Any:
        return self.convert(self.values[row])

    def into(self, buffer: Any, row: int) -> Any:
        if isinstance(buffer, np.ndarray) and buffer.shape == ():
            buffer[...] = self.values[row]
            return buffer
        return self.get(row)

    def batch_node(self, row: int) -> Any:
        return ArrayLeaf((), self.values.dtype)  # what default_collate makes of the Python values

    def rows_into(self, target: np.ndarray, positions: list[int], rows: list[int]) -> bool:
        """``target[positions] = values[rows]`` (one gather); False when ``target`` is not a 1-d array of the dtype."""
        if target.dtype != self.values.dtype or target.ndim != 1:
            return False
        target[positions] = self.values[rows]
        return True


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
        return pyarrow_module().array(encoded, type=self.arrow_type())

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
