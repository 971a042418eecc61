"""``ss.open`` of Parquet in object storage, read in place: an object, a list of them, or a folder prefix.

``open_remote_parquet("s3://bucket/data/")`` (``gs://``, ``az://``, ``https://``, any URL the
``remote.store.Store`` reads; a folder prefix, one ``.parquet`` object or a list of them) is the
container ``inplace.parquet`` makes of local files: ``len``, random access, each row group one
page, columns mapped to fields as conversion maps them.

Opening reads footers alone. A folder is listed once (its ``.parquet`` objects, subfolders too, in
path order: each object's size and ETag or modification time come with the listing); a named
object costs one HEAD. Each footer is read by ranged reads from the object's end (the last 8 bytes
give its length; once one footer of the set is known, one read of that length plus 8 usually gets
the next whole), many objects in parallel (``threads`` at once), through
``Fetcher.read_checked``: retried within the budget, a footer that does not parse read again
before it is called corrupt. The footers are kept in one small index file per opened set beside
the page cache (``inplace.footers``: private, sealed, written atomically), keyed by each object's
URL, size and tag: opening the same set again reads only the listing (or the HEADs).

A page is one row group's column chunks for the chosen fields (their byte ranges from the footer;
chunks less than ``GAP`` apart fetched as one range), downloaded through the ``Fetcher``: the
shared page cache on disk, read-ahead (``prefetch``), retries, one download per node. Each range
is checked before anything keeps it, by decoding its columns from those bytes alone (pyarrow reads
from a file object that serves only the fetched ranges and refuses any other read): what is
checked is the Parquet structure, each data page's CRC where the writer stored one
(``write_page_checksum=True``), the compression framing, and the row counts; bytes that fail are
downloaded again, and the same failing bytes three times raise ``ChecksumError`` naming the object,
row group and samples. Where the writer stored no CRC, a byte changed inside uncompressed values
passes these checks. The decoded columns of a checked range are reused by the read that asked
for it (no second decode).

The object's identity (its size, and its ETag or modification time where the store gives one) is
checked against the one its footer was read with before the first download in each process (one
HEAD), and again when a range fails its checks: an object replaced or changed since raises
``ShardMismatchError`` naming it, a removed one ``MissingShardError``; ranges cached on disk are
keyed by that identity, so a changed object never reads an old one's pages. An object replaced
after a process's first download, by one whose bytes in the ranges read still pass the checks, is
not noticed by that process (the store offers no read conditional on the ETag here).
"""

from __future__ import annotations

import json
import os
import re
import zlib
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..convert.tables import hf_features, table_columns
from ..core.errors import (
    ChecksumError,
    ConvertError,
    CorruptFileError,
    MissingShardError,
    RemoteReadError,
    ShardMismatchError,
    add_note,
)
from ..core.processlock import ProcessLock
from ..core.sizes import parse_size
from ..files import field_kinds as F
from ..files.field import pyarrow_module as _pa
from ..files.packed import PackedDataset
from ..files.pagememory import RecentPages
from ..files.shards import ShardedDataset
from ..remote import pages as _remote_pages
from ..remote.cache import PageCache
from ..remote.cachedir import default_limit
from ..remote.fetch import Fetcher, range_key
from ..remote.open import default_cache_dir
from ..remote.retry import retrying
from ..remote.store import Store, is_url, join
from .footers import Footer, FooterIndex, index_name
from .parquet import SUFFIX, ParquetPages
from .tablepages import TablePages, chosen_columns

__all__ = ["GAP", "RemoteParquetPages", "is_parquet_url", "list_parquet", "open_remote_parquet", "remote_fetcher"]

GAP = 1 << 16  # column chunks of one row group closer than this are fetched as one range
FOOTER_THREADS = 32  # footers read at once
KEEP = 32  # decoded row groups each process keeps (and downloads the fetcher keeps), as ss.open's default
_MAGIC = b"PAR1"
_TAIL = 8  # footer length (4 bytes, little-endian) and the magic
_MAX_FOOTER = 1 << 30  # a footer said to be longer is refused before it is read
_STASHED = 8  # ranges whose decoded columns a source keeps for the read that asked for them
_MAX_DICT_HEADER = 100  # what pyarrow adds to a column chunk's length for files of parquet-mr before 1.2.9
_PANDAS_INDEX = re.compile(r"__index_level_\d+__")  # a pandas index written along: no field (as convert.tables has it)
_TAG_KEYS = ("ETag", "etag", "e_tag", "LastModified", "last_modified", "mtime", "updated", "modified")

