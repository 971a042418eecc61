"""Remote WebDataset reading at its edges (``inplace.webdataset_remote``, ``inplace.tarcache``): an
object without a tag rewritten at its size, an object replaced while its headers are read, brace
patterns of URLs with credentials (a real HTTP server here), lists mixing local shards and URLs,
``filesystem=`` with plain paths, a set with an empty shard, a pickled set in a fresh interpreter,
and hostile headers refused naming the object. Against moto (tools/s3local.py), as
tests/inplace/test_webdataset_remote.py."""

from __future__ import annotations

import base64
import http.server
import io
import json
import pickle
import re
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("moto")
pytest.importorskip("s3fs")
pytest.importorskip("boto3")

from helpers import run_python
from remote_helpers import s3local
from tardata import write_tar

import slipstream as ss
from slipstream.core.errors import CorruptFileError, ShardMismatchError
from slipstream.inplace import tarcache
from slipstream.inplace.parquet_remote import remote_fetcher
from slipstream.inplace.remoteobjects import object_info
from slipstream.inplace.webdataset import open_webdataset
from slipstream.inplace.webdataset_remote import open_remote_webdataset

BUCKET = "slipstream-tars-review"


def _put(server: Any, key: str, data: bytes) -> str:
    s3local.client(server).put_object(Bucket=BUCKET, Key=key, Body=data)
    return f"s3://{BUCKET}/{key}"


def _samples(ds: Any) -> list[dict[str, Any]]:
    return [ds[i] for i in range(len(ds))]


@pytest.fixture(scope="module")
def server() -> Iterator[s3local.S3Server]:
    with s3local.start_server() as s3:
        s3local.client(s3).create_bucket(Bucket=BUCKET)
        yield s3


