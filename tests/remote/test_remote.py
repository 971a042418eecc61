"""ss.open("s3://..."): a sharded dataset in object storage (a local moto S3 server, read directly or
through the fault-injecting proxy of tools/s3local.py) gives exactly what the same shards give on
local disk, survives transient faults, and fails with named errors when the store fails for good or
its objects change.

One S3 server, one proxy and one small dataset (5 shards of 3-4 pages: a JPEG image, an int label
and a float array per sample; plus two packed files written separately) serve the whole module;
each test reads through its own fresh cache folder (``tmp_path``), so no test sees another's cached
pages, and a test that changes objects changes its own copy. Expected values are never written down:
every remote read is compared with the same data read locally.

Every fault injection and permanent failure runs in a child interpreter with a timeout
(``_in_child``: tests/support/remote_helpers.py runs one of its ``scenario_*``), so a hang fails only the
tests of that child; the child compares with local data itself and returns counters. The fault
plans share one child (``fault_runs``: one interpreter start, a test per plan), and so do the
stopped-endpoint tests. The tests of changed objects run here, with a small retry budget (their
errors come at once). Tests that change the proxy's fault schedule clear it afterwards; its
counters are compared as differences.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("moto")
pytest.importorskip("s3fs")
pytest.importorskip("boto3")

from helpers import assert_same
from remote_helpers import (
    BATCH,
    BUCKET,
    FIELDS,
    PAGE_SIZE,
    RESULT,
    SAMPLES,
    SHARD_SIZE,
    SPLIT,
    epoch,
    fetcher_stats,
    s3local,
    samples,
)

import slipstream as ss
from slipstream.remote.cachedir import TAG

HELPERS = Path(__file__).resolve().parents[1] / "support" / "remote_helpers.py"
SRC = Path(ss.__file__).resolve().parents[1]  # where the slipstream under test is imported from


@dataclass(frozen=True)
class Data:
    """The module's dataset: the local copies and the URLs of their uploads."""

    folder: str  # the sharded dataset, local
    url: str  # ... and uploaded
    files: list[str]  # two packed files written separately, local
    file_urls: list[str]  # ... and uploaded
    index: dict[str, Any]  # the sharded dataset's index.json

    def shard(self, k: int) -> dict[str, Any]:
        return self.index["shards"][k]

    def first_sample(self, k: int) -> int:
        """The dataset number of shard ``k``'s first sample."""
        return sum(entry["samples"] for entry in self.index["shards"][:k])

    def first_page(self, k: int) -> int:
        """The dataset number of shard ``k``'s first page."""
        return sum(len(entry["pages"]) for entry in self.index["shards"][:k])

    def pages(self) -> int:
        return sum(len(entry["pages"]) for entry in self.index["shards"])

    def page_bytes(self) -> int:
        return sum(page[1] for entry in self.index["shards"] for page in entry["pages"])


# ------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def server() -> Iterator[s3local.S3Server]:
    with s3local.start_server() as s3:
        yield s3


@pytest.fixture(scope="module")
def data(server: s3local.S3Server, tmp_path_factory: pytest.TempPathFactory) -> Data:
    root = tmp_path_factory.mktemp("remote-data")
    every = samples()
    folder = ss.write(root / "train", every, FIELDS, progress=False, page_size=PAGE_SIZE, shard_size=SHARD_SIZE)
    files = [
        ss.write(root / "a.arrow", every[:SPLIT], FIELDS, progress=False, page_size=PAGE_SIZE),
        ss.write(root / "b.arrow", every[SPLIT:], FIELDS, progress=False, page_size=PAGE_SIZE),
    ]
    s3local.upload(server, folder, BUCKET, "train")
    for path in files:
        s3local.upload(server, path, BUCKET, "files")
    index = json.loads((folder / "index.json").read_text())
    assert len(index["shards"]) >= 4 and all(len(entry["pages"]) >= 3 for entry in index["shards"][:-1])
    return Data(
        str(folder), f"s3://{BUCKET}/train/", [str(p) for p in files], [f"s3://{BUCKET}/files/{p.name}" for p in files], index
    )