ObjectInfo = tuple[str, int, str]  # (name, size, tag: ETag or modification time, "" when the store gives none)


def is_parquet_url(path: Any) -> bool:
    """Whether ``path`` names Parquet in object storage by its name: a URL ending ``.parquet``, or a
    list of such names (local paths among them allowed) with at least one URL."""
    paths = list(path) if isinstance(path, (list, tuple)) else [path]
    return bool(paths) and any(is_url(p) for p in paths) and all(str(p).endswith(SUFFIX) for p in paths)


def remote_fetcher(
    cache_dir: str | os.PathLike | None = None, cache_limit: int | str | None = None, filesystem: Any = None,
    storage_options: dict[str, Any] | None = None, timeout: float = 30.0, retry_budget: float = 120.0, readahead: int = 8, keep: int = KEEP,
) -> Fetcher:  # fmt: skip
    """The ``Fetcher`` ``ss.open`` reads objects through, from its arguments (see ``remote.open``): a
    ``Store`` and the page cache ``cache_dir/pages``."""
    folder = default_cache_dir() if cache_dir is None else Path(cache_dir)
    limit = parse_size(cache_limit, "cache_limit") if cache_limit is not None else default_limit(folder)
    return Fetcher(Store(filesystem, storage_options, timeout), PageCache(folder / "pages", limit), retry_budget, readahead, keep)


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
        fs, path = fetcher.store._filesystem(url)
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


def list_parquet(fetcher: Fetcher, url: str) -> list[ObjectInfo]:
    """(name, size, tag) of each ``.parquet`` object under the folder prefix ``url`` (its subfolders
    too), in path order; one listing, retried."""
    base = url.rstrip("/") + "/"

    def listing() -> list[ObjectInfo]:
        fs, path = fetcher.store._filesystem(base)
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


def parse_footer(url: str, footer: bytes) -> Any:
    """The ``FileMetaData`` of a footer (its bytes and the 8 after them); ``CorruptFileError`` naming
    ``url`` when it cannot be right."""
    pa = _pa()
    import pyarrow.parquet as pq

    try:
        return pq.read_metadata(pa.BufferReader(footer))
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise CorruptFileError(url, f"its Parquet footer cannot be read: {exc}") from None


def read_footer(fetcher: Fetcher, url: str, size: int, guess: int = 0) -> bytes:
    """The footer of the Parquet object ``url`` of ``size`` bytes (its bytes and the 8 after them):
    the last ``max(guess, 8)`` bytes first, then what they lack; checked by parsing it (a footer
    that does not parse is read again, as ``Fetcher.read_checked`` does)."""

    def parse(reads: Any) -> bytes:
        if size < len(_MAGIC) + _TAIL:
            raise CorruptFileError(url, f"is {size} bytes: too short for a Parquet file (at least 12)")
        first = min(size, max(_TAIL, int(guess)))
        tail = reads.ranges([(size - first, size)])[0]
        magic = bytes(tail[-4:])
        if magic == b"PARE":
            raise CorruptFileError(url, "is an encrypted Parquet file (its footer is encrypted), which is not read in place")
        if magic != _MAGIC:
            raise CorruptFileError(
                url, f"does not end with the Parquet magic bytes PAR1 (it ends with {magic!r}): not a Parquet file, or cut short"
            )
        length = int.from_bytes(tail[-8:-4], "little")
        if length + _TAIL + len(_MAGIC) > size or length > _MAX_FOOTER:
            raise CorruptFileError(url, f"its footer is said to be {length} bytes, more than the {size}-byte object can hold")
        if length + _TAIL > first:
            footer = reads.ranges([(size - _TAIL - length, size - first)])[0] + bytes(tail)
        else:
            footer = bytes(tail[first - _TAIL - length :])
        check_footer(url, footer, size)
        return footer

    try:
        return fetcher.read_checked(url, parse, "its Parquet footer")
    except RemoteReadError as exc:
        add_note(exc, "(reading its Parquet footer, to open it)")
        raise


