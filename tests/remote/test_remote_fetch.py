"""remote.fetch: checked ranges from memory, the cache or the store; read-ahead never in a read's way."""

from __future__ import annotations

import errno
import os
import threading
import zlib

import pytest

import slipstream.remote.cache as cache_module
from slipstream.remote.cache import PageCache
from slipstream.remote.fetch import Fetcher

BLOB = os.urandom(20_000)


def _range(k: int) -> tuple[int, int, int]:
    a, b = 1000 * k, 1000 * k + 1000
    return a, b, zlib.crc32(BLOB[a:b])


class _Store:
    """Serves BLOB; reads of page 0 wait for ``release`` (they keep the one read-ahead thread busy)."""

    timeout = 5.0

    def __init__(self) -> None:
        self.release = threading.Event()
        self.reads: list[int] = []

    def read(self, url: str, a: int, b: int) -> bytes:
        self.reads.append(a)
        if a == 0:
            self.release.wait(30)
        return BLOB[a:b]


class _PausingCache(PageCache):
    """A cache whose lookups of ``pause_key`` stop after looking (a miss) until ``go`` is set."""

    pause_key: str | None = None

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.looked, self.go = threading.Event(), threading.Event()

    def get(self, key: str, length: int) -> bytes | None:
        found = super().get(key, length)
        if key == self.pause_key:
            self.looked.set()
            self.go.wait(30)
        return found


def test_a_read_takes_over_a_read_ahead_still_queued_instead_of_waiting_behind_others(tmp_path):
    from slipstream.remote.fetch import range_key

    store = _Store()
    cache = _PausingCache(tmp_path, 10**6)
    fetcher = Fetcher(store, cache, budget=10, readahead=1)
    r0, r5 = _range(0), _range(5)
    cache.pause_key = range_key("u", *r5)
    fetcher.prefetch([("u", *r0, zlib.crc32, None)])  # the only read-ahead thread, busy until released
    got: dict[str, object] = {}
    reader = threading.Thread(target=lambda: got.setdefault("a", fetcher.fetch("u", *r5, zlib.crc32)))
    reader.start()
    assert cache.looked.wait(10)  # the read missed the cache...
    fetcher.prefetch([("u", *r5, zlib.crc32, None)])  # ...and now finds its page queued behind page 0
    cache.go.set()
    reader.join(10)
    try:
        assert not reader.is_alive() and got["a"] == BLOB[5000:6000]  # read at once, page 0 still held up
    finally:
        store.release.set()
    assert fetcher.stats()["misses"] == 1


def test_a_page_the_disk_cannot_take_is_served_from_memory(tmp_path, monkeypatch):
    real_open = open

    def full_disk(path, mode="r", *args, **kwargs):
        if str(path).endswith(".tmp"):
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real_open(path, mode, *args, **kwargs)

    monkeypatch.setattr(cache_module, "open", full_disk, raising=False)
    fetcher = Fetcher(_Store(), PageCache(tmp_path, 10**6), budget=5, readahead=1)
    for k in (1, 2, 3):
        assert fetcher.fetch("u", *_range(k), zlib.crc32) == BLOB[1000 * k : 1000 * k + 1000]
    stats = fetcher.stats()
    assert stats["uncached"] == 3 and stats["cache_bytes"] == 0
    assert not [name for name in os.listdir(tmp_path) if name.endswith(".tmp")]


def test_two_caches_on_one_folder_in_one_process_keep_the_cap(tmp_path):
    limit, page = 20_000, 3_000
    caches = [PageCache(tmp_path, limit), PageCache(tmp_path, limit)]
    errors: list[BaseException] = []

    def put_many(cache: PageCache, tag: int) -> None:
        try:
            for k in range(60):
                cache.put(f"{tag}-{k:03d}", bytes([k]) * page)
                assert cache.usage() <= limit
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=put_many, args=(c, t)) for t, c in enumerate(caches)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert caches[0].usage() <= limit and not [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]


@pytest.mark.parametrize("times", [1, 2])
def test_the_same_wrong_bytes_a_few_times_are_retried_three_mean_the_object_differs(tmp_path, times):
    class Flipping(_Store):
        def __init__(self) -> None:
            super().__init__()
            self.bad = times

        def read(self, url: str, a: int, b: int) -> bytes:
            data = super().read(url, a, b)
            if self.bad:
                self.bad -= 1
                return bytes([data[0] ^ 1]) + data[1:]
            return data

    fetcher = Fetcher(Flipping(), PageCache(tmp_path, 10**6), budget=10, readahead=1)
    assert fetcher.fetch("u", *_range(2), zlib.crc32) == BLOB[2000:3000]
    assert fetcher.stats()["retries"] == times


def test_an_object_that_always_differs_is_a_checksum_error(tmp_path):
    from slipstream.core.errors import ChecksumError

    class Changed(_Store):
        def read(self, url: str, a: int, b: int) -> bytes:
            return bytes(len(BLOB[a:b]))

    fetcher = Fetcher(Changed(), PageCache(tmp_path, 10**6), budget=10, readahead=1)
    with pytest.raises(ChecksumError, match="the same wrong bytes three times"):
        fetcher.fetch("u", *_range(2), zlib.crc32)


# -- what came back, classified by cause ------------------------------------------------------------


