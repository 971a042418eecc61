"""Parquet in object storage read in place (``inplace.parquet_remote``), against a real local S3
server (moto, tools/s3local.py) and its fault-injecting proxy: the same samples and mapped batches
as the same files read locally (``inplace.parquet``), opening that reads footers alone (counted by
the fetcher and by the proxy), a 1,000-object folder opened and opened again from the footer index,
faults survived, and changed, removed or damaged objects refused with errors naming them (every
single-byte flip of a footer among them, or else read as the same values).

One server and one small set (3 files of 4 row groups: a JPEG image, an int label, a token list and
a string per row; page CRCs written) serve the module; each test reads through its own cache folder
(``tmp_path``), and a test that changes objects changes its own copy. Expected values are never
written down: every remote read is compared with the same files read locally. Fault injection,
stores that fail for good and flipped footers run in a child interpreter with a timeout (a hang or
a crash fails only that test).
"""

from __future__ import annotations

import io
import json
import pickle
import stat
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("moto")
pytest.importorskip("s3fs")
pytest.importorskip("boto3")

import pyarrow as pa
import pyarrow.parquet as pq
from helpers import assert_same, run_python
from hfdata import jpeg
from remote_helpers import epoch, s3local

from slipstream.core.errors import ChecksumError, CorruptFileError, MissingFieldError, MissingShardError, ShardMismatchError
from slipstream.inplace import parquet_remote
from slipstream.inplace.parquet import open_parquet
from slipstream.inplace.parquet_remote import is_parquet_url, open_remote_parquet

BUCKET = "slipstream-inplace"
FILES, ROWS, GROUP = 3, 60, 16  # each file: row groups of 16, 16, 16 and 12 rows
MANY = 1000  # objects of the large folder
MANY_ROWS = 10
BATCHED = ["image", "label", "text"]  # the fields batches are compared with
RESULT = "RESULT "


@dataclass(frozen=True)
class Data:
    folder: Path  # the set, local
    files: list[Path]
    url: str  # ... uploaded: s3://BUCKET/set/

    def urls(self) -> list[str]:
        return [self.url + f.name for f in self.files]


def _table(first: int, n: int) -> pa.Table:
    rows = range(first, first + n)
    return pa.table({
        "image": pa.array([jpeg(k, 20 + k % 9, 24 + k % 5) for k in rows], pa.binary()),
        "label": pa.array(list(rows), pa.int64()),
        "tokens": pa.array([list(range(k, k + k % 7)) for k in rows], pa.list_(pa.int32())),
        "text": pa.array([f"row {k}" for k in rows], pa.string()),
    })  # fmt: skip


def _parquet(table: pa.Table, **kwargs: Any) -> bytes:
    sink = io.BytesIO()
    pq.write_table(table, sink, **kwargs)
    return sink.getvalue()


def _footer_bytes(data: bytes) -> int:
    """A Parquet file's footer and the 8 bytes after it."""
    return int.from_bytes(data[-8:-4], "little") + 8


def _put(server: Any, key: str, data: bytes) -> str:
    s3local.client(server).put_object(Bucket=BUCKET, Key=key, Body=data)
    return f"s3://{BUCKET}/{key}"


# ------------------------------------------------------------------------------------------ fixtures


@pytest.fixture(scope="module")
def server() -> Iterator[s3local.S3Server]:
    with s3local.start_server() as s3:
        s3local.client(s3).create_bucket(Bucket=BUCKET)
        yield s3


@pytest.fixture(scope="module")
def data(server: s3local.S3Server, tmp_path_factory: pytest.TempPathFactory) -> Data:
    folder = tmp_path_factory.mktemp("inplace-remote") / "set"
    folder.mkdir()
    files = []
    for k in range(FILES):
        path = folder / f"part-{k}.parquet"
        path.write_bytes(_parquet(_table(k * ROWS, ROWS), row_group_size=GROUP, write_page_checksum=True))
        files.append(path)
    s3local.upload(server, folder, BUCKET, "set")
    return Data(folder, files, f"s3://{BUCKET}/set/")


