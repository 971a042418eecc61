"""remote.cache: the page cache shared by processes (bounded, LRU, crash-safe), alone and behind ``ss.open(s3 url)``.

* ``PageCache`` unit tests and a hypothesis property (the limit holds after every operation; a get returns
  what was last put for the key, or None).
* The cap under load: three processes putting into one folder with a small limit. The bound, from the code:
  ``put`` evicts until ``used + len(page) <= limit`` *before* writing the page's temporary file, all under
  the folder's lock (lockf), so pages plus the one temporary file in flight never exceed ``limit`` itself (not
  ``limit + a page``); a writer killed mid-write leaves a temporary file it had made room for, removed by the
  next put. Measured two ways, both must stay <= limit: by each writer at its peak (with the lock held, its
  temporary file complete, just before the rename), and by the parent from outside (a look counts only when
  two scans in a row agree, so it is what the folder held at one instant).
* Through S3 (moto server behind the fault proxy of ``tools/s3local.py``): two processes sharing a cache,
  processes SIGKILLed mid-download and mid-write, a restart served from the cache, the lock freed by a kill.

Every scenario that could hang runs in a child process (or a thread) with a timeout; children report by
lines on stdout, and the parent waits for those lines (or polls the proxy's counters) with deadlines, never
with fixed sleeps.
"""

from __future__ import annotations

import fcntl
import hashlib
import inspect
import json
import os
import select
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pipedchild import TIMEOUT, Child

import slipstream as ss
from slipstream import fields as F
from slipstream.remote.cache import PageCache
from slipstream.remote.cachedir import TAG, seal
from slipstream.remote.fetch import range_key

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

SRC = str(Path(ss.__file__).resolve().parents[1])  # where the slipstream under test is imported from
BUCKET = "slipstream-cache-test"


# ----------------------------------------------------------------------------------------- helpers


def files(folder: Path) -> dict[str, int]:
    """name -> size of every file in the cache folder but its lock, key and claim files (a page's file is its
    bytes and its ``TAG``-byte seal; a claim file is empty, there while a page is downloaded)."""
    return {p.name: p.stat().st_size for p in folder.iterdir() if p.name not in (".lock", ".key") and p.suffix != ".claim"}


def claim_files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.suffix == ".claim")


def _scan(folder: Path) -> dict[str, tuple[int, int, int]] | None:
    out = {}
    try:
        with os.scandir(folder) as found:
            for entry in found:
                if entry.name not in (".lock", ".key"):
                    st = entry.stat()
                    out[entry.name] = (st.st_ino, st.st_size, st.st_mtime_ns)
    except FileNotFoundError:  # removed between the listing and the stat
        return None
    return out


def stable_usage(folder: Path) -> tuple[int, int] | None:
    """(bytes, temporary files) the folder held at one instant, or None when it changed while looked at.

    Two scans that agree (same files, inodes, sizes, mtimes) mean every file seen existed from its stat in
    the first scan to its stat in the second: all of them at once, between the scans. So the sum is at most
    what the folder held then (a file made and removed between the two looks at its slot is missed): a sound
    sample to check against the limit, unlike one scan, which can count a page twice (as its temporary
    file, then renamed) or a page evicted meanwhile with the one that replaced it."""
    first = _scan(folder)
    second = _scan(folder)
    if first is None or first != second:
        return None
    return sum(size for _, size, _ in first.values()), sum(name.endswith(".tmp") for name in first)


def locked_usage(folder: Path) -> tuple[int, int]:
    """(bytes, temporary files) in the folder, looked at with the cache's lock held (no put in progress)."""
    with open(folder / ".lock", "a+b") as lock:
        fcntl.lockf(lock, fcntl.LOCK_EX)
        got = _scan(folder)
    assert got is not None
    return sum(size for _, size, _ in got.values()), sum(name.endswith(".tmp") for name in got)


