"""Read-ahead of remote data through views and worker processes, counted at the S3 server's proxy.

* Behind ``splitobs``, ``obsview`` and ``mapobs``, remote pages are read ahead as they are for the data
  itself: the loader waits on about one download per epoch, not one per page, and ``order="quasi_random"``
  reads a view page by page.
* With a cache smaller than a page, the trainer's process downloads nothing for workers in other processes
  (it would hold those pages for no one): the helper (one process) downloads each page once, as threads do,
  and process workers at most once each.
* With a cache of a few pages, the trainer's read-ahead keeps to what the cache has room for beside the
  batches being read: it evicts no page before a worker read it, and a retired page is the first the cache
  evicts. The helper downloads each page about once, and so do process workers (3 or 6 pages of cache):
  a page that one process is downloading is waited for by the others (``remote.claims``), not downloaded
  again.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import assert_same, snapshot

import slipstream as ss
from slipstream import fields as F

for _name in ("moto", "boto3", "s3fs"):
    pytest.importorskip(_name)

import s3local  # noqa: E402  (tools/, on the path from conftest)

BUCKET = "slipstream-readahead"
SAMPLES = 240
BATCH = 16


@pytest.fixture(scope="module")
def server() -> Iterator[s3local.S3Server]:
    with s3local.start_server() as s3:
        yield s3


@pytest.fixture(scope="module")
def dataset(server: s3local.S3Server, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, int, int]:
    """(local folder, its URL, pages, largest page in bytes): pages of about 10 samples in 3 shards."""
    local = tmp_path_factory.mktemp("readahead") / "ds"
    samples = [{"label": k, "x": np.arange(k, k + 250, dtype=np.float32)} for k in range(SAMPLES)]
    fields = {"label": F.Int(), "x": F.Array("float32", (250,))}
    ss.write(local, samples, fields, progress=False, page_size=10_000, shard_size=90_000)
    s3local.upload(server, local, BUCKET, "ds")
    index = json.loads((local / "index.json").read_text())
    pages = [page for shard in index["shards"] for page in shard["pages"]]
    assert len(index["shards"]) >= 3 and len(pages) >= 20
    return local, f"s3://{BUCKET}/ds/", len(pages), max(int(page[1]) for page in pages)


@pytest.fixture
def s3(proxy: s3local.ProxyHandle, server: s3local.S3Server, monkeypatch: pytest.MonkeyPatch) -> s3local.ProxyHandle:
    """Reads in this process (and its workers) through the module's proxy, which counts them."""
    for name, value in {**server.env(), "AWS_ENDPOINT_URL": proxy.endpoint}.items():
        monkeypatch.setenv(name, value)
    return proxy


def _epoch(data: Any, **kwargs: Any) -> list[Any]:
    with ss.DataLoader(data, BATCH, seed=7, **kwargs) as loader:
        return [snapshot(batch) for batch in loader]


VIEWS: dict[str, Callable[[Any], Any]] = {
    "splitobs": lambda ds: ss.splitobs(ds, 0.75)[0],
    "obsview": lambda ds: ss.obsview(ds, np.arange(len(ds) - 1, -1, -1)),
    "mapobs": lambda ds: ss.mapobs(lambda sample: {"label": sample["label"] * 2, "x": sample["x"]}, ds),
}


@pytest.mark.parametrize("view", sorted(VIEWS))
def test_remote_data_behind_a_view_is_read_ahead(dataset: tuple[Path, str, int, int], s3: Any, tmp_path: Path, view: str) -> None:
    local, url, pages, _ = dataset
    remote = ss.open(url, cache_dir=tmp_path)
    assert_same(_epoch(VIEWS[view](remote), workers=2), _epoch(VIEWS[view](ss.open(local))))
    stats = remote.remote_stats()
    # the loader waited for a download it had not asked for ahead at most at the epoch's start (a page or two)
    assert stats["misses"] <= 2 and stats["downloads"] >= pages * 0.7, stats