@pytest.fixture
def s3_env(server: s3local.S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """The standard AWS variables of the server, for reads in this process."""
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)


def _copy(server: s3local.S3Server, data: Data, prefix: str) -> str:
    """A fresh copy of the sharded dataset under ``prefix`` (for a test that changes its objects); its URL."""
    s3local.upload(server, data.folder, BUCKET, prefix)
    return f"s3://{BUCKET}/{prefix}/"


def _delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    faults = {k: n - before["faults"].get(k, 0) for k, n in after["faults"].items() if n != before["faults"].get(k, 0)}
    return {k: (faults if k == "faults" else after[k] - before[k]) for k in after}


def _in_child(scenario: str, via: str, timeout: float = 60, **kwargs: Any) -> dict[str, Any]:
    """``remote_helpers.<scenario>(**kwargs)`` run in a fresh interpreter whose S3 endpoint is
    ``via`` (AWS_ENDPOINT_URL); its result, with ``"exited_at"`` (``time.time()`` when the child had
    exited). Fails the test when the child fails (with its traceback) or runs past ``timeout`` s."""
    env = {**os.environ, **s3local.CREDENTIALS, "AWS_ENDPOINT_URL": via}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SRC), env.get("PYTHONPATH")]))
    argv = [sys.executable, str(HELPERS), scenario, json.dumps(kwargs)]
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, env=env, check=False)
    except subprocess.TimeoutExpired as e:
        stderr = e.stderr.decode(errors="replace") if isinstance(e.stderr, bytes) else e.stderr or ""
        pytest.fail(f"{scenario} hung: still running after {timeout} s; its stderr:\n{stderr[-4000:]}")
    if done.returncode != 0:
        pytest.fail(f"{scenario} failed (exit code {done.returncode}); its stderr:\n{done.stderr[-6000:]}")
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    assert lines, f"{scenario} printed no result; its stdout:\n{done.stdout[-2000:]}"
    result = json.loads(lines[-1][len(RESULT) :])
    if isinstance(result, dict):
        result["exited_at"] = time.time()
    return result


# ------------------------------------------------------------------------- 1. the same data as local


def test_open_index_and_validate_like_local(data: Data, s3_env: None, tmp_path: Path) -> None:
    remote, local = ss.open(data.url, cache_dir=tmp_path, cache_limit="5MB"), ss.open(data.folder)
    assert isinstance(remote, ss.ShardedDataset) and remote.remote and not local.remote
    assert len(remote) == len(local) == SAMPLES
    assert remote.num_pages == local.num_pages == data.pages()
    np.testing.assert_array_equal(remote.page_starts(), local.page_starts())
    assert [len(s) for s in remote.shards] == [len(s) for s in local.shards]
    for i in (0, 1, 13, 61, 150, SAMPLES - 1, -1, -2, -SAMPLES):
        assert_same(remote[i], local[i], f"sample {i}")
    for bad in (SAMPLES, -SAMPLES - 1):
        with pytest.raises(IndexError):
            remote[bad]
    assert remote.metadata == local.metadata
    remote.validate()
    assert str(remote.source_of(-1)) == data.url + data.shard(-1)["file"]


