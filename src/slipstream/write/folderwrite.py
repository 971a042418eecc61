"""A sharded dataset's folder, written: its shard files, then the index that names them (``files.folder`` reads them).

``ss.write(path, data, shard_size=...)`` makes ``path`` a folder of packed files
(``shard-00000.arrow``, ``shard-00001.arrow``...), each a complete packed file of about
``shard_size`` bytes (whole pages), then writes ``index.json`` last (its contents: ``files.folder``).

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

Writes of one folder take turns (``writing``: its lock, ``write.writelock``, held from numbering
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

from ..files import format as _format
from ..files.field import Field, field_from_spec
from ..files.folder import FORMAT, INDEX, VERSION, describe, read_local, read_local_index
from .writelock import LOCK, locked

__all__ = [
    "SHARD",
    "appended",
    "check_target",
    "file_identity",
    "first_number",
    "make_index",
    "remove_shards",
    "write_index",
    "write_shards",
    "writing",
]

SHARD = "shard-{:05d}.arrow"


def make_index(entries: list[dict[str, Any]], schema: bytes) -> dict[str, Any]:
    """The index naming the shards ``entries`` in order, with the serialized Arrow ``schema``."""
    return {
        "format": FORMAT,
        "version": VERSION,
        "samples": sum(entry["samples"] for entry in entries),
        "schema": base64.b64encode(schema).decode("ascii"),
        "shards": entries,
    }


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
