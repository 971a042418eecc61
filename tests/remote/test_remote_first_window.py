"""A loader over data in object storage starts downloading its first batches' pages when it is made.

Against the suite's S3 server, through the counting, fault-injecting proxy:

* made and not yet iterated, a loader downloads the pages of its first batches (and no others); its
  epoch then reads them without waiting for a download, and its batches are the local folder's;
* resumed from a state, it downloads the pages the resumed epoch reads first, and its batches are the
  local folder's resumed ones;
* dropped before it is iterated, it takes back what it had queued: those pages are never requested, the
  download under way ends on its own, no claim is left held, and the read-ahead threads end once idle.
"""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import assert_same, snapshot

import slipstream as ss
from slipstream import fields as F
from slipstream.loading.readahead import depth_of
from slipstream.remote import fetch as fetch_module
from slipstream.remote.fetch import range_key

for _name in ("moto", "boto3", "s3fs"):
    pytest.importorskip(_name)

import s3local  # (tools/, on the path from conftest)

BUCKET = "slipstream-first-window"
SAMPLES = 400
BATCH = 16
DEADLINE = 60.0  # for any wait here: a hang, not a speed check


@pytest.fixture(scope="module")
def server() -> Iterator[s3local.S3Server]:
    with s3local.start_server() as s3:
        yield s3


@pytest.fixture(scope="module")
def dataset(server: s3local.S3Server, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """(local folder, its URL): pages of 10 samples in 4 shards."""
    local = tmp_path_factory.mktemp("first-window") / "ds"
    samples = [{"label": k, "x": np.arange(k, k + 250, dtype=np.float32)} for k in range(SAMPLES)]
    ss.write(local, samples, {"label": F.Int(), "x": F.Array("float32", (250,))}, progress=False, page_size=10_000, shard_size=110_000)
    index = json.loads((local / "index.json").read_text())
    assert len(index["shards"]) >= 4 and sum(len(shard["pages"]) for shard in index["shards"]) >= 30
    s3local.upload(server, local, BUCKET, "ds")
    return local, f"s3://{BUCKET}/ds/"


@pytest.fixture
def s3(proxy: s3local.ProxyHandle, server: s3local.S3Server, monkeypatch: pytest.MonkeyPatch) -> s3local.ProxyHandle:
    for name, value in {**server.env(), "AWS_ENDPOINT_URL": proxy.endpoint}.items():
        monkeypatch.setenv(name, value)
    return proxy


def _until(condition: Any, what: str) -> None:
    deadline = time.monotonic() + DEADLINE
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _pages_of(data: Any, batches: list[np.ndarray]) -> set[int]:
    starts = data.page_starts()
    return {int(p) for b in batches for p in np.searchsorted(starts, b, side="right") - 1}


def _cached(data: Any) -> set[int]:
    """The pages of a remote sharded dataset (numbered across its shards) in its disk cache now."""
    out, first = set(), 0
    for shard in data.shards:
        source = shard._source
        for p in range(shard.num_pages):
            if source.fetcher.cache.has(range_key(source.name, *source._range(p))):
                out.add(first + p)
        first += shard.num_pages
    return out


def _loader(data: Any, **kwargs: Any) -> ss.DataLoader:
    return ss.DataLoader(data, BATCH, order="quasi_random", seed=11, workers=2, **kwargs)


def test_a_loader_made_downloads_its_first_batches_pages_and_its_epoch_reads_them_at_once(
    dataset: tuple[Path, str], s3: s3local.ProxyHandle, tmp_path: Path
) -> None:
    local, url = dataset
    remote = ss.open(url, cache_dir=tmp_path, readahead=16)
    loader = _loader(remote)
    first = loader.options.epoch_order.batches(0, len(remote), loader.seed)[: depth_of(loader.prefetch, loader.workers)]
    wanted = _pages_of(remote, first) | {0}  # (page 0: read for the batches' layout as the loader is made)
    _until(lambda: _cached(remote) == wanted, "the first batches' pages were not downloaded")
    assert remote.remote_stats()["downloads"] == len(wanted)  # those, and no others
    got = [snapshot(batch) for batch in loader]
    assert_same(got, [snapshot(batch) for batch in _loader(ss.open(local))])


def test_a_resumed_loader_downloads_the_resumed_epochs_first_pages(
    dataset: tuple[Path, str], s3: s3local.ProxyHandle, tmp_path: Path
) -> None:
    local, url = dataset
    source = _loader(ss.open(local))
    it = iter(source)
    for _ in range(9):
        next(it)
    state = source.state_dict()
    del it

    expected_loader = _loader(ss.open(local))
    expected_loader.load_state_dict(state)
    expected = [snapshot(batch) for batch in expected_loader]

    remote = ss.open(url, cache_dir=tmp_path, readahead=16)
    remote[0]  # (page 0 in memory: the loader's layout read adds nothing)
    loader = _loader(remote)
    loader.load_state_dict(state)
    order = loader.options.epoch_order.batches(0, len(remote), loader.seed)
    resumed_first = _pages_of(remote, order[9 : 9 + depth_of(loader.prefetch, loader.workers)]) - {0}
    _until(lambda: resumed_first <= _cached(remote), "the resumed epoch's first pages were not downloaded")
    got = [snapshot(batch) for batch in loader]
    assert_same(got, expected)


def test_a_loader_dropped_before_iter_takes_back_its_read_ahead(
    dataset: tuple[Path, str], s3: s3local.ProxyHandle, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, url = dataset
    monkeypatch.setattr(fetch_module._DaemonPool, "IDLE", 0.5)
    remote = ss.open(url, cache_dir=tmp_path, readahead=1)
    remote[0]  # (page 0 in memory: making the loader reads nothing itself)
    before, downloads = s3.counts()["ranged_gets"], remote.remote_stats()["downloads"]
    s3.set_faults("slow", every=1, slow=2.0)  # each page's answer held 2 s: one downloads, the others wait in the queue
    loader = _loader(remote)
    _until(lambda: s3.counts()["ranged_gets"] > before, "no read-ahead started")
    fetcher = remote.shards[0]._source.fetcher  # (shared by every shard)
    assert fetcher._queued >= 2  # (readahead=1: one under way, up to 4 queued)
    del loader
    gc.collect()
    _until(lambda: remote.remote_stats()["downloads"] > downloads and not fetcher._inflight, "the download under way did not end")
    s3.set_faults(None)
    assert s3.counts()["ranged_gets"] - before == 1  # the queued pages were never asked for
    assert remote.remote_stats()["downloads"] == downloads + 1
    assert not list((tmp_path / "pages").glob("*.claim"))  # no claim held or left
    _until(lambda: fetcher._pool._alive == 0, "read-ahead threads left running")
