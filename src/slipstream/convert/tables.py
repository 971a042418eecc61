"""Conversion sources from Arrow tables: a ``.parquet`` file (read batch by batch, so memory stays
bounded) and a Hugging Face dataset saved with ``save_to_disk`` (read with pyarrow alone): one field
per column, chosen by the Hugging Face features when present, else by the Arrow type.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..core.errors import CorruptFileError
from ..files import field_kinds as F
from ..files.field import pyarrow_module as _pa
from ..files.parquetfooter import MAGIC, TAIL, FooterClaims, Leaf, checked_footer, footer_bounds, leaf_columns
from .columns import Column, first_null, hf_column, null_error
from .source import ConvertError, Source

__all__ = ["hf_features", "huggingface_source", "parquet_source", "table_columns"]

_ROWS_PER_BATCH_BYTES = 32 << 20  # about how many bytes of table rows to decode at a time
_PANDAS_INDEX = re.compile(r"__index_level_\d+__")


class _ParquetGroup:
    """One row group of a Parquet file: ``rows`` rows, read as record batches of ``names``."""

    def __init__(self, path: Path, group: int, rows: int, names: list[str], batch_size: int):
        self.path, self.group, self.rows, self.names, self.batch_size = path, group, rows, names, batch_size

    def batches(self) -> Iterator[Any]:
        """The row group's record batches; ``ConvertError`` naming the file and row group when its
        bytes cannot be read as the footer describes them."""
        pa = _pa()
        import pyarrow.parquet as pq

        try:
            yield from pq.ParquetFile(self.path, memory_map=True).iter_batches(
                batch_size=self.batch_size, row_groups=[self.group], columns=self.names
            )
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise ConvertError(f"{self.path}: row group {self.group} cannot be read: {exc}") from None


class _ArrowFile:
    """One Arrow IPC stream (or file) of a saved Hugging Face dataset, ``rows`` rows, memory-mapped."""

    def __init__(self, path: Path, rows: int):
        self.path, self.rows = path, rows

    def batches(self) -> Iterator[Any]:
        return _arrow_batches(self.path)


class _TableRows:
    """A table's rows as dict samples: a sized iterable (``ss.write`` without an engine streams it)
    and a file set (``read_rows(start, stop)`` reads the parts, row groups or files, that hold
    those rows and no others, so ``ss.write``'s engines split it into shards). Plain attributes and
    classes only: it pickles small, for worker processes."""

    def __init__(self, where: Path, parts: list[Any], columns: list[Column]):
        self.where, self.parts, self.columns = where, parts, columns
        self.total = sum(part.rows for part in parts)

    def __len__(self) -> int:
        return self.total

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return self.read_rows(0, self.total)

    def read_rows(self, start: int, stop: int) -> Iterator[dict[str, Any]]:
        """The samples ``start`` .. ``stop - 1`` in order, reading only the parts that hold them."""
        if not 0 <= start <= stop <= self.total:
            raise IndexError(f"rows {start}..{stop} are not within the table's {self.total} rows")
        offset = 0
        for part in self.parts:
            if offset >= stop:
                break
            if offset + part.rows > start:
                row = offset
                for batch in part.batches():
                    lo, hi = max(start, row), min(stop, row + batch.num_rows)
                    if lo < hi:
                        yield from self._samples(batch.slice(lo - row, hi - lo), lo)
                    row += batch.num_rows
                    if row >= stop:
                        break
            offset += part.rows

    def _samples(self, batch: Any, first_row: int) -> Iterator[dict[str, Any]]:
        values = []
        for column in self.columns:
            array = batch.column(column.name)
            if array.null_count:
                raise null_error(self.where, column.name, first_row + first_null(array))
            values.append(column.values(array, first_row))
        names = [column.name for column in self.columns]
        for k in range(batch.num_rows):
            yield {name: v[k] for name, v in zip(names, values)}


def hf_features(metadata: dict[bytes, bytes] | None) -> dict[str, Any]:
    """The ``features`` Hugging Face stores in an Arrow or Parquet schema's metadata (empty when none)."""
    raw = (metadata or {}).get(b"huggingface")
    if raw is None:
        return {}
    try:
        features = json.loads(raw).get("info", {}).get("features")
    except (ValueError, AttributeError):
        return {}
    return features if isinstance(features, dict) else {}


def table_columns(where: Path, schema: Any, features: dict[str, Any], first: Callable[[str], Any], image: F.Image) -> list[Column]:
    """One ``Column`` per column of ``schema`` (a pandas index written along is left out), its field
    chosen by the Hugging Face ``features`` where they name it, else by the Arrow type (``first(name)``
    gives a column's first values, to sniff image bytes); ``ConvertError`` for a table with none."""
    columns = []
    for arrow_field in schema:
        name = arrow_field.name
        if _PANDAS_INDEX.fullmatch(name):
            continue  # a pandas index written along: not data
        columns.append(hf_column(where, name, features.get(name), arrow_field.type, lambda name=name: first(name), image))
    if not columns:
        raise ConvertError(f"{where}: the table has no columns")
    return columns


def _source(kind: str, where: Path, rows: _TableRows, columns: list[Column]) -> Source:
    """The source of a table's rows, its ClassLabel names kept as ``{"class_names": {column: names}}``."""
    class_names = {c.name: c.class_names for c in columns if c.class_names is not None}
    metadata = {"class_names": class_names} if class_names else {}
    return Source(kind, where, rows, {c.name: c.field for c in columns}, metadata=metadata)


def parquet_source(path: Path, image: F.Image, files: list[Path] | None = None) -> Source:
    """The rows of the Parquet file ``path``, or of ``files`` in their order (a set of files with
    one schema, ``path`` their folder), read row group by row group."""
    pa = _pa()
    import pyarrow.parquet as pq

    files = [path] if files is None else list(files)
    if not files:
        raise ConvertError(f"{path}: no .parquet files")
    opened = []
    for file in files:
        try:
            opened.append(pq.ParquetFile(file, memory_map=True))
        except (pa.ArrowException, OSError, ValueError) as exc:  # (ValueError: a name that is not UTF-8)
            raise ConvertError(f"{file}: cannot read as Parquet: {exc}") from None
    footers = [_footer_claims(file, handle) for file, handle in zip(files, opened)]  # (before anything reads the data)
    parquet = opened[0]
    schema = parquet.schema_arrow
    for file, other in zip(files[1:], opened[1:]):
        if not other.schema_arrow.remove_metadata().equals(schema.remove_metadata()):
            raise ConvertError(f"{file}: its columns {other.schema_arrow.remove_metadata()} differ from {files[0].name}'s {schema.remove_metadata()}")

    def first(name: str) -> Any:
        batch = next(parquet.iter_batches(batch_size=16, columns=[name]), None)
        return batch.column(0) if batch is not None else pa.array([], type=schema.field(name).type)

    columns = table_columns(path, schema, hf_features(schema.metadata), first, image)
    names = [c.name for c in columns]
    first_row = 0
    for file, handle, (claims, leaves) in zip(files, opened, footers):
        _parquet_nulls(file, handle, claims, leaves, names, first_row)
        first_row += sum(claims.rows)
    row_bytes = 1
    if parquet.metadata.num_row_groups:
        group = parquet.metadata.row_group(0)  # (a row group's own values: no column chunk's metadata)
        row_bytes = max(1, group.total_byte_size // max(1, group.num_rows))
    batch_size = int(min(65536, max(16, _ROWS_PER_BATCH_BYTES // row_bytes)))
    parts = [
        _ParquetGroup(file.absolute(), g, rows, names, batch_size)
        for file, (claims, _) in zip(files, footers)
        for g, rows in enumerate(claims.rows)
    ]
    kind = "Parquet file" if len(files) == 1 and files[0] == path else f"set of {len(files)} Parquet files"
    return _source(kind, path, _TableRows(path, parts, columns), columns)


def _footer_claims(path: Path, parquet: Any) -> tuple[FooterClaims, list[Leaf]]:
    """The claims of the footer of the Parquet file ``path`` (opened as ``parquet``) and its leaf
    columns, checked from the footer's own bytes (``files.parquetfooter``: row counts, column chunk
    ranges, value and null counts) before anything is read or sized by them; ``ConvertError``
    naming the file otherwise (pyarrow's column chunk metadata objects abort the interpreter on
    some damage, so they are never used)."""
    try:
        with path.open("rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            head = handle.read(len(MAGIC))
            handle.seek(max(0, size - TAIL))
            data_end = footer_bounds(path, size, handle.read(TAIL), head)
            handle.seek(data_end)
            footer = handle.read(size - TAIL - data_end)
        meta = parquet.metadata
        leaves = leaf_columns(path, meta, parquet.schema_arrow)
        claims = checked_footer(path, footer, data_end, leaves)
        if len(claims.rows) != meta.num_row_groups or sum(claims.rows) != meta.num_rows:
            raise CorruptFileError(
                path, f"its footer holds {len(claims.rows)} row groups of {sum(claims.rows)} rows, but pyarrow read "
                f"{meta.num_row_groups} of {meta.num_rows} (did the file change?)"
            )  # fmt: skip
    except CorruptFileError as exc:
        raise ConvertError(str(exc)) from None
    return claims, leaves


def _parquet_nulls(
    path: Path, parquet: Any, claims: FooterClaims, leaves: list[Leaf], names: list[str], first_row: int = 0
) -> None:
    """Fail before writing when the footer's checked statistics (``claims``) show a null in a flat
    column (the rows are checked again as they stream); the file's rows are numbered from
    ``first_row``."""
    pa = _pa()
    index = {leaf.path: j for j, leaf in enumerate(leaves)}
    for g, rows in enumerate(claims.rows):
        for name in names:
            j = index.get(name)
            if j is not None and claims.chunks[g][j].nulls:
                try:
                    array = parquet.read_row_group(g, columns=[name]).column(0).combine_chunks()
                except (pa.ArrowException, OSError, ValueError) as exc:
                    raise ConvertError(f"{path}: row group {g}, column {name!r} cannot be read: {exc}") from None
                if array.null_count:
                    raise null_error(path, name, first_row + first_null(array))
        first_row += rows


def _arrow_batches(path: Path) -> Iterator[Any]:
    """The record batches of an Arrow IPC stream (or file), memory-mapped."""
    pa = _pa()
    import pyarrow.ipc  # noqa: F401

    source = pa.memory_map(str(path))
    try:
        reader = pa.ipc.open_stream(source)
    except pa.ArrowInvalid:
        try:
            file_reader = pa.ipc.open_file(source)
        except pa.ArrowInvalid as exc:
            raise ConvertError(f"{path}: not an Arrow IPC stream or file: {exc}") from None
        for p in range(file_reader.num_record_batches):
            yield file_reader.get_batch(p)
        return
    yield from reader


def _arrow_schema(path: Path) -> Any:
    pa = _pa()
    import pyarrow.ipc  # noqa: F401

    source = pa.memory_map(str(path))
    try:
        return pa.ipc.open_stream(source).schema
    except pa.ArrowInvalid:
        try:
            return pa.ipc.open_file(source).schema
        except pa.ArrowInvalid as exc:
            raise ConvertError(f"{path}: not an Arrow IPC stream or file: {exc}") from None


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConvertError(f"{path}: cannot read: {exc}") from None


def huggingface_source(folder: Path, image: F.Image) -> Source:
    pa = _pa()
    state = _read_json(folder / "state.json") if (folder / "state.json").is_file() else {}
    info = _read_json(folder / "dataset_info.json") if (folder / "dataset_info.json").is_file() else {}
    listed = state.get("_data_files") if isinstance(state, dict) else None
    if listed:
        files = [folder / entry["filename"] for entry in listed]
    else:
        files = sorted(folder.glob("data-*.arrow")) or sorted(folder.glob("*.arrow"))
    if not files:
        raise ConvertError(f"{folder}: a Hugging Face dataset folder without data-*.arrow files")
    missing = [str(f.name) for f in files if not f.is_file()]
    if missing:
        raise ConvertError(f"{folder}: state.json lists data files that are missing: {missing}")
    if isinstance(state, dict) and state.get("_indices_data_files"):
        raise ConvertError(f"{folder}: the dataset has an indices mapping (a select/shuffle view); save it with flatten_indices() first")
    schema = _arrow_schema(files[0])
    for other in files[1:]:
        if not _arrow_schema(other).equals(schema):
            raise ConvertError(f"{folder}: {other.name} has a different schema from {files[0].name}")
    features = info.get("features") if isinstance(info, dict) else None
    if not isinstance(features, dict):
        features = hf_features(schema.metadata)

    # One pass over the memory-mapped batches (cheap: nothing is decoded) counts the rows and finds nulls up front.
    total = 0
    first_batch = None
    rows: dict[Path, int] = {}
    for file in files:
        rows[file] = total
        for batch in _arrow_batches(file):
            if first_batch is None and batch.num_rows:
                first_batch = batch
            for k, name in enumerate(batch.schema.names):
                column = batch.column(k)
                if column.null_count and not _PANDAS_INDEX.fullmatch(name):
                    raise null_error(folder, name, total + first_null(column))
            total += batch.num_rows
        rows[file] = total - rows[file]

    def first(name: str) -> Any:
        return first_batch.column(name) if first_batch is not None else pa.array([], type=schema.field(name).type)

    columns = table_columns(folder, schema, features, first, image)

    return _source("Hugging Face dataset", folder, _TableRows(folder, [_ArrowFile(file.absolute(), rows[file]) for file in files], columns), columns)
