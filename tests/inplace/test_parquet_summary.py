"""A remote Parquet folder opened from its ``_metadata`` summary (``inplace.parquet_remote``,
``inplace.remotefooters``), against a real local S3 server (moto) and the counting proxy: opening
reads the listing and the summary alone, each data file's footer is read when one of its pages is
first read (once per cache) and compared with the summary, the samples are the local files' (read
by ``inplace.parquet``, which ignores the summary), a 1,000-object folder opens cold in a few
requests, a stale summary (a file added, removed or rewritten) is noticed, and a damaged one is
warned of and passed over (every footer read instead), never read as other data.

The server, the 1,000-object folder and the helpers are ``test_parquet_remote``'s (imported: each
module gets its own server). Expected values are never written down: every remote read is
compared with the same files read locally. Damaged summaries run in a child interpreter with a
timeout (a hang or a crash fails only that test).
"""

from __future__ import annotations

import io
import json
import pickle
import time
import warnings
from pathlib import Path

import pytest

pytest.importorskip("moto")
pytest.importorskip("s3fs")
pytest.importorskip("boto3")

import pyarrow as pa
import pyarrow.parquet as pq
import test_parquet_remote as remote
from helpers import assert_same, run_python
from remote_helpers import s3local
from test_parquet_remote import BUCKET, GROUP, MANY, MANY_ROWS, RESULT, ROWS, _parquet, _put, _samples, _table

import slipstream as ss
from slipstream.core.errors import ShardMismatchError
from slipstream.inplace.parquet import open_parquet
from slipstream.inplace.parquet_remote import RemoteParquetPages, open_remote_parquet

# that module's fixtures, here too (this module gets a server of its own): the S3 server, the
# 1,000-object folder, reads in this process to the server or through the counting proxy
server, many, direct, proxied = remote.server, remote.many, remote.direct, remote.proxied

FILES = 3
CHOSEN = ["label", "tokens"]  # no binary column: nothing sniffed from row group 0 at open


def summary_of(blobs: dict[str, bytes]) -> bytes:
    """A ``_metadata`` for the Parquet files ``blobs`` (relative path -> bytes), as Dask and
    ``pyarrow.parquet.write_metadata`` write one: every file's row groups, each chunk naming its file."""
    collected = []
    for name, blob in blobs.items():
        metadata = pq.read_metadata(pa.BufferReader(blob))
        metadata.set_file_path(name)
        collected.append(metadata)
    sink = io.BytesIO()
    pq.write_metadata(pq.read_schema(pa.BufferReader(next(iter(blobs.values())))), sink, metadata_collector=collected)
    return sink.getvalue()


def _folder(server: s3local.S3Server, where: Path, prefix: str, blobs: dict[str, bytes], summary: bytes | None) -> str:
    """``blobs`` written under ``where`` and uploaded under ``prefix/`` with ``summary`` as its
    ``_metadata`` (locally too: ``open_parquet`` reads only the ``.parquet`` files); the folder's URL."""
    where.mkdir(parents=True, exist_ok=True)
    for name, blob in blobs.items():
        (where / name).parent.mkdir(parents=True, exist_ok=True)
        (where / name).write_bytes(blob)
        _put(server, f"{prefix}/{name}", blob)
    if summary is not None:
        (where / "_metadata").write_bytes(summary)
        _put(server, f"{prefix}/_metadata", summary)
    return f"s3://{BUCKET}/{prefix}/"


def _blobs(files: int = FILES, first: int = 0) -> dict[str, bytes]:
    return {
        f"part-{k}.parquet": _parquet(_table(first + k * ROWS, ROWS), row_group_size=GROUP, write_page_checksum=True)
        for k in range(files)
    }


def _ranged(proxy: s3local.ProxyHandle) -> int:
    return proxy.counts()["ranged_gets"]


# ------------------------------------------------------------------------------------- opening