def check_footer(url: str, footer: bytes, size: int) -> Any:
    """The ``FileMetaData`` of a footer read from the ``size``-byte object ``url``, all that reading
    it uses checked: the schema (as Arrow types, its Hugging Face features valid JSON), its leaf
    columns, the row counts, and every column chunk's byte range (inside the object's data, in
    this object, none overlapping another); ``CorruptFileError`` naming ``url`` otherwise."""
    pa = _pa()
    metadata = parse_footer(url, footer)
    schema = _arrow_schema(url, metadata)
    features = (schema.metadata or {}).get(b"huggingface")
    if features is not None:
        try:
            json.loads(features)
        except ValueError:
            raise CorruptFileError(url, "its footer's Hugging Face features are not valid JSON") from None
    leaves = _leaf_owners(url, metadata, schema)
    rows = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
    if any(n < 0 for n in rows) or sum(rows) != metadata.num_rows:
        raise CorruptFileError(url, f"its footer's row groups hold {sum(rows)} rows, but it says {metadata.num_rows}")
    padded, end = _old_parquet_mr(metadata.created_by), size - len(footer)
    spans = []
    try:
        for g in range(metadata.num_row_groups):
            group = metadata.row_group(g)
            if group.num_columns != len(leaves):
                raise CorruptFileError(url, f"row group {g} has {group.num_columns} columns, but the schema {len(leaves)}")
            for i in range(group.num_columns):
                chunk = group.column(i)
                if chunk.file_path:
                    raise CorruptFileError(
                        url,
                        f"row group {g}, column {leaves[i]!r}: its data is in another file ({chunk.file_path!r}), which is not read",
                    )
                start, stop = _chunk_range(chunk, padded, size)
                if not len(_MAGIC) <= start <= stop <= (size if padded else end):
                    raise CorruptFileError(
                        url, f"row group {g}, column {leaves[i]!r}: its footer places the column's bytes at {start}..{stop}, "
                        f"outside the file's data ({len(_MAGIC)}..{end}): a damaged footer"
                    )  # fmt: skip
                spans.append((start, stop, g, leaves[i]))
    except (pa.ArrowException, ValueError, UnicodeDecodeError) as exc:
        if isinstance(exc, CorruptFileError):
            raise
        raise CorruptFileError(url, f"its footer's row groups cannot be read: {exc}") from None
    spans.sort()
    reach = (0, 0, "")  # the furthest stop so far, and whose it is
    for start, stop, g, name in spans:
        if start < reach[0] and not padded:
            raise CorruptFileError(
                url, f"its footer places row group {g}'s column {name!r} on bytes of row group {reach[1]}'s column {reach[2]!r}: a damaged footer"
            )  # fmt: skip
        reach = max(reach, (stop, g, name))
    return metadata


def _arrow_schema(url: str, metadata: Any) -> Any:
    pa = _pa()
    try:
        return metadata.schema.to_arrow_schema()
    except (pa.ArrowException, ValueError, UnicodeDecodeError) as exc:
        raise CorruptFileError(url, f"its footer's schema cannot be read as Arrow types: {exc}") from None


def _chunk_range(chunk: Any, padded: bool, size: int) -> tuple[int, int]:
    """Bytes ``start``..``stop`` of a column chunk, as pyarrow reads it (from its dictionary page
    when it has one; up to 100 bytes more for files of old parquet-mr)."""
    start = int(chunk.data_page_offset)
    if chunk.has_dictionary_page and 0 < int(chunk.dictionary_page_offset) < start:
        start = int(chunk.dictionary_page_offset)
    stop = start + int(chunk.total_compressed_size)
    return start, (min(stop + _MAX_DICT_HEADER, size) if padded else stop)


