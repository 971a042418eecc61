"""Edges of a remote Parquet folder opened from its ``_metadata`` summary (``inplace.parquet_remote``,
``inplace.remotefooters``, ``files.parquetfooter.checked_summary``), against a real local S3 server
(moto) and the counting proxy: summaries that list a file's row groups in another order, name a
file twice, by ``./`` or in subfolders, hold row groups of no rows, disagree with a file's own
footer (row groups, Hugging Face features), vanish or shrink between the listing and their read,
are hostile (deep nesting, huge counts, negative offsets), or are rewritten (a new ETag); first
reads from many threads, and from a process the dataset was pickled to; untagged objects.

Expected values are never written down: every remote read is compared with the same files read
locally (``inplace.parquet``, which ignores the summary). Anything that could hang or crash runs in
a child interpreter with a timeout.
"""

from __future__ import annotations

import io
import json
import pickle
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("moto")
s3fs = pytest.importorskip("s3fs")
pytest.importorskip("boto3")

import pyarrow as pa
import pyarrow.parquet as pq
import test_parquet_remote as remote
from helpers import assert_same, run_python
from remote_helpers import s3local
from test_parquet_remote import BUCKET, GROUP, RESULT, ROWS, _parquet, _samples, _table
from test_parquet_summary import CHOSEN, FILES, _blobs, _folder, _ranged, summary_of

from slipstream.core.errors import CorruptFileError, ShardMismatchError
from slipstream.inplace.parquet import open_parquet
from slipstream.inplace.parquet_remote import open_remote_parquet, remote_fetcher
from slipstream.inplace.remotefooters import folder_summary, list_folder

# that module's fixtures, here too (this module gets a server of its own)
server, direct, proxied = remote.server, remote.direct, remote.proxied


def summary_from(named: list[tuple[str, bytes]], schema_of: bytes | None = None) -> bytes:
    """A ``_metadata`` whose row groups are those of each (file_path, blob) in order (a name may
    come twice, a blob need not be the named file's), with the schema of ``schema_of`` (else the
    first blob's)."""
    collected = []
    for name, blob in named:
        metadata = pq.read_metadata(pa.BufferReader(blob))
        metadata.set_file_path(name)
        collected.append(metadata)
    sink = io.BytesIO()
    pq.write_metadata(pq.read_schema(pa.BufferReader(schema_of or named[0][1])), sink, metadata_collector=collected)
    return sink.getvalue()


def _groups(table: pa.Table, sizes: list[int], **kwargs: Any) -> bytes:
    """``table`` written as row groups of ``sizes`` rows (0 allowed), page CRCs on."""
    sink = io.BytesIO()
    with pq.ParquetWriter(sink, table.schema, write_page_checksum=True, **kwargs) as writer:
        first = 0
        for n in sizes:
            writer.write_table(table.slice(first, n), row_group_size=max(n, 1))
            first += n
    return sink.getvalue()


def _small(first: int, n: int) -> pa.Table:
    """``_table``'s columns with shorter values: a file of its row counts whose chunks end sooner."""
    table = _table(first, n)
    return table.set_column(table.schema.get_field_index("text"), "text", pa.array([""] * n, pa.string()))


