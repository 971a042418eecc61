"""remote.claims: processes sharing a page cache download a page once, and a claim never holds a reader up.

A holder is a real fetcher in a child process, reading a range of an object on the suite's S3 server (through
the counting proxy); its ``before()`` (the hook a read runs inside its claim, before its GET: the object's size
check) says "holding" on stdout and waits for a line on stdin, so the test knows the claim is held and decides
how the holder's download ends: it goes on ("go"), fails ("fail"), or the child is SIGKILLed. The waiter is a
fetcher of its own (its own cache object and claim files) in a thread of the test process, joined with a
deadline: the claim conflicts between them as between any two processes. Its wait is bounded by its store's
request timeout (300 s here), so a waiter wrongly held up fails the join's deadline rather than passing late.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pipedchild import Child

from slipstream.remote.cache import PageCache
from slipstream.remote.fetch import Fetcher, range_key
from slipstream.remote.store import Store

for _name in ("moto", "boto3", "s3fs"):
    pytest.importorskip(_name)

import s3local  # (tools/, on the path from conftest)

BUCKET = "slipstream-claims"
BLOB = os.urandom(40_000)
STOP = 10_000  # the page: bytes 0..STOP
CRC = zlib.crc32(BLOB[:STOP])
DEADLINE = 60.0  # for any wait on a child or the waiter: a hang, not a speed check
PATIENT = 300.0  # the fetchers' request timeout and budget: a claim's longest wait

HOLDER = r"""
import sys, zlib
from slipstream.remote.cache import PageCache
from slipstream.remote.fetch import Fetcher
from slipstream.remote.store import Store

url, folder, stop, crc, patient = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
fetcher = Fetcher(Store(timeout=patient), PageCache(folder, 10**7), budget=patient)

def before():
    print("holding", flush=True)
    if sys.stdin.readline().strip() == "fail":
        raise RuntimeError("the holder's download failed")

try:
    fetcher.fetch(url, 0, stop, crc, zlib.crc32, before)
    print("fetched", flush=True)
except RuntimeError:
    print("failed", flush=True)
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[s3local.S3Server]:
    with s3local.start_server() as s3:
        blob = tmp_path_factory.mktemp("claims") / "blob"
        blob.write_bytes(BLOB)
        s3local.upload(s3, blob, BUCKET, "c")
        yield s3


@pytest.fixture
def s3(proxy: s3local.ProxyHandle, server: s3local.S3Server, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """The environment of this process and its children: S3 through the module's proxy, which counts GETs."""
    env = {**server.env(), "AWS_ENDPOINT_URL": proxy.endpoint}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return {**os.environ, **env}


@pytest.fixture
def children() -> Iterator[list[Child]]:
    started: list[Child] = []
    yield started
    for child in started:
        child.close()


URL = f"s3://{BUCKET}/c/blob"
KEY = range_key(URL, 0, STOP, CRC)


def _holder(folder: Path, env: dict[str, str], children: list[Child]) -> Child:
    child = Child(HOLDER, URL, folder, STOP, CRC, PATIENT, env=env)
    children.append(child)
    assert child.line() == "holding"  # inside its claim, before its GET
    return child


class _Waiter:
    """A fetcher of its own reading the page in a thread (see the module doc)."""

    def __init__(self, folder: Path):
        self.fetcher = Fetcher(Store(timeout=PATIENT), PageCache(folder, 10**7), budget=PATIENT)
        self.got: list[Any] = []
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self) -> None:
        try:
            self.got.append(bytes(self.fetcher.fetch(URL, 0, STOP, CRC, zlib.crc32)))
        except BaseException as exc:  # noqa: BLE001 - reported by result()
            self.got.append(exc)

    def waiting(self) -> None:
        """Returns once the waiter waits for another's claim (polled with a deadline)."""
        deadline = time.monotonic() + DEADLINE
        while self.fetcher.stats()["waited"] == 0:
            assert time.monotonic() < deadline and self.thread.is_alive(), f"the waiter never waited: {self.got}"
            time.sleep(0.005)  # (a pace for the poll, not a synchronization)

    def result(self) -> dict[str, Any]:
        self.thread.join(DEADLINE)
        assert not self.thread.is_alive(), f"the waiter is still held up after {DEADLINE} s"
        assert self.got == [BLOB[:STOP]]
        return self.fetcher.stats()