def test_a_folder_with_a_summary_opens_from_it_and_reads_each_footer_once_on_demand(
    proxied: s3local.ProxyHandle, server: s3local.S3Server, tmp_path: Path
) -> None:
    blobs = _blobs()
    url = _folder(server, tmp_path / "local", "summarized", blobs, summary_of(blobs))
    local = open_parquet(tmp_path / "local", CHOSEN)
    before = proxied.counts()
    ds = open_remote_parquet(url, CHOSEN, cache_dir=tmp_path / "cache")
    after = proxied.counts()
    assert after["ranged_gets"] - before["ranged_gets"] == 1  # the summary, whole: no footer
    assert after["requests"] - before["requests"] <= 2  # ... and the listing
    assert len(ds) == len(local) and [len(s.page_starts()) for s in ds.shards] == [4] * FILES
    assert ds.fields == local.fields
    # pickled as workers receive it: small, and no footer read to pickle it
    again = pickle.loads(pickle.dumps(ds))
    assert len(pickle.dumps(ds)) < 4000 * FILES and _ranged(proxied) == after["ranged_gets"]
    # the first read of each file: its footer, then the row group (one range); the next ones: the row group
    for k in range(FILES):
        gets = _ranged(proxied)
        assert_same(ds[k * ROWS], local[k * ROWS], "sample")
        assert _ranged(proxied) - gets == 2, k
        gets = _ranged(proxied)
        assert_same(ds[k * ROWS + GROUP], local[k * ROWS + GROUP], "sample")
        assert _ranged(proxied) - gets == 1, k
    assert_same(_samples(ds), _samples(local), "sample")
    # the footers are in the index beside the page cache now: a process reading them again (the
    # pickled copy, which read none) downloads the row groups only
    gets = _ranged(proxied)
    assert_same(_samples(again), _samples(local), "sample after pickling")
    assert _ranged(proxied) - gets == 0  # (every row group is in the page cache as well)
    # opened again with the same cache: the listing alone (the summary from the index)
    gets = _ranged(proxied)
    reopened = open_remote_parquet(url, CHOSEN, cache_dir=tmp_path / "cache")
    assert _ranged(proxied) == gets
    assert_same(_samples(reopened), _samples(local), "sample reopened")
    # prefetched: each file's footer read then, its row groups downloaded ahead, nothing read twice
    gets = _ranged(proxied)
    ahead = open_remote_parquet(url, CHOSEN, cache_dir=tmp_path / "ahead", readahead=4)
    ahead.prefetch(range(len(ahead)))
    assert all(s._source._claims is not None for s in ahead.shards)
    assert_same(_samples(ahead), _samples(local), "sample prefetched")
    assert _ranged(proxied) - gets == 1 + FILES + 4 * FILES  # the summary, the footers, the row groups
    # every field: the image column's kind is read from row group 0's values (file 0's footer first)
    every = open_remote_parquet(url, cache_dir=tmp_path / "every")
    assert every.remote_stats()["downloads"] == 1
    assert_same(_samples(every), _samples(open_parquet(tmp_path / "local")), "sample of every field")


def test_ss_open_reads_a_prefix_with_a_summary_from_it(
    proxied: s3local.ProxyHandle, server: s3local.S3Server, tmp_path: Path
) -> None:
    """``ss.open`` of a prefix without index.json reaches ``open_remote_parquet``, which opens from the summary."""
    blobs = {"a/part-0.parquet": _blobs(1)["part-0.parquet"], "b/part-1.parquet": _blobs(2)["part-1.parquet"]}
    url = _folder(server, tmp_path / "local", "ss-open", blobs, summary_of(blobs))
    gets = _ranged(proxied)
    ds = ss.open(url, fields=CHOSEN, cache_dir=tmp_path / "cache")
    assert _ranged(proxied) - gets == 1
    assert all(isinstance(s._source, RemoteParquetPages) and s._source._claims is None for s in ds.shards)
    assert_same(_samples(ds), _samples(open_parquet(tmp_path / "local", CHOSEN)), "sample")


