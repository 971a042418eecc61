"""Remote reads fail by their cause: a permanent failure at once, with a clear error, attempted once;
a transient one retried; a damaged transfer of a file's structure read again; credentials never shown.

A local moto S3 server behind the fault-injecting proxy of tools/s3local.py (and, for HTTP, a plain
loopback file server that ignores ranged reads and wants a password). Each test that changes
objects changes its own copy. The retry budgets are far longer than the tests take when the
errors are classified right, so a permanent failure retried again shows as more attempts (counted
at the proxy, the server or the fetcher), not as a time.
"""

from __future__ import annotations

import base64
import functools
import json
import re
import threading
import traceback
import urllib.parse
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("moto")
pytest.importorskip("s3fs")
pytest.importorskip("boto3")

from helpers import assert_same
from remote_helpers import s3local

import slipstream as ss
from slipstream import fields as F

BUCKET = "slipstream-errors"
FIELDS = {"label": F.Int(), "x": F.Array("float32", (64,)), "t": F.Text()}
BUDGET = 30.0  # far more than any test here takes: a permanent failure retried would show as attempts
SECRET = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYzz9"


@dataclass(frozen=True)
class Data:
    folder: Path  # a sharded dataset, local
    file: Path  # one packed file, local
    index: dict[str, Any]

    def shard(self, k: int) -> dict[str, Any]:
        return self.index["shards"][k]

    def first_sample(self, k: int) -> int:
        return sum(entry["samples"] for entry in self.index["shards"][:k])


@pytest.fixture(scope="module")
def server() -> Iterator[s3local.S3Server]:
    with s3local.start_server() as s3:
        yield s3


@pytest.fixture(scope="module")
def data(server: s3local.S3Server, tmp_path_factory: pytest.TempPathFactory) -> Data:
    root = tmp_path_factory.mktemp("errors-data")
    samples = [{"label": k, "x": np.full(64, k, np.float32), "t": f"sample {k}"} for k in range(120)]
    folder = ss.write(root / "train", samples, FIELDS, progress=False, page_size=2_000, shard_size=8_000)
    file = ss.write(root / "one.arrow", samples[:60], FIELDS, progress=False, page_size=2_000)
    s3local.upload(server, folder, BUCKET, "train")
    s3local.upload(server, file, BUCKET, "files")
    index = json.loads((folder / "index.json").read_text())
    assert len(index["shards"]) >= 3 and all(len(entry["pages"]) >= 3 for entry in index["shards"][:-1])
    return Data(folder, file, index)


@pytest.fixture
def via_proxy(server: s3local.S3Server, proxy: s3local.ProxyHandle, monkeypatch: pytest.MonkeyPatch) -> s3local.ProxyHandle:
    """Reads in this process go through the proxy."""
    for name, value in {**server.env(), "AWS_ENDPOINT_URL": proxy.endpoint}.items():
        monkeypatch.setenv(name, value)
    return proxy


def _copy(server: s3local.S3Server, data: Data, prefix: str) -> str:
    s3local.upload(server, data.folder, BUCKET, prefix)
    return f"s3://{BUCKET}/{prefix}/"


def _requests(proxy: s3local.ProxyHandle, before: dict[str, Any]) -> dict[str, int]:
    after = proxy.counts()
    return {k: after[k] - before[k] for k in ("requests", "ranged_gets")}


def _shown(error: BaseException) -> str:
    """Everything an error shows: its traceback with its causes and contexts, its repr, its attributes."""
    return "".join(traceback.format_exception(error)) + repr(error) + repr(getattr(error, "__dict__", {}))


# ------------------------------------------------------------------------- 3. credentials in a URL


def test_credentials_in_an_s3_url_are_refused_before_any_request_and_never_shown(via_proxy: s3local.ProxyHandle, tmp_path: Path) -> None:
    before = via_proxy.counts()
    for url in (f"s3://AKIAEXAMPLE:{SECRET}@{BUCKET}/train/", [f"s3://{BUCKET}/files/one.arrow", f"s3://AKIAEXAMPLE:{SECRET}@{BUCKET}/files/one.arrow"]):
        with pytest.raises(ValueError, match=re.escape(f"s3://***@{BUCKET}/") + ".*cannot carry credentials.*storage_options") as caught:
            ss.open(url, cache_dir=tmp_path, retry_budget=BUDGET)
        assert SECRET not in _shown(caught.value) and "AKIAEXAMPLE:" not in _shown(caught.value)
    assert _requests(via_proxy, before)["requests"] == 0


