"""WebDataset tar shards in object storage read in place (``inplace.webdataset_remote``), against a real
local S3 server (moto, tools/s3local.py) and its fault-injecting proxy: the same samples and batches
as the same shards read locally (``inplace.webdataset``), an index made by one pass and then read
from the index cache with no request, resume, faults survived, and changed, removed or damaged
objects refused with errors naming them.

One server and one small set (3 shards of 14 samples: a JPEG and a class label each) serve the
module; each test reads through its own cache folder (``tmp_path``), and a test that changes objects
changes its own copy. Expected values are never written down: every remote read is compared with
the same shards read locally. Fault injection runs in a child interpreter with a timeout.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("moto")
pytest.importorskip("s3fs")
pytest.importorskip("boto3")

import tarfile

from helpers import assert_resumes_exactly, assert_same, run_python, snapshot
from remote_helpers import pipeline, s3local
from tardata import image_shards, write_tar

import slipstream as ss
from slipstream.core.errors import ChecksumError, CorruptFileError, MissingShardError, ShardMismatchError
from slipstream.inplace import tarcache
from slipstream.inplace.tarindex import object_identity
from slipstream.inplace.webdataset import open_webdataset
from slipstream.inplace.webdataset_remote import open_remote_webdataset

BUCKET = "slipstream-tars"
SHARDS, PER_SHARD = 3, 14
PART = 4  # samples per part: 4 parts a shard
RESULT = "RESULT "


@dataclass(frozen=True)
class Data:
    folder: Path  # the shards, local
    files: list[Path]
    url: str  # ... uploaded: s3://BUCKET/set/

    def urls(self) -> list[str]:
        return [self.url + f.name for f in self.files]


def _put(server: Any, key: str, data: bytes) -> str:
    s3local.client(server).put_object(Bucket=BUCKET, Key=key, Body=data)
    return f"s3://{BUCKET}/{key}"


def _samples(ds: Any) -> list[dict[str, Any]]:
    return [ds[i] for i in range(len(ds))]


def _epoch(ds: Any, **kwargs: Any) -> list[Any]:
    """One epoch's batches (copied) of the shards' images through the image pipeline."""
    with ss.DataLoader(ds.map(jpg=pipeline()), 8, seed=11, workers=2, **kwargs) as loader:
        return [snapshot(batch) for batch in loader]


@pytest.fixture(scope="module")
def server() -> Iterator[s3local.S3Server]:
    with s3local.start_server() as s3:
        s3local.client(s3).create_bucket(Bucket=BUCKET)
        yield s3


@pytest.fixture(scope="module")
def data(server: s3local.S3Server, tmp_path_factory: pytest.TempPathFactory) -> Data:
    folder = tmp_path_factory.mktemp("tars-remote") / "set"
    folder.mkdir()
    files = image_shards(folder, SHARDS, PER_SHARD)
    s3local.upload(server, folder, BUCKET, "set")
    return Data(folder, files, f"s3://{BUCKET}/set/")


def _env(monkeypatch: pytest.MonkeyPatch, endpoint: str, cache: Path) -> None:
    for name, value in {**s3local.CREDENTIALS, "AWS_ENDPOINT_URL": endpoint, "SLIPSTREAM_CACHE_DIR": str(cache)}.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def direct(server: s3local.S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Reads in this process go to the server itself; the local shards' indexes are cached in the test's folder."""
    _env(monkeypatch, server.endpoint, tmp_path / "local-cache")