class _Answers(_Store):
    """Serves BLOB (``size`` bytes of it now) through ``answer(a, b, data)``; counts reads and sizes."""

    def __init__(self, answer, size: int = len(BLOB)) -> None:
        super().__init__()
        self.answer, self.now, self.sizes = answer, size, 0

    def read(self, url: str, a: int, b: int) -> bytes:
        self.reads.append(a)
        return self.answer(a, b, BLOB[: self.now][a:b])

    def size(self, url: str) -> int:
        self.sizes += 1
        return self.now


def test_a_body_longer_than_the_range_is_a_server_ignoring_ranges_read_once(tmp_path):
    from slipstream.core.errors import RemoteReadError

    store = _Answers(lambda a, b, data: BLOB)  # the whole object, whatever the range
    fetcher = Fetcher(store, PageCache(tmp_path, 10**6), budget=30, readahead=1)
    with pytest.raises(RemoteReadError, match="ignores ranged reads") as caught:
        fetcher.fetch("u", *_range(3), zlib.crc32)
    assert store.reads == [3000] and caught.value.attempts == 1 and fetcher.stats()["retries"] == 0


def test_a_range_past_the_end_of_a_shortened_object_is_a_shard_mismatch_read_once(tmp_path):
    from slipstream.core.errors import ShardMismatchError

    class RangeNotSatisfiable(OSError):
        def __init__(self) -> None:
            super().__init__(22, "The requested range is not satisfiable")
            self.__cause__ = type("ClientError", (Exception,), {})("InvalidRange")
            self.__cause__.response = {"Error": {"Code": "InvalidRange"}, "ResponseMetadata": {"HTTPStatusCode": 416}}

    def answer(a, b, data):
        raise RangeNotSatisfiable()

    store = _Answers(answer, size=2000)
    fetcher = Fetcher(store, PageCache(tmp_path, 10**6), budget=30, readahead=1)
    with pytest.raises(ShardMismatchError, match=r"u: bytes 5000\.\.6000 lie past its end .*416.*changed since"):
        fetcher.fetch("u", *_range(5), zlib.crc32)
    assert store.reads == [5000]


def test_a_short_body_is_retried_unless_the_object_is_now_too_short(tmp_path):
    from slipstream.core.errors import ShardMismatchError

    cut = {"times": 2}

    def answer(a, b, data):
        if cut["times"]:
            cut["times"] -= 1
            return data[: len(data) // 2]  # a cut transfer: the object still holds the range
        return data

    store = _Answers(answer)
    fetcher = Fetcher(store, PageCache(tmp_path, 10**6), budget=30, readahead=1)
    assert fetcher.fetch("u", *_range(4), zlib.crc32) == BLOB[4000:5000]
    assert len(store.reads) == 3 and store.sizes == 2 and fetcher.stats()["retries"] == 2

    store = _Answers(lambda a, b, data: data, size=4500)  # the object was cut inside the range
    fetcher = Fetcher(store, PageCache(tmp_path / "other", 10**6), budget=30, readahead=1)
    with pytest.raises(ShardMismatchError, match=r"u: is 4500 bytes now, too short for bytes 4000\.\.5000"):
        fetcher.fetch("u", *_range(4), zlib.crc32)
    assert store.reads == [4000]


def test_a_vanished_object_is_a_missing_shard_error_naming_it(tmp_path):
    from slipstream.core.errors import MissingShardError

    def answer(a, b, data):
        raise FileNotFoundError("The specified key does not exist.")

    store = _Answers(answer)
    fetcher = Fetcher(store, PageCache(tmp_path, 10**6), budget=30, readahead=1)
    with pytest.raises(MissingShardError, match=r"^s3://b/shard-00002\.arrow: the object is missing from the store") as caught:
        fetcher.fetch("s3://b/shard-00002.arrow", *_range(2), zlib.crc32)
    assert isinstance(caught.value, FileNotFoundError) and caught.value.path == "s3://b/shard-00002.arrow" and store.reads == [2000]


def test_read_checked_reads_a_damaged_structure_again_and_the_same_bytes_three_times_are_corrupt(tmp_path):
    from slipstream.core.errors import CorruptFileError

    damaged = {"times": 2}

    def answer(a, b, data):
        if damaged["times"]:
            damaged["times"] -= 1
            return bytes([data[0] ^ 0xFF]) + data[1:]
        return data

    def parse(reads):
        (part,) = reads.ranges([(0, 100)])
        if part != BLOB[:100]:
            raise CorruptFileError("u", "the footer cannot be read")
        return "parsed"

    store = _Answers(answer)
    fetcher = Fetcher(store, PageCache(tmp_path, 10**6), budget=30, readahead=1)
    assert fetcher.read_checked("u", parse, "its structure") == "parsed"
    assert store.reads == [0, 0, 0] and fetcher.stats()["retries"] == 2

    store = _Answers(lambda a, b, data: bytes(len(data)))  # what the object holds: the same bytes every time
    fetcher = Fetcher(store, PageCache(tmp_path, 10**6), budget=30, readahead=1)
    with pytest.raises(CorruptFileError, match="u: the footer cannot be read"):
        fetcher.read_checked("u", parse, "its structure")
    assert store.reads == [0, 0, 0]