@pytest.fixture
def direct(server: s3local.S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> s3local.S3Server:
    for name, value in {
        **s3local.CREDENTIALS,
        "AWS_ENDPOINT_URL": server.endpoint,
        "SLIPSTREAM_CACHE_DIR": str(tmp_path / "c"),
    }.items():
        monkeypatch.setenv(name, value)
    return server


def _pax_tar(path: Path, size_digits: bytes) -> Path:
    """One member whose pax header's ``size`` record is ``size_digits`` (its own header's size field 0)."""
    record = b"size=" + size_digits + b"\n"
    n = len(record) + 1
    while len(str(n).encode()) + len(record) + 1 != n:
        n = len(str(n).encode()) + len(record) + 1
    pax = str(n).encode() + b" " + record
    out = io.BytesIO()
    info = tarfile.TarInfo("././@PaxHeader")
    info.type, info.size = tarfile.XHDTYPE, len(pax)
    out.write(info.tobuf(tarfile.USTAR_FORMAT))
    out.write(pax + b"\0" * (-len(pax) % 512))
    member = tarfile.TarInfo("000.bin")
    member.size = 0
    out.write(member.tobuf(tarfile.USTAR_FORMAT))
    out.write(b"\0" * 10240)
    path.write_bytes(out.getvalue())
    return path


# --------------------------------------------------------------------------- hostile headers: errors


def test_a_pax_size_of_many_digits_is_a_corrupt_file_naming_the_object(direct: Any, tmp_path: Path) -> None:
    """A pax ``size`` record of 5000 digits (well under MAX_RECORD) must be refused as the other
    malformed sizes are: ``CorruptFileError`` naming the object, not Python's int-conversion ValueError."""
    path = _pax_tar(tmp_path / "pax.tar", b"0" * 4999 + b"1")
    url = _put(direct, "hostile/pax-digits.tar", path.read_bytes())
    with pytest.raises(CorruptFileError) as caught:
        open_remote_webdataset(url, cache_dir=tmp_path / "cache", retry_budget=5)
    assert caught.value.path == url
    with pytest.raises(CorruptFileError) as local:
        open_webdataset(path, cache_dir=tmp_path / "cache")
    assert str(path) in str(local.value)


# --------------------------------------------------------------------------- identity: no tag


def test_an_object_without_a_tag_replaced_at_the_same_size_is_not_read_from_its_old_pages(tmp_path: Path) -> None:
    """A store that gives no ETag nor time (here fsspec's memory filesystem with its ``created`` time
    left out): the object's identity is its size alone, so a replacement of the same size and layout
    must not be served the old object's index and cached pages as its own. The memory filesystem as
    it is gives ``created``, which is its tag."""
    fsspec = pytest.importorskip("fsspec")
    from fsspec.implementations.memory import MemoryFileSystem

    class Untagged(MemoryFileSystem):
        def info(self, path: str, **kwargs: Any) -> dict[str, Any]:
            return {k: v for k, v in super().info(path, **kwargs).items() if k != "created"}

    fs = fsspec.filesystem("memory")
    old = write_tar(tmp_path / "old.tar", [(f"{k:05d}.cls", str(k).encode()) for k in range(6)])
    new = write_tar(tmp_path / "new.tar", [(f"{k:05d}.cls", str(9 - k).encode()) for k in range(6)])
    assert old.stat().st_size == new.stat().st_size
    url = "memory://notag/shard.tar"
    fs.pipe_file("/notag/shard.tar", old.read_bytes())
    assert object_info(remote_fetcher(tmp_path / "x"), url)[2] != ""  # (its creation time)
    untagged = Untagged()
    assert object_info(remote_fetcher(tmp_path / "x", filesystem=untagged), url)[2] == ""
    first = open_remote_webdataset(url, cache_dir=tmp_path / "cache", filesystem=untagged)
    assert [s["cls"] for s in _samples(first)] == list(range(6))
    fs.pipe_file("/notag/shard.tar", new.read_bytes())  # replaced: other values, same size and layout
    again = open_remote_webdataset(url, cache_dir=tmp_path / "cache", filesystem=untagged)
    assert [s["cls"] for s in _samples(again)] == [9 - k for k in range(6)]
    assert not list((tmp_path / "cache" / "tarindex").glob("*.idx"))  # an untagged object's index is not kept


# --------------------------------------------------------------------------- the index pass vs the identity


def test_the_pass_does_not_cache_another_objects_index_under_the_listed_identity(direct: Any, tmp_path: Path) -> None:
    """The object is replaced (same size) between the listing/HEAD that gave its tag and the pass over
    its headers: the index the pass made of the new bytes must not be stored under the old tag."""
    members_a = [(f"{'a' * 120}/{k:05d}.cls", str(k).encode()) for k in range(4)]  # GNU long names: not in the headers
    members_b = [(f"{'b' * 120}/{k:05d}.cls", str(k).encode()) for k in range(4)]
    a, b = write_tar(tmp_path / "a.tar", members_a), write_tar(tmp_path / "b.tar", members_b)
    assert a.stat().st_size == b.stat().st_size
    url = _put(direct, "race/shard.tar", a.read_bytes())
    fetcher = remote_fetcher(tmp_path / "cache")
    _, size, tag_a = object_info(fetcher, url)
    _put(direct, "race/shard.tar", b.read_bytes())  # replaced after the listing, before the pass
    with pytest.raises(ShardMismatchError, match="before its headers were read") as caught:
        tarcache.remote_tar_index(fetcher, url, size, tag_a, cache_dir=tmp_path / "cache")
    assert caught.value.path == url
    assert not list((tmp_path / "cache" / "tarindex").glob("*.idx"))  # nothing indexed under the listed tag
    _put(direct, "race/shard.tar", a.read_bytes())  # the listed object (the same ETag) again
    ds = open_remote_webdataset(url, cache_dir=tmp_path / "cache")
    assert [s["__key__"] for s in _samples(ds)] == [name.rsplit(".", 1)[0] for name, _ in members_a]


# --------------------------------------------------------------------------- ss.open dispatch


def test_ss_open_of_a_list_mixing_a_local_shard_and_a_url_reads_both(direct: Any, tmp_path: Path) -> None:
    path = write_tar(tmp_path / "local.tar", [(f"{k:05d}.cls", str(k).encode()) for k in range(3)])
    other = write_tar(tmp_path / "other.tar", [(f"{k:05d}.cls", str(k).encode()) for k in range(3, 5)])
    url = _put(direct, "mixed/remote.tar", other.read_bytes())
    for paths, want in (([str(path), url], [0, 1, 2, 3, 4]), ([url, str(path)], [3, 4, 0, 1, 2])):
        ds = ss.open(paths, cache_dir=tmp_path / "cache")
        assert [s["cls"] for s in _samples(ds)] == want
        assert [str(shard.path) for shard in ds.shards] == paths


def test_ss_open_of_tar_paths_with_a_filesystem_given_reads_them_as_parquet_paths_are(direct: Any, tmp_path: Path) -> None:
    """``filesystem=`` with plain paths works for .parquet objects (not local when a filesystem is
    given); a .tar path with it must reach the WebDataset reader too."""
    s3fs = pytest.importorskip("s3fs")
    path = write_tar(tmp_path / "fs.tar", [(f"{k:05d}.cls", str(k).encode()) for k in range(3)])
    _put(direct, "withfs/shard.tar", path.read_bytes())
    fs = s3fs.S3FileSystem(client_kwargs={"endpoint_url": direct.endpoint})
    ds = ss.open(f"{BUCKET}/withfs/shard.tar", filesystem=fs, cache_dir=tmp_path / "cache")
    assert [s["cls"] for s in _samples(ds)] == [0, 1, 2]


class _AuthRanges(http.server.BaseHTTPRequestHandler):
    """A real HTTP server of ``files`` (name -> bytes) that answers only requests with the basic
    credentials ``user:secret`` (401 otherwise), HEAD and ranged GET."""

    files: dict[str, bytes] = {}
    seen: list[str] = []

    def log_message(self, *args: Any) -> None:
        pass

    def _body(self) -> bytes | None:
        want = "Basic " + base64.b64encode(b"user:secret").decode()
        self.seen.append(self.headers.get("Authorization", ""))
        if self.headers.get("Authorization") != want:
            self.send_response(401)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return None
        data = self.files.get(self.path)
        if data is None:
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
        return data

    def do_HEAD(self) -> None:  # noqa: N802
        data = self._body()
        if data is not None:
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("ETag", f'"{hash(data) & 0xFFFFFFFF:x}"')
            self.end_headers()

    def do_GET(self) -> None:  # noqa: N802
        data = self._body()
        if data is None:
            return
        match = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", ""))
        start, stop = (int(match[1]), int(match[2]) + 1 if match[2] else len(data)) if match else (0, len(data))
        self.send_response(206 if match else 200)
        self.send_header("Content-Length", str(stop - start))
        if match:
            self.send_header("Content-Range", f"bytes {start}-{stop - 1}/{len(data)}")
        self.end_headers()
        self.wfile.write(data[start:stop])


@pytest.fixture
def auth_server() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _AuthRanges)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_a_brace_pattern_of_urls_with_credentials_reads_every_object(auth_server: str, tmp_path: Path) -> None:
    """``http://user:password@host/...``: one such URL reads (the store keeps the real URL for its
    redacted name); a brace pattern of them must read its objects with those credentials too."""
    path = write_tar(tmp_path / "cred.tar", [(f"{k:05d}.cls", str(k).encode()) for k in range(3)])
    _AuthRanges.files = {f"/cred/shard-{s}.tar": path.read_bytes() for s in range(2)}
    one = ss.open(f"http://user:secret@{auth_server}/cred/shard-0.tar", cache_dir=tmp_path / "one", retry_budget=5)
    assert [s["cls"] for s in _samples(one)] == [0, 1, 2]
    ds = ss.open(f"http://user:secret@{auth_server}/cred/shard-{{0..1}}.tar", cache_dir=tmp_path / "cache", retry_budget=5)
    assert [s["cls"] for s in _samples(ds)] == [0, 1, 2] * 2