def test_a_thousand_objects_with_a_summary_open_cold_in_a_few_requests(
    proxied: s3local.ProxyHandle, server: s3local.S3Server, many: tuple[str, list[bytes]], tmp_path: Path
) -> None:
    url, blobs = many
    summary = summary_of({f"part-{k:04d}.parquet": blob for k, blob in enumerate(blobs)})
    _put(server, "many/_metadata", summary)
    before = proxied.counts()
    began = time.perf_counter()
    ds = open_remote_parquet(url, cache_dir=tmp_path)
    seconds = time.perf_counter() - began
    after = proxied.counts()
    assert len(ds) == MANY * MANY_ROWS and len(ds.shards) == MANY
    assert after["ranged_gets"] - before["ranged_gets"] == 1  # the summary
    assert after["requests"] - before["requests"] <= 3  # ... and the listing (1,001 keys: two pages of it)
    stats = ds.remote_stats()
    assert stats["bytes"] == len(summary)  # the summary, nothing else
    print(
        f"\n{MANY} objects with a _metadata: cold open {seconds:.2f} s ({after['requests'] - before['requests']} requests, "
        f"{stats['bytes']} bytes: the summary)"
    )
    for k in (0, 517, MANY - 1):
        assert ds[k * MANY_ROWS + 3]["label"] == k * MANY_ROWS + 3
        assert list(ds[k * MANY_ROWS + 3]["tokens"]) == [k, 3]
    assert proxied.counts()["ranged_gets"] - after["ranged_gets"] == 3 * 2  # each file read: its footer and its row group


# ------------------------------------------------------------------------------ stale summaries


def test_a_summary_without_a_listed_file_or_naming_a_missing_one_is_passed_over(
    direct: None, server: s3local.S3Server, tmp_path: Path
) -> None:
    blobs = _blobs()
    named = dict(list(blobs.items())[:2])
    url = _folder(server, tmp_path / "added", "added", blobs, summary_of(named))  # part-2 written after the summary
    with pytest.warns(
        UserWarning, match=r"summary is stale.*1 listed object it does not name \(s3://.*/added/part-2.parquet\)"
    ) as caught:
        ds = open_remote_parquet(url, CHOSEN, cache_dir=tmp_path / "cache")
    stale = str(caught.pop(UserWarning).message)  # (not caught[0]: a ResourceWarning collected meanwhile may come first)
    assert url in stale and "every data file's footer is read" in stale
    assert_same(_samples(ds), _samples(open_parquet(tmp_path / "added", CHOSEN)), "sample")
    url = _folder(server, tmp_path / "removed", "removed", named, summary_of(blobs))  # part-2 removed since
    with pytest.warns(
        UserWarning, match=r"summary is stale.*1 file it names that is not listed \(s3://.*/removed/part-2.parquet\)"
    ):
        ds = open_remote_parquet(url, CHOSEN, cache_dir=tmp_path / "cache")
    assert_same(_samples(ds), _samples(open_parquet(tmp_path / "removed", CHOSEN)), "sample")


def test_a_file_rewritten_since_its_summary_is_refused_naming_it(direct: None, server: s3local.S3Server, tmp_path: Path) -> None:
    blobs = _blobs()
    url = _folder(server, tmp_path / "local", "rewritten", blobs, summary_of(blobs))
    longer = _parquet(
        _table(5000, ROWS + 20), row_group_size=GROUP + 4, write_page_checksum=True
    )  # (larger: its claims still fit)
    rewritten = _put(server, "rewritten/part-1.parquet", longer)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # (the listing agrees with the summary: no warning)
        ds = open_remote_parquet(url, CHOSEN, cache_dir=tmp_path / "cache")
    assert len(ds) == FILES * ROWS  # as the summary says
    local = open_parquet(tmp_path / "local", CHOSEN)
    assert_same(ds[0], local[0], "sample of a file the summary agrees with")
    with pytest.raises(
        ShardMismatchError, match="row group 0 holds 20 rows, the summary 16.*_metadata summary .* is stale"
    ) as caught:
        ds[ROWS]
    assert caught.value.path == rewritten and str(caught.value).startswith(rewritten + ": ")
    ds.shards[1]._source.prefetch([0, 1])  # (a prefetch never raises)
    with pytest.raises(ShardMismatchError, match="stale"):  # (every read of it)
        ds[ROWS + 1]
    assert_same(ds[2 * ROWS], local[2 * ROWS], "sample of a file the summary agrees with")
    # rewritten shorter: its chunks past the new object's data, a stale summary noticed at open
    _put(server, "rewritten/part-1.parquet", _parquet(_table(5000, 10), write_page_checksum=True))
    with pytest.warns(
        UserWarning, match=r"stale.*column chunks it places past the object's data \(s3://.*part-1.parquet: bytes up to"
    ):
        ds = open_remote_parquet(url, CHOSEN, cache_dir=tmp_path / "cache")
    assert len(ds) == 2 * ROWS + 10 and [s["label"] for s in _samples(ds)][ROWS : ROWS + 10] == list(range(5000, 5010))


