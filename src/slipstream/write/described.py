"""What data says of itself to ``ss.write``: the fields to store when none are given, and the metadata to keep.

A container may offer ``default_fields()`` (the fields ``ss.write`` uses when ``fields`` is None)
and ``default_metadata(names)`` (metadata about the fields ``names`` being written, such as class
names: ``{"class_names": {field: [names]}}``), which ``ss.write`` stores under the caller's own
(``class_names`` merged field by field, the caller's winning). ``ss.imagefolder`` offers both, so
``ss.write(path, ss.imagefolder(root))`` stores what ``slipstream convert`` stores. A Hugging Face
``datasets.Dataset`` is read through ``convert.hfrows`` (imported only when one is given: the one
import of ``convert`` from ``write``), which offers them from its features.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..files.field import Field
from .onefield import as_dicts

__all__ = ["adapted", "default_fields", "is_hf_dataset", "stored_metadata"]


def is_hf_dataset(data: Any) -> bool:
    """Whether ``data`` is a map-style Hugging Face ``datasets.Dataset`` (by its type: nothing is imported)."""
    return any(cls.__module__ == "datasets.arrow_dataset" and cls.__name__ == "Dataset" for cls in type(data).__mro__)


def adapted(data: Any, fields: Mapping[str, Field] | None) -> Any:
    """``data`` as ``ss.write`` reads it: a Hugging Face dataset as its rows (only the columns
    ``fields`` names, when given); with one field in ``fields``, samples that are not dicts as
    ``{name: sample}`` (``onefield``); anything else as it is."""
    if is_hf_dataset(data):
        # lazy: breaks the package cycle write -> convert -> write (convert.sources imports write.writer)
        from ..convert.hfrows import HuggingFaceRows

        return HuggingFaceRows(data, list(fields) if fields is not None else None)
    return as_dicts(data, fields)


def default_fields(data: Any, fields: Mapping[str, Field] | None) -> Mapping[str, Field] | None:
    """``fields``, or when None the data's own (``data.default_fields()``), else None (inferred later)."""
    if fields is None and callable(getattr(data, "default_fields", None)):
        return data.default_fields()
    return fields


def stored_metadata(data: Any, fields: Mapping[str, Field] | None, user: dict[str, Any]) -> dict[str, Any]:
    """The metadata to store: what the data records of itself for the fields written
    (``data.default_metadata(names)``), the user's (checked JSON) over it, ``class_names`` merged
    field by field."""
    declared = getattr(data, "default_metadata", None)
    if not callable(declared) or fields is None:
        return dict(user)
    own = json.loads(json.dumps(declared(list(fields)), allow_nan=False))
    merged = {**own, **user}
    if isinstance(own.get("class_names"), dict) and isinstance(user.get("class_names"), dict):
        merged["class_names"] = {**own["class_names"], **user["class_names"]}
    return merged
