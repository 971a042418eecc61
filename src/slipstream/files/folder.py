"""A sharded dataset's folder, read: the index that says what its shard files hold, checked, and the shards opened.

A sharded dataset (written by ``ss.write(path, data, shard_size=...)``: ``write.folderwrite``) is
a folder of packed files (``shard-00000.arrow``, ``shard-00001.arrow``...), each a complete packed
file of about ``shard_size`` bytes (whole pages), and ``index.json``: the Arrow schema (with the
fields and the writer's metadata), and for each shard its file name, size in bytes, sample count
and every page's byte range, row count and checksum. A reader of a remote copy needs nothing
else to fetch any page with one ranged read and check it before use.

``parse_index`` checks an index's shape (``CorruptFileError``); a folder without ``index.json`` is
not a dataset (``MissingShardError``); ``open_folder`` checks each shard against its entry
(``MissingShardError``, ``ShardMismatchError``). ``describe`` reads one packed file's index entry
through any byte-range reader (``read_local`` for a local file), checking its structure.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.errors import CorruptFileError, MissingShardError, ShardMismatchError
from . import format as _format
from .field import pyarrow_module as _pa
from .layout import TAIL, footer_length, header_counts, header_metadata, page_blocks
from .local import page_meta
from .shards import ShardedDataset

__all__ = [
    "FORMAT",
    "INDEX",
    "VERSION",
    "describe",
    "open_folder",
    "parse_index",
    "read_local",
    "read_local_index",
]

INDEX = "index.json"
FORMAT = "slipstream.shards"
VERSION = 1

ReadMany = Callable[[list[tuple[int, int]]], list[bytes]]  # byte ranges [start, stop) -> their bytes


def describe(name: str, size: int, read_many: ReadMany) -> tuple[dict[str, Any], Any]:
    """(index entry, Arrow schema) of the packed file ``name`` of ``size`` bytes, read
    through ``read_many``: its tail and footer, then each page's header (one batch of reads).
    ``CorruptFileError`` naming ``name`` when the structure cannot be right: what each part says is
    checked against the others (each block's lengths and rows against its page's header, each page's
    first sample against the pages before it, the schema at the start against the footer's copy and
    the pages' schema checksum), so one damaged byte read anywhere in it is found, not taken for the
    file's layout (a remote reader reads it again: ``Fetcher.read_checked``)."""
    try:
        if size < 2 * TAIL:
            raise ValueError(f"{size} bytes is too short for a packed file")
        (tail,) = read_many([(size - TAIL, size)])
        length = footer_length(tail)
        if length > size - TAIL - 8:
            raise ValueError(f"the footer length {length} does not fit in {size} bytes")
        (footer,) = read_many([(size - TAIL - length, size - TAIL)])
        blocks = page_blocks(footer)
        head_stop = blocks[0][0] if blocks else size - TAIL - length
        for k, (offset, page_length, _) in enumerate(blocks):  # (checked before anything is read from them)
            if offset + page_length > size - TAIL - length or offset < head_stop:
                raise ValueError(f"page {k} (bytes {offset}..{offset + page_length}) lies outside the file's {size} bytes of pages")
        if not 8 <= head_stop <= size - TAIL - length:
            raise ValueError(f"the schema's {head_stop} bytes do not fit in the file")
        parts = read_many([(0, head_stop)] + [(offset, offset + header) for offset, _, header in blocks])
        head, headers = parts[0], parts[1:]
        if head[: len(_format.MAGIC)] != _format.MAGIC:
            raise ValueError("it does not start as an Arrow IPC file")
        pages, schema_crc, total = [], -1, 0
        for k, ((offset, page_length, header), raw) in enumerate(zip(blocks, headers)):
            meta = header_metadata(raw)
            first, rows, crc, page_schema_crc = page_meta(meta)
            _check_block(k, page_length, header, raw, meta, first, rows, total)
            total += max(rows, 0)
            schema_crc = page_schema_crc if k == 0 else schema_crc
            pages.append([offset, page_length, header, rows, crc])
    except ValueError as exc:
        if isinstance(exc, CorruptFileError):
            raise
        raise CorruptFileError(name, f"the file's structure cannot be read: {exc}") from None
    entry = {"file": name, "bytes": size, "samples": sum(page[3] for page in pages), "schema_crc32": schema_crc, "pages": pages}
    schema = _schema(head[8:], name)
    _check_schema(name, schema, head, footer, tail, schema_crc if pages else None)
    return entry, schema


_PAGE_KEYS = (_format.PAGE_FIRST, _format.PAGE_ROWS, _format.PAGE_CRC, _format.PAGE_SCHEMA_CRC)


def _check_block(k: int, page_length: int, header: int, raw: bytes, meta: dict[bytes, bytes], first: int, rows: int, total: int) -> None:
    """``ValueError`` unless page ``k``'s block (its length and header length, from the footer)
    and its header (``raw``: the rows, body length and header length its message says; ``meta``:
    its metadata, with its first sample and rows) agree, and it starts where the pages before it
    ended (``total``). A page of slipstream's has all of slipstream's keys (a file with none is
    not slipstream's: that is for its reader to say)."""
    said_rows, body, said_header = header_counts(raw)
    if said_header != header or body != page_length - header:
        raise ValueError(f"page {k}'s block ({header} + {page_length - header} bytes) does not match its header ({said_header} + {body} bytes)")
    missing = [key.decode() for key in _PAGE_KEYS if key not in meta]
    if missing and len(missing) < len(_PAGE_KEYS):
        raise ValueError(f"page {k}'s header lacks {', '.join(missing)}")
    if not missing and (first != total or rows != said_rows):
        raise ValueError(f"page {k} says it holds {rows} samples from sample {first}; its message holds {said_rows} rows and the pages before it {total}")


def _check_schema(name: str, schema: Any, head: bytes, footer: bytes, tail: bytes, schema_crc: int | None) -> None:
    """``CorruptFileError`` unless the schema at the start of the file is the footer's copy of it
    and (when the pages vouch for one: ``schema_crc``) its slipstream metadata has their checksum."""
    pa = _pa()
    import pyarrow.ipc  # noqa: F401

    try:
        copy = pa.ipc.open_file(pa.py_buffer(head + footer + tail)).schema  # (the footer, read without the pages)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise CorruptFileError(name, f"the file's footer cannot be read: {exc}") from None
    if not copy.equals(schema, check_metadata=True):
        raise CorruptFileError(name, "the schema at the start of the file differs from its footer's copy")
    raw = (schema.metadata or {}).get(_format.META_KEY)
    if raw is not None and schema_crc is not None and schema_crc != -1 and _format.metadata_checksum(raw) != schema_crc:
        raise CorruptFileError(name, "the schema metadata does not match the checksum its pages were written with")


def _schema(raw: bytes, name: str) -> Any:
    """The schema message at the start of a file (after the magic)."""
    pa = _pa()
    import pyarrow.ipc  # noqa: F401

    try:
        return pa.ipc.read_schema(pa.py_buffer(raw))
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise CorruptFileError(name, f"the file's schema cannot be read: {exc}") from None


def read_local(path: Path) -> ReadMany:
    """``read_many`` over the local file ``path``."""
    def read_many(ranges: list[tuple[int, int]]) -> list[bytes]:
        with open(path, "rb") as handle:
            out = []
            for start, stop in ranges:
                handle.seek(start)
                out.append(handle.read(stop - start))
            return out

    return read_many


def parse_index(raw: bytes, where: str) -> dict[str, Any]:
    """A sharded dataset's index from its bytes, checked for shape (``CorruptFileError`` naming
    ``where``: for JSON nested too deeply as well, and for a shard listed twice); ``"schema"``
    decoded to the Arrow schema."""
    pa = _pa()
    import pyarrow.ipc  # noqa: F401

    try:
        index = json.loads(raw)
        if not isinstance(index, dict) or index.get("format") != FORMAT:
            raise ValueError(f"it names format {index.get('format') if isinstance(index, dict) else None!r}, not {FORMAT!r}")
        if not isinstance(index.get("version"), int) or index["version"] > VERSION:
            raise ValueError(f"index version {index.get('version')} is newer than this slipstream reads ({VERSION}): upgrade slipstream")
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(index["schema"])))
        if not isinstance(index["shards"], list) or not index["shards"]:
            raise ValueError("it lists no shards")
        names: set[str] = set()
        for entry in index["shards"]:
            _check_entry(entry)
            if entry["file"] in names:  # (read twice, its samples would count twice)
                raise ValueError(f"it lists shard {entry['file']!r} twice")
            names.add(entry["file"])
        total = sum(entry["samples"] for entry in index["shards"])
        if "samples" in index and index["samples"] != total:
            raise ValueError(f"it says {index['samples']!r} samples but its shards hold {total}")
    except RecursionError:  # (JSON nested deeper than Python's parser goes: no index is)
        raise CorruptFileError(where, "not a valid sharded-dataset index: its JSON is nested too deeply to be one") from None
    except (ValueError, KeyError, TypeError, pa.ArrowException) as exc:
        raise CorruptFileError(where, f"not a valid sharded-dataset index: {exc}") from None
    index["schema"] = schema
    return index