# --------------------------------------------------------------------------- shards of 0 samples


def test_a_set_with_an_empty_shard_reads_as_the_same_set_locally(direct: Any, tmp_path: Path) -> None:
    folder = tmp_path / "set"
    folder.mkdir()
    write_tar(folder / "a.tar", [(f"{k:05d}.cls", str(k).encode()) for k in range(3)])
    write_tar(folder / "b.tar", [])
    write_tar(folder / "c.tar", [(f"x{k:05d}.cls", str(k).encode()) for k in range(2)])
    s3local.upload(direct, folder, BUCKET, "withempty")
    try:
        want: Any = _samples(open_webdataset(folder, cache_dir=tmp_path / "l"))
    except Exception as exc:  # noqa: BLE001
        want = type(exc)
    try:
        got: Any = _samples(open_remote_webdataset(f"s3://{BUCKET}/withempty/", cache_dir=tmp_path / "r"))
    except Exception as exc:  # noqa: BLE001
        got = type(exc)
    assert got == want


# --------------------------------------------------------------------------- pickling to a fresh interpreter

SPAWNED = r"""
import pickle, sys, json
ds = pickle.loads(open(sys.argv[1], "rb").read())
print("RESULT " + json.dumps([ds[i]["cls"] for i in range(len(ds))]), flush=True)
"""


