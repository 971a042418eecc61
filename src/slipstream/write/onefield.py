"""Bare samples as one-field dicts: ``ss.write(path, arrays, fields={"tokens": F.Tokens()})``.

When ``fields`` names exactly one field, a sample that is not a dict (an array, a list of token
ids) is that field's value: ``as_dicts(data, fields)`` gives the data whose samples are
``{name: sample}`` (dict samples pass unchanged), keeping what the writer asks of the data: a
container stays a container (``len``, ``[i]``, ``sample_origin``, ``default_metadata``), an
iterable stays an iterable (sized when it was). A file set (``read_rows``: ``slipstream
convert``'s tables, whose rows are dicts) and anything else are returned as they are.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from ..core.containers import getobs, numobs
from .pagewrite import is_container

__all__ = ["as_dicts"]


def _wrapped(name: str, sample: Any) -> Any:
    return sample if isinstance(sample, Mapping) else {name: sample}


class _Container:
    """A container whose non-dict samples become ``{name: sample}``."""

    def __init__(self, data: Any, name: str):
        self.data, self.name = data, name

    def __len__(self) -> int:
        return numobs(self.data)

    def __getitem__(self, index: int) -> Any:
        return _wrapped(self.name, getobs(self.data, index))

    def sample_origin(self, index: int) -> str | None:
        origin = getattr(self.data, "sample_origin", None)
        return origin(index) if callable(origin) else None

    def default_metadata(self, names: list[str]) -> dict[str, Any]:
        declared = getattr(self.data, "default_metadata", None)
        return declared(names) if callable(declared) else {}


class _Iterable:
    """An iterable whose non-dict samples become ``{name: sample}``; sized when ``data`` is."""

    def __init__(self, data: Any, name: str):
        self.data, self.name = data, name

    def __iter__(self) -> Iterator[Any]:
        return (_wrapped(self.name, sample) for sample in self.data)


class _SizedIterable(_Iterable):
    def __len__(self) -> int:
        return len(self.data)


def as_dicts(data: Any, fields: Mapping[str, Any] | None) -> Any:
    """``data`` with its bare samples as ``{name: sample}`` when ``fields`` names one field ``name``
    (see the module doc), else ``data`` itself."""
    if fields is None or not isinstance(fields, Mapping) or len(fields) != 1 or isinstance(data, Mapping):
        return data
    name = str(next(iter(fields)))
    if callable(getattr(data, "read_rows", None)):
        return data
    if is_container(data):
        return _Container(data, name)
    if isinstance(data, (str, bytes)) or not hasattr(data, "__iter__"):
        return data
    return _SizedIterable(data, name) if hasattr(data, "__len__") else _Iterable(data, name)
