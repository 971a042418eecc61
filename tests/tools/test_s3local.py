"""tools/s3local.py: the moto S3 server and the fault-injecting proxy, both in child processes.

One server and one proxy serve the whole module (module-scoped fixtures); each test that changes the proxy's
fault schedule clears it afterwards, and counters are compared as differences.
"""

from __future__ import annotations

import http.client
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("moto")
pytest.importorskip("boto3")

from botocore.exceptions import ClientError, HTTPClientError

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import s3local

BUCKET = "s3local-test"
KEY = "blob.bin"
DATA = os.urandom(1 << 16)
NO_RETRIES = {"retries": {"total_max_attempts": 1}}  # {"max_attempts": 1} would still allow one retry


@pytest.fixture(scope="module")
def server() -> Iterator[s3local.S3Server]:
    with s3local.start_server() as s3:
        s3local.client(s3).create_bucket(Bucket=BUCKET)
        s3local.client(s3).put_object(Bucket=BUCKET, Key=KEY, Body=DATA)
        yield s3


@pytest.fixture(scope="module")
def via_proxy(proxy_module: s3local.ProxyHandle) -> Any:
    """A boto3 client that talks through the proxy and never retries."""
    return s3local.client(proxy_module, **NO_RETRIES)


def ranged(s3: Any, start: int = 100, stop: int = 1100) -> bytes:
    return s3.get_object(Bucket=BUCKET, Key=KEY, Range=f"bytes={start}-{stop - 1}")["Body"].read()


def outcome(s3: Any) -> str:
    """What a ranged GET of DATA[100:1100] through ``s3`` looked like: ok, 503, short, flipped or error."""
    try:
        got = ranged(s3)
    except ClientError as e:
        return str(e.response["ResponseMetadata"]["HTTPStatusCode"])
    except HTTPClientError:
        return "error"
    return "ok" if got == DATA[100:1100] else "short" if len(got) < 1000 else "flipped"


def delta(before: dict[str, Any], after: dict[str, Any]) -> dict[str, Any]:
    faults = {k: n - before["faults"].get(k, 0) for k, n in after["faults"].items() if n != before["faults"].get(k, 0)}
    return {k: (faults if k == "faults" else after[k] - before[k]) for k in after}


def test_server_serves_ranged_gets_and_env(server: s3local.S3Server) -> None:
    assert server.endpoint.startswith("http://127.0.0.1:")
    assert ranged(s3local.client(server)) == DATA[100:1100]
    env = server.env()
    assert env["AWS_ENDPOINT_URL"] == server.endpoint
    assert env["AWS_ACCESS_KEY_ID"] == env["AWS_SECRET_ACCESS_KEY"] == "testing" and env["AWS_DEFAULT_REGION"] == "us-east-1"


def test_upload_file_and_folder(server: s3local.S3Server, tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "a.txt").write_bytes(b"a")
    (tmp_path / "sub" / "b.txt").write_bytes(b"bb")
    assert s3local.upload(server, tmp_path, "s3local-upload", "pre/") == ["pre/a.txt", "pre/sub/b.txt"]
    assert s3local.upload(server.endpoint, tmp_path / "a.txt", "s3local-upload", "one") == ["one/a.txt"]
    assert s3local.upload(server, tmp_path / "sub", "s3local-upload") == ["b.txt"]
    s3 = s3local.client(server)
    listed = s3.list_objects_v2(Bucket="s3local-upload")["Contents"]
    assert {o["Key"]: o["Size"] for o in listed} == {"pre/a.txt": 1, "pre/sub/b.txt": 2, "one/a.txt": 1, "b.txt": 2}
    assert s3.get_object(Bucket="s3local-upload", Key="pre/sub/b.txt")["Body"].read() == b"bb"


