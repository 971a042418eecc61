"""Fetching checked byte ranges of remote objects: from memory, the disk cache, or the store.

``Fetcher(store, cache, budget, readahead, keep)`` is shared by every shard of one opened dataset.
``fetch(url, start, stop, crc, check, before)`` returns the bytes of that range, checked by
``check(data) == crc`` before anything uses them, from (in order) the ``keep`` most recent
downloads of this process, a read-ahead download under way (joined, not repeated; one still queued
is taken over and fetched at once, so a read never waits behind other read-ahead), the disk cache
(checked again: a cache file is never trusted blindly), or a new download through ``remote.retry``
(``before()``, the object's size check, runs beside it on its own thread: the bytes are handed
out only once it passed, and its error, when it fails, is the one raised). A downloaded page is
handed to its reader (and kept in memory) before it is written to the disk cache: the reader does
not wait for the write, and other processes waiting on the page's claim find it there once the
claim is released. What comes back is classified by its cause: a
short body is a cut transfer (transient) unless the object is now too short to hold the range (a
``ShardMismatchError``: it changed since it was indexed), and so is a 416 answer (the range lies
past the object's end); a body longer than the range means the server ignores ranged reads (a
permanent ``RemoteReadError``, not retried); a vanished object is a ``MissingShardError`` naming
it; checksum mismatches are transient, and the same wrong bytes three times mean the object itself
is not what was indexed, a ``ChecksumError``.

``prefetch(ranges)`` queues downloads of ranges not cached nor under way (at most ``4 *
readahead`` queued; more hints are dropped), run ``readahead`` at a time on daemon threads into
the cache; it never raises (a failed read-ahead is fetched again, and fails with its error, when
the range is read). Hints given inside ``recorded(tickets)`` list the downloads they queued in
``tickets``, and ``withdraw(tickets)`` takes them back: those still queued are cancelled, and those
under way run to their end (their pages are cached) on threads lent beyond ``readahead``, so the
downloads queued after them do not wait for them.

Processes on one node share the cache and download a page once: a download holds the page's claim
(``PageCache.claim``), and one that finds it held by another process (or another fetcher) waits
for it, at most the store's request timeout (and never past the budget), then takes the page from
the cache, or downloads it itself when it is not there (the holder failed, or the wait ran out).
Fork- and pickle-safe: threads, in-flight downloads and memory are per process, made again in a child.
``stats()`` counts this process's reads, hits, downloads, requests, retries and bytes.

``read_checked(url, parse, what)`` reads a file's structure (its footer, schema and page headers,
or a folder's ``index.json``), uncached, as page reads are checked: ``parse`` raising
``CorruptFileError`` on what came is taken for a damaged transfer and everything is read again
within the budget; the same bytes failing three times are what the object holds (the error is
raised as itself).
"""

from __future__ import annotations

import hashlib
import os
import queue
import threading
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterator
from concurrent.futures import CancelledError, Future, ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from ..core.errors import ChecksumError, CorruptFileError, MissingShardError, RemoteReadError, ShardMismatchError
from .cache import PageCache
from .retry import http_status, retrying
from .store import Store

__all__ = ["Fetcher", "range_key", "recorded", "withdraw"]

Check = Callable[[bytes], int]  # the checksum of a page's bytes as the index records it
Before = Callable[[], None] | None  # run beside a download (a check of the object), passed before its bytes are used
Ticket = tuple["Fetcher", str, Future]  # a queued read-ahead download: its fetcher, key and future

_RECORD: ContextVar[list[Ticket] | None] = ContextVar("slipstream_prefetch_record", default=None)


@contextmanager
def recorded(tickets: list[Ticket]) -> Iterator[list[Ticket]]:
    """Read-ahead downloads queued by hints given inside are appended to ``tickets`` (see ``withdraw``)."""
    token = _RECORD.set(tickets)
    try:
        yield tickets
    finally:
        _RECORD.reset(token)


def withdraw(tickets: list[Ticket]) -> int:
    """Take back the read-ahead downloads of ``tickets`` (emptied): those still queued are cancelled
    (the number returned), those under way finish on a thread lent to their fetcher's pool for the
    while, so that what is queued behind them starts now."""
    cancelled = 0
    while tickets:
        fetcher, key, future = tickets.pop()
        cancelled += fetcher._withdraw(key, future)
    return cancelled


def range_key(url: str, start: int, stop: int, crc: int) -> str:
    """The cache key of bytes ``start``..``stop`` of ``url`` whose checksum is ``crc``."""
    return hashlib.sha256(f"{url}\0{start}\0{stop}\0{crc}".encode()).hexdigest()[:40]


