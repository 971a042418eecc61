"""A packed file in object storage as a page source for ``PackedDataset`` (see ``files.local``).

``RemotePages(fetcher, url, entry, schema)`` serves the shard ``url`` described by ``entry`` (its
index entry: size, samples, and every page's byte range, rows and checksum; from a sharded
dataset's ``index.json``, or from ``describe`` reading the object's footer and page headers).
``batch(p)`` fetches page ``p``'s bytes through the fetcher (memory, disk cache, or one ranged
GET), checked against the page's checksum before it is parsed. The first download (not a read
served from the cache) checks the object's size against the entry, beside the download (its
bytes are used only once the size is right): an object of another size changed since it was
indexed (``ShardMismatchError``); a missing one is a ``MissingShardError`` naming it. Pages whose bytes fail their checksum the same way three times raise
``ChecksumError`` naming the page and its samples.

``prefetch(pages)`` starts downloads of pages the loader will read next. Given inside
``shared_only()`` (the loader does so when other processes read the batches: process or helper
workers), a hint is for the shared disk cache only: pages it cannot hold (larger than its whole
limit, or a cache that cannot be written) are not fetched, since this process would hold them for
no one; each worker then downloads what it reads (a warning says so once, with the fix). Given
inside ``shared_only(window)``, a hint also keeps to the epoch's ``CacheWindow`` (``remote.window``):
pages for which the cache has no room beside those of the batches still to be read are not fetched.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from ..core.errors import ChecksumError, CorruptFileError, MissingShardError, ShardMismatchError
from ..core.processlock import ProcessLock
from ..files import format as _format
from ..files.field import pyarrow_module as _pa
from ..files.local import PageMeta
from ..files.pagememory import RecentPages
from .fetch import Fetcher, range_key
from .window import CacheWindow

__all__ = ["RemotePages", "admitted", "shared_only"]

_SHARED_ONLY: ContextVar[bool] = ContextVar("slipstream_prefetch_shared_only", default=False)
_WINDOW: ContextVar[CacheWindow | None] = ContextVar("slipstream_prefetch_window", default=None)
_WARNED: set[str] = set()  # cache folders warned about in this process


@contextmanager
def shared_only(window: CacheWindow | None = None) -> Iterator[None]:
    """Read-ahead hints given inside fill only the shared disk cache, and with ``window`` only the
    room it leaves there (see the module doc)."""
    token, room = _SHARED_ONLY.set(True), _WINDOW.set(window)
    try:
        yield
    finally:
        _WINDOW.reset(room)
        _SHARED_ONLY.reset(token)


def admitted(cache: Any, ranges: list[Any], key: Callable[[Any], str], length: Callable[[Any], int]) -> tuple[list[Any], list[Any]]:
    """(the read-ahead ``ranges`` a hint may fetch now, those left out for being larger than the
    disk cache can hold): all of them outside ``shared_only()``; inside it, those ``cache`` can
    hold and, with a window, those it has room for (``key(span)`` names a range in the cache,
    ``length(span)`` its bytes). For every page source that reads ahead through a ``Fetcher``."""
    if not _SHARED_ONLY.get():
        return list(ranges), []
    fit = [span for span in ranges if cache.fits(length(span))]
    too_big = [span for span in ranges if not cache.fits(length(span))]
    window = _WINDOW.get()
    if window is not None:
        fit = [span for span in fit if window.admit(cache, key(span), length(span))]
    return fit, too_big


class RemotePages:
    """One remote packed file's pages (see the module doc)."""

    local = False

    def __init__(self, fetcher: Fetcher, url: str, entry: dict[str, Any], schema: Any, recent: RecentPages):
        self.fetcher, self.name, self.entry, self.schema, self.recent = fetcher, url, entry, schema, recent
        self.identity = (url, int(entry["bytes"]))
        self.size = int(entry["bytes"])
        self._sized = False
        self._lock = ProcessLock()

    def page_table(self) -> list[PageMeta]:
        table, first = [], 0
        for k, (_, _, _, rows, crc) in enumerate(self.entry["pages"]):
            table.append((first, int(rows), int(crc), int(self.entry["schema_crc32"]) if k == 0 else -1))
            first += int(rows)
        return table

    def _range(self, p: int) -> tuple[int, int, int]:
        offset, length, _, _, crc = self.entry["pages"][p]
        return int(offset), int(offset) + int(length), int(crc)

    def batch(self, p: int) -> Any:
        """Page ``p`` as a record batch, its bytes checked."""
        start, stop, crc = self._range(p)
        try:
            data = self.fetcher.fetch(self.name, start, stop, crc, self.checksum, self._before())
        except ChecksumError as exc:  # located: which page, which samples
            first = sum(int(page[3]) for page in self.entry["pages"][:p])
            samples = range(first, first + int(self.entry["pages"][p][3]))
            raise ChecksumError(self.name, f"page {p} (samples {first}..{samples.stop - 1}): {exc.args[0].split(': ', 1)[-1]}", p, samples) from exc
        batch = self.parse(data)
        if batch.num_rows != int(self.entry["pages"][p][3]):
            raise CorruptFileError(self.name, f"page {p} holds {batch.num_rows} samples but its index entry says {self.entry['pages'][p][3]}")
        return batch

    def parse(self, data: bytes) -> Any:
        pa = _pa()
        import pyarrow.ipc  # noqa: F401

        return pa.ipc.read_record_batch(pa.ipc.read_message(pa.py_buffer(data)), self.schema)

    def checksum(self, data: bytes) -> int:
        """The format's page checksum of a page's bytes (-1 when they do not even parse)."""
        pa = _pa()
        try:
            return _format.page_checksum(self.parse(data))
        except (pa.ArrowException, OSError, ValueError):
            return -1

    def _before(self) -> Any:
        """What a download checks first: the object's size, until it was found right once."""
        return None if self._sized else self._check_size

    def _check_size(self) -> None:
        if self._sized:
            return
        with self._lock:
            if self._sized:
                return
            try:
                size = self.fetcher.size(self.name)
            except FileNotFoundError:
                raise MissingShardError(self.name, "the shard is missing from the store (deleted or moved since the dataset was indexed)") from None
            if size != int(self.entry["bytes"]):
                raise ShardMismatchError(
                    self.name, f"is {size} bytes but was {self.entry['bytes']} when indexed: it changed since; re-index or rewrite the dataset"
                )
            self._sized = True

    def check(self) -> None:
        """Nothing to watch: each page's bytes are checked as they arrive."""

    def prefetch(self, pages: list[int]) -> None:
        """Start fetching ``pages`` (the object's size is checked beside the first download);
        inside ``shared_only()``, only those the disk cache can hold (and its window has room for)."""
        ranges = [self._range(p) for p in pages]
        ranges, too_big = admitted(self.fetcher.cache, ranges, lambda span: range_key(self.name, *span), lambda span: span[1] - span[0])
        if too_big:
            self._warn(max(stop - start for start, stop, _ in too_big))
        before = self._before()
        self.fetcher.prefetch([(self.name, *span, self.checksum, before) for span in ranges])

    def _warn(self, length: int) -> None:
        cache = self.fetcher.cache
        if str(cache.folder) in _WARNED:
            return
        _WARNED.add(str(cache.folder))
        why = (
            f"cache_limit={cache.limit} bytes holds no page of {length} bytes (and its seal)"
            if cache.writable
            else "the cache folder cannot be written"
        )
        warnings.warn(
            f"slipstream: {why} ({cache.folder}): worker processes cannot share pages through it, so each downloads "
            "the pages it reads itself. Give ss.open a cache_limit of several pages (and a writable cache_dir), "
            "or read with backend='thread' (or 'helper': one process)",
            stacklevel=2,
        )

    def __getstate__(self) -> dict[str, Any]:
        return {"fetcher": self.fetcher, "url": self.name, "entry": self.entry, "schema": self.schema, "recent": self.recent}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["fetcher"], state["url"], state["entry"], state["schema"], state["recent"])  # type: ignore[misc]