def read_footers(fetcher: Fetcher, objects: list[ObjectInfo], threads: int = FOOTER_THREADS, guess: int = 0) -> list[bytes]:
    """The footers of ``objects``, read ``threads`` at once (see ``read_footer``); after the first,
    each read guesses the largest footer seen so far (a set's footers are alike)."""
    if not objects:
        return []
    out: list[bytes] = []
    if guess <= 0:
        out.append(read_footer(fetcher, objects[0][0], objects[0][1]))
        guess = len(out[0])
    rest = objects[len(out) :]
    largest = [guess]

    def one(entry: ObjectInfo) -> bytes:
        footer = read_footer(fetcher, entry[0], entry[1], largest[0])
        largest[0] = max(largest[0], len(footer))  # (a race here only changes a guess)
        return footer

    if len(rest) <= 1:
        return out + [one(entry) for entry in rest]
    pool = ThreadPoolExecutor(max(1, min(int(threads), len(rest))), thread_name_prefix="slipstream-footers")
    try:
        out.extend(pool.map(one, rest))
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return out


# ------------------------------------------------------------------------------------- the page source


class _Ranges:
    """A read-only file object over the fetched byte ranges of an object of ``size`` bytes: reads
    inside one range are served, any other raises ``OSError`` (pyarrow reads nothing else)."""

    closed = False

    def __init__(self, size: int, ranges: list[tuple[int, Any]]):
        self.size, self.ranges, self.pos = size, [(start, start + len(data), data) for start, data in ranges], 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = offset if whence == 0 else self.pos + offset if whence == 1 else self.size + offset
        return self.pos

    def tell(self) -> int:
        return self.pos

    def read(self, n: int = -1) -> Any:
        n = self.size - self.pos if n is None or n < 0 else n
        for start, stop, data in self.ranges:
            if start <= self.pos and self.pos + n <= stop:
                out = memoryview(data)[self.pos - start : self.pos - start + n]
                self.pos += n
                return out
        raise OSError(f"bytes {self.pos}..{self.pos + n} were not fetched: the footer's column chunk ranges are wrong")

    def close(self) -> None:
        pass


