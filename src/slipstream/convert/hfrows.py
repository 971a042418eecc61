"""``ss.write(path, hf_dataset)``: a Hugging Face ``datasets.Dataset`` as ``ss.write``'s data.

Its rows are read as Arrow (``with_format("arrow")``, selections and shuffles applied), column
by column as ``slipstream convert`` reads a saved dataset (``convert.columns``): an ``Image``
column gives the stored bytes, never a decoded PIL image (a JPEG is kept as it is), a
``ClassLabel`` its integer, ``ArrayND`` arrays, ``Json`` the decoded value. The features choose
the fields when ``fields=`` is not given (``Image``: ``F.Image(codec="jpeg")`` when the first
image is a JPEG, else ``F.Image(codec="png")``, lossless, each image's own channels), and the
``ClassLabel`` names of the fields written are stored as ``metadata["class_names"]``, with or
without ``fields=``. ``datasets`` is never imported here: a dataset is recognized by its type.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from ..files import field_kinds as F
from ..images.encoded import codecs as _imaging
from .columns import Column, hf_column
from .tables import _TableRows

__all__ = ["HuggingFaceRows"]

_PART_ROWS = 1024  # rows read from the dataset at a time


class _DatasetPart:
    """Rows ``start .. start + rows - 1`` of a ``datasets.Dataset``, read as Arrow record batches."""

    def __init__(self, dataset: Any, start: int, rows: int):
        self.dataset, self.start, self.rows = dataset, start, rows

    def batches(self) -> Iterator[Any]:
        table = self.dataset.with_format("arrow")[self.start : self.start + self.rows]
        yield from table.to_batches()


class HuggingFaceRows(_TableRows):
    """A ``datasets.Dataset``'s rows as dict samples (a sized iterable and a file set, as
    ``slipstream convert``'s tables), with the fields and class names its features give
    (``default_fields``, ``default_metadata``: what ``ss.write`` uses)."""

    def __init__(self, dataset: Any, names: list[str] | None = None):
        where = f"the Hugging Face dataset {_describe(dataset)}"
        features = json.loads(json.dumps(dataset.features.to_dict()))  # tuples as lists, as a saved dataset's JSON holds them
        schema = dataset.features.arrow_schema
        keep = [name for name in dataset.column_names if names is None or name in names]
        head = dataset.with_format("arrow")[:16] if len(dataset) else None

        def first(name: str) -> Any:
            import pyarrow as pa

            return head.column(name).combine_chunks() if head is not None else pa.array([], type=schema.field(name).type)

        base = Path.cwd()  # where a relative image path is read from
        image = F.Image(codec="jpeg")
        columns = [
            hf_column(where, name, features.get(name), schema.field(name).type, lambda name=name: first(name), image, base)  # type: ignore[arg-type]
            for name in keep
        ]
        for column in columns:
            if isinstance(column.field, F.Image):
                column.field = _image_field(column, first)
        n = len(dataset)
        parts = [_DatasetPart(dataset, start, min(_PART_ROWS, n - start)) for start in range(0, n, _PART_ROWS)]
        super().__init__(where, parts, columns)  # type: ignore[arg-type] - errors name it as they name a file

    def default_fields(self) -> dict[str, Any]:
        """The fields its features give (see the module doc), a copy."""
        return {column.name: copy.deepcopy(column.field) for column in self.columns}

    def default_metadata(self, names: list[str]) -> dict[str, Any]:
        """``{"class_names": {column: names}}`` for the ``ClassLabel`` columns among ``names``."""
        class_names = {c.name: list(c.class_names) for c in self.columns if c.class_names is not None and c.name in names}
        return {"class_names": class_names} if class_names else {}


def _image_field(column: Column, first: Any) -> F.Image:
    """JPEG when the column's first image is one (kept as it is), else PNG (lossless)."""
    values = column.values(first(column.name), 0) if len(first(column.name)) else []
    sample = next((v for v in values if v is not None), None)
    codec = "jpeg" if sample is not None and _imaging.sniff(sample) == "jpeg" else "png"
    return F.Image(codec=codec)


def _describe(dataset: Any) -> str:
    cached = getattr(dataset, "cache_files", None) or []
    files = [Path(entry["filename"]).name for entry in cached if isinstance(entry, dict) and "filename" in entry]
    return f"({len(dataset)} rows{', ' + files[0] if files else ''})"
