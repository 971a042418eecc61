"""``ss.open`` of Parquet: a file, a list of files or a folder of them, read in place.

``ss.open("train.parquet")`` (or a folder of ``.parquet`` files, its subfolders too, read in path
order, such as a Hugging Face hub dataset's ``data/`` folder, or a list of files) is a container
with ``len`` and random access, each row group one page (``order="quasi_random"`` shuffles row
groups, then rows within a few of them). Opening reads the footers alone (and, for a binary
column without Hugging Face features, the first values of row group 0, to tell image bytes); a
page is one row group's columns, read when a sample in it is first asked for and kept among the
``keep`` most recently used.

Columns map to fields as ``slipstream convert`` maps them (``convert.columns``): the Hugging Face
features stored in the schema's metadata where present (``Image``, ``ClassLabel`` with its names
as ``ds.metadata["class_names"]``, ``ArrayND``, ``Json``), else the Arrow type (numbers, bools,
strings, binary that holds images, lists of integers as ``F.Tokens``, other nested values as
JSON). Only the chosen ``fields`` are mapped (a column of a type no field holds may be left out).
Image columns are read by the pipelines, compiled tasks and the device stage as a packed file's
are; ``image=`` sets their field (``F.Image(channels=3)`` makes every image RGB).

What is checked. At open, the footer's claims against each other and the file, before anything
is sized by them: the magic bytes and footer length, the row groups' row counts against the
file's and against every column chunk's value count (equal for a flat column, at least as many
for a nested one), each column chunk's bytes inside the file's data, and no row group claiming
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

import itertools
import mmap
import os
import stat
from pathlib import Path
from typing import Any

from ..convert.tables import hf_features, table_columns
from ..core.errors import ChecksumError, CorruptFileError, MissingFieldError
from ..files import field_kinds as F
from ..files.field import pyarrow_module as _pa
from ..files.identity import identity
from ..files.packed import PackedDataset
from ..files.pagememory import RecentPages
from ..files.shards import ShardedDataset
from .tablepages import DEFAULT_KEEP, TablePages, chosen_columns

__all__ = ["ROWS_ANYWAY", "ROWS_PER_BYTE", "ParquetPages", "checked_row_counts", "is_parquet", "open_parquet", "parquet_files"]

SUFFIX = ".parquet"
ROWS_PER_BYTE = 4096  # a row group claiming more rows per byte of its column chunks is damage (RLE of constants reaches ~1,500)
ROWS_ANYWAY = 1 << 20  # rows any row group may hold, whatever its size
_MAGIC = b"PAR1"
_TAIL = 8  # the footer's length (4 bytes, little-endian) and the magic


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
    size = len(data)
    if size < len(_MAGIC) + _TAIL:
        raise CorruptFileError(
            path, f"the file is {size} bytes: too short for a Parquet file (at least 12), cut short or not Parquet"
        )
    magic = bytes(data[size - len(_MAGIC) :])
    if magic == b"PARE":
        raise CorruptFileError(path, "an encrypted Parquet file (its footer is encrypted), which is not read in place")
    if magic != _MAGIC or bytes(data[: len(_MAGIC)]) != _MAGIC:
        raise CorruptFileError(
            path, f"does not begin and end with the Parquet magic bytes PAR1 (it ends with {magic!r}): cut short, or not Parquet"
        )
    length = int.from_bytes(data[size - _TAIL : size - len(_MAGIC)], "little")
    if length + _TAIL + len(_MAGIC) > size:
        raise CorruptFileError(
            path, f"its footer is said to be {length} bytes, more than the {size}-byte file holds: cut short or damaged"
        )
    return size - _TAIL - length


# -- the footer's claims, read from its Thrift bytes (compact protocol) ------------------------------------

_MAX_DEPTH = 32  # Thrift values nested deeper in a footer are damage (Parquet's own nest about 6)


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        b = data[pos]  # (an IndexError past the end: damage, as every read here)
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("a number longer than 10 bytes")


def _count(data: bytes, pos: int) -> tuple[int, int, int]:
    """A list's (or set's) (length, element type, position after its header); each element takes at
    least one byte, so a length beyond the bytes left is damage."""
    head = data[pos]
    n, pos = (head >> 4, pos + 1) if head >> 4 != 15 else _varint(data, pos + 1)
    if n > len(data) - pos:
        raise ValueError(f"a list of {n} items runs past the footer's end")
    return n, head & 0x0F, pos


def _skip(data: bytes, pos: int, kind: int, depth: int) -> int:
    """The position after a value of ``kind`` (a bool field's value is its type: no bytes)."""
    if kind <= 2:
        return pos
    if kind == 3:
        return pos + 1
    if kind <= 6:
        while data[pos] & 0x80:
            pos += 1
        return pos + 1
    if kind == 7:
        return pos + 8
    if kind == 8:
        n, pos = _varint(data, pos)
        return pos + n
    if depth > _MAX_DEPTH:
        raise ValueError(f"values nested more than {_MAX_DEPTH} deep")
    if kind in (9, 10):
        n, inner, pos = _count(data, pos)
        if inner <= 3:  # bools and bytes: one byte each
            return pos + n
        if inner == 7:
            return pos + 8 * n
        for _ in range(n):
            pos = _skip(data, pos, inner, depth + 1)
        return pos
    if kind == 11:
        n, pos = _varint(data, pos)
        if n == 0:
            return pos
        if n > len(data) - pos:
            raise ValueError(f"a map of {n} entries runs past the footer's end")
        types = data[pos]
        pos += 1
        for _ in range(n):
            pos = _skip(data, pos, types >> 4, depth + 1) + (1 if types >> 4 <= 2 else 0)
            pos = _skip(data, pos, types & 0x0F, depth + 1) + (1 if types & 0x0F <= 2 else 0)
        return pos
    if kind == 12:
        while (head := data[pos]) != 0:
            pos += 1
            if not head >> 4:
                _, pos = _varint(data, pos)  # a field id written out
            pos = _skip(data, pos, head & 0x0F, depth + 1)
        return pos + 1
    raise ValueError(f"a value of unknown type {kind}")


def _struct(data: bytes, pos: int, depth: int, wanted: dict[int, Any]) -> tuple[dict[int, Any], int]:
    """The fields of a struct that ``wanted`` names ({id: (type, read)}, ``read(data, pos, depth)``
    giving (value, position)), the others passed over; a wanted field of another type is damage."""
    out: dict[int, Any] = {}
    last = 0
    while (head := data[pos]) != 0:
        pos += 1
        if head >> 4:
            last += head >> 4
        else:
            raw, pos = _varint(data, pos)
            last = (raw >> 1) ^ -(raw & 1)
        kind, entry = head & 0x0F, wanted.get(last)
        if entry is None:
            pos = _skip(data, pos, kind, depth + 1)
        elif entry[0] != kind:
            raise ValueError(f"field {last} has type {kind}, not {entry[0]}")
        else:
            out[last], pos = entry[1](data, pos, depth + 1)
    return out, pos + 1


def _i64(data: bytes, pos: int, depth: int) -> tuple[int, int]:
    raw, pos = _varint(data, pos)
    return (raw >> 1) ^ -(raw & 1), pos


def _present(data: bytes, pos: int, depth: int) -> tuple[bool, int]:
    return True, _skip(data, pos, 8, depth)


def _structs(wanted: dict[int, Any]) -> Any:
    def read(data: bytes, pos: int, depth: int) -> tuple[list[dict[int, Any]], int]:
        n, kind, pos = _count(data, pos)
        if n and kind != 12:
            raise ValueError(f"a list of type {kind} where structs belong")
        out = []
        for _ in range(n):
            item, pos = _struct(data, pos, depth, wanted)
            out.append(item)
        return out, pos

    return read


# the fields read (Parquet's parquet.thrift): ColumnMetaData's num_values, total_compressed_size, data_page_offset and
# dictionary_page_offset; ColumnChunk's file_path and meta_data; RowGroup's columns and num_rows; FileMetaData's
# num_rows and row_groups
_CHUNK_META = {5: (6, _i64), 7: (6, _i64), 9: (6, _i64), 11: (6, _i64)}
_CHUNK = {1: (8, _present), 3: (12, lambda data, pos, depth: _struct(data, pos, depth, _CHUNK_META))}
_ROW_GROUP = {1: (9, _structs(_CHUNK)), 3: (6, _i64)}
_FILE = {3: (6, _i64), 4: (9, _structs(_ROW_GROUP))}


def checked_row_counts(path: Any, footer: bytes, data_end: int, leaves: list[tuple[str, bool]]) -> list[int]:
    """The row counts of the row groups of a Parquet footer (``footer``: its Thrift bytes, without
    the 8 after them) whose row groups' data ends at byte ``data_end``, after checking every claim
    anything is sized by (see the module doc), read from the bytes themselves (pyarrow's metadata
    objects abort the process on some damage); ``leaves``: each leaf column's (path, whether it is
    flat: no repeated level). ``CorruptFileError`` naming ``path``, the row group and the column."""
    data = bytes(footer)
    try:
        claims, _ = _struct(data, 0, 0, _FILE)
    except (ValueError, IndexError, RecursionError) as exc:
        raise CorruptFileError(path, f"its footer cannot be read: {exc or 'it ends inside a value'}") from None
    counts, total, spans = [], 0, []
    for g, group in enumerate(claims.get(4, [])):
        rows, chunks = group.get(3), group.get(1, [])
        if rows is None or rows < 0:
            raise CorruptFileError(path, f"its footer says row group {g} holds {rows} rows: a damaged footer")
        if len(chunks) != len(leaves):
            raise CorruptFileError(
                path, f"row group {g} has {len(chunks)} columns, but the schema {len(leaves)}: a damaged footer"
            )
        stored = 0
        for (name, flat), chunk in zip(leaves, chunks):
            meta = chunk.get(3)
            if chunk.get(1):
                raise CorruptFileError(path, f"row group {g}, column {name!r}: its data is in another file, which is not read")
            if meta is None or any(k not in meta for k in (5, 7, 9)):
                raise CorruptFileError(
                    path, f"row group {g}, column {name!r}: its footer does not say where its data is (an encrypted column?)"
                )
            values, size, data, dictionary = meta[5], meta[7], meta[9], meta.get(11)
            start = dictionary if dictionary is not None and 0 < dictionary < data else data  # (where pyarrow starts reading)
            # (an empty chunk is never read: pyarrow writes its offset as 0)
            if values and not len(_MAGIC) <= start <= data <= start + size <= data_end:
                raise CorruptFileError(
                    path, f"row group {g}, column {name!r}: its footer places the column's bytes at {start}..{start + size} (its data pages from {data}), "
                    f"outside the file's data ({len(_MAGIC)}..{data_end}): a damaged footer"
                )  # fmt: skip
            if values != rows if flat else values < rows:
                raise CorruptFileError(
                    path,
                    f"row group {g}, column {name!r}: its footer says it holds {values} values in {rows} rows: a damaged footer",
                )
            stored += size
            if values:
                spans.append((start, start + size, g, name))
        if rows > max(ROWS_ANYWAY, ROWS_PER_BYTE * stored):
            raise CorruptFileError(
                path, f"its footer says row group {g} holds {rows} rows in {stored} bytes of column data: a damaged footer "
                "(a row group of only constant columns this long is not read in place: convert it with slipstream convert)"
            )  # fmt: skip
        counts.append(rows)
        total += rows
    spans.sort()
    for (_, stop, g, name), (start, _, h, other) in itertools.pairwise(spans):
        if start < stop:
            raise CorruptFileError(
                path,
                f"its footer places row group {h}'s column {other!r} on bytes of row group {g}'s column {name!r}: a damaged footer",
            )
    if total != claims.get(3):
        raise CorruptFileError(path, f"its footer's row groups hold {total} rows, but it says {claims.get(3)}: a damaged footer")
    return counts


class ParquetPages(TablePages):
    """A local Parquet file's row groups as pages (see the module doc)."""

    def __init__(
        self,
        path: str | os.PathLike,
        fields: list[str] | None = None,
        *,
        image: F.Image | None = None,
        recent: RecentPages | None = None,
    ):
        self._open(Path(path))
        self._data_end = _footer_end(self.path, self._map)
        pa = _pa()
        import pyarrow.parquet as pq

        try:
            self.metadata = pq.read_metadata(pa.BufferReader(self._buffer))  # the footer alone
            schema = self.metadata.schema.to_arrow_schema()
        except (pa.ArrowException, OSError, ValueError) as exc:  # (ValueError: a name that is not UTF-8)
            raise CorruptFileError(self.path, f"cannot be read as Parquet: {exc}") from None
        try:
            leaves = [
                (c.path, c.max_repetition_level == 0)
                for c in (self.metadata.schema.column(j) for j in range(self.metadata.num_columns))
            ]
        except ValueError as exc:  # (a name that is not UTF-8)
            raise CorruptFileError(self.path, f"its footer's schema cannot be read: {exc}") from None
        self._rows = checked_row_counts(self.path, self._map[self._data_end : len(self._map) - _TAIL], self._data_end, leaves)
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

    def validate(self, starts: list[int], n: int) -> None:
        """Read every row group, checking its structure, page CRCs where stored, and values;
        ``ChecksumError`` naming the first that fails (its row group; ``page`` and ``samples`` in
        this file's numbers: row groups without rows are no pages)."""
        self.check()
        for p in range(len(self.part_rows)):
            stop = starts[p + 1] if p + 1 < len(starts) else n
            try:
                self.batch(p)
            except CorruptFileError as exc:
                message = str(exc).removeprefix(f"{self.path}: ")
                raise ChecksumError(
                    self.path,
                    f"{self.where(p)} (samples {starts[p]}..{stop - 1}) fails its checks: {message}",
                    p,
                    range(starts[p], stop),
                ) from None

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
    naming the first that does not)."""
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