def _quiet_open(url: str, **kwargs: Any) -> Any:
    """``open_remote_parquet`` with every warning an error (the summary is expected to be used)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return open_remote_parquet(url, **kwargs)


# ------------------------------------------------------------------------- row groups and names


def test_a_summary_listing_a_files_row_groups_in_another_order_is_stale_naming_the_file(
    direct: None, server: s3local.S3Server, tmp_path: Path
) -> None:
    blobs = _blobs()
    # the summary's part-0: the same 60 rows, as row groups of 12, 16, 16, 16 (the file's: 16, 16, 16, 12)
    decoy = _groups(_small(0, ROWS), [12, 16, 16, 16])
    named = [("part-0.parquet", decoy), *((n, b) for n, b in blobs.items() if n != "part-0.parquet")]
    url = _folder(server, tmp_path / "local", "edge-order", blobs, summary_from(named, blobs["part-0.parquet"]))
    ds = _quiet_open(url, fields=CHOSEN, cache_dir=tmp_path / "cache")
    local = open_parquet(tmp_path / "local", CHOSEN)
    assert len(ds) == len(local)
    with pytest.raises(ShardMismatchError, match=r"row group 0 holds 16 rows, the summary 12.*_metadata\) is stale") as caught:
        ds[0]
    assert caught.value.path == url + "part-0.parquet" and url + "_metadata" in str(caught.value)
    assert_same([ds[i] for i in range(ROWS, len(ds))], [local[i] for i in range(ROWS, len(local))], "the other files")


def test_a_summary_of_other_bytes_with_the_same_row_counts_reads_the_files_own_values(
    direct: None, server: s3local.S3Server, tmp_path: Path
) -> None:
    """The summary's row counts and schema are all a reader takes from it: a summary of another file
    with the same row groups (another folder's, say) still reads each file's own bytes by its own footer."""
    blobs = _blobs()
    decoy = _groups(_small(9000, ROWS), [GROUP, GROUP, GROUP, ROWS - 3 * GROUP])
    named = [("part-0.parquet", decoy), *((n, b) for n, b in blobs.items() if n != "part-0.parquet")]
    url = _folder(server, tmp_path / "local", "edge-decoy", blobs, summary_from(named, blobs["part-0.parquet"]))
    ds = _quiet_open(url, fields=CHOSEN, cache_dir=tmp_path / "cache")
    assert_same(_samples(ds), _samples(open_parquet(tmp_path / "local", CHOSEN)), "sample")


@pytest.mark.parametrize("case", ["twice", "dot", "parent", "absolute"])
def test_a_summary_naming_a_file_twice_or_by_an_odd_path_is_passed_over(
    case: str, direct: None, server: s3local.S3Server, tmp_path: Path
) -> None:
    blobs = _blobs()
    first = blobs["part-0.parquet"]
    named = {
        "twice": [("part-0.parquet", first), *blobs.items()],
        "dot": [("./part-0.parquet", first), *list(blobs.items())[1:]],
        "parent": [("x/../part-0.parquet", first), *list(blobs.items())[1:]],
        "absolute": [("/part-0.parquet", first), *list(blobs.items())[1:]],
    }[case]
    url = _folder(server, tmp_path / "local", f"edge-name-{case}", blobs, summary_from(named))
    with pytest.warns(UserWarning, match=r"_metadata summary is (damaged|stale)") as caught:
        ds = open_remote_parquet(url, fields=CHOSEN, cache_dir=tmp_path / "cache")
    assert str(caught.pop(UserWarning).message).startswith(url)  # (a ResourceWarning collected meanwhile may come first)
    assert_same(_samples(ds), _samples(open_parquet(tmp_path / "local", CHOSEN)), "sample")


def test_a_summary_naming_files_in_subfolders_opens_from_it(
    proxied: s3local.ProxyHandle, server: s3local.S3Server, tmp_path: Path
) -> None:
    parts = _blobs()
    blobs = {"year=2020/a/part-0.parquet": parts["part-0.parquet"], "year=2020/part-1.parquet": parts["part-1.parquet"],
             "z.parquet": parts["part-2.parquet"]}  # fmt: skip
    url = _folder(server, tmp_path / "local", "edge-sub", blobs, summary_of(dict(reversed(list(blobs.items())))))
    gets = _ranged(proxied)
    ds = _quiet_open(url, fields=CHOSEN, cache_dir=tmp_path / "cache")
    assert _ranged(proxied) - gets == 1  # the summary alone
    assert [s._source.url for s in ds.shards] == [url + n for n in sorted(blobs, key=lambda n: n.split("/"))]
    assert_same(_samples(ds), _samples(open_parquet(tmp_path / "local", CHOSEN)), "sample")


def test_row_groups_of_no_rows_read_as_the_local_files(direct: None, server: s3local.S3Server, tmp_path: Path) -> None:
    """Empty row groups among a file's (no pages), and a first file of no rows at all."""
    blobs = {
        "part-0.parquet": _groups(_table(0, 0), [0]),
        "part-1.parquet": _groups(_table(100, 40), [16, 0, 0, 24]),
        "part-2.parquet": _groups(_table(200, 20), [0, 20, 0]),
    }
    url = _folder(server, tmp_path / "local", "edge-empty", blobs, summary_of(blobs))
    ds = _quiet_open(url, fields=CHOSEN, cache_dir=tmp_path / "cache")
    local = open_parquet(tmp_path / "local", CHOSEN)
    assert len(ds) == len(local) == 60 and ds.fields == local.fields
    assert [len(s.page_starts()) for s in ds.shards] == [len(s.page_starts()) for s in local.shards] == [0, 2, 1]
    assert_same(_samples(ds), _samples(local), "sample")


def test_a_first_file_of_no_rows_does_not_decide_the_image_columns_kind(
    direct: None, server: s3local.S3Server, tmp_path: Path
) -> None:
    """Every field, the first file (in path order) of no rows: a binary column's kind is read from
    values, and the first file has none. The image column must be the images the files with rows
    hold (as the folder without the empty file reads), not raw bytes for the whole folder."""
    blobs = {"part-0.parquet": _groups(_table(0, 0), [0]), "part-1.parquet": _groups(_table(100, 40), [16, 24])}
    with_rows = tmp_path / "rows"
    _folder(server, with_rows, "edge-first-empty-rows", {"part-1.parquet": blobs["part-1.parquet"]}, None)
    want = open_parquet(with_rows)
    for summary in (summary_of(blobs), None):
        url = _folder(server, tmp_path / "local", f"edge-first-empty-{summary is None}", blobs, summary)
        ds = _quiet_open(url, cache_dir=tmp_path / "cache")
        assert ds.fields == want.fields, (summary is None, ds.fields["image"], want.fields["image"])
        assert_same(_samples(ds), _samples(want), "sample")


def test_a_files_own_footer_with_more_or_fewer_row_groups_is_named(
    direct: None, server: s3local.S3Server, tmp_path: Path
) -> None:
    blobs = _blobs()
    fewer = _groups(_small(0, ROWS), [GROUP, GROUP, ROWS - 2 * GROUP])  # the summary's part-0: 3 row groups (the file: 4)
    more = _groups(_small(ROWS, ROWS), [GROUP, GROUP, GROUP, 6, 6])  # the summary's part-1: 5
    named = [("part-0.parquet", fewer), ("part-1.parquet", more), ("part-2.parquet", blobs["part-2.parquet"])]
    url = _folder(server, tmp_path / "local", "edge-groups", blobs, summary_from(named, blobs["part-0.parquet"]))
    ds = _quiet_open(url, fields=CHOSEN, cache_dir=tmp_path / "cache")
    for k, said in ((0, "3 of 60"), (1, "5 of 60")):
        with pytest.raises(
            ShardMismatchError, match=f"its footer holds 4 row groups of 60 rows, the summary says {said}"
        ) as caught:
            ds[k * ROWS]
        assert caught.value.path == url + f"part-{k}.parquet"
    local = open_parquet(tmp_path / "local", CHOSEN)
    assert_same(ds[2 * ROWS + 5], local[2 * ROWS + 5], "the file the summary agrees with")


def test_hugging_face_features_other_than_the_summarys_are_named(direct: None, server: s3local.S3Server, tmp_path: Path) -> None:
    """The same Arrow schema, the class names of a ClassLabel in another order: the file is refused
    at its first read, naming it (its labels would mean other classes)."""

    def labelled(names: list[str], first: int) -> bytes:
        features = {
            "label": {"_type": "ClassLabel", "names": names},
            "tokens": {"_type": "Sequence", "feature": {"_type": "Value", "dtype": "int32"}},
        }
        table = pa.table({"label": pa.array([k % 2 for k in range(first, first + 20)], pa.int64()),
                          "tokens": pa.array([[k] for k in range(first, first + 20)], pa.list_(pa.int32()))})  # fmt: skip
        table = table.replace_schema_metadata({"huggingface": json.dumps({"info": {"features": features}})})
        return _parquet(table, row_group_size=10, write_page_checksum=True)

    blobs = {"part-0.parquet": labelled(["cat", "dog"], 0), "part-1.parquet": labelled(["cat", "dog"], 20)}
    swapped = {"part-0.parquet": blobs["part-0.parquet"], "part-1.parquet": labelled(["dog", "cat"], 20)}
    url = _folder(server, tmp_path / "local", "edge-features", swapped, summary_of(blobs))
    ds = _quiet_open(url, cache_dir=tmp_path / "cache")
    assert ds.metadata["class_names"]["label"] == ["cat", "dog"]  # (the summary's: what every file must say)
    assert_same(ds[3], open_parquet(tmp_path / "local" / "part-0.parquet")[3], "the file that agrees")
    with pytest.raises(ShardMismatchError, match="Hugging Face features are not the ones the summary holds") as caught:
        ds[25]
    assert caught.value.path == url + "part-1.parquet"


# -------------------------------------------------------------------------- first reads, workers


def test_first_reads_from_many_threads_read_each_footer_once(
    proxied: s3local.ProxyHandle, server: s3local.S3Server, tmp_path: Path
) -> None:
    blobs = _blobs()
    url = _folder(server, tmp_path / "local", "edge-threads", blobs, summary_of(blobs))
    ds = _quiet_open(url, fields=CHOSEN, cache_dir=tmp_path / "cache")
    local = open_parquet(tmp_path / "local", CHOSEN)
    wanted = [k * ROWS + g * GROUP for k in range(FILES) for g in range(4)] * 2  # every row group of every file, twice
    start = threading.Barrier(len(wanted))

    def read(i: int) -> Any:
        start.wait(timeout=60)
        return ds[i]

    gets = _ranged(proxied)
    with ThreadPoolExecutor(len(wanted)) as pool:
        got = list(pool.map(read, wanted))
    assert_same(got, [local[i] for i in wanted], "sample")
    assert _ranged(proxied) - gets == FILES + 4 * FILES  # each footer once, each row group once
    assert all(s._source._claims is not None for s in ds.shards)


CHILD = r"""
import json, pickle, sys
from leafvalues import values
args = json.loads(sys.argv[1])
ds = pickle.loads(open(args["pickled"], "rb").read())
assert all(s._source._claims is None for s in ds.shards)
print("RESULT " + json.dumps({"values": values(ds), "footed": [s._source._claims is not None for s in ds.shards]}), flush=True)
"""


def test_a_source_pickled_before_its_footer_was_read_reads_it_in_a_fresh_interpreter(
    server: s3local.S3Server, direct: None, tmp_path: Path
) -> None:
    """As a spawned worker receives it: the summary's claims travel, the footer is read there."""
    from leafvalues import values

    blobs = _blobs()
    url = _folder(server, tmp_path / "local", "edge-spawn", blobs, summary_of(blobs))
    ds = _quiet_open(url, fields=CHOSEN, cache_dir=tmp_path / "cache")
    (tmp_path / "ds.pickle").write_bytes(pickle.dumps(ds))
    env = {**s3local.CREDENTIALS, "AWS_ENDPOINT_URL": server.endpoint}
    done = run_python(CHILD, timeout=120, env=env, argv=[json.dumps({"pickled": str(tmp_path / "ds.pickle")})])
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    assert done.returncode == 0 and lines, done.stderr[-4000:]
    got = json.loads(lines[-1][len(RESULT) :])
    assert got["footed"] == [True] * FILES
    assert got["values"] == json.loads(json.dumps(values(open_parquet(tmp_path / "local", CHOSEN))))


# --------------------------------------------------------------------- the summary's own object


@pytest.mark.parametrize("case", ["cut", "emptied", "removed"])
def test_a_summary_removed_or_cut_between_the_listing_and_its_read_is_passed_over(
    case: str, direct: None, server: s3local.S3Server, tmp_path: Path
) -> None:
    """A writer replacing ``_metadata`` while a reader opens the folder: the summary the listing named
    is gone (or shorter, or empty) when it is read. The folder is still readable (every footer read
    instead, with a warning), in about the time a failed read takes, not the retry budget."""
    blobs = _blobs()
    url = _folder(server, tmp_path / "local", f"edge-gone-{case}", blobs, summary_of(blobs))
    fetcher = remote_fetcher(tmp_path / "cache", retry_budget=20)
    infos, info = list_folder(fetcher, url)
    assert info is not None
    client = s3local.client(server)
    if case != "removed":  # (a writer's new, shorter summary; or one it has begun to write again)
        body = summary_of(blobs)[:-100] if case == "cut" else b""
        client.put_object(Bucket=BUCKET, Key=f"edge-gone-{case}/_metadata", Body=body)
    else:
        client.delete_object(Bucket=BUCKET, Key=f"edge-gone-{case}/_metadata")
    began = time.monotonic()
    with pytest.warns(UserWarning, match=r"_metadata summary is (damaged|stale)"):
        assert folder_summary(fetcher, url, info, infos) is None
    assert time.monotonic() - began < 10  # (the retry budget is 20 s: a summary that changed is no transient failure)


class _Racing(s3fs.S3FileSystem):
    """S3 whose next listing is followed at once by ``after()``: a writer acting between a reader's
    listing of a folder and its next read."""

    after: Any = None

    def find(self, path: str, *args: Any, **kwargs: Any) -> Any:
        out = super().find(path, *args, **kwargs)
        after, self.after = self.after, None
        if after is not None:
            after()
        return out


@pytest.mark.parametrize("case", ["cut", "removed"])
def test_a_summary_gone_while_the_folder_opens_reads_every_footer_and_a_damaged_file_is_still_named(
    case: str, direct: None, server: s3local.S3Server, tmp_path: Path
) -> None:
    """``open_remote_parquet`` with the summary cut or removed between its listing and the summary's
    read: a warning, every footer read, the local files' values. Only the summary is optional: a
    data file with a damaged footer in such a folder is ``CorruptFileError`` naming it."""
    blobs = _blobs()
    prefix = f"edge-racing-{case}"
    client = s3local.client(server)

    def writer() -> None:
        if case == "cut":
            client.put_object(Bucket=BUCKET, Key=f"{prefix}/_metadata", Body=summary_of(blobs)[:-100])
        else:
            client.delete_object(Bucket=BUCKET, Key=f"{prefix}/_metadata")

    fs = _Racing(skip_instance_cache=True, endpoint_url=server.endpoint, key="testing", secret="testing")
    url = _folder(server, tmp_path / "local", prefix, blobs, summary_of(blobs))
    fs.after = writer
    began = time.monotonic()
    with pytest.warns(UserWarning, match=r"_metadata summary is stale, removed or changed since the folder was listed") as caught:
        ds = open_remote_parquet(url, fields=CHOSEN, cache_dir=tmp_path / "cache", filesystem=fs, retry_budget=20)
    assert time.monotonic() - began < 10 and str(caught.pop(UserWarning).message).startswith(url)
    assert_same(_samples(ds), _samples(open_parquet(tmp_path / "local", CHOSEN)), "sample")
    damaged = dict(blobs, **{"part-1.parquet": blobs["part-1.parquet"][:-8] + b"\x00\x00\x00\x00PAR1"})  # its footer 0 bytes long
    url = _folder(server, tmp_path / "damaged", prefix, damaged, summary_of(blobs))
    fs.after = writer
    with pytest.warns(UserWarning, match=r"_metadata summary is stale"), pytest.raises(CorruptFileError) as refused:
        open_remote_parquet(url, fields=CHOSEN, cache_dir=tmp_path / "cache", filesystem=fs, retry_budget=20)
    assert refused.value.path == url + "part-1.parquet"


def test_a_summarys_transfer_cut_short_is_read_again_and_used(
    proxied: s3local.ProxyHandle, server: s3local.S3Server, tmp_path: Path
) -> None:
    """A short read of the summary the listing named, unchanged in the store (a transfer cut, the
    store still says its listed size): read again, and the folder opens from it, no warning."""
    blobs = _blobs()
    url = _folder(server, tmp_path / "local", "edge-truncated", blobs, summary_of(blobs))
    cut = proxied.counts()["faults"].get("truncate", 0)
    proxied.set_faults({1: "truncate"})  # (the first ranged GET: the summary's, the listing is none)
    gets = _ranged(proxied)
    ds = _quiet_open(url, fields=CHOSEN, cache_dir=tmp_path / "cache")
    assert proxied.counts()["faults"].get("truncate", 0) - cut == 1
    assert _ranged(proxied) - gets == 2  # the summary twice, no footer
    assert_same(_samples(ds), _samples(open_parquet(tmp_path / "local", CHOSEN)), "sample")


def test_a_rewritten_summary_is_read_again_not_served_from_the_index(
    direct: None, server: s3local.S3Server, tmp_path: Path
) -> None:
    blobs = _blobs()
    two = dict(list(blobs.items())[:2])
    url = _folder(server, tmp_path / "local", "edge-rewritten", two, summary_of(two))
    assert len(_quiet_open(url, fields=CHOSEN, cache_dir=tmp_path / "cache")) == 2 * ROWS
    url = _folder(
        server, tmp_path / "local", "edge-rewritten", blobs, summary_of(blobs)
    )  # a file added, the summary written again
    ds = _quiet_open(url, fields=CHOSEN, cache_dir=tmp_path / "cache")
    assert_same(_samples(ds), _samples(open_parquet(tmp_path / "local", CHOSEN)), "sample")
    # the same names and sizes, other values, the summary written again: the new files' values
    other = {
        name: _parquet(_table(7000 + k * ROWS, ROWS), row_group_size=GROUP, write_page_checksum=True)
        for k, name in enumerate(blobs)
    }
    url = _folder(server, tmp_path / "local", "edge-rewritten", other, summary_of(other))
    ds = _quiet_open(url, fields=CHOSEN, cache_dir=tmp_path / "cache")
    assert_same(_samples(ds), _samples(open_parquet(tmp_path / "local", CHOSEN)), "sample after the rewrite")


def test_untagged_objects_with_a_summary_are_never_read_from_an_earlier_open(tmp_path: Path) -> None:
    """A store that gives no ETag nor time, in its listing or its HEADs (fsspec's memory filesystem
    without ``created``): files rewritten at their size with other values, and their summary written
    again, read as the new files (nothing of an untagged object reused across opens)."""
    fsspec = pytest.importorskip("fsspec")
    from fsspec.implementations.memory import MemoryFileSystem

    class Untagged(MemoryFileSystem):
        def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
            return {k: v for k, v in super().info(path, **kwargs).items() if k != "created"}

        def ls(self, path: str, detail: bool = True, **kwargs: Any) -> Any:
            out = super().ls(path, detail=detail, **kwargs)
            return [{k: v for k, v in e.items() if k != "created"} for e in out] if detail else out

        def find(self, path: str, *args: Any, detail: bool = False, **kwargs: Any) -> Any:
            out = super().find(path, *args, detail=detail, **kwargs)
            return {n: {k: v for k, v in e.items() if k != "created"} for n, e in out.items()} if detail else out

    plain = {"row_group_size": 10, "compression": "none", "use_dictionary": False, "write_statistics": False}
    memory = fsspec.filesystem("memory")

    def write(first: int) -> None:
        blobs = {
            f"p{k}.parquet": _parquet(
                pa.table({"label": pa.array(range(first + 40 * k, first + 40 * k + 40), pa.int64())}), **plain
            )
            for k in range(2)
        }
        for name, blob in blobs.items():
            memory.pipe_file(f"/untagged-summary/{name}", blob)
        memory.pipe_file("/untagged-summary/_metadata", summary_of(blobs))

    fs = Untagged()
    write(0)
    assert fs.find("/untagged-summary", detail=True)["/untagged-summary/p0.parquet"].get("created") is None
    first = _quiet_open("memory://untagged-summary/", cache_dir=tmp_path, filesystem=fs)
    assert [s["label"] for s in _samples(first)] == list(range(80))
    write(1000)
    again = _quiet_open("memory://untagged-summary/", cache_dir=tmp_path, filesystem=fs)
    assert [s["label"] for s in _samples(again)] == list(range(1000, 1080))


# ---------------------------------------------------------------------------- hostile summaries

HOSTILE = r"""
import json, sys, time, warnings
from slipstream.inplace.parquet_remote import open_remote_parquet
from leafvalues import values
from slipstream.inplace.parquet import open_parquet
args = json.loads(sys.argv[1])
want = values(open_parquet(args["local"]))
out = {}
for case, url in args["urls"].items():
    began = time.monotonic()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        got = values(open_remote_parquet(url, cache_dir=args["cache"], retry_budget=5))
    messages = [str(w.message) for w in seen if issubclass(w.category, UserWarning)]
    out[case] = {"same": got == want, "warned": [m[:300] for m in messages], "seconds": time.monotonic() - began}
print("RESULT " + json.dumps(out), flush=True)
"""


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(out)


def _with_field(summary: bytes, field: bytes) -> bytes:
    """``summary`` with ``field`` (a Thrift compact field, header and value) added at the end of its
    FileMetaData struct (before its stop byte), the footer's length written again."""
    length = int.from_bytes(summary[-8:-4], "little")
    start = len(summary) - 8 - length
    footer = summary[start:-8]
    assert footer[-1] == 0
    footer = footer[:-1] + field + b"\x00"
    return summary[:start] + footer + len(footer).to_bytes(4, "little") + b"PAR1"


def _negative_offset(summary: bytes, blob: bytes) -> bytes:
    """``summary`` with the first data page offset of ``blob``'s first column chunk made negative
    (its zigzag varint, after the field header of ColumnMetaData field 9 following field 7)."""
    offset = pq.read_metadata(pa.BufferReader(blob)).row_group(0).column(0).data_page_offset
    was, now = b"\x26" + _varint(2 * offset), b"\x26" + _varint(2 * offset - 1)
    assert len(was) == len(now) and summary.count(was) >= 1
    return summary.replace(was, now, 1)


def test_a_hostile_summary_is_passed_over_without_a_hang_or_a_crash(server: s3local.S3Server, tmp_path: Path) -> None:
    """Deep nesting (a list of lists 100,000 deep), a list said to hold 2**62 items, a map said to
    hold 2**40 entries, a negative data page offset: each summary is warned of (naming the folder)
    and the folder read by every footer, in a child interpreter with a timeout."""
    blobs = _blobs(2)
    summary = summary_of(blobs)
    header = lambda kind: bytes([kind]) + _varint(2 * 100)  # noqa: E731  (field 100, its id written out)
    cases = {
        "deep": _with_field(summary, header(9) + b"\x19" * 100_000 + b"\x09"),
        "long list": _with_field(summary, header(9) + b"\xf9" + _varint(1 << 62) + b"\x00" * 16),
        "big map": _with_field(summary, header(11) + _varint(1 << 40) + b"\x55" + b"\x00" * 16),
        "negative offset": _negative_offset(summary, blobs["part-0.parquet"]),
    }
    urls = {
        case: _folder(server, tmp_path / "local", f"edge-hostile-{k}", blobs, data)
        for k, (case, data) in enumerate(cases.items())
    }
    env = {**s3local.CREDENTIALS, "AWS_ENDPOINT_URL": server.endpoint}
    args = {"urls": urls, "local": str(tmp_path / "local"), "cache": str(tmp_path / "cache")}
    done = run_python(HOSTILE, timeout=300, env=env, argv=[json.dumps(args)])
    lines = [line for line in done.stdout.splitlines() if line.startswith(RESULT)]
    assert done.returncode == 0 and lines, f"the child failed (exit {done.returncode}):\n{done.stderr[-4000:]}"
    got = json.loads(lines[-1][len(RESULT) :])
    for case, url in urls.items():
        assert got[case]["same"], (case, got[case])
        assert len(got[case]["warned"]) == 1 and got[case]["warned"][0].startswith(url) and "damaged" in got[case]["warned"][0], (
            case,
            got[case],
        )
        assert got[case]["seconds"] < 60, (case, got[case])