def test_a_pickled_remote_set_reads_in_a_fresh_interpreter_without_a_pass(direct: Any, tmp_path: Path) -> None:
    folder = tmp_path / "pick"
    folder.mkdir()
    for s in range(2):
        write_tar(folder / f"s{s}.tar", [(f"{s}{k:04d}.cls", str(k).encode()) for k in range(5)])
    s3local.upload(direct, folder, BUCKET, "pickled")
    ds = open_remote_webdataset(f"s3://{BUCKET}/pickled/", cache_dir=tmp_path / "cache")
    blob = tmp_path / "ds.pkl"
    blob.write_bytes(pickle.dumps(ds))
    env = {**s3local.CREDENTIALS, "AWS_ENDPOINT_URL": direct.endpoint}
    done = run_python(SPAWNED, timeout=120, env=env, argv=[str(blob)])
    lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
    assert done.returncode == 0 and lines, done.stderr[-3000:]
    assert json.loads(lines[-1][7:]) == list(range(5)) * 2


# --------------------------------------------------------------------------- hostile headers that hold


def _one_member(size_field: bytes, type_flag: bytes = b"0", tail: int = 10240) -> bytes:
    info = tarfile.TarInfo("000.bin")
    block = bytearray(info.tobuf(tarfile.USTAR_FORMAT))
    block[124:136], block[156:157] = size_field, type_flag
    block[148:156] = b" " * 8
    block[148:156] = f"{sum(block):06o}\0 ".encode()
    return bytes(block) + b"\0" * tail


@pytest.mark.parametrize(
    "raw",
    [
        _one_member(b"\x80" + (2**80).to_bytes(11, "big")),  # base-256, huge
        _one_member(b"\xff" * 12),  # base-256, negative
        _one_member(b"77777777777\0"),  # past the end
        _one_member(b"00000077777\0", b"x"),  # a pax record past the end
        _one_member(b"00000000000\0", tail=100),  # cut inside the end marker
        _one_member(b"00000000000\0")[:700],  # a header past the end (truncated)
    ],
    ids=["huge-base256", "negative-base256", "size-past-end", "pax-past-end", "cut-end", "truncated"],
)
def test_hostile_headers_are_refused_naming_the_object(direct: Any, tmp_path: Path, raw: bytes) -> None:
    url = _put(direct, f"hostile/{hash(raw) & 0xFFFF:x}.tar", raw)
    with pytest.raises(CorruptFileError) as caught:
        open_remote_webdataset(url, cache_dir=tmp_path / "cache", retry_budget=5)
    assert caught.value.path == url