@pytest.fixture(scope="module")
def many(server: s3local.S3Server) -> tuple[str, list[bytes]]:
    """MANY small objects under many/ (uploaded at once); their URL and bytes."""
    blobs = [_parquet(pa.table({"label": pa.array(range(k * MANY_ROWS, (k + 1) * MANY_ROWS), pa.int64()),
                                "tokens": pa.array([[k, j] for j in range(MANY_ROWS)], pa.list_(pa.int32()))}))
             for k in range(MANY)]  # fmt: skip
    client = s3local.client(server, max_pool_connections=16)
    with ThreadPoolExecutor(16) as pool:
        list(pool.map(lambda k: client.put_object(Bucket=BUCKET, Key=f"many/part-{k:04d}.parquet", Body=blobs[k]), range(MANY)))
    return f"s3://{BUCKET}/many/", blobs


def _env(monkeypatch: pytest.MonkeyPatch, endpoint: str) -> None:
    for name, value in {**s3local.CREDENTIALS, "AWS_ENDPOINT_URL": endpoint}.items():
        monkeypatch.setenv(name, value)


@pytest.fixture
def direct(server: s3local.S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """Reads in this process go to the server itself."""
    _env(monkeypatch, server.endpoint)


@pytest.fixture
def proxied(proxy: s3local.ProxyHandle, monkeypatch: pytest.MonkeyPatch) -> s3local.ProxyHandle:
    """Reads in this process go through the proxy (no faults), whose counters count them."""
    _env(monkeypatch, proxy.endpoint)
    return proxy


def _samples(ds: Any) -> list[dict[str, Any]]:
    return [ds[i] for i in range(len(ds))]


# ------------------------------------------------------------------------------------ the same data


def test_a_folder_reads_as_the_same_files_do_locally(direct: None, data: Data, tmp_path: Path) -> None:
    remote = open_remote_parquet(data.url, cache_dir=tmp_path)
    local = open_parquet(data.folder)
    assert len(remote) == len(local) == FILES * ROWS
    assert remote.fields == local.fields and [len(s.page_starts()) for s in remote.shards] == [4] * FILES
    assert_same(_samples(remote), _samples(local), "sample")
    batched = open_remote_parquet(data.url, BATCHED, cache_dir=tmp_path)  # (token lists of varied lengths do not stack)
    for kwargs in ({"shuffle": True}, {"order": "quasi_random"}):
        assert_same(epoch(batched, **kwargs), epoch(open_parquet(data.folder, BATCHED), **kwargs), f"mapped epoch {kwargs}")
    again = pickle.loads(pickle.dumps(remote))  # (as worker processes receive it)
    assert_same(_samples(again), _samples(local), "sample after pickling")


def test_one_object_and_a_list_read_as_local_files(direct: None, data: Data, tmp_path: Path) -> None:
    one = open_remote_parquet(data.urls()[1], cache_dir=tmp_path)
    assert type(one).__name__ == "PackedDataset" and one.path == data.urls()[1]
    assert_same(_samples(one), _samples(open_parquet(data.files[1])), "sample")
    listed = open_remote_parquet([data.urls()[2], data.urls()[0]], cache_dir=tmp_path)
    assert_same(_samples(listed), _samples(open_parquet([data.files[2], data.files[0]])), "sample")
    mixed = open_remote_parquet([str(data.files[0]), data.urls()[1]], cache_dir=tmp_path)  # a local file in the list
    assert_same(_samples(mixed), _samples(open_parquet(data.files[:2])), "sample")
    assert is_parquet_url(data.urls()[0]) and is_parquet_url([str(data.files[0]), data.urls()[1]])
    assert not is_parquet_url(data.url) and not is_parquet_url([str(f) for f in data.files])


def test_ss_open_reads_parquet_urls_and_a_prefix_without_an_index_in_place(direct: None, data: Data, tmp_path: Path) -> None:
    """ss.open picks the in-place reader for .parquet URLs and for a prefix holding Parquet objects
    and no index.json; a prefix with neither is still the packed reader's MissingShardError."""
    import slipstream as ss

    folder = ss.open(data.url, cache_dir=tmp_path)
    assert_same(_samples(folder), _samples(open_parquet(data.folder)), "sample of the prefix")
    one = ss.open(data.urls()[1], cache_dir=tmp_path)
    assert_same(_samples(one), _samples(open_parquet(data.files[1])), "sample of one object")
    with pytest.raises(ss.MissingShardError, match="index.json"):
        ss.open(data.url.rstrip("/") + "-nothing-here/", cache_dir=tmp_path)


def test_chosen_fields_fetch_only_their_columns(direct: None, data: Data, tmp_path: Path) -> None:
    chosen = open_remote_parquet(data.url, ["tokens", "label"], cache_dir=tmp_path / "chosen")
    assert list(chosen.fields) == ["tokens", "label"]
    assert_same(_samples(chosen), _samples(open_parquet(data.folder, ["tokens", "label"])), "sample")
    with pytest.raises(MissingFieldError, match="no column 'nope'") as caught:
        open_remote_parquet(data.url, ["image", "nope"], cache_dir=tmp_path / "chosen")
    assert caught.value.path == data.urls()[0]
    every = open_remote_parquet(data.url, cache_dir=tmp_path / "every")
    _samples(every)
    images = sum(pq.read_metadata(f).row_group(g).column(0).total_compressed_size for f in data.files for g in range(4))
    assert chosen.remote_stats()["bytes"] + images <= every.remote_stats()["bytes"]


def test_columns_apart_are_fetched_as_ranges_of_their_own(
    direct: None, data: Data, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parquet_remote, "GAP", 0)  # label and text, the tokens' chunk between them: two ranges
    apart = open_remote_parquet(data.url, ["text", "label"], cache_dir=tmp_path)
    opened = apart.remote_stats()["requests"]
    assert_same(_samples(apart), _samples(open_parquet(data.folder, ["text", "label"])), "sample")
    assert apart.remote_stats()["requests"] - opened == 2 * 4 * FILES


def test_prefetched_row_groups_are_read_without_more_requests(direct: None, data: Data, tmp_path: Path) -> None:
    ds = open_remote_parquet(data.url, ["label", "tokens"], cache_dir=tmp_path, readahead=4)
    opened = ds.remote_stats()["requests"]
    ds.prefetch(range(len(ds)))
    assert_same(_samples(ds), _samples(open_parquet(data.folder, ["label", "tokens"])), "sample")
    stats = ds.remote_stats()
    assert stats["downloads"] == stats["requests"] - opened == 4 * FILES and stats["misses"] < 4 * FILES, stats


# ------------------------------------------------------------------------------- what opening reads


def test_opening_reads_the_footers_alone(proxied: s3local.ProxyHandle, data: Data, tmp_path: Path) -> None:
    footers = [_footer_bytes(f.read_bytes()) for f in data.files]
    before = proxied.counts()
    ds = open_remote_parquet(data.url, ["label", "tokens"], cache_dir=tmp_path)  # (no binary column: nothing to sniff)
    opened, after = ds.remote_stats(), proxied.counts()
    # the first footer by its length, then each in one read of the largest seen so far
    assert sum(footers) <= opened["bytes"] <= 8 + FILES * max(footers)
    assert FILES <= opened["requests"] <= FILES + 1 + sum(f > footers[0] for f in footers)
    assert after["ranged_gets"] - before["ranged_gets"] == opened["requests"] and opened["retries"] == 0
    assert opened["reads"] == 0  # no row group read
    ds[len(ds) - 1]
    assert ds.remote_stats()["requests"] == opened["requests"] + 1  # one row group's chunks: one range
    # an image column without Hugging Face features: its kind is read from row group 0's values,
    # fetched as read_part(0) fetches them, so reading there downloads nothing more
    imaged = open_remote_parquet(data.url, cache_dir=tmp_path / "imaged")
    seen = imaged.remote_stats()
    assert seen["downloads"] == 1 and seen["bytes"] <= 8 + FILES * max(footers) + sum(
        c.total_compressed_size for c in (pq.read_metadata(data.files[0]).row_group(0).column(i) for i in range(4))
    )
    imaged[0]
    assert imaged.remote_stats()["downloads"] == 1


def test_a_thousand_objects_open_from_footers_then_from_the_index(
    proxied: s3local.ProxyHandle, many: tuple[str, list[bytes]], tmp_path: Path
) -> None:
    url, blobs = many
    footers = [_footer_bytes(b) for b in blobs]
    before = proxied.counts()
    began = time.perf_counter()
    ds = open_remote_parquet(url, cache_dir=tmp_path)
    first = time.perf_counter() - began
    stats, after = ds.remote_stats(), proxied.counts()
    assert len(ds) == MANY * MANY_ROWS and len(ds.shards) == MANY
    assert sum(footers) <= stats["bytes"] <= 8 + MANY * max(footers)  # the footers (and the first one's length), no data
    assert stats["requests"] <= MANY + 1 + sum(f > footers[0] for f in footers)
    assert after["ranged_gets"] - before["ranged_gets"] == stats["requests"]
    began = time.perf_counter()
    again = open_remote_parquet(url, cache_dir=tmp_path)
    second = time.perf_counter() - began
    final = proxied.counts()
    assert again.remote_stats()["requests"] == 0 and final["ranged_gets"] == after["ranged_gets"]  # no footer read
    assert final["requests"] - after["requests"] <= 2  # the listing
    index = tmp_path / "footers"
    assert len(list(index.glob("*.footers"))) == 1
    print(
        f"\n{MANY} objects: first open {first:.2f} s ({stats['requests']} ranged reads, {stats['bytes']} bytes: footers "
        f"{sum(footers)}), second open {second:.2f} s ({final['requests'] - after['requests']} requests, the listing)"
    )
    for k in (0, 517, MANY - 1):
        assert again[k * MANY_ROWS + 3]["label"] == k * MANY_ROWS + 3
        assert list(again[k * MANY_ROWS + 3]["tokens"]) == [k, 3]


def test_the_index_is_private_sealed_and_follows_changed_objects(
    proxied: s3local.ProxyHandle, server: s3local.S3Server, data: Data, tmp_path: Path
) -> None:
    prefix = "indexed"
    for f in data.files:
        _put(server, f"{prefix}/{f.name}", f.read_bytes())
    url = f"s3://{BUCKET}/{prefix}/"
    open_remote_parquet(url, cache_dir=tmp_path)
    folder = tmp_path / "footers"
    (index,) = folder.glob("*.footers")
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and stat.S_IMODE(index.stat().st_mode) == 0o600

    def reads() -> tuple[int, list[dict[str, Any]]]:
        before = proxied.counts()["ranged_gets"]
        ds = open_remote_parquet(url, ["label", "text"], cache_dir=tmp_path)
        return proxied.counts()["ranged_gets"] - before, _samples(ds)

    assert reads()[0] == 0
    damaged = bytearray(index.read_bytes())
    damaged[len(damaged) // 2] ^= 0xFF
    index.write_bytes(bytes(damaged))  # not sealed by this cache any more: ignored, read again, saved again
    count, samples = reads()
    assert count >= FILES and index.read_bytes() != bytes(damaged)
    assert_same(samples, _samples(open_parquet(data.folder, ["label", "text"])), "sample")
    changed = _parquet(_table(1000, 30), row_group_size=GROUP)
    _put(server, f"{prefix}/{data.files[1].name}", changed)  # only the changed object's footer is read again
    count, samples = reads()
    assert 1 <= count <= 2 and [s["label"] for s in samples][ROWS : ROWS + 30] == list(range(1000, 1030))
    assert reads()[0] == 0


# ------------------------------------------------------------------------- changed or damaged objects


def test_an_object_changed_after_opening_is_refused(direct: None, server: s3local.S3Server, data: Data, tmp_path: Path) -> None:
    urls = [_put(server, f"changed/{f.name}", f.read_bytes()) for f in data.files]
    ds = open_remote_parquet(f"s3://{BUCKET}/changed/", cache_dir=tmp_path, retry_budget=5)
    same_size = bytearray(data.files[0].read_bytes())
    same_size[100] ^= 0xFF  # the same size, other bytes (another ETag)
    _put(server, "changed/part-0.parquet", bytes(same_size))
    with pytest.raises(ShardMismatchError, match="changed since") as caught:
        ds[GROUP]  # (row group 0 came at open, for the image column's kind: read as it was then)
    assert caught.value.path == urls[0] and urls[0] in str(caught.value)
    _put(server, "changed/part-1.parquet", data.files[1].read_bytes() + b"\0")
    with pytest.raises(ShardMismatchError, match=f"is {data.files[1].stat().st_size + 1} bytes"):
        ds[ROWS]
    s3local.client(server).delete_object(Bucket=BUCKET, Key="changed/part-2.parquet")
    with pytest.raises(MissingShardError, match="missing") as caught:
        ds[2 * ROWS]
    assert caught.value.path == urls[2]


def test_damaged_objects_are_refused_naming_them(direct: None, server: s3local.S3Server, data: Data, tmp_path: Path) -> None:
    good = data.files[0].read_bytes()
    cases = {
        "not-parquet.parquet": (b"not a parquet file " * 10, "does not end with the Parquet magic"),
        "cut.parquet": (good[: len(good) // 2], "does not end with the Parquet magic"),
        "huge-footer.parquet": (b"PAR1" + b"\0" * 64 + (2**31).to_bytes(4, "little") + b"PAR1", "more than the 76-byte object"),
        "garbled-footer.parquet": (good[:-200] + b"\x07" * 192 + good[-8:], "footer"),
        "tiny.parquet": (b"PAR1", "too short"),
    }
    for name, (body, message) in cases.items():
        url = _put(server, f"damaged/{name}", body)
        with pytest.raises(CorruptFileError, match=message) as caught:
            open_remote_parquet(url, cache_dir=tmp_path, retry_budget=5)
        assert caught.value.path == url, name
    # a data page's bytes damaged at the source (its CRC fails the same way three times)
    chunk = pq.read_metadata(data.files[0]).row_group(1).column(1)
    start = chunk.dictionary_page_offset if chunk.has_dictionary_page else chunk.data_page_offset
    damaged = bytearray(good)
    damaged[start + chunk.total_compressed_size - 3] ^= 0xFF  # (inside its last data page)
    url = _put(server, "damaged/data.parquet", bytes(damaged))
    ds = open_remote_parquet(url, cache_dir=tmp_path, retry_budget=10)
    assert ds[0]["label"] == 0  # row group 0 is whole
    with pytest.raises(ChecksumError, match="row group 1 .samples 16..31.") as caught:
        ds[GROUP]
    assert caught.value.path == url and caught.value.page == 1 and caught.value.samples == range(GROUP, 2 * GROUP)
    with pytest.raises(MissingShardError, match="no such object"):
        open_remote_parquet(f"s3://{BUCKET}/damaged/absent.parquet", cache_dir=tmp_path, retry_budget=5)
    with pytest.raises(FileNotFoundError, match="no .parquet objects"):
        open_remote_parquet(f"s3://{BUCKET}/nothing-here/", cache_dir=tmp_path, retry_budget=5)


def test_row_groups_without_rows_are_no_pages(direct: None, server: s3local.S3Server, tmp_path: Path) -> None:
    """An empty row group (pyarrow writes its chunks' data offsets as 0) is no page, as locally."""
    path = tmp_path / "empty-group.parquet"
    table = _table(0, 10)
    with pq.ParquetWriter(path, table.schema) as writer:
        for part in (table.slice(0, 4), table.slice(0, 0), table.slice(4, 6)):
            writer.write_table(part)
    assert pq.read_metadata(path).num_row_groups == 3
    ds = open_remote_parquet(_put(server, "empty-group/part.parquet", path.read_bytes()), cache_dir=tmp_path)
    local = open_parquet(path)
    assert len(ds) == 10 and [len(ds.page_starts())] == [len(local.page_starts())] == [2]
    assert_same(_samples(ds), _samples(local), "sample")
    ds.validate()


FLIPS = r"""
import json, sys
from concurrent.futures import ThreadPoolExecutor
import numpy as np
from remote_helpers import s3local
from slipstream.core.errors import ConvertError, CorruptFileError
from slipstream.inplace.parquet import open_parquet
from slipstream.inplace.parquet_remote import open_remote_parquet, remote_fetcher
from slipstream.inplace.remotefooters import read_footer

args = json.loads(sys.argv[1])
data = open(args["source"], "rb").read()
start = len(data) - 8 - int.from_bytes(data[-8:-4], "little")
client = s3local.client(args["endpoint"])
fetcher = remote_fetcher(args["cache"], retry_budget=5)  # (one client for every object)


class Bytes:  # a fetcher of the footer from these bytes, read once (open's own reads are retried)
    def __init__(self, data):
        self.data = data

    def read_checked(self, url, parse, what):
        return parse(self)

    def ranges(self, spans):
        return [self.data[a:b] for a, b in spans]


from leafvalues import values


def opened(pos, flipped):
    key = f"{args['prefix']}/{pos}.parquet"
    url = f"s3://{args['bucket']}/{key}"
    client.put_object(Bucket=args["bucket"], Key=key, Body=flipped)
    try:
        return pos, url, values(open_remote_parquet(url, fetcher=fetcher))
    except (CorruptFileError, ConvertError) as exc:
        return pos, url, exc


want = values(open_parquet(args["source"]))
outcomes = {"refused": 0, "same": 0, "refused again": 0}
uploads, refused = [], set()
for pos in range(start, len(data)):
    flipped = bytearray(data)
    flipped[pos] ^= 0xFF
    url = f"s3://{args['bucket']}/{args['prefix']}/{pos}.parquet"
    try:  # what opening checks the footer it fetched with
        read_footer(Bytes(bytes(flipped)), url, len(flipped))
    except CorruptFileError as exc:
        assert str(exc).startswith(url + ": ") and exc.path == url, (pos - start, repr(exc))
        outcomes["refused"] += 1
        refused.add(pos)
        if pos % 8:
            continue  # (every eighth opened as well: refused the same way through the store)
    uploads.append((pos, bytes(flipped)))
with ThreadPoolExecutor(4) as pool:
    for pos, url, got in pool.map(lambda job: opened(*job), uploads):
        if isinstance(got, Exception):
            assert str(got).startswith(url + ": ") and getattr(got, "path", url) == url, (pos - start, repr(got))
            outcomes["refused again" if pos in refused else "refused"] += 1
            continue
        assert pos not in refused, (pos - start, "opened, though its footer's check refuses it")
        assert got == want, (pos - start, [r[:20] for r in got if r not in want][:1], [r[:20] for r in want if r not in got][:1])
        outcomes["same"] += 1
print("RESULT " + json.dumps(outcomes), flush=True)
"""


def test_every_flipped_footer_byte_of_an_object_is_refused_naming_it_or_reads_the_same_values(
    server: s3local.S3Server, tmp_path: Path
) -> None:
    """Each single-byte flip of an object's footer (its statistics too: pyarrow's accessors of those
    abort the interpreter on some damage) is refused naming the object by the footer check opening
    runs, or, uploaded and opened in place, gives an error naming the object or the same rows'
    values as the file read locally (the leaves, in order: a flipped name or annotation may rename a
    column or read its text as bytes); every eighth refused flip is uploaded and opened as well. In
    a child interpreter with a timeout: a crash or a hang fails this test only."""
    source = tmp_path / "source.parquet"
    table = pa.table({
        "label": [0, 1, 2, 0],
        "text": ["a", "bé", "", "c"],
        "tokens": pa.array([[1], [], [2, 3], [4]], pa.list_(pa.int32())),
        "photo": pa.array([jpeg(i, 8, 8) for i in range(4)], pa.binary()),
    })  # fmt: skip
    statistics = ["label", "text", "tokens.list.element"]  # (the photos' would be whole JPEGs: a long footer, a slow test)
    pq.write_table(table, source, row_group_size=2, write_page_checksum=True, store_schema=False, write_statistics=statistics)
    args = {"source": str(source), "endpoint": server.endpoint, "bucket": BUCKET, "prefix": "flips", "cache": str(tmp_path)}
    env = {**s3local.CREDENTIALS, "AWS_ENDPOINT_URL": server.endpoint}
    done = run_python(FLIPS, timeout=400, env=env, argv=[json.dumps(args)])
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    assert done.returncode == 0 and lines, f"the child failed (exit {done.returncode}):\n{done.stderr[-4000:]}"
    outcomes = json.loads(lines[-1][len(RESULT) :])
    footer = _footer_bytes(source.read_bytes())
    assert outcomes["refused"] + outcomes["same"] == footer and outcomes["same"] > 0, outcomes
    assert outcomes["refused again"] >= outcomes["refused"] // 16, outcomes  # (refused flips opened too)


# ------------------------------------------------------------------------- faults (in a child process)

CHILD = r"""
import json, sys, time, traceback
from helpers import assert_same
from remote_helpers import epoch, proxy_control
import slipstream as ss
from slipstream.inplace.parquet import open_parquet
from slipstream.inplace.parquet_remote import open_remote_parquet, remote_fetcher

args = json.loads(sys.argv[1])
fetcher = remote_fetcher(args["cache"], retry_budget=5)  # (one client for every open: each object's tag keys what it caches)
url, cache, endpoint = args["url"], args["cache"], args["endpoint"]
local = open_parquet(args["folder"])
want_samples = [local[i] for i in range(len(local))]
want_epoch = epoch(open_parquet(args["folder"], args["batched"]), shuffle=True)
out = {}


def schedule(faults, every=1, slow=2.5):
    proxy_control(endpoint, "config", {"faults": faults, "every": every, "slow": slow})


def faults_since(before):
    after = proxy_control(endpoint, "counts")
    return {k: n - before["faults"].get(k, 0) for k, n in after["faults"].items() if n != before["faults"].get(k, 0)}


def survived(name, faults, every, backend):
    schedule(faults, every)
    before = proxy_control(endpoint, "counts")
    try:  # cold: the footers and every row group through the faults
        batched = open_remote_parquet(url, args["batched"], cache_dir=f"{cache}/{name}", timeout=1.0, retry_budget=60)
        assert_same(epoch(batched, shuffle=True, backend=backend), want_epoch, "epoch")
        ds = open_remote_parquet(url, cache_dir=f"{cache}/{name}", timeout=1.0, retry_budget=60)
        assert_same([ds[i] for i in range(len(ds))], want_samples, "sample")
        out[name] = {"error": None, "stats": ds.remote_stats(), "faults": faults_since(before)}
    except Exception:
        out[name] = {"error": traceback.format_exc(), "faults": faults_since(before)}
    schedule(None)


def failure(name, call):
    began = time.monotonic()
    try:
        call()
        out[name] = {"type": None}
    except Exception as e:
        out[name] = {"type": type(e).__name__, "path": str(getattr(e, "path", "")), "message": str(e),
                     "attempts": getattr(e, "attempts", None), "notes": getattr(e, "__notes__", []), "seconds": time.monotonic() - began}
    schedule(None)


survived("transient", ["503", "reset", "truncate", "flip", "drop", "slow"], 2, "thread")
survived("processes", ["503", "flip", "truncate"], 3, "process")

ds = open_remote_parquet(url, cache_dir=f"{cache}/down", retry_budget=2, timeout=1.0)
ds[0]
schedule(["503"])
failure("read_fails", lambda: ds[len(ds) - 1])
schedule(["503"])
failure("open_fails", lambda: open_remote_parquet(url, cache_dir=f"{cache}/down-open", retry_budget=2, timeout=1.0))
schedule(["norange"])
failure("norange", lambda: open_remote_parquet(url, cache_dir=f"{cache}/norange", retry_budget=30, timeout=1.0))
print("RESULT " + json.dumps(out), flush=True)
"""


@pytest.fixture(scope="module")
def fault_runs(data: Data, proxy_module: s3local.ProxyHandle, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The child's runs through the proxy: faults survived (thread and process backends), and a store
    that fails for good or ignores ranges."""
    args = {
        "url": data.url,
        "cache": str(tmp_path_factory.mktemp("faults")),
        "endpoint": proxy_module.endpoint,
        "folder": str(data.folder),
        "batched": BATCHED,
    }
    env = {**s3local.CREDENTIALS, "AWS_ENDPOINT_URL": proxy_module.endpoint}
    done = run_python(CHILD, timeout=240, env=env, argv=[json.dumps(args)])
    proxy_module.set_faults(None)
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    assert done.returncode == 0 and lines, (
        f"the child failed (exit {done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-6000:]}"
    )
    return json.loads(lines[-1][len(RESULT) :])


@pytest.mark.parametrize("run", ["transient", "processes"])
def test_transient_faults_are_survived(fault_runs: dict[str, Any], run: str) -> None:
    got = fault_runs[run]
    assert got["error"] is None, got["error"]
    kinds = {"transient": {"503", "reset", "truncate", "flip", "drop", "slow"}, "processes": {"503", "flip", "truncate"}}[run]
    assert set(got["faults"]) == kinds, got
    assert got["stats"]["retries"] > 0 or run == "processes", got  # (the workers' retries are their own)


def test_a_store_that_fails_for_good_is_named(fault_runs: dict[str, Any], data: Data) -> None:
    read, opened = fault_runs["read_fails"], fault_runs["open_fails"]
    assert read["type"] == "RemoteReadError" and read["path"] in data.urls() and read["seconds"] < 30, read
    assert read["path"] == data.urls()[-1] and "attempts" in read["message"]
    assert opened["type"] == "RemoteReadError" and opened["path"] in data.urls() and "footer" in " ".join(opened["notes"]), opened


def test_a_store_that_ignores_ranges_is_named_at_once(fault_runs: dict[str, Any], data: Data) -> None:
    got = fault_runs["norange"]
    assert got["type"] == "RemoteReadError" and got["path"] in data.urls() and "ranged reads" in got["message"], got
    assert got["attempts"] == 1 and got["seconds"] < 20, got


def test_an_untagged_object_rewritten_at_its_size_is_never_read_from_its_old_pages(tmp_path: Path) -> None:
    """A store that gives no ETag nor time (fsspec's memory filesystem without its ``created``): a
    Parquet object rewritten with other values of the same size must not be served the old object's
    footer or cached row groups (its identity is its size alone: nothing is reused across opens)."""
    fsspec = pytest.importorskip("fsspec")
    from fsspec.implementations.memory import MemoryFileSystem

    class Untagged(MemoryFileSystem):
        def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
            return {k: v for k, v in super().info(path, **kwargs).items() if k != "created"}

    plain = {"row_group_size": 10, "compression": "none", "use_dictionary": False}  # (the size follows the row count)
    old = _parquet(pa.table({"label": pa.array(range(40), pa.int64())}), **plain)
    new = _parquet(pa.table({"label": pa.array(range(100, 140), pa.int64())}), **plain)
    assert len(old) == len(new)
    fsspec.filesystem("memory").pipe_file("/untagged/t.parquet", old)
    url, fs = "memory://untagged/t.parquet", Untagged()
    assert [s["label"] for s in _samples(open_remote_parquet(url, cache_dir=tmp_path, filesystem=fs))] == list(range(40))
    fsspec.filesystem("memory").pipe_file("/untagged/t.parquet", new)
    assert [s["label"] for s in _samples(open_remote_parquet(url, cache_dir=tmp_path, filesystem=fs))] == list(range(100, 140))
