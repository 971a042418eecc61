"""remote.fetch: what a download no longer waits for, and read-ahead taken back.

* The object's check (``before()``: its size) runs beside the download, not before it; its failure is
  what is raised, and the bytes are neither handed out nor cached; no attempt starts after it failed.
* A reader has its page while the page is still being written to the disk cache (under the claim).
* ``withdraw`` cancels read-ahead still queued (never downloaded) and lends a thread for one under way,
  so the downloads queued behind it start at once.

Every wait here has a deadline: a hang fails the test instead of holding the run.
"""

from __future__ import annotations

import os
import threading
import time
import zlib
from typing import Any

import pytest

from slipstream.core.errors import ShardMismatchError
from slipstream.remote.cache import PageCache
from slipstream.remote.fetch import Fetcher, range_key, recorded, withdraw

BLOB = os.urandom(20_000)
DEADLINE = 20.0


def _range(k: int) -> tuple[int, int, int]:
    a, b = 1000 * k, 1000 * k + 1000
    return a, b, zlib.crc32(BLOB[a:b])


class _Store:
    """Serves BLOB; a read of a start in ``held`` waits until that start's event is set."""

    timeout = 10.0

    def __init__(self, held: tuple[int, ...] = ()) -> None:
        self.held = {a: threading.Event() for a in held}
        self.reads: list[int] = []
        self.requested = threading.Event()
        self.lock = threading.Lock()

    def read(self, url: str, a: int, b: int) -> bytes:
        with self.lock:
            self.reads.append(a)
        self.requested.set()
        if a in self.held:
            assert self.held[a].wait(DEADLINE)
        return BLOB[a:b]


def _in_thread(call: Any) -> tuple[threading.Thread, list[Any]]:
    got: list[Any] = []

    def run() -> None:
        try:
            got.append(call())
        except BaseException as exc:  # noqa: BLE001 - the test looks at it
            got.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, got


def _until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.005)


# -- the object's check beside the download --------------------------------------------------------


def test_the_objects_check_runs_while_the_page_downloads(tmp_path):
    store = _Store()
    fetcher = Fetcher(store, PageCache(tmp_path, 10**6), budget=10, readahead=1)
    saw: list[bool] = []

    def before() -> None:  # returns only once the GET was sent: with a check before the GET, it would wait in vain
        saw.append(store.requested.wait(DEADLINE))

    assert fetcher.fetch("u", *_range(1), zlib.crc32, before) == BLOB[1000:2000]
    assert saw == [True]


def test_a_failed_check_is_raised_and_its_download_neither_handed_out_nor_cached(tmp_path):
    store = _Store()
    cache = PageCache(tmp_path, 10**6)
    fetcher = Fetcher(store, cache, budget=10, readahead=1)

    def before() -> None:
        assert store.requested.wait(DEADLINE)
        raise ShardMismatchError("u", "is 5 bytes but was 20000 when indexed")

    with pytest.raises(ShardMismatchError, match="is 5 bytes"):
        fetcher.fetch("u", *_range(2), zlib.crc32, before)
    assert not cache.has(range_key("u", *_range(2)))
    assert fetcher.fetch("u", *_range(2), zlib.crc32) == BLOB[2000:3000]  # not kept in memory either: fetched again
    assert store.reads == [2000, 2000]


def test_no_attempt_starts_after_the_check_failed(tmp_path):
    class Failing(_Store):
        def read(self, url: str, a: int, b: int) -> bytes:
            super().read(url, a, b)
            raise ConnectionResetError("reset by peer")  # transient: retried, while the check allows

    store = Failing()
    failed = threading.Event()

    def before() -> None:
        failed.set()
        raise ShardMismatchError("u", "is 5 bytes but was 20000 when indexed")

    fetcher = Fetcher(store, PageCache(tmp_path, 10**6), budget=DEADLINE, readahead=1)
    began = time.monotonic()
    with pytest.raises(ShardMismatchError):
        fetcher.fetch("u", *_range(3), zlib.crc32, before)
    assert failed.is_set() and time.monotonic() - began < DEADLINE / 2  # not retried until the budget ran out
    assert len(store.reads) <= 2  # (the attempt under way when it failed, and at most one more started meanwhile)


# -- the cache write after the reader has its page ---------------------------------------------------


