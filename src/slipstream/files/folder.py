"""A sharded dataset's folder: shard files and the index that says what they hold.

``ss.write(path, data, shard_size=...)`` makes ``path`` a folder of packed files
(``shard-00000.arrow``, ``shard-00001.arrow``...), each a complete packed file of about
``shard_size`` bytes (whole pages), then writes ``index.json`` last: the Arrow schema (with the
fields and the writer's metadata), and for each shard its file name, size in bytes, sample count
and every page's byte range, row count and checksum. A reader of a remote copy needs nothing
else to fetch any page with one ranged read and check it before use.

Contract: every shard and the index are written under temporary names and renamed into place
(``writer``'s commit), the index last, so an interrupted write leaves either the previous index
(and the shards it names, untouched) or the new one; a folder without ``index.json`` is not a
dataset (``MissingShardError``). A write that fails with an exception removes the shards it added
and its temporary files: a new folder is left empty (the same write can run again), an appended
one holds the dataset it held. Only a killed process (``SIGKILL``, a power cut) leaves shards or
temporary files (``.*.partial``) behind, never a new index. ``append=True`` adds shards numbered after the last and rewrites
the index to name them all; the data must have the same fields, and the dataset's page size and
metadata are kept. Writing into a folder that holds anything but a sharded dataset to append to
is refused before any sample is encoded.

Writes of one folder take turns (``writing``: its lock, ``files.writelock``, held from numbering
the shards to committing the index, the folder checked again under it): two appends both land; a
second write of a new folder is a ``FileExistsError`` once the first filled it. A failing write
removes only the files it committed (each checked to be that file still), never another write's.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..core.errors import CorruptFileError, MissingShardError, ShardMismatchError
from . import format as _format
from .field import Field, field_from_spec
from .field import pyarrow_module as _pa
from .layout import TAIL, footer_length, header_counts, header_metadata, page_blocks
from .local import page_meta
from .shards import ShardedDataset
from .writelock import LOCK, locked

__all__ = [
    "INDEX",
    "SHARD",
    "appended",
    "check_target",
    "describe",
    "file_identity",
    "first_number",
    "make_index",
    "open_folder",
    "parse_index",
    "read_local",
    "read_local_index",
    "remove_shards",
    "write_index",
    "write_shards",
    "writing",
]

INDEX = "index.json"
FORMAT = "slipstream.shards"
VERSION = 1
SHARD = "shard-{:05d}.arrow"

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


def make_index(entries: list[dict[str, Any]], schema: bytes) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "version": VERSION,
        "samples": sum(entry["samples"] for entry in entries),
        "schema": base64.b64encode(schema).decode("ascii"),
        "shards": entries,
    }


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


def check_target(folder: Path, append: bool) -> dict[str, Any] | None:
    """Before encoding: the existing index when appending (``folder`` must hold a dataset), else
    None (``folder`` must be new or empty)."""
    if append:
        return read_local_index(folder)
    if folder.exists() and (not folder.is_dir() or any(entry.name != LOCK for entry in folder.iterdir())):
        raise FileExistsError(
            f"{folder}: exists and is not an empty folder; ss.write(..., shard_size=...) writes a new sharded dataset "
            "there (append=True adds shards to one; remove it to rewrite)"
        )
    return None


@contextmanager
def writing(folder: Path, existing: dict[str, Any] | None) -> Iterator[dict[str, Any] | None]:
    """Hold ``folder``'s write lock (making the folder when new) while a write of it decides its shard
    numbers, writes and commits; yields the index to append to, read again under the lock (another
    append may have committed since ``existing`` was read), or None for a new dataset, the folder
    checked empty again (``FileExistsError`` when another write filled it meanwhile). A dataset whose
    schema is no longer ``existing``'s (replaced meanwhile) is a ``ValueError``: nothing is written."""
    folder.mkdir(parents=True, exist_ok=True)
    with locked(folder):
        try:
            fresh = check_target(folder, existing is not None)
        except FileExistsError as exc:
            raise FileExistsError(f"{exc}. Another write of this folder may have filled it since this one began; this write wrote nothing there") from None
        if existing is not None and not fresh["schema"].equals(existing["schema"], check_metadata=True):
            raise ValueError(f"{folder}: the dataset was replaced by one with other fields or settings while this append waited for another write of it; nothing was appended")
        yield fresh