def _check_entry(entry: Any) -> None:
    """``ValueError`` unless ``entry`` is a well-formed shard entry: a plain file name, non-negative
    integers, pages in order inside the file, adding up to its samples."""
    if not isinstance(entry, dict) or not isinstance(entry.get("file"), str):
        raise ValueError(f"a shard entry is not a dict with a file name: {entry!r:.200}")
    name = entry["file"]
    if not name or "/" in name or "\\" in name or name.startswith("."):
        raise ValueError(f"shard name {name!r} is not a plain file name")
    numbers = [entry.get("bytes"), entry.get("samples"), entry.get("schema_crc32")]
    pages = entry.get("pages")
    if not isinstance(pages, list) or any(not isinstance(page, list) or len(page) != 5 for page in pages):
        raise ValueError(f"shard {name!r}: pages must be lists of [offset, length, header length, rows, checksum]")
    if any(type(v) is not int or v < -1 for v in numbers + [v for page in pages for v in page]):
        raise ValueError(f"shard {name!r}: its sizes, counts and checksums must be integers")
    end = 0
    for k, (offset, length, header, rows, _) in enumerate(pages):
        if offset < end or not 0 < header <= length or offset + length > entry["bytes"] or rows < 0:
            raise ValueError(f"shard {name!r}: page {k} (bytes {offset}..{offset + length}) does not lie in order inside its {entry['bytes']} bytes")
        end = offset + length
    if sum(page[3] for page in pages) != entry["samples"]:
        raise ValueError(f"shard {name!r}: its pages do not add up to its {entry['samples']} samples")


