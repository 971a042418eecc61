"""``ss.open`` of Parquet: a file, a list of files or a folder of them, read in place.

``ss.open("train.parquet")`` (or a folder of ``.parquet`` files, its subfolders too, read in path
order, such as a Hugging Face hub dataset's ``data/`` folder, or a list of files) is a container
with ``len`` and random access, each row group one page (``order="quasi_random"`` shuffles row
groups, then rows within a few of them). Opening reads the footers alone (and, for a binary
column without Hugging Face features, the first values of row group 0, to tell image bytes: a file
without rows takes the columns of the set's first file with rows and its schema); a page is one
row group's columns, read when a sample in it is first asked for and kept among the ``keep`` most
recently used.

Columns map to fields as ``slipstream convert`` maps them (``convert.columns``): the Hugging Face
features stored in the schema's metadata where present (``Image``, ``ClassLabel`` with its names
as ``ds.metadata["class_names"]``, ``ArrayND``, ``Json``), else the Arrow type (numbers, bools,
strings, binary that holds images, lists of integers as ``F.Tokens``, other nested values as
JSON). Only the chosen ``fields`` are mapped (a column of a type no field holds may be left out).
Image columns are read by the pipelines, compiled tasks and the device stage as a packed file's
are; ``image=`` sets their field (``F.Image(channels=3)`` makes every image RGB).

What is checked. At open, the footer's claims against each other and the file, from its own bytes
(``files.parquetfooter``), before anything is sized by them: the magic bytes and footer length,
the row groups' row counts against the file's and against every column chunk's value count (equal
for a flat column, at least as many for a nested one), each column chunk's bytes inside the
file's data and apart from the others', and no row group claiming
more than ``ROWS_PER_BYTE`` rows per byte of its column chunks (beyond ``ROWS_ANYWAY`` rows: a
row group of only constant columns past that is refused, convert such data instead). On reads:
every page's structure by pyarrow's reader, each data page's CRC where the writer stored one
(``write_page_checksum=True``; most writers store none, and then only the structure and the
compression framing are checked), the row counts against the footer, and the file's identity
(inode, size, modification time) before each read: a file changed or replaced since it was
opened raises ``CorruptFileError``, as a packed file does. Reads come from the file as opened (a
memory map of it), never from another file renamed over the path meanwhile. The pages' own
headers and values are decoded by pyarrow, which allocates what they say they hold: a checksum
catches a changed byte there, not a forged page.

A dataset pickled to a worker process reopens the file by path there, refusing one that is not
the file it was opened from (``CorruptFileError``), and keeps sharing one bound of decoded row
groups (``keep``) among the files opened together.
"""

from __future__ import annotations

import mmap
import os
import stat
from pathlib import Path
from typing import Any

from ..convert.tables import hf_features, table_columns
from ..core.errors import CorruptFileError, MissingFieldError
from ..files import field_kinds as F
from ..files.field import pyarrow_module as _pa
from ..files.identity import identity
from ..files.packed import PackedDataset
from ..files.pagememory import RecentPages
from ..files.parquetfooter import (
    MAGIC,
    ROWS_ANYWAY,
    ROWS_PER_BYTE,
    TAIL,
    arrow_schema,
    checked_footer,
    checked_row_counts,
    footer_bounds,
    leaf_columns,
    parse_metadata,
)
from ..files.shards import ShardedDataset
from .tablepages import DEFAULT_KEEP, TablePages, chosen_columns

__all__ = ["ROWS_ANYWAY", "ROWS_PER_BYTE", "ParquetPages", "checked_row_counts", "is_parquet", "open_parquet", "parquet_files"]

SUFFIX = ".parquet"


def is_parquet(path: Any) -> bool:
    """Whether ``path`` names Parquet by its name (``.parquet``), or is a folder holding such files
    (in it or its subfolders) and no ``index.json`` (a sharded packed dataset's)."""
    p = Path(path)
    if p.suffix == SUFFIX:
        return True
    return p.is_dir() and not (p / "index.json").exists() and any(q.is_file() for q in p.rglob(f"*{SUFFIX}"))


def parquet_files(folder: Path) -> list[Path]:
    """The ``.parquet`` files under ``folder`` (its subfolders too), in path order."""
    return sorted(q for q in folder.rglob(f"*{SUFFIX}") if q.is_file())