def put_within(cache: PageCache, key: str, data: bytes, timeout: float = 20.0) -> bool:
    """``cache.put`` in a thread; fails (instead of hanging the test) if it has not returned within ``timeout``."""
    result: list[Any] = []
    thread = threading.Thread(target=lambda: result.append(cache.put(key, data)), daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"put({key!r}) still waits after {timeout} s: the cache's lock is held"
    return result[0]


@pytest.fixture
def children() -> Iterator[list[Child]]:
    """Children started by a test; every one left is killed at the end."""
    started: list[Child] = []
    yield started
    for child in started:
        child.close()


# ---------------------------------------------------------------------------------------- unit tests


def test_put_then_get_round_trip(tmp_path: Path) -> None:
    cache = PageCache(tmp_path / "c", 10_000)
    assert cache.usage() == 0 and not cache.has("a") and cache.get("a", 3) is None
    assert cache.put("a", b"abc") is True
    assert cache.has("a") and cache.get("a", 3) == b"abc" and cache.usage() == 3 + TAG  # the page and its seal
    assert cache.put("a", b"xyz") is True  # the same key again: replaced, counted once
    assert cache.get("a", 3) == b"xyz" and cache.usage() == 3 + TAG
    assert cache.put("empty", b"") is True and cache.get("empty", 0) == b""
    assert sorted(files(tmp_path / "c")) == ["a.page", "empty.page"]
    assert PageCache(tmp_path / "c", 10_000).get("a", 3) == b"xyz"  # it is the folder: another instance finds it


def test_get_with_a_wrong_length_is_a_miss(tmp_path: Path) -> None:
    cache = PageCache(tmp_path, 10_000)
    cache.put("k", b"0123456789")
    assert cache.get("k", 9) is None and cache.get("k", 11) is None and cache.get("k", 0) is None
    assert cache.get("k", 10) == b"0123456789"
    (tmp_path / "k.page").write_bytes(b"01234")  # a short file (damaged on disk) is a miss too
    assert cache.get("k", 10) is None


def _age(cache: PageCache, times: dict[str, int]) -> None:
    """Give pages distinct last-use times (seconds since the epoch, long ago) instead of sleeping."""
    for key, seconds in times.items():
        os.utime(cache.folder / f"{key}.page", ns=(seconds * 10**9, seconds * 10**9))


def test_eviction_removes_the_least_recently_used_first(tmp_path: Path) -> None:
    cache = PageCache(tmp_path, 3 * (100 + TAG))
    for key in "abc":
        assert cache.put(key, key.encode() * 100)
    _age(cache, {"a": 1_000_000, "b": 1_000_001, "c": 1_000_002})
    assert cache.put("d", b"d" * 100)  # one page must go: the oldest, a
    assert [cache.has(k) for k in "abcd"] == [False, True, True, True]
    _age(cache, {"b": 1_000_010, "c": 1_000_011, "d": 1_000_012})
    assert cache.get("b", 100) == b"b" * 100  # reading b makes it the newest: c is now the oldest
    assert cache.put("e", b"e" * 100)
    assert [cache.has(k) for k in "bcde"] == [True, False, True, True]
    _age(cache, {"b": 1_000_020, "d": 1_000_021, "e": 1_000_022})
    assert cache.put("f", b"f" * 150)  # needs two pages' room: the two oldest go
    assert [cache.has(k) for k in "bdef"] == [False, False, True, True]
    assert cache.usage() == 250 + 2 * TAG


def test_a_page_larger_than_the_limit_is_refused_and_evicts_nothing(tmp_path: Path) -> None:
    cache = PageCache(tmp_path, 1000)
    assert cache.put("a", b"a" * 400) and cache.put("b", b"b" * 400)
    before = files(tmp_path)
    assert cache.put("huge", b"h" * 1001) is False
    assert files(tmp_path) == before and not cache.has("huge") and cache.usage() == 800 + 2 * TAG
    assert cache.put("too", b"t" * (1001 - TAG)) is False  # the seal counts: its file would be over the limit
    assert cache.put("whole", b"w" * (1000 - TAG)) is True  # exactly the limit fits, with everything else evicted
    assert files(tmp_path) == {"whole.page": 1000}
    assert PageCache(tmp_path / "tiny", 0).put("x", b"x") is False  # a limit below a page never waits


def test_orphaned_temporary_files_are_never_served_and_go_at_the_next_put(tmp_path: Path) -> None:
    cache = PageCache(tmp_path, 10_000)
    cache.put("old", b"o" * 10)
    # what writers killed mid-write leave: "<key>.<pid>.tmp", whole or cut short
    (tmp_path / "k.4242.tmp").write_bytes(b"k" * 10)
    (tmp_path / "j.4243.tmp").write_bytes(b"j" * 5)
    assert cache.get("k", 10) is None and not cache.has("k") and cache.get("j", 10) is None
    assert cache.usage() == 10 + TAG  # only pages count
    assert cache.put("new", b"n" * 10)
    assert sorted(files(tmp_path)) == ["new.page", "old.page"]


def test_an_orphan_does_not_block_its_own_key(tmp_path: Path) -> None:
    cache = PageCache(tmp_path, 100)
    (tmp_path / f"k.{os.getpid()}.tmp").write_bytes(b"x" * 100)  # this very process's name, left by a crash before a restart
    assert cache.put("k", b"k" * 60) and cache.get("k", 60) == b"k" * 60
    assert files(tmp_path) == {"k.page": 60 + TAG}


_ops = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.integers(0, 5), st.integers(0, 3000)),
        st.tuples(st.just("get"), st.integers(0, 5), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(limit=st.integers(0, 6000), ops=_ops)
def test_property_the_limit_holds_and_gets_return_the_last_put_or_none(limit: int, ops: list[tuple[str, int, int]]) -> None:
    with tempfile.TemporaryDirectory() as folder:
        cache = PageCache(folder, limit)
        last: dict[str, bytes] = {}
        for n, (op, k, size) in enumerate(ops):
            key = f"key{k}"
            if op == "put":
                data = (f"{n}:{k}|".encode() * (size // 4 + 1))[:size]  # differs from every other put's bytes
                stored = cache.put(key, data)
                assert stored == (size + TAG <= limit)  # one process: refused only when its file is larger than the whole limit
                last[key] = data
                if stored:
                    assert cache.get(key, size) == data
            elif key in last:
                assert cache.get(key, len(last[key])) in (None, last[key])
            assert cache.usage() <= limit
            assert sum(files(Path(folder)).values()) <= limit  # on disk too: nothing but pages remains
        for key, data in last.items():
            assert cache.get(key, len(data)) in (None, data)


def test_a_forked_child_can_put_while_its_parent_was_mid_put(tmp_path: Path, children: list[Child]) -> None:
    child = Child(FORK_DURING_PUT, tmp_path / "c")
    children.append(child)
    got = child.result()
    assert got == {"child_put": "done", "parent_put_while_child_lives": "done"}


# --------------------------------------------------------------------- the limit holds under load


def page_bytes(k: int) -> bytes:
    """The page of key k: 1..4 KiB of bytes that depend on k (as the reader's keys name their bytes)."""
    seed = hashlib.sha256(b"page %d" % k).digest()
    size = 1024 + (k * 997) % 3073
    return (seed * (size // 32 + 1))[:size]


_PAGE_BYTES = "import hashlib\n" + inspect.getsource(page_bytes)  # the same function in the children

PUTTER = (
    _PAGE_BYTES
    + r"""
import json, os, random, sys
from slipstream.remote.cache import PageCache

folder, limit, seed, n, keys = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
cache = PageCache(folder, limit)
peak = {"bytes": 0, "tmp": 0}
real_replace = os.replace

def replace_at_peak(source, target, **where):
    # put() calls this holding the lock, its temporary file complete: the most the folder holds
    total = tmp = 0
    with os.scandir(folder) as found:
        for entry in found:
            if entry.name not in (".lock", ".key"):
                total += entry.stat().st_size
                tmp += entry.name.endswith(".tmp")
    peak["bytes"], peak["tmp"] = max(peak["bytes"], total), max(peak["tmp"], tmp)
    real_replace(source, target, **where)

os.replace = replace_at_peak
rng = random.Random(seed)
print("ready", flush=True)
sys.stdin.readline()  # go: all start together
wrong, hits, stored = [], 0, 0
for _ in range(n):
    k = rng.randrange(keys)
    stored += cache.put(f"{k:04d}", page_bytes(k))
    j = rng.randrange(keys)
    got = cache.get(f"{j:04d}", len(page_bytes(j)))
    if got is not None:
        hits += 1
        if got != page_bytes(j):
            wrong.append(j)
final = {}
for j in range(keys):
    got = cache.get(f"{j:04d}", len(page_bytes(j)))
    final[j] = None if got is None else got == page_bytes(j)
print(json.dumps({"stored": stored, "hits": hits, "wrong": wrong, "final": final, "peak": peak}), flush=True)
"""
)


def test_the_limit_holds_under_concurrent_puts_from_three_processes(tmp_path: Path, children: list[Child]) -> None:
    folder, limit, keys, n = tmp_path / "c", 32 * 1024, 40, 500
    largest = max(len(page_bytes(k)) for k in range(keys))
    PageCache(folder, limit)  # the folder
    for seed in range(3):
        children.append(Child(PUTTER, folder, limit, seed, n, keys))
    for child in children:
        assert child.line() == "ready"
    for child in children:
        child.send("go")

    outside = {"looks": 0, "stable": 0, "max": 0, "tmp_seen": 0, "locked": 0}
    deadline = time.monotonic() + TIMEOUT
    while any(child.proc.poll() is None for child in children):  # look as often as we can while they run
        assert time.monotonic() < deadline, "the writers did not finish"
        outside["looks"] += 1
        if outside["looks"] % 25 == 0:  # now and then with the lock held: between puts, and no temporary file
            used, tmp = locked_usage(folder)
            assert used <= limit and tmp == 0, (used, tmp)
            outside["locked"] += 1
        seen = stable_usage(folder)
        if seen is not None:
            outside["stable"] += 1
            outside["max"] = max(outside["max"], seen[0])
            outside["tmp_seen"] += seen[1]
            assert seen[0] <= limit, f"{seen[0]} bytes on disk over the limit of {limit}"

    results = [child.result() for child in children]
    for r in results:
        assert r["wrong"] == [], "a get returned another page's bytes"
        assert all(v in (None, True) for v in r["final"].values()), r["final"]
        assert r["stored"] == n  # every page fits the limit: no put is refused
        assert r["peak"]["bytes"] <= limit, r["peak"]  # pages plus the complete temporary file, the lock held
        assert r["peak"]["tmp"] == 1, r["peak"]  # only the writer's own: writes happen under the lock
    # the cache was really full: at its peaks it held within one page of the limit
    assert max(r["peak"]["bytes"] for r in results) > limit - largest
    assert outside["stable"] > 0
    used = sum(files(folder).values())
    assert used <= limit and PageCache(folder, limit).usage() == used
    assert not [name for name in files(folder) if not name.endswith(".page")]
    cache = PageCache(folder, limit)
    for k in range(keys):
        assert cache.get(f"{k:04d}", len(page_bytes(k))) in (None, page_bytes(k))
    print(
        f"cap under load: limit {limit}, largest page {largest}; writers' peaks {[r['peak'] for r in results]}; outside {outside}"
    )


# a child's stall: from then on a page's temporary file gets half its bytes, then the writer stops (until killed)
_STALL_WRITES = r"""
import threading
import slipstream.remote.cache as cache_module

def stall_writes():
    real_open = open

    class Stalled:
        def __init__(self, f, path):
            self.f, self.path = f, path
        def __enter__(self):
            return self
        def __exit__(self, *exc):
            self.f.close()
        def write(self, data):
            self.f.write(data[: len(data) // 2])
            self.f.flush()
            print("stalled " + self.path, flush=True)
            threading.Event().wait()

    cache_module.open = lambda path, mode="r", *a, **k: Stalled(real_open(path, mode, *a, **k), str(path)) if str(path).endswith(".tmp") else real_open(path, mode, *a, **k)
"""


# ------------------------------------------------------------------------------------ lock and kills

LOCKER = _STALL_WRITES + r"""
import fcntl, sys, threading
from slipstream.remote.cache import PageCache

folder, how = sys.argv[1], sys.argv[2]
if how == "lock":  # take the cache's lock as put() does, and hold it
    lock = open(folder + "/.lock", "a+b")
    fcntl.lockf(lock, fcntl.LOCK_EX)
    print("locked", flush=True)
else:  # a put that stops half way through writing its page, the lock held
    stall_writes()
    PageCache(folder, 1 << 20).put("victim", b"v" * 100_000)
threading.Event().wait()
"""

FORK_DURING_PUT = r"""
import json, os, sys, threading
import slipstream.remote.cache as cache_module
from slipstream.remote.cache import PageCache

cache = PageCache(sys.argv[1], 1 << 20)
writing, release = threading.Event(), threading.Event()
real_open = open

class Held:
    def __init__(self, f):
        self.f = f
    def __enter__(self):
        return self
    def __exit__(self, *exc):
        self.f.close()
    def write(self, data):
        writing.set()
        release.wait()
        self.f.write(data)

cache_module.open = lambda path, mode="r", *a, **k: Held(real_open(path, mode, *a, **k)) if str(path).endswith(".tmp") else real_open(path, mode, *a, **k)
writer = threading.Thread(target=cache.put, args=("a", b"a" * 100))
writer.start()
assert writing.wait(30)
pid = os.fork()  # as a loader forks its workers while a read-ahead thread stores a page
if pid == 0:
    cache_module.open = real_open
    done = threading.Event()
    threading.Thread(target=lambda: (cache.put("b", b"b" * 100), done.set()), daemon=True).start()
    os._exit(0 if done.wait(2) else 3)
release.set()
writer.join()
cache_module.open = real_open
done = threading.Event()
threading.Thread(target=lambda: (cache.put("c", b"c" * 100), done.set()), daemon=True).start()
parent = "done" if done.wait(1) else "waited"
_, status = os.waitpid(pid, 0)
done.wait(30)
child = "done" if os.waitstatus_to_exitcode(status) == 0 else "hung"
print(json.dumps({"child_put": child, "parent_put_while_child_lives": parent}), flush=True)
"""


def _assert_lock_held(folder: Path) -> None:
    with open(folder / ".lock", "a+b") as lock, pytest.raises(BlockingIOError):
        fcntl.lockf(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)


@pytest.mark.parametrize("how", ["lock", "put"])
def test_a_killed_lock_holder_does_not_keep_the_lock(tmp_path: Path, children: list[Child], how: str) -> None:
    folder = tmp_path / "c"
    cache = PageCache(folder, 1 << 20)
    assert cache.put("before", b"b" * 10)
    child = Child(LOCKER, folder, how)
    children.append(child)
    said = child.line()
    _assert_lock_held(folder)  # really held: a put now would wait
    if how == "put":
        assert said.startswith("stalled ")
        orphan = Path(said.split(" ", 1)[1])
        assert orphan.parent == folder and orphan.name.endswith(".tmp") and orphan.stat().st_size == 50_000  # half written
        assert cache.get("victim", 100_000) is None
    else:
        assert said == "locked"
    child.kill()
    assert child.proc.returncode == -signal.SIGKILL
    assert put_within(cache, "after", b"a" * 10) is True  # the kernel released the dead holder's lock
    assert files(folder) == {"before.page": 10 + TAG, "after.page": 10 + TAG}  # the half-written page went with that put
    assert cache.get("victim", 100_000) is None and cache.get("before", 10) == b"b" * 10


# ------------------------------------------------------------------------------------ through S3


def digest(sample: dict[str, Any]) -> str:
    """A sample's fingerprint, to compare what a child read with the local dataset."""
    return hashlib.sha256(b"%d|" % int(sample["label"]) + np.ascontiguousarray(sample["x"]).tobytes()).hexdigest()[:16]


_SAMPLE_DIGEST = "import hashlib\nfrom typing import Any\nimport numpy as np\n" + inspect.getsource(digest)

READER = (
    _SAMPLE_DIGEST
    + _STALL_WRITES
    + r"""
import json, sys, threading
import slipstream as ss
import slipstream.remote.cache as cache_module

url, cache_dir, limit, order, wait, stall = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5] == "wait", int(sys.argv[6])
ds = ss.open(url, cache_dir=cache_dir, cache_limit=limit, retry_budget=20, timeout=20)
indices = list(range(len(ds)))
if order == "backward":
    indices.reverse()


print("ready", flush=True)
if wait:
    sys.stdin.readline()
out = {}
for n, i in enumerate(indices):
    if n == stall:
        stall_writes()
    out[i] = digest(ds[i])
print(json.dumps(out), flush=True)
"""
)


@dataclass
class Remote:
    local: Path  # the dataset's folder
    url: str
    proxy: Any  # s3local.ProxyHandle
    env: dict[str, str]  # a child's environment: S3 through the proxy
    digests: dict[int, str]  # sample index -> digest, read locally
    pages: dict[str, bytes]  # cache key -> the page's bytes, from the local shards
    samples_per_page: int

    def ranged_gets(self) -> int:
        return int(self.proxy.counts()["ranged_gets"])

    def reader(self, cache_dir: Path, limit: int = 10**7, order: str = "forward", wait: bool = False, stall: int = -1) -> Child:
        return Child(READER, self.url, cache_dir, limit, order, "wait" if wait else "go", stall, env=self.env)

    def check_read(self, got: dict[str, str]) -> None:
        assert {int(i): d for i, d in got.items()} == self.digests

    def check_cache(self, folder: Path) -> int:
        """Every file in a cache's page folder is a whole page with the right bytes; returns how many."""
        names = files(folder)
        assert all(name.endswith(".page") for name in names), sorted(names)
        for name in names:
            page = self.pages[name[: -len(".page")]]
            assert (folder / name).read_bytes()[:-TAG] == page, f"{name} holds other bytes than its page"
        return len(names)


@pytest.fixture(scope="module")
def remote_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Remote]:
    for name in ("moto", "boto3", "s3fs"):
        pytest.importorskip(name)
    import s3local

    local = tmp_path_factory.mktemp("remote") / "ds"
    samples = [{"label": k, "x": np.arange(k, k + 100, dtype=np.float32)} for k in range(120)]  # 12 pages in 2 shards
    ss.write(
        local, samples, {"label": F.Int(), "x": F.Array("float32", (100,))}, progress=False, page_size=4000, shard_size=40000
    )
    index = json.loads((local / "index.json").read_text())
    url = f"s3://{BUCKET}/ds"
    pages = {}
    for shard in index["shards"]:
        blob = (local / shard["file"]).read_bytes()
        for offset, length, _, _, crc in shard["pages"]:
            pages[range_key(f"{url}/{shard['file']}", int(offset), int(offset) + int(length), int(crc))] = blob[
                offset : offset + length
            ]
    dataset = ss.open(local)
    digests = {i: digest(dataset[i]) for i in range(len(dataset))}
    assert len(pages) == 12 and len(digests) == 120
    with s3local.start_server() as s3, s3local.start_proxy(s3.endpoint) as proxy:
        s3local.upload(s3, local, BUCKET, "ds")
        env = {**os.environ, **s3.env(), "AWS_ENDPOINT_URL": proxy.endpoint}
        yield Remote(local, url + "/", proxy, env, digests, pages, len(digests) // len(pages))


@pytest.fixture
def remote(remote_module: Remote) -> Iterator[Remote]:
    """The module's dataset and proxy, the proxy's faults cleared after the test."""
    yield remote_module
    remote_module.proxy.set_faults(None)


def test_two_processes_sharing_a_cache_read_everything_and_keep_under_the_limit(
    remote: Remote, tmp_path: Path, children: list[Child]
) -> None:
    folder, limit = tmp_path / "cache", 30_000  # about half the dataset's pages: they evict each other's
    before = remote.ranged_gets()
    children += [remote.reader(folder, limit, wait=True), remote.reader(folder, limit, wait=True)]
    for child in children:
        assert child.line() == "ready"
    for child in children:
        child.send("go")
    pages_folder, looks, deadline = folder / "pages", 0, time.monotonic() + TIMEOUT
    while any(child.proc.poll() is None for child in children):
        assert time.monotonic() < deadline
        seen = stable_usage(pages_folder)
        if seen is not None:
            looks += 1
            assert seen[0] <= limit, f"{seen[0]} bytes cached over the limit of {limit}"
        # a look every few ms, leaving the CPUs to the readers (a pace, not a synchronization: it ends at once
        # when a child writes its result)
        select.select([child.proc.stdout for child in children], [], [], 0.003)
    for child in children:
        remote.check_read(child.result())
    downloads = remote.ranged_gets() - before
    assert len(remote.pages) <= downloads <= 2 * len(remote.pages)  # each page at most once per process
    assert 0 < PageCache(pages_folder, limit).usage() <= limit
    remote.check_cache(pages_folder)


def test_three_processes_sharing_a_two_page_cache_under_faults_read_the_same_right_data(
    remote: Remote, tmp_path: Path, children: list[Child]
) -> None:
    folder = tmp_path / "cache"
    limit = 2 * (max(len(page) for page in remote.pages.values()) + TAG)  # two pages and their seals
    remote.proxy.set_faults(["503", "flip", "truncate"], every=3)  # every third ranged GET goes wrong
    children += [remote.reader(folder, limit, order=order, wait=True) for order in ("forward", "backward", "forward")]
    for child in children:
        assert child.line() == "ready"
    for child in children:
        child.send("go")
    for child in children:
        remote.check_read(child.result())  # every sample right, in every process
    assert remote.proxy.counts()["faults"]
    assert PageCache(folder / "pages", limit).usage() <= limit
    remote.check_cache(folder / "pages")  # whole, sealed pages only


def test_a_restart_reads_from_the_cache(remote: Remote, tmp_path: Path, children: list[Child]) -> None:
    folder = tmp_path / "cache"
    before = remote.ranged_gets()
    first = remote.reader(folder)
    children.append(first)
    remote.check_read(first.result())
    assert remote.ranged_gets() - before == len(remote.pages)  # every page once
    assert remote.check_cache(folder / "pages") == len(remote.pages)
    before = remote.ranged_gets()
    second = remote.reader(folder, order="backward")
    children.append(second)
    remote.check_read(second.result())
    assert remote.ranged_gets() - before == 0  # every page from the cache


def test_processes_killed_mid_download_and_mid_write_leave_no_bad_page(
    remote: Remote, tmp_path: Path, children: list[Child]
) -> None:
    folder = tmp_path / "cache"
    pages_folder = folder / "pages"
    per_page = remote.samples_per_page

    # 1. killed while its first ranged GET is in flight (the proxy holds every response for 30 s)
    remote.proxy.set_faults("slow", every=1, slow=30)
    before = remote.ranged_gets()
    stuck = remote.reader(folder)
    writer = remote.reader(folder, stall=3 * per_page, wait=True)  # for step 2; it starts reading when told
    children += [stuck, writer]
    assert stuck.line() == "ready"
    deadline = time.monotonic() + TIMEOUT
    while remote.ranged_gets() == before:  # poll until its request reached the proxy
        assert time.monotonic() < deadline and stuck.proc.poll() is None, stuck.stderr()
    stuck.kill()
    assert stuck.proc.returncode == -signal.SIGKILL
    remote.proxy.set_faults(None)
    assert files(pages_folder) == {}  # nothing came: nothing cached, nothing half there
    # the killed downloader's claim file is left, and held by no one: a claim of that page is taken at once
    (left,) = claim_files(pages_folder)
    waits: list[int] = []
    with PageCache(pages_folder, 10**7).claim(left[: -len(".claim")], 100, 30.0, lambda: waits.append(1)) as held:
        assert held and not waits

    # 2. killed half way through writing a page into the cache (lock held), after caching three pages
    assert writer.line() == "ready"
    writer.send("go")
    said = writer.line()
    assert said.startswith("stalled ")
    orphan = Path(said.split(" ", 1)[1])
    _assert_lock_held(pages_folder)
    writer.kill()
    orphan_key = orphan.name.split(".")[0]
    names = files(pages_folder)
    assert orphan.parent == pages_folder and names.pop(orphan.name) == len(remote.pages[orphan_key]) // 2  # half written
    assert len(names) == 3 and all(name.endswith(".page") for name in names)
    for name in names:
        assert (pages_folder / name).read_bytes()[:-TAG] == remote.pages[name[: -len(".page")]]

    # 3. what other crashes and damage leave: a whole-length temporary file of garbage for a page not cached,
    #    and a cached page whose bytes were damaged on disk (right length, the good page's seal, wrong bytes)
    keys = list(remote.pages)
    uncached = [k for k in keys if not (pages_folder / f"{k}.page").exists() and k != orphan_key]
    garbage_key, damaged_key = uncached[-1], uncached[-2]
    (pages_folder / f"{garbage_key}.99999.tmp").write_bytes(b"\0" * len(remote.pages[garbage_key]))
    damaged = bytearray(remote.pages[damaged_key])
    damaged[len(damaged) // 2] ^= 0xFF
    good_seal = seal((pages_folder / ".key").read_bytes(), f"{damaged_key}.page", remote.pages[damaged_key])
    (pages_folder / f"{damaged_key}.page").write_bytes(bytes(damaged) + good_seal)
    cache = PageCache(pages_folder, 10**7)
    assert cache.get(garbage_key, len(remote.pages[garbage_key])) is None  # a temporary file is never served
    cached_good = sum(1 for k in keys if (pages_folder / f"{k}.page").exists() and k != damaged_key)
    assert cached_good == 3

    # 4. a new process reads everything right, downloading exactly the pages not (correctly) cached
    before = remote.ranged_gets()
    fresh = remote.reader(folder)
    children.append(fresh)
    remote.check_read(fresh.result())
    assert remote.ranged_gets() - before == len(keys) - cached_good  # the damaged page was fetched again
    # only whole pages remain (the orphans went with its first put), each with its page's bytes: what a
    # restart reads from the cache (test_a_restart_reads_from_the_cache)
    assert remote.check_cache(pages_folder) == len(keys)
    assert claim_files(pages_folder) == []  # the killed writer's claim went with a put (no one held it)