def test_proxy_forwards_without_faults(proxy: s3local.ProxyHandle, via_proxy: Any) -> None:
    before = proxy.counts()
    assert ranged(via_proxy) == DATA[100:1100]
    assert via_proxy.get_object(Bucket=BUCKET, Key=KEY)["Body"].read() == DATA
    assert via_proxy.head_object(Bucket=BUCKET, Key=KEY)["ContentLength"] == len(DATA)
    via_proxy.put_object(Bucket=BUCKET, Key="put.bin", Body=b"x" * 3000)
    assert via_proxy.list_objects_v2(Bucket=BUCKET, Prefix="put")["Contents"][0]["Size"] == 3000
    assert via_proxy.delete_object(Bucket=BUCKET, Key="put.bin")["ResponseMetadata"]["HTTPStatusCode"] == 204
    assert ranged(via_proxy, 0, 10) == DATA[:10]  # the connection survived the bodiless HEAD and 204
    d = delta(before, proxy.counts())
    assert d["requests"] == 7 and d["ranged_gets"] == 2 and d["faults"] == {}
    assert d["bytes"] >= 1000 + len(DATA) + 10
    assert d["connections"] <= 1  # kept alive (0: boto3 reused a connection of an earlier test)


@pytest.mark.parametrize("kind", s3local.FAULTS)
def test_each_fault_is_observed(proxy: s3local.ProxyHandle, via_proxy: Any, kind: str) -> None:
    proxy.set_faults(kind, every=1, slow=0.3)
    before = proxy.counts()
    start = time.perf_counter()
    if kind in ("drop", "reset"):
        with pytest.raises(HTTPClientError):  # ConnectionClosedError / ResponseStreamingError
            ranged(via_proxy)
    elif kind == "503":
        with pytest.raises(ClientError) as e:
            ranged(via_proxy)
        assert e.value.response["Error"]["Code"] == "SlowDown"
        assert e.value.response["ResponseMetadata"]["HTTPStatusCode"] == 503
    else:
        got = ranged(via_proxy)
        want = DATA[100:1100]
        if kind == "slow":
            assert got == want and time.perf_counter() - start >= 0.3
        elif kind == "truncate":
            assert got == want[:500]
        elif kind == "norange":
            assert got == DATA  # the whole object, as from a server that ignores Range
        else:
            assert len(got) == len(want) and sum(a != b for a, b in zip(got, want)) == 1
    assert delta(before, proxy.counts())["faults"] == {kind: 1}
    assert via_proxy.head_object(Bucket=BUCKET, Key=KEY)["ContentLength"] == len(DATA)  # only ranged GETs get faults


def test_round_robin_schedule(proxy: s3local.ProxyHandle, via_proxy: Any) -> None:
    proxy.set_faults(["503", "flip"], every=3)
    seen = []
    for _ in range(7):
        seen.append(outcome(via_proxy))
        via_proxy.get_object(Bucket=BUCKET, Key=KEY)["Body"].read()  # not ranged: neither faulted nor numbered
    assert seen == ["ok", "ok", "503", "ok", "ok", "flipped", "ok"]
    proxy.set_faults("503", every=1)  # permanent; the numbering restarts
    assert [outcome(via_proxy) for _ in range(3)] == ["503"] * 3
    proxy.set_faults(None)
    assert outcome(via_proxy) == "ok"


def test_dict_schedule(proxy: s3local.ProxyHandle, via_proxy: Any) -> None:
    proxy.set_faults({2: "truncate", 4: "drop"})
    assert [outcome(via_proxy) for _ in range(5)] == ["ok", "short", "ok", "error", "ok"]