class _DaemonPool:
    """Up to ``threads`` daemon threads running submitted calls, started as calls come and gone after
    ``idle`` seconds without one: read-ahead that never holds up the interpreter's exit (a download
    retrying within its budget is abandoned; the cache takes only complete pages)."""

    IDLE = 10.0  # seconds a thread waits for a call before it ends

    def __init__(self, threads: int, idle: float | None = None):
        self._calls: queue.SimpleQueue = queue.SimpleQueue()
        self._most, self._idle, self._alive = threads, self.IDLE if idle is None else idle, 0
        self._lock = threading.Lock()

    def submit(self, call: Callable[..., Any], *args: Any) -> None:
        with self._lock:
            self._calls.put((call, args))
            self._grow()

    def lend(self, threads: int) -> None:
        """Allow ``threads`` more at once (negative: take them back; a thread over the number ends
        after its call)."""
        with self._lock:
            self._most += threads
            if not self._calls.empty():
                self._grow()

    def _grow(self) -> None:
        if self._alive < self._most:  # (under the lock)
            self._alive += 1
            threading.Thread(target=self._run, name="slipstream-fetch", daemon=True).start()

    def _run(self) -> None:
        while True:
            try:
                call, args = self._calls.get(timeout=self._idle)
            except queue.Empty:
                with self._lock:  # (a submit puts under this lock: it either sees this thread gone or is seen here)
                    if self._calls.empty():
                        self._alive -= 1
                        return
                continue
            call(*args)  # (the call reports its own errors, through its future)
            with self._lock:
                if self._alive > self._most:  # (threads lent for a while, taken back)
                    self._alive -= 1
                    return


class _Beside:
    """``call()`` run on a daemon thread from now (a check of the object beside its download):
    ``failure()`` is its error once it failed (without waiting), ``wait()`` raises it or returns once
    it passed. ``call`` bounds itself (a request retried within the budget)."""

    def __init__(self, call: Callable[[], None]):
        self._done = threading.Event()
        self._error: BaseException | None = None
        threading.Thread(target=self._run, args=(call,), name="slipstream-check", daemon=True).start()

    def _run(self, call: Callable[[], None]) -> None:
        try:
            call()
        except BaseException as exc:  # noqa: BLE001 - raised by wait()
            self._error = exc
        finally:
            self._done.set()

    def failure(self) -> BaseException | None:
        return self._error if self._done.is_set() else None

    def wait(self) -> None:
        self._done.wait()
        if self._error is not None:
            raise self._error


class _CheckFailed(Exception):
    """The check beside a download failed: no more attempts (its own error is raised instead)."""

    permanent = True


class _ShortRead(OSError):
    """Fewer bytes came than the range holds (a cut transfer): transient."""


class _BadChecksum(OSError):
    """The bytes that came fail their checksum (a damaged transfer): transient, once."""


class _BadStructure(OSError):
    """A file's structure read from the bytes that came cannot be right (a damaged transfer): transient, twice."""


class _Reads:
    """The reads of one ``read_checked`` attempt, each uncached and retried, and a digest of what they
    gave (running: a pass over a whole object keeps none of its bytes here)."""

    def __init__(self, fetcher: Fetcher, url: str):
        self.fetcher, self.url, self._crc = fetcher, url, 0

    def _seen(self, part: bytes) -> None:
        self._crc = zlib.crc32(len(part).to_bytes(8, "little"), zlib.crc32(part, self._crc))

    def ranges(self, spans: list[tuple[int, int]]) -> list[bytes]:
        parts = self.fetcher.read_ranges(self.url, spans)
        for part in parts:
            self._seen(part)
        return parts

    def whole(self) -> bytes:
        data = self.fetcher.read_whole(self.url)
        self._seen(data)
        return data

    def digest(self) -> int:
        return self._crc