@pytest.mark.parametrize("backend", ["thread", "process", "helper"])
def test_loader_batches_equal_local(data: Data, s3_env: None, tmp_path: Path, backend: str) -> None:
    """Shuffled with the image pipeline on each of two ranks, and quasi-random: bit-identical batches."""
    remote, local = ss.open(data.url, cache_dir=tmp_path), ss.open(data.folder)
    for rank in range(2):
        got = epoch(remote, backend=backend, shuffle=True, rank=rank, world_size=2)
        assert_same(got, epoch(local, backend=backend, shuffle=True, rank=rank, world_size=2), f"{backend}, rank {rank}")
        assert len(got) == -(-SAMPLES // 2 // BATCH)
    got = epoch(remote, backend=backend, order="quasi_random")
    assert_same(got, epoch(local, backend=backend, order="quasi_random"), f"{backend}, quasi_random")
    assert sorted(np.concatenate([b["label"] for b in got]).tolist()) == list(range(SAMPLES))


def test_a_list_of_files_and_a_single_file_url(data: Data, s3_env: None, tmp_path: Path) -> None:
    remote, local = ss.open(data.file_urls, cache_dir=tmp_path), ss.open(data.files)
    assert isinstance(remote, ss.ShardedDataset) and remote.remote
    assert len(remote) == len(local) == SAMPLES and [len(s) for s in remote.shards] == [SPLIT, SAMPLES - SPLIT]
    for i in (0, SPLIT - 1, SPLIT, -1, -SAMPLES):
        assert_same(remote[i], local[i], f"sample {i}")
    remote.validate()
    assert_same(epoch(remote, shuffle=True), epoch(local, shuffle=True), "list of files")

    one, one_local = ss.open(data.file_urls[1], cache_dir=tmp_path / "one"), ss.open(data.files[1])
    assert isinstance(one, ss.PackedDataset) and one.remote and len(one) == len(one_local) == SAMPLES - SPLIT
    for i in (0, 57, -1, -(SAMPLES - SPLIT)):
        assert_same(one[i], one_local[i], f"single file, sample {i}")
    one.validate()
    assert_same(epoch(one, order="quasi_random"), epoch(one_local, order="quasi_random"), "single file")


# ------------------------------------------------------------------------- 2. transient faults, survived

KINDS = ["drop", "503", "reset", "truncate", "slow"]


def _mixed() -> dict[int, str]:
    """GETs 2, 5, 7, 10, 12, ... fail, each time another way (more than an epoch asks for with its
    retries); GET 1 is flipped (one flip only: see ``FAULT_PLANS``)."""
    schedule, n = {1: "flip"}, 0
    for k in range(60):
        n += 2 + k % 2
        schedule[n] = KINDS[k % len(KINDS)]
    return schedule


# One plan per fault kind alone, and a mixed one. A slow answer (1 s) outlasts the request timeout
# (0.5 s), so it is asked again. Flips happen once per plan: the proxy flips the same byte of a range
# every time, and the same wrong bytes twice read as an object that changed (a ChecksumError, by
# design), which concurrent retries of one page could otherwise meet.
FAULT_PLANS: dict[str, dict[str, Any]] = {
    **{kind: {"faults": kind, "every": 3, "slow": 1.0, "open": {"timeout": 0.5}, "loader": {"shuffle": True}} for kind in KINDS},
    "flip": {"faults": {2: "flip"}, "loader": {"shuffle": True}},
    "mixed": {"faults": _mixed(), "slow": 1.0, "open": {"timeout": 0.5}, "loader": {"order": "quasi_random"}},
}


@pytest.fixture(scope="module")
def fault_runs(data: Data, proxy_module: s3local.ProxyHandle, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every plan of ``FAULT_PLANS`` run in one child (one interpreter start for all): per plan, the
    proxy's fault counts, the fetcher's counters and the child's traceback if the epoch failed."""
    try:
        return _in_child(
            "scenario_faults", proxy_module.endpoint, timeout=100, url=data.url, local=data.folder,
            cache_dir=str(tmp_path_factory.mktemp("faults")), endpoint=proxy_module.endpoint, plans=FAULT_PLANS,
        )  # fmt: skip
    finally:
        proxy_module.set_faults(None)


@pytest.mark.parametrize("plan", list(FAULT_PLANS))
def test_an_epoch_survives_transient_faults(data: Data, fault_runs: dict[str, Any], plan: str) -> None:
    """The epoch's batches equal local ones (checked in the child), the faults happened, and the
    faulted transfers were asked again."""
    run = fault_runs[plan]
    assert run["error"] is None, f"plan {plan}: the epoch failed in the child:\n{run['error']}"
    want = set(KINDS) | {"flip"} if plan == "mixed" else {plan}
    assert set(run["faults"]) == want and all(n >= 1 for n in run["faults"].values()), run
    stats = run["stats"]
    # every page was downloaded, and each faulted GET was followed by another of its page
    assert stats["downloads"] >= data.pages() and run["ranged_gets"] >= data.pages() + sum(run["faults"].values()), run
    if plan != "drop":  # (a request whose kept-alive connection was dropped may be resent by the HTTP client itself)
        assert stats["requests"] > stats["downloads"], run  # slipstream's retries asked again
    if plan in ("truncate", "flip", "mixed"):
        assert stats["retries"] >= 1, run


def test_retries_count_every_retried_transfer(fault_runs: dict[str, Any]) -> None:
    stats = fault_runs["503"]["stats"]
    assert stats["requests"] > stats["downloads"] and stats["retries"] == stats["requests"] - stats["downloads"], stats


# ---------------------------------------------------------------------------- 3. permanent failures

BUDGET = 3.0  # the retry_budget of the permanent failures (timeout=2)
WAIT = 12.0  # the time a child gives each part of such a scenario before abandoning it
STOPPED_BUDGET = 1.0  # smaller where a part is known to run out of time (it costs its wait)


def test_503_for_good_gives_remote_read_error_within_the_budget(data: Data, proxy: s3local.ProxyHandle, tmp_path: Path) -> None:
    """Every ranged GET answers 503 after the dataset was opened and a loader made: a read raises
    RemoteReadError naming the object and the page's bytes within the budget; so do the loader's
    epochs (threads, processes), and the child then exits at once (read-ahead still retrying does
    not hold it up)."""
    got = _in_child(
        "scenario_fails_for_good", proxy.endpoint, timeout=60, url=data.url, cache_dir=str(tmp_path), endpoint=proxy.endpoint,
        budget=BUDGET, how="503", backends=["thread", "process"], wait=WAIT,
    )  # fmt: skip
    _assert_names_the_page(data, got["read"], BUDGET)
    for backend in ("thread", "process"):
        part = got[backend]
        assert part.get("type") == "RemoteReadError" and part["url"].startswith(data.url), (backend, part)
        # (+ starting worker processes; the thread executor, closing on the error, gives its workers
        # up to 2 s to leave the downloads they retry for later batches)
        assert part["stop"] > part["start"] and part["seconds"] < BUDGET + 4, (backend, part)
    assert not got["abandoned"] and got["exited_at"] - got["process"]["returned_at"] < 5, got


def _assert_names_the_page(data: Data, read: dict[str, Any], budget: float) -> None:
    """``read`` is the RemoteReadError of shard 0's last page, raised within ``budget`` (and a margin)."""
    offset, length = data.shard(0)["pages"][-1][:2]
    url = data.url + data.shard(0)["file"]
    assert read.get("type") == "RemoteReadError", read
    assert read["url"] == url and (read["start"], read["stop"]) == (offset, offset + length), read
    assert read["message"].startswith(f"{url}: bytes {offset}..{offset + length} could not be read"), read
    assert read["attempts"] >= 2 and read["seconds"] < budget + 1.5, read


@pytest.fixture(scope="module")
def stopped_run(data: Data, proxy_module: s3local.ProxyHandle, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The endpoint (a proxy of the child's own) stopped after a read and a loader were made: a read
    of shard 0's last page, then the loader's epoch (each given the budget and 4 s)."""
    return _in_child(
        "scenario_fails_for_good", proxy_module.endpoint, timeout=60, url=data.url, cache_dir=str(tmp_path_factory.mktemp("stopped")),
        endpoint=proxy_module.endpoint, budget=STOPPED_BUDGET, how="stopped", backends=["thread"], wait=STOPPED_BUDGET + 4,
    )  # fmt: skip


def test_a_stopped_endpoint_gives_remote_read_error_within_the_budget(data: Data, stopped_run: dict[str, Any]) -> None:
    _assert_names_the_page(data, stopped_run["read"], STOPPED_BUDGET)


def test_a_stopped_endpoint_fails_the_loader_within_the_budget(stopped_run: dict[str, Any]) -> None:
    part = stopped_run["thread"]
    assert part.get("type") == "RemoteReadError" and part["seconds"] < STOPPED_BUDGET + 3, part


def test_a_read_queued_behind_failing_prefetches_fails_within_its_budget(
    data: Data, proxy: s3local.ProxyHandle, tmp_path: Path
) -> None:
    budget, margin = 1.0, 1.5
    got = _in_child(
        "scenario_read_behind_queue", proxy.endpoint, timeout=40, url=data.url, cache_dir=str(tmp_path), endpoint=proxy.endpoint,
        budget=budget, wait=budget + margin,
    )  # fmt: skip
    assert got.get("type") == "RemoteReadError" and got["seconds"] < budget + margin, got


# ------------------------------------------------------------------------- 4. objects that changed


def _open_copy(server: s3local.S3Server, data: Data, prefix: str, tmp_path: Path) -> tuple[Any, Any]:
    """(remote copy of the dataset under ``prefix``, opened; a boto3 client)."""
    url = _copy(server, data, prefix)
    return ss.open(url, cache_dir=tmp_path, retry_budget=5, timeout=2), s3local.client(server)


def test_a_deleted_shard_is_a_missing_shard_error(data: Data, server: s3local.S3Server, s3_env: None, tmp_path: Path) -> None:
    remote, s3 = _open_copy(server, data, "deleted", tmp_path)
    local = ss.open(data.folder)
    name = data.shard(2)["file"]
    s3.delete_object(Bucket=BUCKET, Key=f"deleted/{name}")
    victim = f"s3://{BUCKET}/deleted/{name}"
    assert_same(remote[0], local[0], "shard 0")  # the others still read
    assert_same(remote[-1], local[-1], "the last shard")
    with pytest.raises(ss.MissingShardError, match=re.escape(victim)) as e:
        remote[data.first_sample(2) + 1]
    assert e.value.path == victim and isinstance(e.value, FileNotFoundError)
    with pytest.raises(ss.MissingShardError, match=re.escape(victim)):
        epoch(remote, shuffle=True)


def test_an_object_of_another_size_is_a_shard_mismatch_error(
    data: Data, server: s3local.S3Server, s3_env: None, tmp_path: Path
) -> None:
    remote, s3 = _open_copy(server, data, "resized", tmp_path)
    name = data.shard(1)["file"]
    s3.put_object(Bucket=BUCKET, Key=f"resized/{name}", Body=(Path(data.folder) / name).read_bytes() + bytes(100))
    with pytest.raises(ss.ShardMismatchError, match=re.escape(f"s3://{BUCKET}/resized/{name}")):
        remote[data.first_sample(1)]
    assert_same(remote[0], ss.open(data.folder)[0], "shard 0")


def _same_size_other_bytes(data: Data, k: int, page: int) -> tuple[bytes, int]:
    """Shard ``k``'s bytes with one byte inverted inside the JPEG of the first sample of its page
    ``page`` (same size, a valid layout); and that sample's number in the shard."""
    shard = ss.open(data.folder).shards[k]
    i = int(shard.page_starts()[page])
    jpeg = bytes(shard.encoded(i, "image")[1])
    raw = bytearray((Path(data.folder) / data.shard(k)["file"]).read_bytes())
    at = raw.find(jpeg)
    assert at > 0 and raw.find(jpeg, at + 1) < 0
    raw[at + len(jpeg) // 2] ^= 0xFF
    return bytes(raw), i


def test_an_object_with_other_bytes_is_a_checksum_error(
    data: Data, server: s3local.S3Server, s3_env: None, tmp_path: Path
) -> None:
    remote, s3 = _open_copy(server, data, "changed", tmp_path)
    local = ss.open(data.folder)
    k, page = 3, 1
    body, i = _same_size_other_bytes(data, k, page)
    s3.put_object(Bucket=BUCKET, Key=f"changed/{data.shard(k)['file']}", Body=body)
    url = f"s3://{BUCKET}/changed/{data.shard(k)['file']}"
    offset, length = data.shard(k)["pages"][page][:2]
    with pytest.raises(ss.ChecksumError, match=re.escape(f"{url}: page {page} (samples ") + r"\d+\.\.\d+\): " + re.escape(f"bytes {offset}..{offset + length} fail their checksum")):
        remote[data.first_sample(k) + i]
    first = data.first_sample(k)
    assert_same(remote[first], local[first], "the shard's page 0")  # the unchanged pages still read
    with pytest.raises(ss.ChecksumError, match=re.escape(url)):
        epoch(remote, order="quasi_random")
    with pytest.raises(ss.ChecksumError, match=re.escape(f"{url}: page {page}")) as e:
        remote.validate()
    assert e.value.page == data.first_page(k) + page  # the dataset's page number (the message names the shard's too)


def test_a_remote_checksum_error_locates_its_page(data: Data, server: s3local.S3Server, s3_env: None, tmp_path: Path) -> None:
    remote, s3 = _open_copy(server, data, "located", tmp_path)
    k, page = 3, 1
    body, i = _same_size_other_bytes(data, k, page)
    s3.put_object(Bucket=BUCKET, Key=f"located/{data.shard(k)['file']}", Body=body)
    shard = ss.open(data.folder).shards[k]
    starts = shard.page_starts()
    with pytest.raises(ss.ChecksumError) as e:
        remote[data.first_sample(k) + i]
    first = data.first_sample(k)  # the page and samples in the dataset's numbers, as ds[i] counts them
    assert e.value.page == data.first_page(k) + page and e.value.samples == range(first + int(starts[page]), first + int(starts[page + 1]))
    assert f"page {page} (samples {starts[page]}..{starts[page + 1] - 1})" in str(e.value)  # the shard's own, in the message
    assert f"in the dataset: page {data.first_page(k) + page}, samples {first + starts[page]}..{first + starts[page + 1] - 1}" in str(e.value)


# ------------------------------------------------------------------------- 5. read-ahead, 6. warm cache


def test_the_loader_reads_ahead(data: Data, s3_env: None, tmp_path: Path) -> None:
    """Without the loader each page is downloaded when first read (never a hit); a loader's first,
    cold epoch finds pages already in the cache, put there by read-ahead before they were read."""
    plain = ss.open(data.url, cache_dir=tmp_path / "plain")
    for i in range(len(plain)):
        plain[i]
    stats = fetcher_stats(plain)
    assert stats["hits"] == 0 and stats["misses"] == data.pages(), stats

    remote = ss.open(data.url, cache_dir=tmp_path / "loader")
    assert_same(epoch(remote), epoch(ss.open(data.folder)), "sequential epoch")
    stats = fetcher_stats(remote)
    assert stats["hits"] + stats["joined"] > 0 and stats["downloads"] >= data.pages(), stats


def test_a_warm_cache_serves_a_second_open(
    data: Data, proxy: s3local.ProxyHandle, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    for name, value in {**s3local.CREDENTIALS, "AWS_ENDPOINT_URL": proxy.endpoint}.items():
        monkeypatch.setenv(name, value)
    want = epoch(ss.open(data.folder), shuffle=True)
    first = ss.open(data.url, cache_dir=tmp_path, cache_limit="5MB")
    before = proxy.counts()
    assert_same(epoch(first, shuffle=True), want, "cold epoch")
    assert _delta(before, proxy.counts())["ranged_gets"] >= data.pages()
    assert fetcher_stats(first)["cache_bytes"] == data.page_bytes() + TAG * data.pages()  # every page, once (and its seal)

    second = ss.open(data.url, cache_dir=tmp_path, cache_limit="5MB")
    before = proxy.counts()
    assert_same(epoch(second, shuffle=True), want, "warm epoch")
    assert _delta(before, proxy.counts())["ranged_gets"] == 0
    stats = fetcher_stats(second)
    assert stats["misses"] == stats["requests"] == 0 and stats["hits"] > 0, stats