def test_credentials_in_a_query_string_are_never_shown(via_proxy: s3local.ProxyHandle, tmp_path: Path) -> None:
    url = f"s3://{BUCKET}/files/none.arrow?X-Amz-Security-Token={SECRET}"
    with pytest.raises(ss.MissingShardError) as caught:
        ss.open(url, cache_dir=tmp_path, retry_budget=BUDGET)
    assert caught.value.path == f"s3://{BUCKET}/files/none.arrow?X-Amz-Security-Token=***"
    assert SECRET not in _shown(caught.value)


def test_an_endpoint_url_with_a_password_in_storage_options_is_never_shown(server: s3local.S3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL")
    endpoint = f"http://admin:{SECRET}@127.0.0.1:9/"  # nothing listens on port 9 (discard): refused at once
    with pytest.raises(ss.RemoteReadError) as caught:
        ss.open(f"s3://{BUCKET}/train/", cache_dir=tmp_path, retry_budget=0.5, timeout=0.5, storage_options={"endpoint_url": endpoint})
    shown = _shown(caught.value)
    assert SECRET not in shown and "admin:" not in shown, shown


class _Files(SimpleHTTPRequestHandler):
    """A loopback file server as many are: no ranged reads (the whole file for any Range), and a
    password (HTTP basic auth). Counts GETs by path and the requests that carried the password."""

    counts: dict[str, int]
    password = ""

    def log_message(self, *args: Any) -> None:
        pass

    def _allowed(self) -> bool:
        want = "Basic " + base64.b64encode(f"reader:{self.password}".encode()).decode()
        if self.headers.get("Authorization") != want:
            self.send_error(401, "password needed")
            return False
        self.counts["authorized"] = self.counts.get("authorized", 0) + 1
        return True

    def do_GET(self) -> None:
        self.counts[self.path] = self.counts.get(self.path, 0) + 1
        if self._allowed():
            super().do_GET()

    def do_HEAD(self) -> None:
        if self._allowed():
            super().do_HEAD()


class _RangedFiles(_Files):
    """The same server, answering ranged reads (206 with the bytes asked for)."""

    def do_GET(self) -> None:
        wanted = re.fullmatch(r"bytes=(\d+)-(\d+)", self.headers.get("Range", ""))
        if wanted is None:
            return super().do_GET()
        self.counts[self.path] = self.counts.get(self.path, 0) + 1
        if not self._allowed():
            return None
        raw = Path(self.translate_path(self.path)).read_bytes()
        body = raw[int(wanted[1]) : int(wanted[2]) + 1]
        self.send_response(206)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Content-Range", f"bytes {wanted[1]}-{int(wanted[1]) + len(body) - 1}/{len(raw)}")
        self.end_headers()
        self.wfile.write(body)
        return None


@pytest.fixture
def files_server(data: Data, request: pytest.FixtureRequest) -> Iterator[tuple[Any, str]]:
    """(handler class, base URL with the password in it) of a loopback file server of ``data``'s
    folder's parent; ``request.param``: whether it answers ranged reads."""
    pytest.importorskip("aiohttp")  # (fsspec's HTTP client)
    handler = type("Handler", (_RangedFiles if request.param else _Files,), {"counts": {}, "password": SECRET})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(handler, directory=str(data.file.parent)))
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield handler, f"http://reader:{urllib.parse.quote(SECRET, safe='')}@127.0.0.1:{httpd.server_address[1]}/"
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join(10)


