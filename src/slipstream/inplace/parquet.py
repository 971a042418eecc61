"""``ss.open`` of Parquet: a file, a list of files or a folder of them, read in place.

``ss.open("train.parquet")`` (or a folder of ``.parquet`` files, read in name order, such as a
Hugging Face hub dataset's ``data/`` folder, or a list of files) is a container with ``len`` and
random access, each row group one page (``order="quasi_random"`` shuffles row groups, then rows
within a few of them). Opening reads the footers alone (no data); a page is one row group's
columns, read when a sample in it is first asked for and kept among the ``keep`` most recently
used.

Columns map to fields as ``slipstream convert`` maps them (``convert.columns``): the Hugging Face
features stored in the schema's metadata where present (``Image``, ``ClassLabel`` with its names
as ``ds.metadata["class_names"]``, ``ArrayND``, ``Json``), else the Arrow type (numbers, bools,
strings, binary that holds images, lists of integers as ``F.Tokens``, other nested values as
JSON). Image columns are read by the pipelines, compiled tasks and the device stage as a packed
file's are; ``image=`` sets their field (``F.Image(channels=3)`` makes every image RGB).

What is checked: the footer and every page's structure by pyarrow's reader, each data page's
CRC where the writer stored one (``write_page_checksum=True``; most writers store none, and then
only the structure and the compression framing are checked), the row counts against the footer,
and the file's identity (inode, size, modification time) before each read: a file changed or
replaced since it was opened raises ``CorruptFileError``, as a packed file does.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..convert.tables import hf_features, table_columns
from ..core.errors import ChecksumError, CorruptFileError
from ..files import field_kinds as F
from ..files.field import pyarrow_module as _pa
from ..files.identity import identity
from ..files.packed import PackedDataset
from ..files.pagememory import RecentPages
from ..files.shards import ShardedDataset
from .tablepages import DEFAULT_KEEP, TablePages, chosen_columns

__all__ = ["ParquetPages", "is_parquet", "open_parquet", "parquet_files"]

SUFFIX = ".parquet"


def is_parquet(path: Any) -> bool:
    """Whether ``path`` names Parquet by its name (``.parquet``), or is a folder holding such files
    and no ``index.json`` (a sharded packed dataset's)."""
    p = Path(path)
    if p.suffix == SUFFIX:
        return True
    return p.is_dir() and not (p / "index.json").exists() and any(q.suffix == SUFFIX for q in p.iterdir())


def parquet_files(folder: Path) -> list[Path]:
    """The ``.parquet`` files under ``folder`` (its subfolders too), in path order."""
    return sorted(q for q in folder.rglob(f"*{SUFFIX}") if q.is_file())


class ParquetPages(TablePages):
    """A local Parquet file's row groups as pages (see the module doc)."""

    def __init__(self, path: str | os.PathLike, fields: list[str] | None = None, *, image: F.Image | None = None, recent: RecentPages | None = None):
        pa = _pa()
        import pyarrow.parquet as pq

        self.name = self.path = Path(path)
        self.identity = identity(self.path)
        self.size = self.identity[1]
        try:
            self.metadata = pq.read_metadata(self.path)  # the footer alone
            schema = self.metadata.schema.to_arrow_schema()
        except (pa.ArrowException, OSError) as exc:
            if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError)):
                raise
            raise CorruptFileError(self.path, f"cannot be read as Parquet: {exc}") from None
        self._image = image if image is not None else F.Image(codec="jpeg")

        def first(name: str) -> Any:  # a column's first values (only binary columns without features ask: image bytes?)
            if self.metadata.num_row_groups == 0:
                return pa.array([], type=schema.field(name).type)
            return self._reader().read_row_group(0, columns=[name]).column(0).slice(0, 16).combine_chunks()

        columns = table_columns(self.path, schema, hf_features(schema.metadata), first, self._image)
        self._wanted = None if fields is None else list(fields)
        rows = [self.metadata.row_group(g).num_rows for g in range(self.metadata.num_row_groups)]
        super().__init__(chosen_columns(self.path, columns, fields), rows, None, recent)
        self._names = [c.name for c in self.columns]

    def _reader(self) -> Any:
        import pyarrow.parquet as pq

        return pq.ParquetFile(self.path, metadata=self.metadata, memory_map=True, page_checksum_verification=True)

    def where(self, p: int) -> str:
        return f"row group {p}"

    def read_part(self, p: int) -> Any:
        pa = _pa()
        try:
            return self._reader().read_row_group(p, columns=self._names, use_threads=False)
        except (pa.ArrowException, OSError) as exc:
            if isinstance(exc, FileNotFoundError):
                raise
            raise CorruptFileError(self.path, f"row group {p} cannot be read: {exc}") from None

    def check(self) -> None:
        """``CorruptFileError`` when the file at the path is not the one opened (one ``stat``)."""
        try:
            now = identity(self.path)
        except FileNotFoundError:
            raise CorruptFileError(self.path, "the file was removed since it was opened") from None
        if now != self.identity:
            raise CorruptFileError(
                self.path,
                f"the file changed since it was opened (size {self.identity[1]} -> {now[1]} bytes, or replaced): reopen it to read the new contents",
            )

    def validate(self, starts: list[int], n: int) -> None:
        """Read every row group, checking its structure, page CRCs where stored, and values;
        ``ChecksumError`` naming the first that fails (``page`` and ``samples`` in this file's numbers)."""
        for p in range(len(self.part_rows)):
            stop = starts[p + 1] if p + 1 < len(starts) else n
            try:
                self.batch(p)
            except CorruptFileError as exc:
                message = str(exc).removeprefix(f"{self.path}: ")
                raise ChecksumError(self.path, f"row group {p} (samples {starts[p]}..{stop - 1}) fails its checks: {message}", p, range(starts[p], stop)) from None

    def __getstate__(self) -> dict[str, Any]:
        return {"path": str(self.path), "fields": self._wanted, "image": self._image, "identity": self.identity, "keep": self.recent.keep}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["path"], state["fields"], image=state["image"], recent=RecentPages(state["keep"]))  # type: ignore[misc]


def open_parquet(
    path: Any, fields: list[str] | None = None, *, image: F.Image | None = None, keep: int = DEFAULT_KEEP
) -> PackedDataset | ShardedDataset:
    """A local Parquet file as a ``PackedDataset``, or a folder or list of them as a ``ShardedDataset``
    (see the module doc); the files of a set must hold the same columns."""
    recent = RecentPages(keep)
    if isinstance(path, (list, tuple)):
        files = [Path(p) for p in path]
    elif Path(path).is_dir():
        files = parquet_files(Path(path))
        if not files:
            raise FileNotFoundError(f"{path}: no .parquet files in this folder")
    else:
        source = ParquetPages(path, fields, image=image, recent=recent)
        return PackedDataset(source.path, fields=fields, source=source)
    shards = [PackedDataset(f, fields=fields, source=ParquetPages(f, fields, image=image, recent=recent)) for f in files]
    return ShardedDataset([], fields=fields, shards=shards)