class RemoteParquetPages(TablePages):
    """One Parquet object in a store, its row groups as pages (see the module doc). ``footer``: its
    footer bytes (and the 8 after them), read when its size and ``tag`` were as given (``metadata``:
    the footer parsed, when it is already); ``columns``: the fields of its columns when known (the
    files of a set share them)."""

    def __init__(
        self, fetcher: Fetcher, url: str, size: int, tag: str, footer: bytes, fields: list[str] | None = None, *,
        image: F.Image | None = None, recent: RecentPages | None = None, columns: list[Any] | None = None, metadata: Any = None,
    ):  # fmt: skip
        self.fetcher = fetcher
        self.name = self.url = url
        self.size, self.tag, self.footer = int(size), str(tag or ""), bytes(footer)
        self.identity = (url, self.size, self.tag)
        self.metadata = parse_footer(url, self.footer) if metadata is None else metadata
        self._data_end = self.size - len(self.footer)
        self._image = image if image is not None else F.Image(codec="jpeg")
        self._wanted = None if fields is None else list(fields)
        self._lock = ProcessLock()
        self._identified = False
        self._stash: OrderedDict[tuple[Any, ...], tuple[Any, Any]] = OrderedDict()  # checked range -> (its bytes, columns)
        self._failed: dict[tuple[Any, ...], str] = {}  # checked range -> why its last bytes failed
        self._spans_of: dict[int, list[tuple[int, int, tuple[str, ...]]]] = {}
        schema = _arrow_schema(url, self.metadata)
        self._leaves = _leaf_owners(url, self.metadata, schema)
        rows = self._rows = [self.metadata.row_group(g).num_rows for g in range(self.metadata.num_row_groups)]
        if any(n < 0 for n in rows) or sum(rows) != self.metadata.num_rows:
            raise CorruptFileError(url, f"its footer's row groups hold {sum(rows)} rows, but it says {self.metadata.num_rows}")
        if columns is None:
            columns = self._columns(schema)
        super().__init__(chosen_columns(url, columns, fields), rows, None, recent)
        self._names = [c.name for c in self.columns]
        self._all_columns = columns

    def _columns(self, schema: Any) -> list[Any]:
        """The fields of the columns (binary columns without features sniffed from row group 0's values)."""
        pa = _pa()

        read: list[Any] = []

        def first(name: str) -> Any:
            if not self._rows or self._rows[0] == 0 or (self._wanted is not None and name not in self._wanted):
                return pa.array([], type=schema.field(name).type)  # (a column not chosen: its field is never used)
            if not read:  # row group 0 as read_part(0) reads it (the same ranges: cached for it)
                chosen = [n for n in (self._wanted or schema.names) if n in schema.names and not _PANDAS_INDEX.fullmatch(n)]
                read.append(self._read(0, tuple(chosen), identify=False))  # (its identity just came with the listing)
            return read[0].column(name).slice(0, 16).combine_chunks()

        where = Path(self.url)
        try:
            return table_columns(where, schema, hf_features(schema.metadata), first, self._image)
        except ConvertError as exc:
            raise CorruptFileError(self.url, str(exc).removeprefix(f"{where}: ")) from None

    def where(self, p: int) -> str:
        return f"row group {p}"

    # -- byte ranges -------------------------------------------------------------------------
    def _spans(self, p: int, names: tuple[str, ...] | None = None) -> list[tuple[int, int, tuple[str, ...]]]:
        """The ranges to fetch for row group ``p`` (the chosen columns, or ``names``): (start, stop,
        the columns whose chunks lie in it); ``CorruptFileError`` for chunks outside the data."""
        if names is None and p in self._spans_of:
            return self._spans_of[p]
        wanted = set(self._names if names is None else names)
        group = self.metadata.row_group(p)
        padded = _old_parquet_mr(self.metadata.created_by)
        extent: dict[str, list[int]] = {}
        for i, owner in enumerate(self._leaves):
            if owner not in wanted:
                continue
            start, stop = _chunk_range(group.column(i), padded, self.size)
            limit = self.size if padded else self._data_end
            if not len(_MAGIC) <= start <= stop <= limit:
                raise CorruptFileError(
                    self.url, f"row group {p}, column {owner!r}: its footer places the column's bytes at {start}..{stop}, outside "
                    f"the file's data ({len(_MAGIC)}..{self._data_end}): a damaged footer"
                )  # fmt: skip
            span = extent.setdefault(owner, [start, stop])
            span[0], span[1] = min(span[0], start), max(span[1], stop)
        spans: list[list[Any]] = []
        for owner, (start, stop) in sorted(extent.items(), key=lambda item: item[1][0]):
            if spans and start - spans[-1][1] <= GAP:
                spans[-1][1] = max(spans[-1][1], stop)
                spans[-1][2].append(owner)
            else:
                spans.append([start, stop, [owner]])
        out = [(start, stop, tuple(owners)) for start, stop, owners in spans]
        if names is None:
            self._spans_of[p] = out
        return out

    def _crc(self, names: tuple[str, ...]) -> int:
        """What a checked range's key records: the object's identity and the columns decoded from it."""
        return zlib.crc32("\0".join([str(self.size), self.tag, *names]).encode())

    def _decode(self, p: int, ranges: list[tuple[int, Any]], names: tuple[str, ...]) -> Any:
        import pyarrow.parquet as pq

        reader = pq.ParquetFile(_Ranges(self.size, ranges), metadata=self.metadata, page_checksum_verification=True)
        return reader.read_row_group(p, columns=list(names), use_threads=False)

    def _checker(self, p: int, start: int, names: tuple[str, ...]) -> Callable[[Any], int]:
        crc = self._crc(names)
        pa = _pa()

        def check(data: Any) -> int:
            try:
                table = self._decode(p, [(start, data)], names)
                if table.num_rows != self._rows[p]:
                    raise OSError(f"it decodes to {table.num_rows} rows, but the footer says {self._rows[p]}")
            except (pa.ArrowException, OSError, ValueError) as exc:
                with self._lock:
                    self._failed[(p, start, names)] = str(exc)
                return -1
            with self._lock:
                self._stash[(p, start, names)] = (data, table)
                while len(self._stash) > max(_STASHED, 2 * self.fetcher.readahead):
                    self._stash.popitem(last=False)
            return crc

        return check

    def _read(self, p: int, names: tuple[str, ...] | None = None, identify: bool = True) -> Any:
        """Row group ``p``'s columns (the chosen ones, or ``names``), fetched and checked (with
        ``identify``, the object's identity before its first download)."""
        pa = _pa()
        before = self._identify if identify else None
        spans = self._spans(p, names)
        checks = [self._checker(p, start, owners) for start, _, owners in spans]
        if len(spans) > 1:  # (the others download while the first is read)
            self.fetcher.prefetch(
                [
                    (self.url, start, stop, self._crc(owners), checks[k], before)
                    for k, (start, stop, owners) in enumerate(spans)
                    if k
                ]
            )
        columns: dict[str, Any] = {}
        for k, (start, stop, owners) in enumerate(spans):
            try:
                data = self.fetcher.fetch(self.url, start, stop, self._crc(owners), checks[k], before)
            except ChecksumError as exc:
                self._identify(again=True)  # (an object replaced since its first download: named as such)
                first = sum(self._rows[:p])
                samples = range(first, first + self._rows[p])
                why = self._failed.get((p, start, owners), exc.args[0].split(": ", 1)[-1])
                raise ChecksumError(
                    self.url, f"row group {p} (samples {first}..{samples.stop - 1}), columns {list(owners)}: bytes {start}..{stop} "
                    f"fail their checks, the same bytes three times: {why}; the object is damaged, or changed since its footer was read", p, samples,
                ) from None  # fmt: skip
            with self._lock:
                stashed = self._stash.pop((p, start, owners), None)
            if stashed is not None and stashed[0] is data:
                table = stashed[1]
            else:  # (checked when it came, its columns since dropped: decoded again)
                try:
                    table = self._decode(p, [(start, data)], owners)
                except (pa.ArrowException, OSError, ValueError) as exc:
                    raise CorruptFileError(self.url, f"row group {p} cannot be read: {exc}") from None
            for name in owners:
                columns[name] = table.column(name)
        return pa.table({name: columns[name] for name in (self._names if names is None else names)})

    def read_part(self, p: int) -> Any:
        return self._read(p)

    # -- the object's identity ---------------------------------------------------------------
    def _identify(self, again: bool = False) -> None:
        """``ShardMismatchError`` when the object is not the one whose footer was read (size, tag),
        ``MissingShardError`` when it is gone; checked once per process (before its first download),
        or ``again``."""
        if self._identified and not again:
            return
        with self._lock:
            if self._identified and not again:
                return
        try:
            _, size, tag = object_info(self.fetcher, self.url)
        except FileNotFoundError:
            raise MissingShardError(
                self.url, "the object is missing from the store (deleted or moved since its footer was read)"
            ) from None
        if size != self.size or (tag and self.tag and tag != self.tag):
            now = f"{size} bytes" + (f", tag {tag}" if tag else "")
            was = f"{self.size} bytes" + (f", tag {self.tag}" if self.tag else "")
            raise ShardMismatchError(
                self.url, f"is {now} but was {was} when its footer was read: it changed since; open it again"
            )
        with self._lock:
            self._identified = True

    def check(self) -> None:
        """Nothing to watch between reads: the object's identity is checked before its first download,
        and every range as it arrives."""

    def prefetch(self, pages: Any) -> None:
        """Start downloading row groups ``pages`` (never raises: a range that cannot be fetched fails
        when it is read); inside ``remote.pages.shared_only()``, only what the disk cache can hold."""
        ranges = []
        for p in pages:
            try:
                spans = self._spans(int(p))
            except CorruptFileError:
                continue
            for start, stop, owners in spans:
                ranges.append((self.url, start, stop, self._crc(owners), self._checker(int(p), start, owners), self._identify))
        if _remote_pages._SHARED_ONLY.get():
            cache = self.fetcher.cache
            ranges = [span for span in ranges if cache.fits(span[2] - span[1])]
            window = _remote_pages._WINDOW.get()
            if window is not None:
                ranges = [span for span in ranges if window.admit(cache, range_key(*span[:4]), span[2] - span[1])]
        self.fetcher.prefetch(ranges)

    def validate(self, starts: list[int], n: int) -> None:
        """Read every row group, checking its structure, page CRCs where stored, and values;
        ``ChecksumError`` naming the first that fails (``page`` and ``samples`` in this object's numbers)."""
        for p in range(len(self.part_rows)):
            stop = starts[p + 1] if p + 1 < len(starts) else n
            try:
                self.batch(p)
            except ChecksumError:
                raise
            except CorruptFileError as exc:
                message = str(exc).removeprefix(f"{self.url}: ")
                raise ChecksumError(
                    self.url,
                    f"row group {p} (samples {starts[p]}..{stop - 1}) fails its checks: {message}",
                    p,
                    range(starts[p], stop),
                ) from None

    def __getstate__(self) -> dict[str, Any]:
        return {
            "fetcher": self.fetcher,
            "url": self.url,
            "size": self.size,
            "tag": self.tag,
            "footer": self.footer,
            "fields": self._wanted,
            "image": self._image,
            "recent": self.recent,
            "columns": self._all_columns,
        }  # fmt: skip (the identity is checked again in the process that receives it)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(  # type: ignore[misc]
            state["fetcher"], state["url"], state["size"], state["tag"], state["footer"], state["fields"], image=state["image"],
            recent=state["recent"], columns=state["columns"],
        )  # fmt: skip