def test_a_process_waits_for_the_download_another_holds_and_takes_the_page_from_the_cache(
    tmp_path: Path, s3: dict[str, str], proxy: s3local.ProxyHandle, children: list[Child]
) -> None:
    before = proxy.counts()["ranged_gets"]
    holder = _holder(tmp_path, s3, children)
    waiter = _Waiter(tmp_path)
    waiter.waiting()
    holder.send("go")
    assert holder.line() == "fetched"
    stats = waiter.result()
    assert (stats["waited"], stats["downloads"]) == (1, 0)  # served from what the holder stored
    assert proxy.counts()["ranged_gets"] - before == 1  # one GET for the two readers
    assert not list(tmp_path.glob("*.claim"))  # claim files go with their holders


def test_a_holder_whose_download_fails_lets_the_waiter_download_it(
    tmp_path: Path, s3: dict[str, str], proxy: s3local.ProxyHandle, children: list[Child]
) -> None:
    holder = _holder(tmp_path, s3, children)
    waiter = _Waiter(tmp_path)
    waiter.waiting()
    holder.send("fail")
    assert holder.line() == "failed"
    stats = waiter.result()
    assert (stats["waited"], stats["downloads"]) == (1, 1)
    assert PageCache(tmp_path, 10**7).get(KEY, STOP) == BLOB[:STOP]  # and stored it for the others
    assert not list(tmp_path.glob("*.claim"))


def test_a_claim_held_by_a_killed_process_does_not_hold_a_reader_up(
    tmp_path: Path, s3: dict[str, str], proxy: s3local.ProxyHandle, children: list[Child]
) -> None:
    holder = _holder(tmp_path, s3, children)
    holder.kill()  # SIGKILL, inside its claim
    assert [p.name for p in tmp_path.glob("*.claim")] == [f"{KEY}.claim"]  # its file stays, held by no one
    stats = _Waiter(tmp_path).result()
    assert (stats["waited"], stats["downloads"]) == (0, 1)  # the kernel dropped the dead holder's claim
    assert not list(tmp_path.glob("*.claim"))  # reused, then removed by the reader that took it


def test_a_killed_holders_claim_file_goes_with_the_next_put(tmp_path: Path, s3: dict[str, str], children: list[Child]) -> None:
    _holder(tmp_path, s3, children).kill()
    assert len(list(tmp_path.glob("*.claim"))) == 1
    cache = PageCache(tmp_path, 10**7)
    assert cache.put("another", b"x" * 100)
    assert not list(tmp_path.glob("*.claim"))


FORKER = r"""
import os, sys
from slipstream.remote.cache import PageCache

with PageCache(sys.argv[1], 10**7).claim("page", 100, 60.0) as held:
    assert held
    pid = os.fork()
    if pid == 0:  # lives on (reading the stdin it shares with its parent) after its parent is killed
        sys.stdin.readline()
        os._exit(0)
    print(pid, flush=True)
    sys.stdin.readline()
"""


def test_a_forked_child_does_not_keep_its_parents_claim(tmp_path: Path, children: list[Child]) -> None:
    parent = Child(FORKER, tmp_path)
    children.append(parent)
    child = int(parent.line())  # forked while the parent held the claim
    try:
        parent.kill()  # SIGKILL: the parent never releases it; its child still has the parent's open files
        waits: list[int] = []
        with PageCache(tmp_path, 10**7).claim("page", 100, DEADLINE, lambda: waits.append(1)) as held:
            assert held and not waits  # the child closed its copy of the claim file at the fork
        os.kill(child, 0)  # (the child was alive all along)
    finally:
        os.kill(child, signal.SIGKILL)


def test_no_claim_is_taken_for_a_page_the_cache_cannot_store(tmp_path: Path) -> None:
    cache = PageCache(tmp_path, 1000)
    with cache.claim("big", 2000, DEADLINE) as held:
        assert not held and not list(tmp_path.glob("*.claim"))
    with PageCache(tmp_path, 1000).claim("big", 2000, DEADLINE) as again:  # (and no wait: no one holds anything)
        assert not again
