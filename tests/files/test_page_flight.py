"""files.packed: a page of a source that is not local (pages read into memory: object storage, data
read in place) is read once when many threads ask for it at once; the others get that read's
result, or its error, and a failed read is tried again by the next caller.

The source is a packed file read through a wrapper that says it is not local and counts its
reads. The threads are made to ask together without sleeps: every one of them must have missed
the page in memory (``RecentPages.get``) before the first read may return.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import slipstream as ss
from slipstream import fields as F
from slipstream.files.local import LocalFile
from slipstream.files.packed import PackedDataset
from slipstream.files.pagememory import RecentPages

THREADS = 8
WAIT = 60  # seconds: a safety net for a broken implementation, never reached when it works


class CountingSource:
    """A packed file's pages as a source that is not local (kept within a ``RecentPages``), counting
    ``batch`` calls; ``before_read`` runs first in each (the test's gate), ``fail`` makes the next read raise."""

    local = False

    def __init__(self, path: Path, before_read: Callable[[], None]):
        self._file = LocalFile(path)
        self.name, self.size, self.identity, self.schema = self._file.name, self._file.size, self._file.identity, self._file.schema
        self.recent = RecentPages(4)
        self.reads: list[int] = []
        self.before_read = before_read
        self.fail = False

    def page_table(self) -> Any:
        return self._file.page_table()

    def check(self) -> None:
        self._file.check()

    def prefetch(self, pages: Any) -> None:
        pass

    def batch(self, p: int) -> Any:
        self.reads.append(p)
        self.before_read()
        if self.fail:
            self.fail = False
            raise OSError(f"read {len(self.reads)} of page {p} failed")
        return self._file.batch(p)


class MissedBy:
    """Gates reads until ``n`` threads have missed a page in memory (``RecentPages.get`` giving None)."""

    def __init__(self, n: int):
        self.n, self.threads, self.changed = n, set(), threading.Condition()

    def missed(self) -> None:
        with self.changed:
            self.threads.add(threading.get_ident())
            self.changed.notify_all()

    def wait(self) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: len(self.threads) >= self.n, WAIT), f"only {len(self.threads)} threads asked"


@pytest.fixture
def gated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[PackedDataset, CountingSource, MissedBy]:
    samples = [{"x": np.full(4, k, np.int32), "label": k} for k in range(40)]
    path = ss.write(tmp_path / "d.arrow", samples, {"x": F.Array("int32", (4,)), "label": F.Int()}, progress=False, page_size=200)
    gate = MissedBy(THREADS)
    source = CountingSource(path, gate.wait)
    original = RecentPages.get

    def get(self: RecentPages, key: Any) -> Any:
        value = original(self, key)
        if value is None and self is source.recent:
            gate.missed()
        return value

    monkeypatch.setattr(RecentPages, "get", get)
    ds = PackedDataset(path, source=source)
    assert ds.num_pages > 2 and ds.remote
    return ds, source, gate


def together(call: Callable[[], Any]) -> list[Any]:
    """``call()`` in ``THREADS`` threads started together: each one's result or exception."""
    results: list[Any] = [None] * THREADS
    start = threading.Barrier(THREADS)

    def run(k: int) -> None:
        start.wait()
        try:
            results[k] = call()
        except Exception as exc:  # noqa: BLE001 - the test looks at it
            results[k] = exc

    threads = [threading.Thread(target=run, args=(k,)) for k in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert not any(thread.is_alive() for thread in threads), "a reader hangs"
    return results


def test_threads_asking_for_one_page_at_once_read_it_once(gated: Any) -> None:
    ds, source, _ = gated
    page = ds.locate_many([5])[1][0]
    results = together(lambda: ds[5])
    assert source.reads == [page]
    for result in results:
        assert not isinstance(result, Exception), result
        assert result["label"] == 5 and (result["x"] == 5).all()


def test_a_failed_read_is_every_waiters_error_and_the_next_caller_reads_again(gated: Any) -> None:
    ds, source, gate = gated
    source.fail = True
    results = together(lambda: ds[5])
    assert len(source.reads) == 1
    assert all(isinstance(r, OSError) and "read 1 of page" in str(r) for r in results), results
    gate.n = 0  # (nothing to wait for now)
    assert ds[5]["label"] == 5 and len(source.reads) == 2  # not remembered: read again, and kept
    assert ds[6]["label"] == 6 and len(source.reads) == 2 + (ds.locate_many([6])[1][0] != ds.locate_many([5])[1][0])