def _leaf_owners(url: str, metadata: Any, schema: Any) -> list[str]:
    """The top-level column of each of the footer's leaf columns, in order."""
    owners: list[str] = []
    for field in schema:
        owners.extend([field.name] * _leaves(field.type))
    if len(owners) != metadata.num_columns:
        raise CorruptFileError(
            url, f"its footer's schema has {len(owners)} leaf columns, but its row groups {metadata.num_columns}"
        )
    for i, owner in enumerate(owners):
        path = metadata.schema.column(i).path
        if path != owner and not path.startswith(owner + "."):
            raise CorruptFileError(url, f"its footer's leaf column {i} is {path!r}, which is not part of column {owner!r}")
    return owners


def _leaves(typ: Any) -> int:
    """How many Parquet leaf columns store an Arrow type."""
    pa = _pa()
    if isinstance(typ, pa.ExtensionType):
        return _leaves(typ.storage_type)
    if pa.types.is_struct(typ):
        return sum(_leaves(typ.field(i).type) for i in range(typ.num_fields))
    if pa.types.is_map(typ):
        return _leaves(typ.key_type) + _leaves(typ.item_type)
    if (
        pa.types.is_list(typ)
        or pa.types.is_large_list(typ)
        or pa.types.is_fixed_size_list(typ)
        or getattr(pa.types, "is_list_view", lambda t: False)(typ)
    ):
        return _leaves(typ.value_type)
    if getattr(pa.types, "is_large_list_view", lambda t: False)(typ):
        return _leaves(typ.value_type)
    return 1