@pytest.fixture
def proxied(proxy: s3local.ProxyHandle, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> s3local.ProxyHandle:
    """Reads in this process go through the proxy (no faults), whose counters count them."""
    _env(monkeypatch, proxy.endpoint, tmp_path / "local-cache")
    return proxy


# ------------------------------------------------------------------------------------ the same data


def test_a_prefix_a_list_a_pattern_and_one_object_read_as_the_local_shards(direct: None, data: Data, tmp_path: Path) -> None:
    want = _samples(open_webdataset(data.folder, part_samples=PART))
    pattern = f"{data.url}shard-{{0000..{SHARDS - 1:04d}}}.tar"
    for k, path in enumerate([data.url, data.urls(), pattern]):
        ds = open_remote_webdataset(path, cache_dir=tmp_path / f"c{k}", part_samples=PART)
        assert len(ds.shards) == SHARDS and ds.shards[1].path == data.urls()[1]
        assert_same(_samples(ds), want, "sample")
    one = open_remote_webdataset(data.urls()[2], ["__key__", "cls"], cache_dir=tmp_path / "one")
    assert one.path == data.urls()[2]
    assert_same(_samples(one), [{k: s[k] for k in ("__key__", "cls")} for s in want[2 * PER_SHARD :]], "sample")


def test_ss_open_reads_tar_urls_patterns_and_a_prefix_without_an_index_in_place(direct: None, data: Data, tmp_path: Path) -> None:
    want = _samples(open_webdataset(data.folder))
    for k, path in enumerate([data.url, data.url.rstrip("/"), data.urls(), f"{data.url}shard-{{0000..0002}}.tar"]):
        assert_same(_samples(ss.open(path, cache_dir=tmp_path / f"c{k}")), want, "sample")
    with pytest.raises(MissingShardError, match="shard-0003.tar"):
        ss.open(f"{data.url}shard-{{0000..0009}}.tar", cache_dir=tmp_path / "missing")
    with pytest.raises(MissingShardError):
        ss.open(f"s3://{BUCKET}/nothing-here/", cache_dir=tmp_path / "nothing")


def test_batches_through_the_pipeline_are_the_local_ones_and_resume_exactly(direct: None, data: Data, tmp_path: Path) -> None:
    local = open_webdataset(data.folder, ["jpg", "cls"], part_samples=PART)
    remote = open_remote_webdataset(data.url, ["jpg", "cls"], cache_dir=tmp_path, part_samples=PART)
    for order in ("random", "quasi_random"):
        assert_same(_epoch(remote, order=order), _epoch(local, order=order), "batch")

    def make() -> Any:
        return ss.DataLoader(remote.map(jpg=pipeline()), 8, seed=3, workers=2, order="quasi_random")

    assert assert_resumes_exactly(make, epochs=1) > 3


# ------------------------------------------------------------------------------- what opening reads


def test_the_index_is_made_by_one_pass_then_read_from_the_cache_without_a_request(
    proxied: s3local.ProxyHandle, data: Data, tmp_path: Path
) -> None:
    size = sum(f.stat().st_size for f in data.files)
    before = proxied.counts()
    ds = open_remote_webdataset(data.url, cache_dir=tmp_path, part_samples=PART)
    first, after = ds.remote_stats(), proxied.counts()
    assert first["bytes"] == size and first["reads"] == 0  # each shard once, by the pass; no part read
    assert after["ranged_gets"] - before["ranged_gets"] == first["requests"] >= SHARDS
    assert len(list((tmp_path / "tarindex").glob("*.idx"))) == SHARDS
    again = open_remote_webdataset(data.url, cache_dir=tmp_path, part_samples=PART)
    final = proxied.counts()
    assert again.remote_stats()["requests"] == 0 and final["ranged_gets"] == after["ranged_gets"]
    assert final["requests"] - after["requests"] <= 2  # the listing
    again[len(again) - 1]
    assert again.remote_stats()["requests"] == 1  # one part: one range (its object's HEAD is no ranged read)
    assert proxied.counts()["ranged_gets"] == final["ranged_gets"] + 1


def test_a_shard_of_large_members_is_indexed_without_downloading_them(
    proxied: s3local.ProxyHandle, server: s3local.S3Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tarcache, "REMOTE_WINDOW", 4096)
    monkeypatch.setattr(tarcache, "REMOTE_WINDOWS", 2)
    big = 3 * 4096 * 2  # each member larger than one round of the pass
    path = write_tar(tmp_path / "big.tar", [(f"{k:03d}.bin", bytes([k]) * big) for k in range(4)])
    url = _put(server, "big/big.tar", path.read_bytes())
    ds = open_remote_webdataset(url, cache_dir=tmp_path / "cache")
    assert ds.remote_stats()["bytes"] <= 5 * 4096 * 2 + 2 * 10240  # a round per header (and the end), not the members
    assert [ds[k]["bin"] for k in range(4)] == [bytes([k]) * big for k in range(4)]


# ------------------------------------------------------------------------- changed or damaged objects


def test_a_changed_or_removed_object_is_refused_naming_it(
    direct: None, server: s3local.S3Server, data: Data, tmp_path: Path
) -> None:
    urls = [_put(server, f"changed/{f.name}", f.read_bytes()) for f in data.files]
    ds = open_remote_webdataset(f"s3://{BUCKET}/changed/", cache_dir=tmp_path, part_samples=PART)
    other = image_shards(tmp_path, 1, PER_SHARD + 1)[0]  # other bytes, another size
    _put(server, "changed/shard-0001.tar", other.read_bytes())
    with pytest.raises(ShardMismatchError, match="changed since") as caught:
        ds[PER_SHARD]
    assert caught.value.path == urls[1]
    s3local.client(server).delete_object(Bucket=BUCKET, Key="changed/shard-0002.tar")
    with pytest.raises(MissingShardError) as missing:
        ds[2 * PER_SHARD]
    assert missing.value.path == urls[2]
    assert_same([ds[i] for i in range(PER_SHARD)], _samples(open_webdataset(data.files[0], part_samples=PART)), "sample")


def test_an_index_that_is_not_the_objects_is_caught_by_the_headers_read(
    direct: None, server: s3local.S3Server, tmp_path: Path
) -> None:
    """A cache entry for the object's name, size and tag made from another tar of the same layout
    (forged, or a store that reuses tags): every part read checks the member headers it holds."""
    members = [(f"{k:05d}.{ext}", b"x" * 700) for k in range(6) for ext in ("a", "b")]
    renamed = [(name.replace("00003", "00009"), value) for name, value in members]
    good, other = write_tar(tmp_path / "good.tar", members), write_tar(tmp_path / "other.tar", renamed)
    assert good.stat().st_size == other.stat().st_size
    url = _put(server, "forged/shard.tar", other.read_bytes())
    ds = open_remote_webdataset(url, cache_dir=tmp_path / "cache", part_samples=2)
    entry = next((tmp_path / "cache" / "tarindex").glob("*.idx"))
    index = ds._source.index
    forged = tarcache.tar_index(good, cache=False)
    forged.path, forged.identity = index.path, object_identity(index.identity[1], index.identity[2])
    entry.write_bytes(tarcache._encode(forged))
    again = open_remote_webdataset(url, cache_dir=tmp_path / "cache", part_samples=2, retry_budget=10)
    assert again[0]["a"] == b"x" * 700  # parts whose headers agree read as ever
    with pytest.raises(ChecksumError, match="00009") as caught:
        again[3]
    assert caught.value.path == url and "the same bytes three times" in str(caught.value)


@pytest.mark.parametrize("damage", ["checksum", "truncated", "gzip"])
def test_a_damaged_tar_is_refused_at_open_naming_the_object(
    direct: None, server: s3local.S3Server, data: Data, tmp_path: Path, damage: str
) -> None:
    raw = bytearray(data.files[0].read_bytes())
    if damage == "checksum":
        with tarfile.open(data.files[0]) as tar:
            raw[tar.getmembers()[3].offset + 10] ^= 0x20  # a byte of the fourth member's header (its name)
    elif damage == "truncated":
        raw = raw[: len(raw) // 2 + 100]
    else:
        import gzip

        raw = bytearray(gzip.compress(bytes(raw)))
    url = _put(server, f"damaged/{damage}.tar", bytes(raw))
    with pytest.raises(CorruptFileError) as caught:
        open_remote_webdataset(url, cache_dir=tmp_path, retry_budget=10)
    assert caught.value.path == url


# ------------------------------------------------------------------------------------------ faults

CHILD = r"""
import json, sys, traceback
import slipstream as ss
from helpers import assert_same, snapshot
from remote_helpers import pipeline, proxy_control
from slipstream.inplace.webdataset import open_webdataset
from slipstream.inplace.webdataset_remote import open_remote_webdataset

args = json.loads(sys.argv[1])
url, cache, endpoint = args["url"], args["cache"], args["endpoint"]


def epoch(ds, backend):
    with ss.DataLoader(ds.map(jpg=pipeline()), 8, seed=11, workers=2, shuffle=True, backend=backend) as loader:
        return [snapshot(batch) for batch in loader]


local = open_webdataset(args["folder"], part_samples=4)
want_samples = [local[i] for i in range(len(local))]
want_epoch = epoch(open_webdataset(args["folder"], ["jpg", "cls"], part_samples=4), "thread")
out = {}
for name, faults, every, backend in [("transient", ["503", "reset", "truncate", "flip", "drop", "slow"], 2, "thread"),
                                     ("processes", ["503", "flip", "truncate"], 3, "process")]:
    before = proxy_control(endpoint, "counts")["faults"]
    proxy_control(endpoint, "config", {"faults": faults, "every": every, "slow": 2.5})
    try:  # cold: the pass over the headers and every part through the faults
        ds = open_remote_webdataset(url, cache_dir=f"{cache}/{name}", part_samples=4, timeout=1.0, retry_budget=60)
        assert_same([ds[i] for i in range(len(ds))], want_samples, "sample")
        batched = open_remote_webdataset(url, ["jpg", "cls"], cache_dir=f"{cache}/{name}-b", part_samples=4, timeout=1.0, retry_budget=60)
        assert_same(epoch(batched, backend), want_epoch, "epoch")
        after = proxy_control(endpoint, "counts")["faults"]
        out[name] = {"error": None, "retries": ds.remote_stats()["retries"],
                     "faults": sorted(k for k, n in after.items() if n != before.get(k, 0))}
    except Exception:
        out[name] = {"error": traceback.format_exc()}
    proxy_control(endpoint, "config", {"faults": None})
print("RESULT " + json.dumps(out), flush=True)
"""


def test_transient_faults_are_survived(data: Data, proxy_module: s3local.ProxyHandle, tmp_path: Path) -> None:
    args = {"url": data.url, "cache": str(tmp_path), "endpoint": proxy_module.endpoint, "folder": str(data.folder)}
    env = {**s3local.CREDENTIALS, "AWS_ENDPOINT_URL": proxy_module.endpoint, "SLIPSTREAM_CACHE_DIR": str(tmp_path / "local")}
    done = run_python(CHILD, timeout=240, env=env, argv=[json.dumps(args)])
    proxy_module.set_faults(None)
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    assert done.returncode == 0 and lines, (
        f"the child failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    )
    out = json.loads(lines[-1][len(RESULT) :])
    for run in ("transient", "processes"):
        assert out[run]["error"] is None, out[run]["error"]
    assert out["transient"]["retries"] > 0
    assert out["transient"]["faults"] == ["503", "drop", "flip", "reset", "slow", "truncate"], out
    assert out["processes"]["faults"] == ["503", "flip", "truncate"], out