@pytest.mark.parametrize("files_server", [True], indirect=True)
def test_a_url_with_a_password_reads_and_shows_none_in_any_process(data: Data, files_server: tuple[Any, str], tmp_path: Path) -> None:
    handler, base = files_server
    remote, local = ss.open(base + "train/", cache_dir=tmp_path, retry_budget=BUDGET), ss.open(data.folder)
    shown = "http://***@127.0.0.1:" + base.rsplit(":", 1)[1]
    assert str(remote.source_of(0)).startswith(shown + "train/shard-") and repr(remote.shards[0]).startswith(f"ss.open('{shown}train/")
    for backend in ("thread", "process"):  # (a process worker reads by the name too: the store it was sent knows the URL)
        with ss.DataLoader(remote, 16, shuffle=True, seed=2, workers=2, backend=backend) as a, ss.DataLoader(local, 16, shuffle=True, seed=2) as b:
            for x, y in zip(a, b, strict=True):
                assert_same(x, y, backend)
    assert handler.counts["authorized"] > remote.shards[0].num_pages
    everything = repr(remote) + repr([(s.path, repr(s), s.identity) for s in remote.shards]) + repr(remote.remote_stats())
    assert SECRET not in everything and urllib.parse.quote(SECRET, safe="") not in everything


@pytest.mark.parametrize("files_server", [True], indirect=True)
def test_inspect_and_validate_of_a_url_with_a_password_print_none_of_it(
    data: Data, files_server: tuple[Any, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from slipstream.cli.main import main

    _, base = files_server
    monkeypatch.setenv("SLIPSTREAM_CACHE_DIR", str(tmp_path / "cache"))
    assert main(["validate", base + "train/"]) == 0
    assert main(["inspect", base + "train/"]) == 0
    out = capsys.readouterr()
    shown = out.out + out.err
    assert "http://***@127.0.0.1:" in shown and "every page matches" in shown, shown
    assert SECRET not in shown and urllib.parse.quote(SECRET, safe="") not in shown, shown


@pytest.mark.parametrize("files_server", [False], indirect=True)
def test_an_http_server_that_ignores_ranges_fails_at_once_and_its_password_is_never_shown(data: Data, files_server: tuple[Any, str], tmp_path: Path) -> None:
    handler, base = files_server
    with pytest.raises(ss.RemoteReadError, match="ignores ranged reads") as caught:
        ss.open(base + data.file.name, cache_dir=tmp_path, retry_budget=BUDGET)
    error = caught.value
    assert error.attempts == 1 and handler.counts[f"/{data.file.name}"] == 1, handler.counts  # attempted once
    assert handler.counts["authorized"] >= 2  # the size and the read carried the password: the real URL was read
    assert error.url == "http://***@127.0.0.1:" + base.rsplit(":", 1)[1] + data.file.name
    assert SECRET not in _shown(error) and urllib.parse.quote(SECRET, safe="") not in _shown(error) and "reader:" not in _shown(error)


# ------------------------------------------------------------------------- 10. classified by cause


def test_an_invalid_bucket_name_fails_at_once(via_proxy: s3local.ProxyHandle, tmp_path: Path) -> None:
    before = via_proxy.counts()
    with pytest.raises(ss.RemoteReadError, match=r"a permanent failure, not retried: ParamValidationError") as caught:
        ss.open("s3://not a bucket!/train/", cache_dir=tmp_path, retry_budget=BUDGET)
    assert caught.value.attempts == 1 and _requests(via_proxy, before)["requests"] == 0  # (a client-side error: nothing sent)


def test_an_object_that_got_shorter_is_a_shard_mismatch_error_read_once(data: Data, server: s3local.S3Server, via_proxy: s3local.ProxyHandle, tmp_path: Path) -> None:
    url = _copy(server, data, "shortened")
    remote = ss.open(url, cache_dir=tmp_path, retry_budget=BUDGET)
    local = ss.open(data.folder)
    first = data.first_sample(1)
    assert_same(remote[first], local[first], "shard 1")  # its size is checked now, once
    name = data.shard(1)["file"]
    pages = data.shard(1)["pages"]
    raw = (data.folder / name).read_bytes()
    s3 = s3local.client(server)
    for cut, page, why in [(pages[1][0] + pages[1][1] // 2, 1, "too short for bytes"), (pages[1][0], 2, "lie past its end")]:
        s3.put_object(Bucket=BUCKET, Key=f"shortened/{name}", Body=raw[:cut])  # inside page 1 (a short body), then before it (416)
        i = first + sum(p[3] for p in pages[:page])
        stats, before = remote.remote_stats(), via_proxy.counts()
        with pytest.raises(ss.ShardMismatchError, match=re.escape(f"{url}{name}: ") + f".*{why}.*changed since"):
            remote[i]
        assert remote.remote_stats()["requests"] - stats["requests"] == 1 and _requests(via_proxy, before)["ranged_gets"] == 1
    assert_same(remote[0], local[0], "shard 0")  # the others still read


def test_a_store_that_ignores_ranges_fails_at_once(data: Data, via_proxy: s3local.ProxyHandle, tmp_path: Path) -> None:
    remote = ss.open(f"s3://{BUCKET}/train/", cache_dir=tmp_path, retry_budget=BUDGET)
    via_proxy.set_faults("norange", every=1)
    before = via_proxy.counts()
    with pytest.raises(ss.RemoteReadError, match="ignores ranged reads") as caught:
        remote[0]
    assert caught.value.attempts == 1 and _requests(via_proxy, before)["ranged_gets"] == 1
    assert remote.remote_stats()["retries"] == 0


def test_transient_failures_are_still_retried(data: Data, via_proxy: s3local.ProxyHandle, tmp_path: Path) -> None:
    remote = ss.open(f"s3://{BUCKET}/train/", cache_dir=tmp_path, retry_budget=BUDGET, timeout=0.5)
    via_proxy.set_faults({1: "503", 2: "truncate", 3: "slow"}, slow=1.0)  # (a cut body: the object still holds the range)
    assert_same(remote[0], ss.open(data.folder)[0], "sample 0")
    stats = remote.remote_stats()
    assert stats["requests"] == 4 and stats["retries"] == 3, stats


# ------------------------------------------------------------------- 11. a damaged transfer of the structure


def test_one_flipped_byte_while_opening_an_index_less_file_is_read_again(data: Data, via_proxy: s3local.ProxyHandle, tmp_path: Path) -> None:
    """The file's structure comes in 3 + pages ranged reads (its tail, its footer, then its schema and
    every page's header together): each one in turn arrives with a byte flipped."""
    local = ss.open(data.file)
    reads = 3 + local.num_pages
    for n in range(1, reads + 1):
        via_proxy.set_faults({n: "flip"})
        flips = via_proxy.counts()["faults"].get("flip", 0)
        remote = ss.open(f"s3://{BUCKET}/files/{data.file.name}", cache_dir=tmp_path / str(n), retry_budget=BUDGET)
        assert via_proxy.counts()["faults"].get("flip", 0) == flips + 1  # (the read with the flip was one of the structure's)
        assert remote.remote_stats()["retries"] >= 1, n  # found damaged, and read again
        assert len(remote) == len(local) and remote.num_pages == local.num_pages
        np.testing.assert_array_equal(remote.page_starts(), local.page_starts())
        for i in (0, len(local) // 2, len(local) - 1):
            assert_same(remote[i], local[i], f"flip at read {n}, sample {i}")
        via_proxy.set_faults(None)
        remote.validate()


# ------------------------------------------------------------------------- 12. a shard deleted mid-epoch


def test_a_shard_deleted_mid_epoch_is_a_missing_shard_error_naming_it(data: Data, server: s3local.S3Server, via_proxy: s3local.ProxyHandle, tmp_path: Path) -> None:
    url = _copy(server, data, "deleted")
    remote = ss.open(url, cache_dir=tmp_path, retry_budget=BUDGET)
    first = data.first_sample(2)
    remote[first]  # shard 2's size checked, its first page read
    name = data.shard(2)["file"]
    s3local.client(server).delete_object(Bucket=BUCKET, Key=f"deleted/{name}")
    before = via_proxy.counts()
    with pytest.raises(ss.MissingShardError, match=re.escape(f"{url}{name}: the object is missing")) as caught:
        remote[first + data.shard(2)["pages"][0][3]]  # its second page
    assert caught.value.path == url + name and isinstance(caught.value, FileNotFoundError)
    assert _requests(via_proxy, before)["ranged_gets"] == 1
    with pytest.raises(ss.MissingShardError, match=re.escape(url + name)):
        with ss.DataLoader(remote, 8, shuffle=True, seed=1, workers=2) as loader:
            for _ in loader:
                pass