# ------------------------------------------------------------------------ damaged summaries (a child)

DAMAGED = r"""
import json, sys, warnings
from remote_helpers import s3local
from leafvalues import values
from slipstream.core.errors import CorruptFileError, ShardMismatchError
from slipstream.inplace.parquet import open_parquet
from slipstream.inplace.parquet_remote import open_remote_parquet, remote_fetcher
from slipstream.inplace.remotefooters import agree, check_summary, read_footer, summarized, summary_differences

args = json.loads(sys.argv[1])
summary = open(args["summary"], "rb").read()
start = len(summary) - 8 - int.from_bytes(summary[-8:-4], "little")
client = s3local.client(args["endpoint"])
bucket, names = args["bucket"], args["names"]
blobs = {name: open(f"{args['folder']}/{name}", "rb").read() for name in names}
want = values(open_parquet(args["folder"]))
out = {"refused": 0, "stale": 0, "summary": 0, "mismatch": 0, "opened": 0, "warned": 0}


uploaded = set()


def upload(prefix, data):
    if prefix not in uploaded:  # (the data files once: a case replaces the summary alone)
        for name, blob in blobs.items():
            client.put_object(Bucket=bucket, Key=f"{prefix}/{name}", Body=blob)
        uploaded.add(prefix)
    client.put_object(Bucket=bucket, Key=f"{prefix}/_metadata", Body=data)
    return f"s3://{bucket}/{prefix}/"


def opened(case, data):
    # through the store: the same values as the local files, or an error naming a data file (a
    # stale-looking summary found out at its first read)
    url = upload(f"{args['prefix']}/{case}", data)
    try:
        got = values(open_remote_parquet(url, cache_dir=args["cache"], retry_budget=5))
    except ShardMismatchError as exc:
        assert exc.path in [url + n for n in names] and "stale" in str(exc), (case, repr(exc))
        got = None
    assert got is None or got == want, (case, "other values")
    return url, got is not None


def warned(seen, urls):
    # a summary passed over is warned of, naming its folder
    messages = [str(w.message) for w in seen if issubclass(w.category, UserWarning)]
    assert all(any(m.startswith(u + ":") for u in urls) and "_metadata summary is" in m for m in messages), messages
    return messages


# a few whole cases through the store: cut short, cut to its footer's end, garbage
for case, data in {"cut": summary[: len(summary) // 2], "tail": summary[:-1], "garbage": b"PAR1" + b"\x17" * 200 + summary[-8:]}.items():
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        url, read = opened(case, data)
    messages = warned(seen, [url])
    assert read and len(messages) == 1 and "summary is damaged" in messages[0], (case, messages)


class Bytes:  # a fetcher of a footer from these bytes, read once
    def __init__(self, data):
        self.data = data

    def read_checked(self, url, parse, what):
        return parse(self)

    def ranges(self, spans):
        return [self.data[a:b] for a, b in spans]


url = f"s3://{bucket}/{args['prefix']}/flips/"
infos = [(url + name, len(blobs[name]), "") for name in names]
footers = {url + name: read_footer(Bytes(blobs[name]), url + name, len(blobs[name])) for name in names}

# every byte of the summary's footer flipped, checked as opening checks it: refused (naming the
# summary), stale (the listing differs), or accepted, and then each data file's own footer agrees
# with what it says, or is refused naming the file (ShardMismatchError); opened through the store
# too (the summary of one folder replaced each time): every eighth accepted, every stale one, and
# every hundredth refused (each read three times, with a pause between: they cost the most)
uploads = []
for pos in range(start, len(summary)):
    flipped = bytearray(summary)
    flipped[pos] ^= 0xFF
    where = url + "_metadata"
    try:
        checked = check_summary(where, bytes(flipped[start:]), len(flipped), url)
    except CorruptFileError as exc:
        assert exc.path == where and str(exc).startswith(where + ": "), (pos - start, repr(exc))
        out["refused"] += 1
        if out["refused"] % 100 == 1:
            uploads.append(bytes(flipped))
    else:
        if summary_differences(checked, infos):
            out["stale"] += 1
            uploads.append(bytes(flipped))
        else:
            out["summary"] += 1
            if out["summary"] % 8 == 1:
                uploads.append(bytes(flipped))
            for name in names:
                try:
                    agree(url + name, footers[url + name], summarized(checked, url + name))
                except ShardMismatchError as exc:
                    assert exc.path == url + name and "stale" in str(exc), (pos - start, repr(exc))
                    out["mismatch"] += 1
                    break
with warnings.catch_warnings(record=True) as seen:
    warnings.simplefilter("always")
    done = [opened("flipped", data) for data in uploads]
out["opened"] = sum(read for _, read in done)
out["warned"] = len(warned(seen, [done[0][0]]))
print("RESULT " + json.dumps(out), flush=True)
"""