class Fetcher:
    """Checked ranges of remote objects (see the module doc)."""

    def __init__(self, store: Store, cache: PageCache, budget: float = 120.0, readahead: int = 8, keep: int = 16):
        self.store, self.cache, self.budget, self.readahead, self.keep = store, cache, float(budget), int(readahead), int(keep)
        self._fresh_process()

    def _fresh_process(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        self._inflight: dict[str, Future] = {}
        self._writing = 0  # pages handed to their reader and still being written to the cache
        self._written = threading.Condition(self._lock)
        self._queued = 0  # read-ahead downloads waiting for a thread
        self._memory: OrderedDict[str, bytes] = OrderedDict()  # the most recent downloads, checked
        self._pool: _DaemonPool | None = None
        names = ("reads", "hits", "joined", "misses", "downloads", "requests", "bytes", "retries", "uncached", "dropped_hints", "waited")  # fmt: skip
        self._stats = dict.fromkeys(names, 0)

    def _here(self) -> None:
        if self._pid != os.getpid():  # a forked child: the parent's threads and locks are not ours
            self._fresh_process()

    # -- reading -----------------------------------------------------------------------------
    def fetch(self, url: str, start: int, stop: int, crc: int, check: Check, before: Before = None) -> Any:
        """The checked bytes of the range (bytes, or a view of the cached file; see the module doc);
        ``before()`` runs before a download (a check of the object, e.g. its size, that only
        matters when bytes are fetched)."""
        self._here()
        key = range_key(url, start, stop, crc)
        self._count("reads")
        with self._lock:
            data = self._memory.get(key)
            future = self._inflight.get(key)
            if future is not None and future.cancel():  # a read-ahead still queued: this read fetches it now
                self._inflight.pop(key)
                self._queued -= 1
                future = None
        if data is not None:
            self._count("hits")
            return data
        if future is not None:
            self._count("joined")  # a read-ahead download under way: wait for it rather than repeat it
            try:
                return future.result()
            except CancelledError:  # another read took it over before it started: ask again
                return self.fetch(url, start, stop, crc, check, before)
        data = self._cached(key, stop - start, crc, check)
        if data is not None:
            self._count("hits")
            return data
        self._count("misses")
        return self._start(key, url, start, stop, crc, check, before, wait=True).result()

    def prefetch(self, ranges: list[tuple[str, int, int, int, Check, Before]]) -> None:
        """Start downloading ``ranges`` not cached nor under way, at most ``4 * readahead`` queued
        (hints past that are dropped: those pages are fetched when read)."""
        self._here()
        for url, start, stop, crc, check, before in ranges:
            key = range_key(url, start, stop, crc)
            with self._lock:
                known = key in self._memory or key in self._inflight
                full = self._queued >= 4 * self.readahead
            if full:
                self._count("dropped_hints")
            elif not known and not self.cache.has(key):
                self._start(key, url, start, stop, crc, check, before, wait=False)

    def _cached(self, key: str, length: int, crc: int, check: Check) -> Any:
        data = self.cache.get(key, length)
        if data is not None and check(data) != crc:
            return None  # damaged on disk: fetched again (and the good copy replaces it)
        return data

    def _start(self, key: str, url: str, start: int, stop: int, crc: int, check: Check, before: Before, wait: bool) -> Future:
        """The download of ``key`` (joined if one is in flight): run here when the caller waits for
        it, else queued for the read-ahead threads."""
        with self._lock:
            future = self._inflight.get(key)
            if future is not None and not (wait and future.cancel()):  # (a read takes over a queued read-ahead)
                return future
            if future is not None:
                self._queued -= 1
            future = self._inflight[key] = Future()
            if wait:
                future.set_running_or_notify_cancel()  # (under the lock: no read may cancel it now)
            else:
                self._queued += 1
                if self._pool is None:
                    self._pool = _DaemonPool(max(1, self.readahead))
                tickets = _RECORD.get()
                if tickets is not None:
                    tickets.append((self, key, future))
        if wait:
            self._download(future, key, url, start, stop, crc, check, before)
        else:
            assert self._pool is not None
            self._pool.submit(self._queued_download, future, key, url, start, stop, crc, check, before)
        return future

    def _queued_download(self, future: Future, *args: Any) -> None:
        with self._lock:
            if not future.set_running_or_notify_cancel():  # a read took it over (or it was withdrawn)
                return
            self._queued -= 1
        self._download(future, *args)

    def _withdraw(self, key: str, future: Future) -> bool:
        """Cancel the read-ahead download ``future`` of ``key`` if still queued (True); one under way
        runs on, on a thread lent to the pool until it ends (see ``withdraw``)."""
        if self._pid != os.getpid():  # (a forked child: the parent's downloads are not here)
            return False
        with self._lock:
            if future.cancelled():  # (a read took it over)
                return False
            if future.cancel():
                if self._inflight.get(key) is future:
                    self._inflight.pop(key)
                self._queued -= 1
                return True
            pool = self._pool
        if pool is not None and not future.done():
            pool.lend(1)
            future.add_done_callback(lambda _: pool.lend(-1))
        return False

    def _download(self, future: Future, key: str, url: str, start: int, stop: int, crc: int, check: Check, before: Before) -> None:
        handed = False  # the reader has the page (it may still be being written to the cache)
        try:
            wait = min(self.budget, getattr(self.store, "timeout", None) or self.budget)
            with self.cache.claim(key, stop - start, wait, lambda: self._count("waited")):
                data = self._cached(key, stop - start, crc, check)  # (stored by the claim's previous holder)
                if data is None:
                    self._count("downloads")
                    data = self._downloaded(url, start, stop, crc, check, before)
                    with self._lock:  # kept a while: the read this was fetched for is usually near
                        self._memory[key] = data
                        while len(self._memory) > self.keep:
                            self._memory.popitem(last=False)
                    with self._lock:
                        self._writing += 1
                    try:
                        future.set_result(data)  # (the reader goes on while the page is written, under the claim)
                        handed = True
                        if not self.cache.put(key, data):
                            self._count("uncached")
                    finally:
                        with self._lock:
                            self._writing -= 1
                            if not self._writing:
                                self._written.notify_all()
            if not handed:
                future.set_result(data)
                handed = True
        except BaseException as exc:  # (the reader gets it from the future)
            if not handed:
                future.set_exception(exc)
            elif not isinstance(exc, Exception):  # (an interrupt in the reader's own thread, once it has the page)
                raise
            else:  # the page could not be cached: served from memory
                self._count("uncached")
        finally:
            with self._lock:
                if self._inflight.get(key) is future:
                    self._inflight.pop(key)

    def _downloaded(self, url: str, start: int, stop: int, crc: int = 0, check: Check | None = None, before: Before = None) -> bytes:
        """Bytes ``start``..``stop`` of ``url`` whole (and, with ``check``, checked), retried; with
        ``before``, that check of the object runs beside the download, and its error is raised (an
        attempt after it failed is not made; bytes that came are not returned until it passed)."""
        bad: dict[int, int] = {}  # wrong bytes seen (their crc32) -> how often
        beside = None if before is None else _Beside(before)

        def attempt() -> bytes:
            if beside is not None and beside.failure() is not None:
                raise _CheckFailed("the object's check failed")  # (raised as the check's own error, below)
            self._count("requests")
            data = self._request(url, start, stop)
            self._count("bytes", len(data))
            if len(data) > stop - start:
                error = RemoteReadError(
                    url, f"bytes {start}..{stop}: the store answered with {len(data)} bytes for the {stop - start} asked for: it "
                    "ignores ranged reads (the HTTP Range header), which slipstream needs; serve the files from a server or store "
                    "that supports them", start, stop, 1,
                )  # fmt: skip
                error.permanent = True  # type: ignore[attr-defined]
                raise error
            if len(data) < stop - start:
                self._check_holds(url, start, stop)  # (an object now too short is no cut transfer)
                raise _ShortRead(f"{len(data)} bytes came of the {stop - start} asked for")
            if check is None:
                return data
            got = check(data)
            if got != crc:
                digest = zlib.crc32(data)
                bad[digest] = bad.get(digest, 0) + 1
                if bad[digest] >= 3:  # the same wrong bytes a third time: that is what the object holds
                    error = ChecksumError(
                        url, f"bytes {start}..{stop} fail their checksum (indexed {crc}, computed {got}), the same wrong bytes "
                        "three times: the object changed since the index was written, or was damaged at the source", -1, range(0),
                    )  # fmt: skip
                    error.permanent = True  # type: ignore[attr-defined]
                    raise error
                raise _BadChecksum(f"the bytes that came fail their checksum (indexed {crc}, computed {got})")
            return data

        if beside is None:
            return self._retried(attempt, url, f"bytes {start}..{stop}", start, stop)
        try:
            data = self._retried(attempt, url, f"bytes {start}..{stop}", start, stop)
        except BaseException:
            beside.wait()  # (its error, when it failed, names the cause better: the object changed or is gone)
            raise
        beside.wait()
        return data

    def _request(self, url: str, start: int, stop: int) -> bytes:
        """One ranged GET, its permanent failures named: a vanished object, a range past its end."""
        try:
            return self.store.read(url, start, stop)
        except FileNotFoundError:
            raise MissingShardError(url, "the object is missing from the store (deleted or moved since the dataset was indexed)") from None
        except Exception as exc:
            if http_status(exc) == 416:  # range not satisfiable: it starts past the object's end
                raise ShardMismatchError(
                    url, f"bytes {start}..{stop} lie past its end (the store answered 416, range not satisfiable): it is shorter "
                    "than when it was indexed, so it changed since; re-index or rewrite the dataset"
                ) from None
            raise

    def _check_holds(self, url: str, start: int, stop: int) -> None:
        """``ShardMismatchError`` when the object is now too short to hold bytes ``start``..``stop``
        (a short body from a shortened object, not a cut transfer)."""
        try:
            size = self.store.size(url)
        except FileNotFoundError:
            raise MissingShardError(url, "the object is missing from the store (deleted or moved since the dataset was indexed)") from None
        except Exception:  # noqa: BLE001 - the size is not known: the short body is retried as a cut transfer
            return
        if size < stop:
            raise ShardMismatchError(
                url, f"is {size} bytes now, too short for bytes {start}..{stop} it held when indexed: it changed since; "
                "re-index or rewrite the dataset"
            )  # fmt: skip

    def read_checked(self, url: str, parse: Callable[[_Reads], Any], what: str) -> Any:
        """``parse(reads)``, its reads (``reads.ranges(spans)``, ``reads.whole()``) checked by ``parse``
        itself: see the module doc."""
        self._here()
        bad: dict[int, int] = {}  # the bytes that failed (their digest) -> how often

        def attempt() -> Any:
            reads = _Reads(self, url)
            try:
                return parse(reads)
            except CorruptFileError as exc:
                digest = reads.digest()
                bad[digest] = bad.get(digest, 0) + 1
                if bad[digest] >= 3:  # the same bytes a third time: that is what the object holds
                    raise
                raise _BadStructure(f"{exc.args[0].split(': ', 1)[-1]} (read again: the transfer may have been damaged)") from None

        return retrying(attempt, url, 0, 0, self.budget, on_retry=lambda: self._count("retries"), what=what)

    def read_ranges(self, url: str, ranges: list[tuple[int, int]]) -> list[bytes]:
        """Uncached, unchecked reads of ``ranges`` of ``url`` (a file's structure), concurrently, retried."""
        self._here()

        if len(ranges) <= 1:
            return [self._downloaded(url, *span) for span in ranges]
        with ThreadPoolExecutor(max(1, min(self.readahead, len(ranges)))) as pool:
            return list(pool.map(lambda span: self._downloaded(url, *span), ranges))

    def size(self, url: str) -> int:
        """The object's size (a HEAD), retried within the budget."""
        return self._retried(lambda: self.store.size(url), url, "its size")

    def read_whole(self, url: str) -> bytes:
        """A whole small object (an index), retried within the budget."""
        return self._retried(lambda: self.store.read_all(url), url, "the object")

    def _retried(self, call: Callable[[], Any], url: str, what: str, start: int = 0, stop: int = 0) -> Any:
        """``call()`` through ``retrying`` with this fetcher's budget, request timeout and counters;
        the store's client is made first, outside the budget."""
        connect = getattr(self.store, "connect", None)
        return retrying(
            call, url, start, stop, self.budget, on_retry=lambda: self._count("retries"), attempt_timeout=getattr(self.store, "timeout", None),
            what=what, prepare=None if connect is None else (lambda: connect(url)),
        )  # fmt: skip

    # -- counters ----------------------------------------------------------------------------
    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._stats[name] += n

    def stats(self) -> dict[str, Any]:
        """This process's counts. Reads: ``reads`` (pages asked for), ``hits`` (served from memory or
        the disk cache), ``joined`` (waited for a read-ahead download under way), ``misses`` (had to
        download); ``hit_rate`` = hits / reads. Downloads: ``downloads`` (read-ahead ones too),
        ``requests`` (GETs sent, each retry one more), ``retries``, ``bytes``, ``uncached`` (pages
        the cache could not take), ``dropped_hints``, ``waited`` (for another process's download of
        the page, to share it); ``cache_bytes`` on disk once the pages already handed to their
        readers are written (waiting up to the fetch budget for those writes); ``rejected``
        (cached pages whose seal failed, downloaded again: ``remote.cache``)."""
        self._here()
        with self._lock:
            self._written.wait_for(lambda: not self._writing, timeout=self.budget)
            out: dict[str, Any] = dict(self._stats)
        out["hit_rate"] = out["hits"] / out["reads"] if out["reads"] else None
        out["cache_bytes"] = self.cache.usage()
        out["rejected"] = self.cache.rejected
        return out

    def __getstate__(self) -> dict[str, Any]:
        return {"store": self.store, "cache": (str(self.cache.folder), self.cache.limit), "budget": self.budget, "readahead": self.readahead, "keep": self.keep}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["store"], PageCache(*state["cache"]), state["budget"], state["readahead"], state["keep"])  # type: ignore[misc]