def test_quasi_random_reads_a_view_of_remote_data_as_it_reads_local_data(
    dataset: tuple[Path, str, int, int], s3: Any, tmp_path: Path
) -> None:
    local, url, _, _ = dataset
    remote = ss.open(url, cache_dir=tmp_path)
    for part in (0, 1):
        view, local_view = ss.splitobs(remote, 0.6)[part], ss.splitobs(ss.open(local), 0.6)[part]
        assert_same(_epoch(view, order="quasi_random", workers=2), _epoch(local_view, order="quasi_random"))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", ["thread", "helper", "process"])
def test_with_a_cache_smaller_than_a_page_the_trainer_downloads_nothing_for_worker_processes(
    dataset: tuple[Path, str, int, int], s3: s3local.ProxyHandle, tmp_path: Path, backend: str
) -> None:
    local, url, pages, largest = dataset
    remote = ss.open(url, cache_dir=tmp_path, cache_limit=largest // 2)
    before = s3.counts()["ranged_gets"]
    if backend == "thread":
        got = _epoch(remote, workers=2, backend=backend)
    else:
        with pytest.warns(UserWarning, match="each downloads the pages it reads itself.*cache_limit"):
            got = _epoch(remote, workers=2, backend=backend)
    assert_same(got, _epoch(ss.open(local)))
    gets = s3.counts()["ranged_gets"] - before
    trainer = remote.remote_stats()["downloads"]
    print(f"{backend}: {gets} ranged GETs for {pages} pages (the trainer's process: {trainer}); cache limit {largest // 2} B")
    if backend == "thread":
        assert gets == pages
    else:
        # read-ahead there only fills the shared cache, which holds no page: the trainer reads only the first page,
        # for the batches' layout, when the loader is made
        assert trainer <= 1
        assert gets == pages if backend == "helper" else pages <= gets <= 2 * pages  # each worker process: each page at most once
    assert sorted(os.listdir(tmp_path / "pages")) == [".key", ".lock"]  # nothing stored, nothing left half written


@pytest.mark.timeout(300)
@pytest.mark.parametrize(("backend", "room"), [("helper", 3), ("process", 3), ("process", 6)])
def test_with_a_cache_of_a_few_pages_the_trainers_read_ahead_evicts_no_page_before_the_workers_read_it(
    dataset: tuple[Path, str, int, int], s3: s3local.ProxyHandle, tmp_path: Path, backend: str, room: int
) -> None:
    local, url, pages, largest = dataset
    limit = room * (largest + 32) + 100  # ``room`` pages and their seals
    remote = ss.open(url, cache_dir=tmp_path, cache_limit=limit)
    before = s3.counts()["ranged_gets"]
    assert_same(_epoch(remote, workers=2, backend=backend), _epoch(ss.open(local)))
    gets = s3.counts()["ranged_gets"] - before
    trainer = remote.remote_stats()["downloads"]
    print(f"{backend}: {gets} ranged GETs for {pages} pages (the trainer's process: {trainer}); cache limit {limit} B")
    if backend == "helper":  # one process reads every page: once each, but for a few the trainer fetched as the helper read them
        assert gets <= pages * 1.25
    else:
        # the workers and the trainer's read-ahead share what the cache holds, and a page one of them is downloading
        # is waited for, not downloaded again (its claim): about once each. The margin (10%, 2 pages of 24) is
        # for a page evicted between its download and another process's read of it (the read-ahead's window
        # counts only this loader's batches being read), or a wait cut short on a loaded machine; without the
        # claims the two workers and the read-ahead downloaded about 1.5-2 times the pages
        assert gets <= pages * 1.1
    assert not list((tmp_path / "pages").glob("*.claim"))  # no claim left behind


def test_a_retired_page_is_the_first_the_cache_evicts(tmp_path: Path) -> None:
    from slipstream.remote.cache import PageCache

    cache = PageCache(tmp_path / "pages", 3 * (100 + 32))
    for key in ("aa", "bb", "cc"):
        assert cache.put(key, bytes(100))
    assert cache.get("aa", 100) is not None  # "bb" is now the least recently used page...
    cache.retire("cc")  # ...but "cc" was read for the last time
    cache.retire("dd")  # (a page not there: nothing to do)
    assert cache.put("dd", bytes(100))
    assert [cache.has(key) for key in ("aa", "bb", "cc", "dd")] == [True, True, False, True]