def test_a_damaged_summary_is_passed_over_with_a_warning_never_read_as_other_data(
    server: s3local.S3Server, tmp_path: Path
) -> None:
    """A ``_metadata`` cut short, garbled, or with any byte of its footer flipped: refused by its
    checks (three reads of the same bytes, then a warning naming it, and every footer read instead),
    found stale against the listing (a warning, every footer read), or accepted, and then each data
    file's own footer agrees with it or the file's first read is a ``ShardMismatchError`` naming the
    file; read through the store, always the local files' values. In a child interpreter with a
    timeout: a crash or a hang fails this test only."""
    folder = tmp_path / "local"
    folder.mkdir()
    table = pa.table({
        "label": [0, 1, 2, 0, 5, 6],
        "text": ["a", "bé", "", "c", "d", "e"],
        "tokens": pa.array([[1], [], [2, 3], [4], [5], []], pa.list_(pa.int32())),
    })  # fmt: skip
    blobs = {}
    for k, part in enumerate((table.slice(0, 4), table.slice(4, 2))):
        blobs[f"part-{k}.parquet"] = _parquet(part, row_group_size=2, write_page_checksum=True, store_schema=False)
        (folder / f"part-{k}.parquet").write_bytes(blobs[f"part-{k}.parquet"])
    summary = tmp_path / "_metadata"
    summary.write_bytes(summary_of(blobs))
    args = {
        "summary": str(summary), "folder": str(folder), "names": list(blobs), "endpoint": server.endpoint, "bucket": BUCKET,
        "prefix": "damaged-summary", "cache": str(tmp_path / "cache"),
    }  # fmt: skip
    env = {**s3local.CREDENTIALS, "AWS_ENDPOINT_URL": server.endpoint}
    done = run_python(DAMAGED, timeout=400, env=env, argv=[json.dumps(args)])
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    assert done.returncode == 0 and lines, f"the child failed (exit {done.returncode}):\n{done.stderr[-4000:]}"
    got = json.loads(lines[-1][len(RESULT) :])
    footer = int.from_bytes(summary.read_bytes()[-8:-4], "little") + 8
    assert got["refused"] + got["stale"] + got["summary"] == footer and got["refused"] > 0 and got["summary"] > 0, got
    assert got["opened"] > 0 and got["warned"] > 0, got
    print(f"\n{footer} footer bytes of a summary flipped: {got}")