def read_local_index(folder: Path) -> dict[str, Any]:
    """The index of the sharded dataset in ``folder`` (``MissingShardError`` when there is none)."""
    path = folder / INDEX
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise MissingShardError(
            folder, f"a folder without {INDEX}: not a sharded dataset written by ss.write(..., shard_size=...) (or its write did not finish)"
        ) from None
    return parse_index(raw, str(path))


def open_folder(folder: Path, cache: str = "os", fields: list[str] | None = None) -> ShardedDataset:
    """The sharded dataset in ``folder``, each shard checked against its index entry: present
    (``MissingShardError``), of the size and sample count the index says (``ShardMismatchError``)."""
    index = read_local_index(folder)
    paths = []
    for entry in index["shards"]:
        path = folder / entry["file"]
        try:
            size = os.stat(path).st_size
        except FileNotFoundError:
            raise MissingShardError(path, f"listed in {folder / INDEX} but missing") from None
        if size != entry["bytes"]:
            raise ShardMismatchError(path, f"is {size} bytes but the index says {entry['bytes']}: it changed since the index was written")
        paths.append(path)
    dataset = ShardedDataset(paths, cache=cache, fields=fields)
    for shard, entry in zip(dataset.shards, index["shards"]):
        if len(shard) != entry["samples"]:
            raise ShardMismatchError(shard.path, f"holds {len(shard)} samples but {folder / INDEX} says {entry['samples']}: it changed since the index was written")
    return dataset