def test_bad_schedules_are_refused(proxy: s3local.ProxyHandle) -> None:
    for bad in ("timeout", [], ["503", "nope"], {1: "nope"}):
        with pytest.raises(ValueError):
            proxy.set_faults(bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        proxy.set_faults("503", every=0)


def test_latency_delays_each_request(server: s3local.S3Server) -> None:
    with s3local.start_proxy(server.endpoint, latency=0.1) as slow:
        s3 = s3local.client(slow, **NO_RETRIES)
        s3.head_object(Bucket=BUCKET, Key=KEY)  # connect outside the measurement
        start = time.perf_counter()
        for _ in range(3):
            assert ranged(s3) == DATA[100:1100]
        assert time.perf_counter() - start >= 3 * 0.1
        slow.set_latency(0.3)
        start = time.perf_counter()
        s3.head_object(Bucket=BUCKET, Key=KEY)
        assert time.perf_counter() - start >= 0.3


def test_s3fs_through_proxy(proxy: s3local.ProxyHandle) -> None:
    s3fs = pytest.importorskip("s3fs")
    fs = s3fs.S3FileSystem(
        client_kwargs={"endpoint_url": proxy.endpoint}, key="testing", secret="testing", skip_instance_cache=True
    )
    before = proxy.counts()
    assert f"{BUCKET}/{KEY}" in fs.ls(BUCKET)
    assert fs.info(f"{BUCKET}/{KEY}", refresh=True)["size"] == len(DATA)  # HEAD
    assert fs.cat_file(f"{BUCKET}/{KEY}", start=10, end=20) == DATA[10:20]
    with fs.open(f"{BUCKET}/{KEY}", block_size=1 << 14) as f:
        f.seek(30000)
        assert f.read(5000) == DATA[30000:35000]
    d = delta(before, proxy.counts())
    assert d["requests"] >= 4 and d["ranged_gets"] >= 2
    assert d["connections"] < d["requests"]  # aiohttp kept connections alive through the proxy


def test_s3fs_honours_aws_endpoint_url(server: s3local.S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    """botocore reads AWS_ENDPOINT_URL itself, and s3fs passes no endpoint when it has none: the env suffices."""
    s3fs = pytest.importorskip("s3fs")
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    assert fs.cat_file(f"{BUCKET}/{KEY}", start=10, end=20) == DATA[10:20]


class _ChunkedEcho(BaseHTTPRequestHandler):
    """Answers every request with its body (plus a marker), in chunked transfer encoding."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        assert "Transfer-Encoding" not in self.headers  # the proxy re-frames a chunked request body
        body = self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for part in (b"echo:", body):
            self.wfile.write(b"%x\r\n%s\r\n" % (len(part), part))
        self.wfile.write(b"0\r\n\r\n")


def test_chunked_bodies_both_ways() -> None:
    upstream = ThreadingHTTPServer(("127.0.0.1", 0), _ChunkedEcho)
    threading.Thread(target=upstream.serve_forever, daemon=True).start()
    try:
        with s3local.start_proxy(f"http://127.0.0.1:{upstream.server_address[1]}") as proxy:
            conn = http.client.HTTPConnection(proxy.endpoint.removeprefix("http://"), timeout=10)
            for n in (1, 2):  # twice on one connection
                conn.request("POST", "/x", body=iter([b"hello ", b"world%d" % n]), encode_chunked=True)
                response = conn.getresponse()
                assert response.getheader("Content-Length") == str(len(b"echo:hello world1"))
                assert response.read() == b"echo:hello world%d" % n
            conn.close()
    finally:
        upstream.shutdown()
        upstream.server_close()


def test_failed_start_reports_the_childs_stderr() -> None:
    with pytest.raises(RuntimeError, match="upstream must be an http:// URL"):
        s3local.start_proxy("ftp://127.0.0.1:1")


@pytest.mark.skipif(not hasattr(os, "pidfd_open"), reason="needs os.pidfd_open (Linux) to await a non-child")
def test_children_exit_when_the_parent_dies(server: s3local.S3Server) -> None:
    code = (
        f"import os, sys; sys.path.insert(0, {str(Path(s3local.__file__).parent)!r}); import s3local\n"
        f"p = s3local.start_proxy({server.endpoint!r}); print(p._proc.pid, flush=True); os._exit(0)"
    )
    orphan = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True).stdout)
    try:
        pidfd = os.pidfd_open(orphan)
    except ProcessLookupError:
        return  # already gone and reaped
    try:
        assert select.select([pidfd], [], [], 10)[0], "the orphaned proxy still runs 10 s after its parent died"
    finally:
        os.close(pidfd)