def file_identity(path: Path) -> tuple[int, ...] | None:
    """What tells the file at ``path`` from any other later put there (None when there is none)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def write_shards(
    folder: Path, schema: Any, pages: Iterator[Any], shard_size: int, existing: dict[str, Any] | None,
    write_file: Callable[[Path, Callable[[int], bool]], bool], temporary: Callable[[Path], Path], commit: Callable[[Path, Path], None],
) -> Path:  # fmt: skip
    """Write the shards (``write_file(partial, stop)`` writes pages to one file until ``stop(bytes)``),
    then the index naming the existing shards (when appending) and the new ones, holding the
    folder's write lock (``writing``: ``existing`` is read again under it). A failure removes the
    shards this write added (and its temporary files) before it propagates."""
    with writing(folder, existing) as current:
        entries = list(current["shards"]) if current is not None else []
        number = first_number(current)
        added: dict[Path, tuple[int, ...] | None] = {}  # the shards this write committed (as committed), removed again if it fails
        done = False
        try:
            while not done:
                name = SHARD.format(number)
                final = folder / name
                partial = temporary(final)
                try:
                    done = write_file(partial, lambda nbytes: nbytes >= shard_size)
                    entry, _ = describe(name, partial.stat().st_size, read_local(partial))
                    if entry["samples"] == 0 and (entries or number > 0):
                        partial.unlink()  # the pages ran out exactly as the last shard filled
                        break
                    commit(partial, final)
                except BaseException:
                    partial.unlink(missing_ok=True)
                    raise
                added[final] = file_identity(final)
                entries.append(entry)
                number += 1
            write_index(folder, entries, schema, temporary, commit)
        except BaseException:
            remove_shards(added)
            raise
    return folder


def remove_shards(added: Mapping[Path, tuple[int, ...] | None]) -> None:
    """Remove the shard files a failing write added, each only while it is still the file that write
    committed (``added``: path -> its ``file_identity`` then), so that the folder is again what it
    was (empty, or the dataset its index, unchanged, describes) and no other write's file is lost."""
    for path, identity in added.items():
        if identity is not None and file_identity(path) == identity:
            path.unlink(missing_ok=True)


def first_number(existing: dict[str, Any] | None) -> int:
    """The number of the first new shard: after the last of an ``existing`` index, else 0."""
    entries = existing["shards"] if existing is not None else []
    return 1 + max((int(e["file"][6:11]) for e in entries if e["file"].startswith("shard-")), default=-1)


def write_index(
    folder: Path, entries: list[dict[str, Any]], schema: Any, temporary: Callable[[Path], Path], commit: Callable[[Path, Path], None]
) -> Path:
    """Write ``folder``'s index naming ``entries`` in order (under a temporary name, then renamed
    into place, as the shards are); returns its path. The same entries and schema give the same bytes."""
    index = make_index(entries, schema.serialize().to_pybytes())
    index_path = folder / INDEX
    partial = temporary(index_path)
    try:
        partial.write_text(json.dumps(index, separators=(",", ":")))
        commit(partial, index_path)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    return index_path


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


def appended(existing: dict[str, Any], fields: Any, metadata: dict[str, Any] | None, path: Path) -> tuple[dict[str, Field], int, Any]:
    """(fields, page size, metadata) to append to the dataset whose index is ``existing``: its own,
    the fields in the order of its columns (``fields`` may name the same fields in any order);
    ``ValueError`` when the caller asks for other fields or other ``metadata`` (already checked JSON)."""
    meta = json.loads(existing["schema"].metadata[_format.META_KEY])
    stored = {name: field_from_spec(meta["fields"][name]) for name in existing["schema"].names}  # the columns' order (the specs' JSON is sorted)
    if fields is not None and (set(fields) != set(stored) or any(fields[n].spec() != stored[n].spec() for n in stored)):
        raise ValueError(f"{path}: append=True must write the dataset's fields {stored}, got {dict(fields)}")
    user = _format.user_metadata(meta)
    if metadata is not None and metadata != user:
        raise ValueError(f"{path}: append=True keeps the dataset's metadata {user!r}; got other metadata {metadata!r}")
    return stored, int(meta["page_size"]), user or None