def _old_parquet_mr(created_by: str | None) -> bool:
    """Whether the writer is parquet-mr before 1.2.9, whose column chunk lengths leave out the
    dictionary page's header (pyarrow reads up to 100 bytes more)."""
    text = (created_by or "").strip()
    if not text.startswith("parquet-mr version "):
        return False
    try:
        parts = [int(x) for x in text.split()[2].split("-")[0].split(".")[:3]]
    except (IndexError, ValueError):
        return False
    return tuple(parts) < (1, 2, 9)


# ------------------------------------------------------------------------------------------- opening


def open_remote_parquet(
    path: Any, fields: list[str] | None = None, *, image: F.Image | None = None, fetcher: Fetcher | None = None,
    cache_dir: str | os.PathLike | None = None, cache_limit: int | str | None = None, filesystem: Any = None,
    storage_options: dict[str, Any] | None = None, timeout: float = 30.0, retry_budget: float = 120.0, readahead: int = 8,
    keep: int = KEEP, threads: int = FOOTER_THREADS,
) -> PackedDataset | ShardedDataset:  # fmt: skip
    """Parquet in object storage as a ``PackedDataset`` (one object) or a ``ShardedDataset`` (a folder
    prefix, or a list of objects; local paths in a list are read as ``inplace.parquet`` reads them):
    see the module doc. ``fetcher``: the one to read through (else made from the other arguments,
    as ``ss.open`` makes it); ``threads``: footers read at once. The objects of a set must hold the
    same columns. ``MissingShardError`` for an object that is not there, ``FileNotFoundError`` for
    a folder without ``.parquet`` objects."""
    if fetcher is None:
        fetcher = remote_fetcher(cache_dir, cache_limit, filesystem, storage_options, timeout, retry_budget, readahead, keep)
    recent = RecentPages(keep)
    store = fetcher.store
    if isinstance(path, (list, tuple)):
        given = [store.name(str(p)) if is_url(p) else p for p in path]  # (each checked before any request)
        urls = [p for p in given if is_url(p)]
        infos = _infos(fetcher, urls, threads)
        opened = "\0".join(urls)
        single = False
    else:
        url = store.name(str(path))
        single = not url.endswith("/") and url.endswith(SUFFIX)
        infos = []
        if single:
            try:
                infos = [object_info(fetcher, url)]
            except FileNotFoundError:
                single = False  # (perhaps a folder named x.parquet/, as Spark writes)
        if not infos:
            infos = list_parquet(fetcher, url)
            if not infos:
                if url.endswith(SUFFIX):
                    raise MissingShardError(url, "no such object (nor a folder of .parquet objects under it)")
                raise FileNotFoundError(f"{url}: no .parquet objects under this folder")
        opened = url
        given = [info[0] for info in infos]
    footers = _footers(fetcher, infos, opened, threads)
    shared: list[tuple[Any, list[Any]]] = []  # (schema, its columns): the files of a set share them
    made: dict[str, RemoteParquetPages] = {}
    for name, size, tag in infos:
        footer, metadata = footers[name]
        schema = _arrow_schema(name, metadata)
        columns = next((cols for known, cols in shared if known.equals(schema, check_metadata=True)), None)
        made[name] = source = RemoteParquetPages(
            fetcher, name, size, tag, footer, fields, image=image, recent=recent, columns=columns, metadata=metadata
        )
        if columns is None:
            shared.append((schema, source._all_columns))
    if single:
        source = made[infos[0][0]]
        return PackedDataset(source.url, fields=fields, source=source)
    shards = [
        PackedDataset(p, fields=fields, source=made[p]) if p in made else PackedDataset(p, fields=fields, source=ParquetPages(p, fields, image=image, recent=recent))
        for p in given
    ]  # fmt: skip
    return ShardedDataset([], fields=fields, shards=shards)


