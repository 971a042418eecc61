"""A Parquet footer read and checked from its own bytes, before anything is sized by it.

pyarrow parses a footer (``pq.read_metadata``) with errors raised as exceptions, but several of
its Python metadata accessors (a column chunk's ``statistics``, ``compression``, ...) abort the
whole interpreter on some damage (a C++ exception the binding does not catch). So the claims a
reader needs are read here from the footer's Thrift bytes (the compact protocol) and checked
against each other and the file; no reader uses pyarrow's column chunk metadata objects.

``footer_bounds(path, size, tail, head)`` checks a file's (or object's) last 8 bytes (the footer's
length and the magic ``PAR1``; ``PARE``, an encrypted footer, is refused) and, where given, its
first 4, and gives where the footer starts (the end of the row groups' data). ``parse_metadata``
and ``arrow_schema`` are pyarrow's parse of the footer and its schema as Arrow types, errors as
``CorruptFileError``; ``leaf_columns`` the schema's leaf columns (their dotted path, whether they
are flat, the top-level column each belongs to), from the schema (which pyarrow checks as it
parses). ``checked_footer(path, footer, data_end, leaves)`` gives the ``FooterClaims``: each row
group's rows and each column chunk's bytes, value and null counts, after checking

* the row groups' row counts against the file's, and against every column chunk's value count
  (equal for a flat column, at least as many for a nested one; nulls at most the values);
* each row group's column chunks, one per leaf column, none in another file or without its
  metadata (an encrypted column);
* each non-empty column chunk's bytes inside the data (``4 .. data_end``), none overlapping
  another's (an empty chunk is never read: pyarrow writes its offset as 0);
* no row group claiming more than ``ROWS_PER_BYTE`` rows per byte of its column chunks beyond
  ``ROWS_ANYWAY`` rows (a row group of only constant columns past that is refused).

``checked_summary(path, footer, leaves, sizes)`` gives the same claims from a summary file's footer
(``_metadata``, as Dask, Spark and ``pyarrow.parquet.write_metadata`` write it: every data file's
row groups, each column chunk naming its file), by data file, with the same checks per file (each
chunk's bytes inside the data of its own file, of the size given).

Every failure is a ``CorruptFileError`` naming ``path`` (and the row group and column).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, NamedTuple

from ..core.errors import CorruptFileError
from .field import pyarrow_module as _pa

__all__ = [
    "MAGIC", "MAX_FOOTER", "ROWS_ANYWAY", "ROWS_PER_BYTE", "TAIL", "Chunk", "FooterClaims", "Leaf", "SummaryFile",
    "arrow_schema", "checked_footer", "checked_row_counts", "checked_summary", "footer_bounds", "leaf_columns", "parse_metadata",
]  # fmt: skip

MAGIC = b"PAR1"
TAIL = 8  # the footer's length (4 bytes, little-endian) and the magic
MAX_FOOTER = 1 << 30  # a footer said to be longer is refused before it is read
ROWS_PER_BYTE = 4096  # a row group claiming more rows per byte of its column chunks is damage (RLE of constants reaches ~1,500)
ROWS_ANYWAY = 1 << 20  # rows any row group may hold, whatever its size


class Leaf(NamedTuple):
    """A leaf column of a Parquet schema: its dotted path, whether it is flat (no repeated level),
    and the top-level column it belongs to."""

    path: str
    flat: bool
    owner: str


class Chunk(NamedTuple):
    """A column chunk's claims: its bytes ``start .. stop`` (from its dictionary page when it has
    one, as pyarrow reads it), its values, and its nulls (``None`` when its statistics hold none)."""

    start: int
    stop: int
    values: int
    nulls: int | None


@dataclass(frozen=True)
class FooterClaims:
    """What a checked footer says: each row group's rows, each one's column chunks (one per leaf
    column, in the schema's order), and the writer (``created_by``, ``""`` when not said)."""

    rows: tuple[int, ...]
    chunks: tuple[tuple[Chunk, ...], ...]
    created_by: str


def footer_bounds(path: Any, size: int, tail: bytes, head: bytes | None = None, what: str = "file") -> int:
    """Where the footer of a ``size``-byte Parquet ``what`` starts (the end of its row groups' data),
    from its last 8 bytes ``tail`` (and its first 4, ``head``, where given): its length and magic
    checked, ``CorruptFileError`` naming ``path`` otherwise."""
    if size < len(MAGIC) + TAIL:
        raise CorruptFileError(
            path, f"the {what} is {size} bytes: too short for a Parquet file (at least 12), cut short or not Parquet"
        )
    magic = bytes(tail[-len(MAGIC) :])
    if magic == b"PARE":
        raise CorruptFileError(path, "an encrypted Parquet file (its footer is encrypted), which is not read in place")
    if magic != MAGIC or (head is not None and bytes(head[: len(MAGIC)]) != MAGIC):
        ends = "begin and end" if head is not None else "end"
        raise CorruptFileError(
            path, f"does not {ends} with the Parquet magic bytes PAR1 (it ends with {magic!r}): cut short, or not Parquet"
        )
    length = int.from_bytes(tail[-TAIL : -len(MAGIC)], "little")
    if length + TAIL + len(MAGIC) > size or length > MAX_FOOTER:
        raise CorruptFileError(
            path, f"its footer is said to be {length} bytes, more than the {size}-byte {what} holds: cut short or damaged"
        )
    return size - TAIL - length


def parse_metadata(path: Any, data: Any) -> Any:
    """pyarrow's ``FileMetaData`` of ``data`` (a footer with the 8 bytes after it, or a whole file);
    ``CorruptFileError`` naming ``path`` when it does not parse. Only its schema and file-level
    values are safe to use before ``checked_footer`` (and its column chunks' metadata never)."""
    pa = _pa()
    import pyarrow.parquet as pq

    try:
        return pq.read_metadata(pa.BufferReader(data))
    except (pa.ArrowException, OSError, ValueError) as exc:  # (ValueError: a name that is not UTF-8)
        raise CorruptFileError(path, f"its Parquet footer cannot be read: {exc}") from None


def arrow_schema(path: Any, metadata: Any) -> Any:
    """The footer's schema as Arrow types; ``CorruptFileError`` naming ``path`` when it has none."""
    pa = _pa()
    try:
        return metadata.schema.to_arrow_schema()
    except (pa.ArrowException, ValueError, UnicodeDecodeError) as exc:
        raise CorruptFileError(path, f"its footer's schema cannot be read as Arrow types: {exc}") from None


def leaf_columns(path: Any, metadata: Any, schema: Any) -> list[Leaf]:
    """The leaf columns of a parsed footer (``metadata``, its Arrow ``schema``), in order; each one's
    path checked to lie in the top-level column whose Arrow type stores it there."""
    owners: list[str] = []
    for field in schema:
        owners.extend([field.name] * _leaves(field.type))
    if len(owners) != metadata.num_columns:
        raise CorruptFileError(
            path, f"its footer's schema has {len(owners)} leaf columns, but its row groups {metadata.num_columns}"
        )
    out = []
    try:
        for i, owner in enumerate(owners):
            column = metadata.schema.column(i)
            if column.path != owner and not column.path.startswith(owner + "."):
                raise CorruptFileError(
                    path, f"its footer's leaf column {i} is {column.path!r}, which is not part of column {owner!r}"
                )
            out.append(Leaf(column.path, column.max_repetition_level == 0, owner))
    except (ValueError, UnicodeDecodeError) as exc:  # (a name that is not UTF-8)
        if isinstance(exc, CorruptFileError):
            raise
        raise CorruptFileError(path, f"its footer's schema cannot be read: {exc}") from None
    return out


def _leaves(typ: Any) -> int:
    """How many Parquet leaf columns store an Arrow type."""
    pa = _pa()
    if isinstance(typ, pa.ExtensionType):
        return _leaves(typ.storage_type)
    if pa.types.is_struct(typ):
        return sum(_leaves(typ.field(i).type) for i in range(typ.num_fields))
    if pa.types.is_map(typ):
        return _leaves(typ.key_type) + _leaves(typ.item_type)
    if pa.types.is_list(typ) or pa.types.is_large_list(typ) or pa.types.is_fixed_size_list(typ):
        return _leaves(typ.value_type)
    if getattr(pa.types, "is_list_view", lambda t: False)(typ) or getattr(pa.types, "is_large_list_view", lambda t: False)(typ):
        return _leaves(typ.value_type)
    return 1


# -- the footer's Thrift bytes (compact protocol) -------------------------------------------------------

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


def _text(data: bytes, pos: int, depth: int) -> tuple[str, int]:
    n, pos = _varint(data, pos)
    if n > len(data) - pos:
        raise ValueError(f"a string of {n} bytes runs past the footer's end")
    return data[pos : pos + n].decode("utf-8", "replace"), pos + n


def _within(wanted: dict[int, Any]) -> Any:
    return lambda data, pos, depth: _struct(data, pos, depth, wanted)


_LENGTH = -1  # (the key under which a measured struct keeps how many footer bytes it takes)


def _structs(wanted: dict[int, Any], measured: bool = False) -> Any:
    """A list of structs, each read as ``wanted`` says; ``measured``: each with its length in
    bytes under ``_LENGTH``."""

    def read(data: bytes, pos: int, depth: int) -> tuple[list[dict[int, Any]], int]:
        n, kind, pos = _count(data, pos)
        if n and kind != 12:
            raise ValueError(f"a list of type {kind} where structs belong")
        out = []
        for _ in range(n):
            begin = pos
            item, pos = _struct(data, pos, depth, wanted)
            if measured:
                item[_LENGTH] = pos - begin
            out.append(item)
        return out, pos

    return read


# the fields read (Parquet's parquet.thrift): Statistics' null_count; ColumnMetaData's num_values,
# total_compressed_size, data_page_offset, dictionary_page_offset and statistics; ColumnChunk's file_path and
# meta_data; RowGroup's columns and num_rows; FileMetaData's num_rows, row_groups and created_by
_STATISTICS = {3: (6, _i64)}
_CHUNK_META = {5: (6, _i64), 7: (6, _i64), 9: (6, _i64), 11: (6, _i64), 12: (12, _within(_STATISTICS))}
_CHUNK = {1: (8, _present), 3: (12, _within(_CHUNK_META))}
_ROW_GROUP = {1: (9, _structs(_CHUNK)), 3: (6, _i64)}
_FILE = {3: (6, _i64), 4: (9, _structs(_ROW_GROUP)), 6: (8, _text)}


def _group_rows(path: Any, g: int, group: dict[int, Any], leaves: list[Any], damaged: str) -> tuple[int, list[dict[int, Any]]]:
    """Row group ``g``'s rows and column chunks, after checking its row count (present, not
    negative) and that it has one chunk per leaf column; ``damaged``: what the errors call the
    footer (``"a damaged footer"``, ``"a damaged summary"``)."""
    rows, chunks = group.get(3), group.get(1, [])
    if rows is None or rows < 0:
        raise CorruptFileError(path, f"its footer says row group {g} holds {rows} rows: {damaged}")
    if len(chunks) != len(leaves):
        raise CorruptFileError(path, f"row group {g} has {len(chunks)} columns, but the schema {len(leaves)}: {damaged}")
    return rows, chunks


def _checked_chunks(
    path: Any, groups: Iterable[tuple[int, int, list[dict[int, Any]]]], leaves: list[Any], data_end: int | None, file: str | None
) -> tuple[list[int], list[tuple[Chunk, ...]]]:
    """The rows and ``Chunk``s of the row groups of one data file (``groups``: each one's number in
    the footer, rows and column chunks, as ``_group_rows`` gives them), after checking each chunk's
    metadata is there, its bytes inside the data (``4 .. data_end``; without ``data_end``, only
    its start from 4 and its data pages inside its own bytes), its values against the rows (equal
    when flat, at least as many when nested), its nulls at most its values, no row group claiming
    more than ``ROWS_PER_BYTE`` rows per byte beyond ``ROWS_ANYWAY``, and no two non-empty chunks
    overlapping. ``file``: ``None`` for a
    file's own footer, else the data file a summary names (in every message, which then calls the
    footer a damaged summary)."""
    if file is None:  # (a file's own footer)
        of, into, damaged, stale, inside = "", "", "a damaged footer", "a damaged footer", "the file's"
        dense = " (a row group of only constant columns this long is not read in place: convert it with slipstream convert)"
    else:  # (a summary's row groups of one data file, of a size given or not)
        of, into, dense = f" (of {file!r})", f" in {file!r}", ""
        damaged, stale = "a damaged summary", "a damaged or stale summary"
        inside = "its file's" if data_end is None else f"the {data_end + TAIL}-byte file's"
    counts, chunked, spans = [], [], []
    for g, rows, chunks in groups:
        stored, mine = 0, []
        for leaf, chunk in zip(leaves, chunks):
            column, flat, meta = leaf[0], leaf[1], chunk.get(3)
            where = f"row group {g}{of}, column {column!r}"
            if meta is None or any(k not in meta for k in (5, 7, 9)):
                raise CorruptFileError(path, f"{where}: its footer does not say where its data is (an encrypted column?)")
            values, size, first, dictionary = meta[5], meta[7], meta[9], meta.get(11)
            nulls = meta.get(12, {}).get(3)
            start = dictionary if dictionary is not None and 0 < dictionary < first else first  # (where pyarrow starts reading)
            end = start + size if data_end is None else data_end
            if values and not len(MAGIC) <= start <= first <= start + size <= end:
                raise CorruptFileError(
                    path, f"{where}: its footer places the column's bytes at {start}..{start + size} (its data pages from {first}), "
                    f"outside {inside} data ({len(MAGIC)}..{end}): {stale}"
                )  # fmt: skip
            if values != rows if flat else values < rows:
                raise CorruptFileError(path, f"{where}: its footer says it holds {values} values in {rows} rows: {damaged}")
            if nulls is not None and not 0 <= nulls <= values:
                raise CorruptFileError(path, f"{where}: its footer says it holds {nulls} nulls in {values} values: {damaged}")
            stored += size
            if values:
                spans.append((start, start + size, g, column))
            mine.append(Chunk(start, start + size, values, nulls))
        if rows > max(ROWS_ANYWAY, ROWS_PER_BYTE * stored):
            raise CorruptFileError(
                path, f"its footer says row group {g}{of} holds {rows} rows in {stored} bytes of column data: {damaged}{dense}"
            )
        counts.append(rows)
        chunked.append(tuple(mine))
    spans.sort()
    for (_, stop, g, column), (start, _, h, other) in itertools.pairwise(spans):
        if start < stop:
            raise CorruptFileError(
                path, f"its footer places row group {h}'s column {other!r} on bytes of row group {g}'s column {column!r}{into}: {damaged}"
            )  # fmt: skip
    return counts, chunked


def checked_footer(path: Any, footer: bytes, data_end: int, leaves: list[Any]) -> FooterClaims:
    """The claims of a Parquet footer (``footer``: its Thrift bytes, without the 8 after them) whose
    row groups' data ends at byte ``data_end``, after checking every claim anything is sized by
    (see the module doc); ``leaves``: each leaf column's (path, whether it is flat, ...), as
    ``leaf_columns`` gives them. ``CorruptFileError`` naming ``path``, the row group and the column."""
    data = bytes(footer)
    try:
        claims, _ = _struct(data, 0, 0, _FILE)
    except (ValueError, IndexError, RecursionError) as exc:
        raise CorruptFileError(path, f"its footer cannot be read: {exc or 'it ends inside a value'}") from None

    def groups() -> Iterator[tuple[int, int, list[dict[int, Any]]]]:  # (each checked just before its chunks)
        for g, group in enumerate(claims.get(4, [])):
            rows, chunks = _group_rows(path, g, group, leaves, "a damaged footer")
            for leaf, chunk in zip(leaves, chunks):
                if chunk.get(1):
                    raise CorruptFileError(
                        path, f"row group {g}, column {leaf[0]!r}: its data is in another file, which is not read"
                    )
            yield g, rows, chunks

    counts, chunked = _checked_chunks(path, groups(), leaves, data_end, None)
    if sum(counts) != claims.get(3):
        raise CorruptFileError(
            path, f"its footer's row groups hold {sum(counts)} rows, but it says {claims.get(3)}: a damaged footer"
        )
    return FooterClaims(tuple(counts), tuple(chunked), claims.get(6, ""))


def checked_row_counts(path: Any, footer: bytes, data_end: int, leaves: list[Any]) -> list[int]:
    """The row counts of a checked footer's row groups (``checked_footer``'s ``rows``)."""
    return list(checked_footer(path, footer, data_end, leaves).rows)


# -- a summary file's footer (``_metadata``: every data file's row groups, each chunk naming its file) --

_SUMMARY_CHUNK = {1: (8, _text), 3: (12, _within(_CHUNK_META))}
_SUMMARY_ROW_GROUP = {1: (9, _structs(_SUMMARY_CHUNK)), 3: (6, _i64)}
_SUMMARY_FILE = {3: (6, _i64), 4: (9, _structs(_SUMMARY_ROW_GROUP, measured=True)), 6: (8, _text)}


class SummaryFile(NamedTuple):
    """What a summary says of one data file: its claims, and about how long its own footer is (the
    summary's bytes but for the other files' row groups, with the 8 after it: a guess to read it by)."""

    claims: FooterClaims
    footer: int


def _relative(name: Any) -> bool:
    """Whether ``name`` is a file path as a summary names its data files: relative, ``/``-separated,
    no empty, ``.`` or ``..`` part."""
    return (
        isinstance(name, str) and bool(name) and "\\" not in name and all(part not in ("", ".", "..") for part in name.split("/"))
    )


def checked_summary(path: Any, footer: bytes, leaves: list[Any], sizes: dict[str, int] | None = None) -> dict[str, SummaryFile]:
    """The claims of a Parquet summary file's footer (``footer``: its Thrift bytes, without the 8
    after them), by data file: ``{file_path: SummaryFile}`` in the order the summary first names
    each file, each file's row groups in the summary's order. Checked as ``checked_footer`` checks
    a footer, per file: every row group's column chunks name one file by a relative path (none in
    the summary itself), one chunk per leaf column; the row counts against the chunks' value counts
    and, over every file, against the summary's total; each non-empty chunk's bytes inside its
    file's data (``4 .. sizes[file_path] - 8``) and apart from that file's other chunks; no row
    group claiming more than ``ROWS_PER_BYTE`` rows per byte of its chunks beyond ``ROWS_ANYWAY``.
    A file missing from ``sizes`` (or every file, without ``sizes``) has its chunks' ends unchecked
    against its size (its caller compares them with the file it finds, or finds none).
    ``CorruptFileError`` naming ``path``, the row group, its file and the column."""
    data = bytes(footer)
    try:
        claims, _ = _struct(data, 0, 0, _SUMMARY_FILE)
    except (ValueError, IndexError, RecursionError) as exc:
        raise CorruptFileError(path, f"its footer cannot be read: {exc or 'it ends inside a value'}") from None
    grouped: dict[str, list[tuple[int, int, list[dict[int, Any]]]]] = {}
    taken: dict[str, int] = {}  # file_path -> the footer bytes its row groups take
    total = 0
    for g, group in enumerate(claims.get(4, [])):
        rows, chunks = _group_rows(path, g, group, leaves, "a damaged summary")
        names = {chunk.get(1) for chunk in chunks}
        named = sorted("(none: the summary itself)" if n is None else str(n) for n in names)
        if len(names) != 1 or not _relative(next(iter(names))):
            raise CorruptFileError(
                path, f"row group {g}: its column chunks name the files {named}, not one data file by a relative path "
                "(a summary's row group lies in one data file beside it): a damaged summary"
            )  # fmt: skip
        grouped.setdefault(named[0], []).append((g, rows, chunks))
        taken[named[0]] = taken.get(named[0], 0) + group[_LENGTH]
        total += rows
    if total != claims.get(3):
        raise CorruptFileError(path, f"its footer's row groups hold {total} rows, but it says {claims.get(3)}: a damaged summary")
    created_by = claims.get(6, "")
    shared = len(data) - sum(taken.values())  # (the schema and the file's values: in every data file's footer)
    out: dict[str, SummaryFile] = {}
    for name, groups in grouped.items():
        size = (sizes or {}).get(name)
        data_end = None if size is None else size - TAIL
        counts, chunked = _checked_chunks(path, groups, leaves, data_end, name)
        out[name] = SummaryFile(FooterClaims(tuple(counts), tuple(chunked), created_by), shared + taken[name] + TAIL)
    return out