def _mapped(path: Path) -> tuple[Any, tuple[int, int, int]]:
    """A read-only memory map of the file at ``path`` (``b""`` for an empty one) and its (inode,
    size, mtime) then, from the descriptor that mapped it."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise IsADirectoryError(f"{path}: not a file")
        return (mmap.mmap(fd, 0, access=mmap.ACCESS_READ) if st.st_size else b""), (st.st_ino, st.st_size, st.st_mtime_ns)
    finally:
        os.close(fd)


def _footer_end(path: Path, data: Any) -> int:
    """Where the footer starts (the end of the row groups' data): checked by its magic and length."""
    return footer_bounds(path, len(data), data[len(data) - TAIL :], data[: len(MAGIC)])


class ParquetPages(TablePages):
    """A local Parquet file's row groups as pages (see the module doc). ``columns``: the fields of
    its chosen columns when known (another file's of the same schema: a file without rows has no
    values to tell image bytes by)."""

    def __init__(
        self,
        path: str | os.PathLike,
        fields: list[str] | None = None,
        *,
        image: F.Image | None = None,
        recent: RecentPages | None = None,
        columns: list[Any] | None = None,
    ):
        self._open(Path(path))
        self._data_end = _footer_end(self.path, self._map)
        pa = _pa()
        self.metadata = parse_metadata(self.path, self._buffer)  # the footer alone
        schema = arrow_schema(self.path, self.metadata)
        leaves = leaf_columns(self.path, self.metadata, schema)
        self._rows = list(
            checked_footer(self.path, self._map[self._data_end : len(self._map) - TAIL], self._data_end, leaves).rows
        )
        if len(self._rows) != self.metadata.num_row_groups:
            raise CorruptFileError(
                self.path, f"its footer holds {len(self._rows)} row groups, but pyarrow reads {self.metadata.num_row_groups}"
            )
        self._image = image if image is not None else F.Image(codec="jpeg")
        self._wanted = None if fields is None else list(fields)
        if fields is not None:  # only the chosen columns are mapped (and sniffed)
            missing = [n for n in fields if n not in schema.names]
            if missing:
                raise MissingFieldError(self.path, f"no column {missing[0]!r}; it has {schema.names}")
            schema = pa.schema([schema.field(n) for n in dict.fromkeys(fields)], metadata=schema.metadata)
        if columns is None:
            columns = table_columns(self.path, schema, hf_features(schema.metadata), self._first, self._image)
        self._setup(chosen_columns(self.path, columns, fields), recent)

    def _open(self, path: Path) -> None:
        self.name = self.path = path
        self._map, self.identity = _mapped(path)
        self.size = self.identity[1]
        self._buffer = _pa().py_buffer(self._map)

    def _setup(self, columns: list[Any], recent: RecentPages | None) -> None:
        # page p is row group _groups[p] (row groups without rows are no pages)
        self._groups = [g for g, rows in enumerate(self._rows) if rows]
        super().__init__(columns, [self._rows[g] for g in self._groups], None, recent)
        self._names = [c.name for c in self.columns]

    def _first(self, name: str) -> Any:
        """A column's first values (at most 16, from row group 0): binary columns without features
        ask, to tell image bytes."""
        pa = _pa()
        for g, rows in enumerate(self._rows):
            if rows:
                try:
                    batch = next(self._reader().iter_batches(batch_size=16, row_groups=[g], columns=[name], use_threads=False))
                except (pa.ArrowException, OSError, ValueError, StopIteration) as exc:
                    raise CorruptFileError(self.path, f"row group {g} cannot be read: {exc!r}") from None
                return batch.column(0)
        return pa.array([], type=self.metadata.schema.to_arrow_schema().field(name).type)

    def _reader(self) -> Any:
        import pyarrow.parquet as pq

        return pq.ParquetFile(_pa().BufferReader(self._buffer), metadata=self.metadata, page_checksum_verification=True)

    def where(self, p: int) -> str:
        return f"row group {self._groups[p]}"

    def read_part(self, p: int) -> Any:
        pa = _pa()
        try:
            return self._reader().read_row_group(self._groups[p], columns=self._names, use_threads=False)
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise CorruptFileError(self.path, f"{self.where(p)} cannot be read: {exc}") from None

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

    def __getstate__(self) -> dict[str, Any]:
        return {
            "path": str(self.path), "fields": self._wanted, "image": self._image, "identity": self.identity, "recent": self.recent,
            "metadata": self.metadata, "rows": self._rows, "columns": self.columns,
        }  # fmt: skip

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Reopen the file by path, refusing one that is not the file pickled (its footer and
        columns come along: nothing is read again)."""
        path = Path(state["path"])
        try:
            self._open(path)
        except FileNotFoundError:
            raise CorruptFileError(path, "was removed since the dataset was opened in the process that sent it here") from None
        if tuple(self.identity) != tuple(state["identity"]):
            raise CorruptFileError(
                path,
                "was replaced or changed since the dataset was opened in the process that sent it here: this process "
                "would read other data than that one; open the new file with ss.open (a new loader)",
            )
        self._data_end = _footer_end(path, self._map)
        self.metadata, self._rows, self._image, self._wanted = state["metadata"], state["rows"], state["image"], state["fields"]
        self._setup(state["columns"], state["recent"])


def open_parquet(
    path: Any, fields: list[str] | None = None, *, image: F.Image | None = None, keep: int = DEFAULT_KEEP
) -> PackedDataset | ShardedDataset:
    """A local Parquet file as a ``PackedDataset``, or a folder or list of them as a ``ShardedDataset``
    (see the module doc); the files of a set must hold the same columns (``ShardMismatchError``
    naming the first that does not). A file without rows takes its columns' fields from the first
    file with rows and the same schema (its own, from no values, when there is none)."""
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
    sources = [ParquetPages(f, fields, image=image, recent=recent) for f in files]
    empty = [k for k, source in enumerate(sources) if not any(source._rows)]
    if empty and len(empty) < len(sources):  # (opened again with the columns of the first file with rows and its schema)
        schemas = [arrow_schema(source.path, source.metadata) for source in sources]
        for k in empty:
            donor = next(
                (d for j, d in enumerate(sources) if any(d._rows) and schemas[j].equals(schemas[k], check_metadata=True)), None
            )
            if donor is not None:
                sources[k] = ParquetPages(files[k], fields, image=image, recent=recent, columns=donor.columns)
    shards = [PackedDataset(f, fields=fields, source=source) for f, source in zip(files, sources)]
    return ShardedDataset([], fields=fields, shards=shards)
