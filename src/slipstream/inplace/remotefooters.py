"""Parquet objects in a store and their footers, as opening them reads them: listed, identified, read and checked.

``list_parquet(fetcher, url)`` lists a folder prefix once (its ``.parquet`` objects, subfolders
too, in path order: each object's size and ETag or modification time come with the listing);
``object_info`` is one object's (one HEAD), ``object_infos`` many at once. ``read_footers`` reads
each footer by ranged reads from the object's end (the last 8 bytes give its length; once one
footer of the set is known, one read of that length plus 8 usually gets the next whole), many
objects in parallel, through ``Fetcher.read_checked``: retried within the budget, a footer that
does not pass ``check_footer`` read again before it is called corrupt. ``opened_footers`` keeps
the footers in one small index file per opened set beside the page cache (``inplace.footers``:
private, sealed, written atomically), keyed by each object's URL, size and tag: opening the same
set again reads only the listing (or the HEADs), and checks each footer from the index again.

``check_footer(url, footer, size)`` is every check a footer gets before anything uses it: its
length and magic, pyarrow's parse of it (the schema as Arrow types, its Hugging Face features valid
JSON, its leaf columns), then its claims from its own bytes (``files.parquetfooter``: row counts,
every column chunk's byte range inside the object's data and apart from the others', value and
null counts). What it gives (``CheckedFooter``) is all a reader of the object uses: the column
chunks' places come from those checked claims, never from pyarrow's column chunk metadata, whose
accessors abort the interpreter on some damage. ``CorruptFileError`` naming the object otherwise.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple

from ..core.errors import CorruptFileError, MissingShardError, RemoteReadError, add_note
from ..files.parquetfooter import (
    MAGIC,
    TAIL,
    FooterClaims,
    Leaf,
    arrow_schema,
    checked_footer,
    footer_bounds,
    leaf_columns,
    parse_metadata,
)
from ..remote.fetch import Fetcher
from ..remote.retry import retrying
from ..remote.store import join
from .footers import Footer, FooterIndex, index_name
from .parquet import SUFFIX

__all__ = [
    "FOOTER_THREADS", "CheckedFooter", "ObjectInfo", "check_footer", "list_parquet", "object_info", "object_infos",
    "opened_footers", "read_footer", "read_footers",
]  # fmt: skip

FOOTER_THREADS = 32  # footers read at once
_TAG_KEYS = ("ETag", "etag", "e_tag", "LastModified", "last_modified", "mtime", "updated", "modified")

ObjectInfo = tuple[str, int, str]  # (name, size, tag: ETag or modification time, "" when the store gives none)


class CheckedFooter(NamedTuple):
    """A footer that passed ``check_footer``: its bytes (and the 8 after them), pyarrow's parse of
    it (``metadata``: its schema and file-level values only), its Arrow ``schema``, its ``leaves``
    and its ``claims`` (row groups' rows, column chunks' bytes)."""

    footer: bytes
    metadata: Any
    schema: Any
    leaves: list[Leaf]
    claims: FooterClaims


# ------------------------------------------------------------------------------ objects: listing, identity


def _tag(info: dict[str, Any]) -> str:
    for key in _TAG_KEYS:
        value = info.get(key)
        if value is not None and value != "":
            return str(value)
    return ""


def _retried(fetcher: Fetcher, url: str, call: Callable[[], Any], what: str) -> Any:
    store = fetcher.store
    return retrying(
        call, url, 0, 0, fetcher.budget, attempt_timeout=max(fetcher.budget, getattr(store, "timeout", 0) or 0), what=what,
        prepare=lambda: store.connect(url),
    )  # fmt: skip


def object_info(fetcher: Fetcher, url: str) -> ObjectInfo:
    """(name, size, tag) of the object ``url`` (one HEAD, retried); ``FileNotFoundError`` when there is
    none (a folder prefix is none)."""

    def head() -> ObjectInfo:
        fs, path = fetcher.store.filesystem(url)
        if type(fs).__module__.startswith("pyarrow"):
            info = fs.get_file_info(path)
            if info.type.name != "File":
                raise FileNotFoundError(url)
            return url, int(info.size), str(info.mtime_ns or "")
        if hasattr(fs, "invalidate_cache"):
            fs.invalidate_cache(path)  # (never an answer remembered from before: the object may have changed)
        info = fs.info(path)
        if info.get("type") == "directory":
            raise FileNotFoundError(url)
        return url, int(info["size"]), _tag(info)

    return _retried(fetcher, url, head, "its size and identity")


def object_infos(fetcher: Fetcher, urls: list[str], threads: int = FOOTER_THREADS) -> list[ObjectInfo]:
    """(name, size, tag) of each of ``urls`` (HEADs, ``threads`` at once); ``MissingShardError`` for one not there."""

    def one(url: str) -> ObjectInfo:
        try:
            return object_info(fetcher, url)
        except FileNotFoundError:
            raise MissingShardError(url, "no such object") from None

    if len(urls) <= 1:
        return [one(u) for u in urls]
    with ThreadPoolExecutor(max(1, min(int(threads), len(urls))), thread_name_prefix="slipstream-footers") as pool:
        return list(pool.map(one, urls))


def list_parquet(fetcher: Fetcher, url: str) -> list[ObjectInfo]:
    """(name, size, tag) of each ``.parquet`` object under the folder prefix ``url`` (its subfolders
    too), in path order; one listing, retried."""
    base = url.rstrip("/") + "/"

    def listing() -> list[ObjectInfo]:
        fs, path = fetcher.store.filesystem(base)
        root = path.rstrip("/") + "/"
        found: list[tuple[str, int, str]] = []
        if type(fs).__module__.startswith("pyarrow"):
            import pyarrow.fs as pafs

            for info in fs.get_file_info(pafs.FileSelector(root.rstrip("/"), recursive=True, allow_not_found=True)):
                if info.type.name == "File" and info.path.startswith(root):
                    found.append((info.path[len(root) :], int(info.size), str(info.mtime_ns or "")))
        else:
            if hasattr(fs, "invalidate_cache"):
                fs.invalidate_cache(path)
            try:
                entries = fs.find(root, detail=True)
            except FileNotFoundError:
                entries = {}
            for key, info in entries.items():
                key = fs._strip_protocol(key)
                if info.get("type", "file") != "directory" and key.startswith(root):
                    found.append((key[len(root) :], int(info["size"]), _tag(info)))
        chosen = [entry for entry in found if entry[0].endswith(SUFFIX)]
        chosen.sort(key=lambda entry: entry[0].split("/"))  # (the order of local paths, part by part)
        return [(join(base.rstrip("/"), relative), size, tag) for relative, size, tag in chosen]

    return _retried(fetcher, base, listing, "its listing")


# --------------------------------------------------------------------------------------------- footers


def check_footer(url: str, footer: bytes, size: int, claims: FooterClaims | None = None) -> CheckedFooter:
    """A footer (its bytes and the 8 after them) of the ``size``-byte object ``url``, checked (see
    the module doc); ``claims``: its claims when this process has them from a check done before
    (a source pickled to it), else read from its bytes. ``CorruptFileError`` naming ``url``."""
    footer = bytes(footer)
    if len(footer) < TAIL or footer_bounds(url, size, footer[-TAIL:], what="object") != size - len(footer):
        raise CorruptFileError(url, f"its footer's {len(footer)} bytes do not end with its length and the magic bytes PAR1")
    metadata = parse_metadata(url, footer)
    schema = arrow_schema(url, metadata)
    features = (schema.metadata or {}).get(b"huggingface")
    if features is not None:
        try:
            json.loads(features)
        except ValueError:
            raise CorruptFileError(url, "its footer's Hugging Face features are not valid JSON") from None
    leaves = leaf_columns(url, metadata, schema)
    if claims is None:
        claims = checked_footer(url, footer[:-TAIL], size - len(footer), leaves)
    if len(claims.rows) != metadata.num_row_groups or sum(claims.rows) != metadata.num_rows:
        raise CorruptFileError(
            url, f"its footer holds {len(claims.rows)} row groups of {sum(claims.rows)} rows, but pyarrow reads "
            f"{metadata.num_row_groups} of {metadata.num_rows}"
        )  # fmt: skip
    return CheckedFooter(footer, metadata, schema, leaves, claims)


def read_footer(fetcher: Fetcher, url: str, size: int, guess: int = 0) -> CheckedFooter:
    """The footer of the Parquet object ``url`` of ``size`` bytes, checked: the last ``max(guess,
    8)`` bytes first, then what they lack; a footer that fails ``check_footer`` is read again, as
    ``Fetcher.read_checked`` does."""

    def parse(reads: Any) -> CheckedFooter:
        if size < len(MAGIC) + TAIL:
            footer_bounds(url, size, b"", what="object")  # (too short: raises)
        first = min(size, max(TAIL, int(guess)))
        tail = bytes(reads.ranges([(size - first, size)])[0])
        length = size - TAIL - footer_bounds(url, size, tail[-TAIL:], what="object")
        if length + TAIL > first:
            footer = bytes(reads.ranges([(size - TAIL - length, size - first)])[0]) + tail
        else:
            footer = tail[first - TAIL - length :]
        return check_footer(url, footer, size)

    try:
        return fetcher.read_checked(url, parse, "its Parquet footer")
    except RemoteReadError as exc:
        add_note(exc, "(reading its Parquet footer, to open it)")
        raise


def read_footers(
    fetcher: Fetcher, objects: list[ObjectInfo], threads: int = FOOTER_THREADS, guess: int = 0
) -> list[CheckedFooter]:
    """The footers of ``objects``, read ``threads`` at once (see ``read_footer``); after the first,
    each read guesses the largest footer seen so far (a set's footers are alike)."""
    if not objects:
        return []
    out: list[CheckedFooter] = []
    if guess <= 0:
        out.append(read_footer(fetcher, objects[0][0], objects[0][1]))
        guess = len(out[0].footer)
    rest = objects[len(out) :]
    largest = [guess]

    def one(entry: ObjectInfo) -> CheckedFooter:
        checked = read_footer(fetcher, entry[0], entry[1], largest[0])
        largest[0] = max(largest[0], len(checked.footer))  # (a race here only changes a guess)
        return checked

    if len(rest) <= 1:
        return out + [one(entry) for entry in rest]
    pool = ThreadPoolExecutor(max(1, min(int(threads), len(rest))), thread_name_prefix="slipstream-footers")
    try:
        out.extend(pool.map(one, rest))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return out


def opened_footers(
    fetcher: Fetcher, infos: list[ObjectInfo], opened: str, threads: int = FOOTER_THREADS
) -> dict[str, CheckedFooter]:
    """Every object's checked footer: from the footer index where its size and tag are the ones
    recorded (and it passes ``check_footer``), else read; the index saved again when it changed
    (``opened``: what was opened, which names the index)."""
    index = FooterIndex(Path(fetcher.cache.folder).parent / "footers")
    name = index_name(opened)
    known = index.load(name)
    out: dict[str, CheckedFooter] = {}
    missing: list[ObjectInfo] = []
    for url, size, tag in infos:
        entry = known.get(url)
        checked = None
        if entry is not None and tag and entry[0] == size and entry[1] == tag:
            try:
                checked = check_footer(url, entry[2], size)
            except CorruptFileError:
                checked = None
        if checked is None:
            missing.append((url, size, tag))
        else:
            out[url] = checked
    if missing:
        guess = max((len(checked.footer) for checked in out.values()), default=0)
        for (url, _, _), checked in zip(missing, read_footers(fetcher, missing, threads, guess)):
            out[url] = checked
    keep: dict[str, Footer] = {
        url: (size, tag, out[url].footer) for url, size, tag in infos if tag
    }  # (untagged objects: read every time)
    if keep != known:
        index.save(name, keep)
    return out
