"""``ss.open`` of Parquet in object storage, read in place: an object, a list of them, or a folder prefix.

``open_remote_parquet("s3://bucket/data/")`` (``gs://``, ``az://``, ``https://``, any URL the
``remote.store.Store`` reads; a folder prefix, one ``.parquet`` object or a list of them) is the
container ``inplace.parquet`` makes of local files: ``len``, random access, each row group with
rows one page, columns mapped to fields as conversion maps them.

Opening reads footers alone (``inplace.remotefooters``): a folder is listed once, a named object
costs one HEAD, and each footer is read by ranged reads from the object's end, many objects in
parallel (``threads`` at once), and checked from its own bytes before anything uses it (a footer
that fails is read again before it is called corrupt); the footers are kept in an index beside
the page cache, so opening the same set again reads only the listing (or the HEADs).

A folder whose listing holds a summary ``_metadata`` at its root (as Dask, Spark and
``pyarrow.parquet.write_metadata`` write it: one footer holding every data file's row groups, each
column chunk naming its file) opens from it alone: the listing and one read of the summary (kept
in the footer index too), checked as hard as a footer, each file's byte ranges inside that listed
object (``remotefooters.check_summary``). Its row counts by file and its schema give ``len``, the
pages and the fields. Each data file's own footer is then read when one of its pages is first read
or prefetched in a process (one ranged read, through the footer index: once per cache) and
compared with what the summary says of it (its row groups' rows, its schema): a file that differs
raises ``ShardMismatchError`` naming it and saying the summary is stale; its pages are read by
its own footer's checked claims, as any other's. A source pickled to a worker before its footer
was read carries the summary's few claims about it, never the footer, and reads it there. The
listing is what exists: a listed ``.parquet`` object the summary does not name (a data file without
row groups, which no summary can name, among them), a file it names that is not listed, or one
whose chunks it places past the listed object's data, make it stale, as does its own removal or
shortening between the listing and its read, and a summary that fails its checks three times is
damaged: either way a warning names the folder and what is wrong, and every footer is read
instead, as for a folder without one (``remotefooters.folder_summary`` says why a damaged summary
is passed over rather than raised). The files of a folder are those of the listing in path order,
with or without a summary.

A page is one row group's column chunks for the chosen fields (their byte ranges from the
footer's checked claims, never from pyarrow's column chunk metadata; chunks less than ``GAP``
apart fetched as one range), downloaded through the ``Fetcher``: the shared page cache on disk,
read-ahead (``prefetch``), retries, one download per node. Each range
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

import hashlib
import os
import re
import secrets
from collections import OrderedDict
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..convert.tables import hf_features, table_columns
from ..core.errors import ChecksumError, ConvertError, CorruptFileError, MissingShardError, PackedFileError
from ..core.processlock import ProcessLock
from ..core.sizes import parse_size
from ..files import field_kinds as F
from ..files.field import pyarrow_module as _pa
from ..files.packed import PackedDataset
from ..files.pagememory import RecentPages
from ..files.shards import ShardedDataset
from ..remote.cache import PageCache
from ..remote.cachedir import default_limit
from ..remote.fetch import Fetcher, range_key
from ..remote.open import default_cache_dir
from ..remote.pages import admitted
from ..remote.store import Store, is_url
from .parquet import SUFFIX, ParquetPages
from .remotefooters import (
    FOOTER_THREADS,
    CheckedFooter,
    Summarized,
    agree,
    check_footer,
    folder_summary,
    list_folder,
    list_parquet,
    object_footer,
    opened_footers,
    summarized,
)
from .remoteobjects import ObjectCheck, ObjectInfo, object_info, object_infos
from .tablepages import TablePages, chosen_columns

__all__ = ["GAP", "RemoteParquetPages", "is_parquet_url", "list_parquet", "open_remote_parquet", "remote_fetcher"]

GAP = 1 << 16  # column chunks of one row group closer than this are fetched as one range
KEEP = 32  # decoded row groups each process keeps (and downloads the fetcher keeps), as ss.open's default
_STASHED = 8  # ranges whose decoded columns a source keeps for the read that asked for them
_MAX_DICT_HEADER = 100  # what pyarrow adds to a column chunk's length for files of parquet-mr before 1.2.9
_PANDAS_INDEX = re.compile(r"__index_level_\d+__")  # a pandas index written along: no field (as convert.tables has it)


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
    """One Parquet object in a store, its row groups with rows as pages (see the module doc).
    ``footer``: its footer bytes (and the 8 after them), read when its size and ``tag`` were as
    given (``checked``: that footer as ``remotefooters.check_footer`` gives it, when it is already
    checked; else it is checked here); or, with ``footer`` ``None``, ``summary``: what the folder's
    summary says of it (its row groups' rows, its schema), its own footer read when a page is first
    read or prefetched in a process and compared with that (``remotefooters.agree``). ``columns``:
    the fields of its columns when known (the files of a set share them). Where its column chunks
    lie comes from its own footer's checked claims alone."""

    def __init__(
        self, fetcher: Fetcher, url: str, size: int, tag: str, footer: bytes | None, fields: list[str] | None = None, *,
        image: F.Image | None = None, recent: RecentPages | None = None, columns: list[Any] | None = None,
        checked: CheckedFooter | None = None, summary: Summarized | None = None, salt: str = "",
    ):  # fmt: skip
        self.fetcher = fetcher
        self.name = self.url = url
        self.size, self.tag = int(size), str(tag or "")
        self.identity = (url, self.size, self.tag)
        if checked is None and footer is not None:
            checked = check_footer(url, footer, self.size)
        if checked is None and summary is None:
            raise TypeError(f"{url}: a source needs its footer or what the folder's summary says of it")
        self._summary = summary
        self._footing = ProcessLock()  # (held while the footer is read: apart from _lock, which checks take)
        self.footer: bytes | None = None
        self.metadata: Any = None
        self._claims: Any = None  # the footer's checked claims, once read (set last)
        self._leaves: list[str] = []
        if checked is not None:
            self._use(checked)
        self._image = image if image is not None else F.Image(codec="jpeg")
        self._wanted = None if fields is None else list(fields)
        self._lock = ProcessLock()
        self._identify = ObjectCheck(fetcher, url, self.size, self.tag, "its footer was read")
        # An object without a tag cannot be told from one rewritten at its size: nothing of it is
        # reused across opens (its footer is read again, its ranges are keyed by this open's salt).
        self._salt = salt if self.tag else (salt or secrets.token_hex(8))
        self._stash: OrderedDict[tuple[Any, ...], tuple[Any, Any]] = OrderedDict()  # checked range -> (its bytes, columns)
        self._failed: dict[tuple[Any, ...], str] = {}  # checked range -> why its last bytes failed
        self._spans_of: dict[int, list[tuple[int, int, tuple[str, ...]]]] = {}
        # page p is row group _groups[p] (row groups without rows are no pages), of _rows[p] rows
        said = checked.claims.rows if checked is not None else summary.rows  # type: ignore[union-attr]
        self._groups = [g for g, rows in enumerate(said) if rows]
        self._rows = [said[g] for g in self._groups]
        if columns is None:
            columns = self._columns(checked.schema if checked is not None else summary.schema)  # type: ignore[union-attr]
        super().__init__(chosen_columns(url, columns, fields), self._rows, None, recent)
        self._names = [c.name for c in self.columns]
        self._all_columns = columns

    def _columns(self, schema: Any) -> list[Any]:
        """The fields of the columns (binary columns without features sniffed from page 0's values)."""
        pa = _pa()

        read: list[Any] = []

        def first(name: str) -> Any:
            if not self._rows or (self._wanted is not None and name not in self._wanted):
                return pa.array([], type=schema.field(name).type)  # (a column not chosen: its field is never used)
            if not read:  # page 0 as read_part(0) reads it (the same ranges: cached for it)
                chosen = [n for n in (self._wanted or schema.names) if n in schema.names and not _PANDAS_INDEX.fullmatch(n)]
                read.append(self._read(0, tuple(chosen), identify=False))  # (its identity just came with the listing)
            return read[0].column(name).slice(0, 16).combine_chunks()

        where = Path(self.url)
        try:
            return table_columns(where, schema, hf_features(schema.metadata), first, self._image)
        except ConvertError as exc:
            raise CorruptFileError(self.url, str(exc).removeprefix(f"{where}: ")) from None

    def where(self, p: int) -> str:
        return f"row group {self._groups[p]}"

    # -- the footer --------------------------------------------------------------------------
    def _use(self, checked: CheckedFooter) -> None:
        self.footer, self.metadata = checked.footer, checked.metadata
        self._leaves = [leaf.owner for leaf in checked.leaves]
        self._claims = checked.claims

    def _footed(self, identify: bool = True) -> Any:
        """The footer's checked claims: for a source made from the folder's summary, its own footer
        read (through the footer index: once per cache) the first time in this process (with
        ``identify``, the object's identity first) and compared with what the summary said
        (``ShardMismatchError`` naming the object when they differ)."""
        claims = self._claims
        if claims is not None:
            return claims
        with self._footing:
            if self._claims is None:
                if identify:
                    self._identify()
                checked = object_footer(self.fetcher, (self.url, self.size, self.tag), self._summary.footer)  # type: ignore[union-attr]
                agree(self.url, checked, self._summary)  # type: ignore[arg-type]
                self._use(checked)
        return self._claims

    # -- byte ranges -------------------------------------------------------------------------
    def _spans(self, p: int, names: tuple[str, ...] | None = None) -> list[tuple[int, int, tuple[str, ...]]]:
        """The ranges to fetch for page ``p`` (the chosen columns, or ``names``): (start, stop, the
        columns whose chunks lie in it), from the footer's checked claims (up to 100 bytes more per
        chunk for files of old parquet-mr, whose chunk lengths leave out the dictionary page's
        header, as pyarrow reads them)."""
        if names is None and p in self._spans_of:
            return self._spans_of[p]
        claims = self._footed()
        wanted = set(self._names if names is None else names)
        padded = _old_parquet_mr(claims.created_by)
        extent: dict[str, list[int]] = {}
        for chunk, owner in zip(claims.chunks[self._groups[p]], self._leaves):
            if owner not in wanted:
                continue
            start, stop = chunk.start, (min(chunk.stop + _MAX_DICT_HEADER, self.size) if padded else chunk.stop)
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
        key = "\0".join([str(self.size), self.tag, self._salt, *names]).encode()
        return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")

    def _decode(self, p: int, ranges: list[tuple[int, Any]], names: tuple[str, ...]) -> Any:
        import pyarrow.parquet as pq

        reader = pq.ParquetFile(_Ranges(self.size, ranges), metadata=self.metadata, page_checksum_verification=True)
        return reader.read_row_group(self._groups[p], columns=list(names), use_threads=False)

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
        """Page ``p``'s columns (the chosen ones, or ``names``), fetched and checked (with
        ``identify``, the object's identity before its first download)."""
        pa = _pa()
        before = self._identify if identify else None
        self._footed(identify)
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
                    self.url, f"{self.where(p)} (samples {first}..{samples.stop - 1}), columns {list(owners)}: bytes {start}..{stop} "
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
                    raise CorruptFileError(self.url, f"{self.where(p)} cannot be read: {exc}") from None
            for name in owners:
                columns[name] = table.column(name)
        return pa.table({name: columns[name] for name in (self._names if names is None else names)})

    def read_part(self, p: int) -> Any:
        return self._read(p)

    def check(self) -> None:
        """Nothing to watch between reads: the object's identity is checked before its first download,
        and every range as it arrives."""

    def prefetch(self, pages: Any) -> None:
        """Start downloading row groups ``pages`` (never raises: a range that cannot be fetched fails
        when it is read); inside ``remote.pages.shared_only()``, only what the disk cache can hold."""
        ranges = []
        try:
            self._footed()
        except PackedFileError:
            return  # (its footer is read again, and the error raised, when a page is read)
        for p in pages:
            try:
                spans = self._spans(int(p))
            except CorruptFileError:
                continue
            for start, stop, owners in spans:
                ranges.append((self.url, start, stop, self._crc(owners), self._checker(int(p), start, owners), self._identify))
        ranges, _ = admitted(self.fetcher.cache, ranges, lambda span: range_key(*span[:4]), lambda span: span[2] - span[1])
        self.fetcher.prefetch(ranges)

    def __getstate__(self) -> dict[str, Any]:
        footed = self._claims is not None
        return {
            "fetcher": self.fetcher,
            "url": self.url,
            "size": self.size,
            "tag": self.tag,
            "footer": self.footer if footed else None,
            "claims": self._claims,
            "summary": None if footed else self._summary,
            "fields": self._wanted,
            "image": self._image,
            "recent": self.recent,
            "columns": self._all_columns,
            "salt": self._salt,
        }  # fmt: skip (the identity is checked again in the process that receives it)

    def __setstate__(self, state: dict[str, Any]) -> None:
        """The source again from its footer, parsed again here (its claims come along, checked in
        the process that sent it); or, when that process had not read it, from what the folder's
        summary said of it (the footer read here when a page is first read)."""
        footer = state["footer"]
        checked = None if footer is None else check_footer(state["url"], footer, state["size"], state["claims"])
        self.__init__(  # type: ignore[misc]
            state["fetcher"], state["url"], state["size"], state["tag"], footer, state["fields"], image=state["image"],
            recent=state["recent"], columns=state["columns"], checked=checked, summary=state.get("summary"), salt=state["salt"],
        )  # fmt: skip


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


def _with_rows_first(infos: list[ObjectInfo], rows: Callable[[str], tuple[int, ...]]) -> list[ObjectInfo]:
    """``infos`` in the order their sources are made: the objects with rows (``rows(name)``: each row
    group's) first, each group in path order. The first made maps the columns the others share, and
    an object without rows has no values to tell a binary column's kind (image bytes) by."""
    return sorted(infos, key=lambda info: not any(rows(info[0])))


def open_remote_parquet(
    path: Any, fields: list[str] | None = None, *, image: F.Image | None = None, fetcher: Fetcher | None = None,
    cache_dir: str | os.PathLike | None = None, cache_limit: int | str | None = None, filesystem: Any = None,
    storage_options: dict[str, Any] | None = None, timeout: float = 30.0, retry_budget: float = 120.0, readahead: int = 8,
    keep: int = KEEP, threads: int = FOOTER_THREADS,
) -> PackedDataset | ShardedDataset:  # fmt: skip
    """Parquet in object storage as a ``PackedDataset`` (one object) or a ``ShardedDataset`` (a folder
    prefix, or a list of objects; local paths in a list are read as ``inplace.parquet`` reads them):
    see the module doc. ``fetcher``: the one to read through (else made from the other arguments,
    as ``ss.open`` makes it); ``threads``: footers read at once. A folder with a ``_metadata``
    summary that agrees with its listing opens from it, each data file's footer read on demand.
    The objects of a set must hold the same columns. ``MissingShardError`` for an object that is not there, ``FileNotFoundError`` for
    a folder without ``.parquet`` objects."""
    if fetcher is None:
        fetcher = remote_fetcher(cache_dir, cache_limit, filesystem, storage_options, timeout, retry_budget, readahead, keep)
    recent = RecentPages(keep)
    store = fetcher.store
    if isinstance(path, (list, tuple)):
        given = [store.name(str(p)) if is_url(p) else p for p in path]  # (each checked before any request)
        urls = [p for p in given if is_url(p)]
        infos = object_infos(fetcher, urls, threads)
        opened = "\0".join(urls)
        single = False
    else:
        url = store.name(str(path))
        single = not url.endswith("/") and url.endswith(SUFFIX)
        infos, summary = [], None
        if single:
            try:
                infos = [object_info(fetcher, url)]
            except FileNotFoundError:
                single = False  # (perhaps a folder named x.parquet/, as Spark writes)
        if not infos:
            infos, summary = list_folder(fetcher, url)
            if not infos:
                if url.endswith(SUFFIX):
                    raise MissingShardError(url, "no such object (nor a folder of .parquet objects under it)")
                raise FileNotFoundError(f"{url}: no .parquet objects under this folder")
        opened = url
        given = [info[0] for info in infos]
        if summary is not None:
            said = folder_summary(fetcher, url, summary, infos)
            if said is not None:  # (every listed object named by the summary, which was checked)
                columns = None
                summarized_by: dict[str, RemoteParquetPages] = {}
                for name, size, tag in _with_rows_first(infos, lambda name: said.files[name].claims.rows):
                    summarized_by[name] = source = RemoteParquetPages(
                        fetcher, name, size, tag, None, fields, image=image, recent=recent, columns=columns,
                        summary=summarized(said, name),
                    )  # fmt: skip
                    columns = source._all_columns
                shards = [PackedDataset(name, fields=fields, source=summarized_by[name]) for name, _, _ in infos]
                return ShardedDataset([], fields=fields, shards=shards)
    footers = opened_footers(fetcher, infos, opened, threads)
    shared: list[tuple[Any, list[Any]]] = []  # (schema, its columns): the files of a set share them
    made: dict[str, RemoteParquetPages] = {}
    for name, size, tag in _with_rows_first(infos, lambda name: footers[name].claims.rows):
        checked = footers[name]
        schema = checked.schema
        columns = next((cols for known, cols in shared if known.equals(schema, check_metadata=True)), None)
        made[name] = source = RemoteParquetPages(
            fetcher, name, size, tag, checked.footer, fields, image=image, recent=recent, columns=columns, checked=checked
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