class _SlowCache(PageCache):
    """A cache whose writes wait for ``release`` (``writing`` says one has begun)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.writing, self.release = threading.Event(), threading.Event()

    def put(self, key: str, data: bytes) -> bool:
        self.writing.set()
        assert self.release.wait(DEADLINE)
        return super().put(key, data)


@pytest.mark.parametrize("read_ahead", [True, False])
def test_a_reader_has_its_page_while_it_is_written_to_the_cache(tmp_path, read_ahead):
    cache = _SlowCache(tmp_path, 10**6)
    fetcher = Fetcher(_Store(), cache, budget=10, readahead=1)
    r4 = _range(4)
    if read_ahead:
        fetcher.prefetch([("u", *r4, zlib.crc32, None)])
        assert cache.writing.wait(DEADLINE)
        thread, got = _in_thread(lambda: fetcher.fetch("u", *r4, zlib.crc32))
        thread.join(DEADLINE)
        try:
            assert got == [BLOB[4000:5000]]  # while the write still waits
            assert not cache.has(range_key("u", *r4))
        finally:
            cache.release.set()
        _until(lambda: cache.has(range_key("u", *r4)), "the page never reached the cache")
    else:  # a read that downloads in its own thread writes the page before it returns (no other thread to do it)
        cache.release.set()
        assert fetcher.fetch("u", *r4, zlib.crc32) == BLOB[4000:5000]
        assert cache.has(range_key("u", *r4))


def test_another_fetcher_waiting_on_the_claim_finds_the_page_written(tmp_path):
    cache = _SlowCache(tmp_path, 10**6)
    store = _Store()
    first = Fetcher(store, cache, budget=10, readahead=1)
    r6 = _range(6)
    first.prefetch([("u", *r6, zlib.crc32, None)])
    assert cache.writing.wait(DEADLINE)  # handed out, still being written, the claim held
    other_store = _Store()
    other = Fetcher(other_store, PageCache(tmp_path, 10**6), budget=10, readahead=1)
    thread, got = _in_thread(lambda: bytes(other.fetch("u", *r6, zlib.crc32)))
    _until(lambda: other.stats()["waited"] == 1, "the other fetcher did not wait for the claim")
    cache.release.set()
    thread.join(DEADLINE)
    assert got == [BLOB[6000:7000]] and other_store.reads == []  # from the cache, not downloaded again


# -- read-ahead taken back ----------------------------------------------------------------------------


def test_withdrawn_read_ahead_still_queued_is_never_downloaded(tmp_path):
    store = _Store(held=(0,))
    fetcher = Fetcher(store, PageCache(tmp_path, 10**6), budget=10, readahead=1)
    tickets: list[Any] = []
    with recorded(tickets):
        fetcher.prefetch([("u", *_range(k), zlib.crc32, None) for k in range(4)])
    assert len(tickets) == 4
    _until(lambda: store.reads == [0], "the first read-ahead did not start")
    assert withdraw(tickets) == 3 and tickets == []  # page 0 is under way: it runs on
    store.held[0].set()
    _until(lambda: fetcher.stats()["downloads"] == 1 and fetcher.cache.has(range_key("u", *_range(0))), "page 0 did not land")
    fetcher.prefetch([("u", *_range(5), zlib.crc32, None)])
    _until(lambda: fetcher.cache.has(range_key("u", *_range(5))), "a later read-ahead did not run")
    assert sorted(store.reads) == [0, 5000]  # pages 1..3 were never asked for
    assert fetcher.fetch("u", *_range(2), zlib.crc32) == BLOB[2000:3000]  # a withdrawn page is read as any other


def test_what_is_queued_behind_a_withdrawn_download_under_way_starts_at_once(tmp_path):
    store = _Store(held=(0,))
    fetcher = Fetcher(store, PageCache(tmp_path, 10**6), budget=10, readahead=1)
    tickets: list[Any] = []
    with recorded(tickets):
        fetcher.prefetch([("u", *_range(0), zlib.crc32, None)])
    _until(lambda: store.reads == [0], "the first read-ahead did not start")
    withdraw(tickets)  # under way: a thread is lent to the pool while it runs
    fetcher.prefetch([("u", *_range(7), zlib.crc32, None)])
    try:
        _until(lambda: fetcher.cache.has(range_key("u", *_range(7))), "the next read-ahead waited behind the withdrawn one")
    finally:
        store.held[0].set()
    _until(lambda: fetcher.cache.has(range_key("u", *_range(0))), "the withdrawn download did not finish")
    pool = fetcher._pool
    _until(lambda: pool._most == 1, "the lent thread was not given back")


def test_hints_outside_recorded_are_not_listed(tmp_path):
    fetcher = Fetcher(_Store(), PageCache(tmp_path, 10**6), budget=10, readahead=1)
    tickets: list[Any] = []
    with recorded(tickets):
        pass
    fetcher.prefetch([("u", *_range(8), zlib.crc32, None)])
    assert tickets == []
    _until(lambda: fetcher.cache.has(range_key("u", *_range(8))), "the read-ahead did not run")