def _infos(fetcher: Fetcher, urls: list[str], threads: int) -> list[ObjectInfo]:
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


def _footers(fetcher: Fetcher, infos: list[ObjectInfo], opened: str, threads: int) -> dict[str, tuple[bytes, Any]]:
    """Every object's footer and its parsed metadata: from the footer index where its size and tag
    are the ones recorded (and it parses), else read; the index saved again when it changed."""
    index = FooterIndex(Path(fetcher.cache.folder).parent / "footers")
    name = index_name(opened)
    known = index.load(name)
    out: dict[str, tuple[bytes, Any]] = {}
    missing: list[ObjectInfo] = []
    for url, size, tag in infos:
        entry = known.get(url)
        metadata = None
        if entry is not None and tag and entry[0] == size and entry[1] == tag:
            try:
                metadata = parse_footer(url, entry[2])
            except CorruptFileError:
                metadata = None
        if metadata is None:
            missing.append((url, size, tag))
        else:
            out[url] = (entry[2], metadata)
    if missing:
        guess = max((len(footer) for footer, _ in out.values()), default=0)
        for (url, _, _), footer in zip(missing, read_footers(fetcher, missing, threads, guess)):
            out[url] = (footer, parse_footer(url, footer))
    keep: dict[str, Footer] = {
        url: (size, tag, out[url][0]) for url, size, tag in infos if tag
    }  # (untagged objects: read every time)
    if keep != known:
        index.save(name, keep)
    return out
