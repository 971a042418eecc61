"""A local S3 for tests and benchmarks: moto's S3 server and a fault-injecting proxy, each in its own subprocess.

Self-contained (standard library, plus moto in the server child and boto3 in ``upload``/``client``); everything
listens on 127.0.0.1 only, on a port the OS picks.

    with start_server() as s3, start_proxy(s3.endpoint, latency=0.02) as proxy:
        upload(s3, "data/", "bucket", "train")         # s3://bucket/train/...
        proxy.set_faults(["503", "flip"], every=3)      # every 3rd ranged GET fails, alternating the two kinds
        ...                                             # point clients at proxy.endpoint
        proxy.counts()                                  # {"requests": n, "ranged_gets": n, "faults": {...}, "bytes": n}

Ready-line protocol: a child (``python s3local.py server`` or ``python s3local.py proxy --upstream URL``) binds
port 0, starts accepting connections, then prints exactly one line ``s3local ready http://127.0.0.1:PORT`` on
stdout and nothing more there (its stdout then goes to /dev/null). The parent waits for that line (at most
``READY_TIMEOUT_S``); if the child exits or the time runs out first, it raises ``RuntimeError`` with the child's
stderr. A child whose stdin is a pipe exits as soon as that pipe reaches EOF, which happens when the parent
closes it or dies (even by SIGKILL); from a terminal or with stdin from /dev/null, a child runs until killed.

Faults (proxy): only GET requests with a ``Range`` header (ranged reads) get faults. Ranged GETs are numbered
1, 2, 3, ... from the moment the schedule is set. A list ``[f1, f2, ...]`` with ``every=k`` faults the GETs
numbered k, 2k, 3k, ..., using f1, f2, ... in turn (round-robin); ``set_faults("503", every=1)`` fails every
ranged GET for good. A dict ``{n: fault}`` faults exactly the listed GET numbers. Kinds (``FAULTS``):

- ``drop``: close the connection without a response;
- ``503``: a 503 reply with an S3 XML error body, code ``SlowDown`` (upstream is not asked);
- ``reset``: status, headers and the first half of the body, then the connection closes (RST);
- ``slow``: the correct response, after ``slow`` seconds (2 by default);
- ``truncate``: correct status and headers, but Content-Length and body cut to half the body (Content-Range
  still tells the full range), so the client sees a short but apparently complete response;
- ``flip``: the byte in the middle of the body is inverted (XOR 0xFF); status and length unchanged;
- ``norange``: forwarded without its ``Range`` header, so the answer is ``200 OK`` with the whole object (a
  server that ignores ranged reads).
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:
    from typing_extensions import Self

HOST = "127.0.0.1"
READY_PREFIX = "s3local ready "
READY_TIMEOUT_S = 60.0
FAULTS = ("drop", "503", "reset", "slow", "truncate", "flip", "norange")
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
CONTROL_PREFIX = "/__proxy__/"

# headers that concern one connection only; never forwarded (the body is re-framed with a Content-Length)
_HOP_BY_HOP = frozenset(
    ("connection", "keep-alive", "proxy-connection", "transfer-encoding", "te", "trailer", "upgrade", "expect")
)
_SLOWDOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate.</Message><RequestId>s3local</RequestId></Error>"
)

Faults = str | list[str] | dict[int, str] | None


# ---------------------------------------------------------------------------------------------- the parent side


class _Child:
    """A child process that printed the ready line; ``endpoint`` is its URL. Stop it with ``stop()`` or ``with``."""

    def __init__(self, args: list[str]) -> None:
        self._stderr: BinaryIO = tempfile.TemporaryFile()  # noqa: SIM115 (open as long as the child runs)
        self._proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), *args],
            stdin=subprocess.PIPE,  # the child exits at EOF: when we close it or die
            stdout=subprocess.PIPE,
            stderr=self._stderr,
        )
        self.endpoint: str = self._wait_ready()

    def _wait_ready(self) -> str:
        assert self._proc.stdout is not None
        line: list[bytes] = []
        reader = threading.Thread(target=lambda: line.append(self._proc.stdout.readline()), daemon=True)  # type: ignore[union-attr]
        reader.start()
        reader.join(READY_TIMEOUT_S)
        text = line[0].decode(errors="replace").strip() if line else ""
        if not text.startswith(READY_PREFIX):
            why = (
                f"no ready line within {READY_TIMEOUT_S:.0f} s"
                if not line
                else f"it printed {text!r} and exit code {self._proc.poll()}"
            )
            self._proc.kill()  # its stdout reaches EOF: the reader returns
            reader.join()
            self.stop()
            raise RuntimeError(f"s3local child {self._proc.args[2:]} failed to start: {why}; its stderr:\n{self.log()}")
        self._proc.stdout.close()
        return text[len(READY_PREFIX) :]

    def log(self) -> str:
        """What the child wrote on stderr so far."""
        self._stderr.seek(0)
        return self._stderr.read().decode(errors="replace")

    def stop(self) -> None:
        """Terminate the child and wait for it (SIGKILL after 5 s). Idempotent."""
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
        for pipe in (self._proc.stdin, self._proc.stdout):
            if pipe is not None:
                pipe.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class S3Server(_Child):
    """A moto S3 server in a child process; ``endpoint`` is "http://127.0.0.1:PORT"."""

    def __init__(self) -> None:
        super().__init__(["server"])

    def env(self) -> dict[str, str]:
        """The standard environment variables for an S3 client of this server (endpoint, test credentials, region)."""
        return {"AWS_ENDPOINT_URL": self.endpoint, **CREDENTIALS}


class ProxyHandle(_Child):
    """A FaultProxy in a child process; point S3 clients at ``endpoint``. See the module docstring for faults."""

    def __init__(self, upstream: str, latency: float = 0.0, faults: Faults = None, every: int = 1, slow: float = 2.0) -> None:
        _check_faults(faults)
        super().__init__(["proxy", "--upstream", upstream, "--latency", str(latency)])
        if faults is not None:
            try:
                self.set_faults(faults, every=every, slow=slow)
            except BaseException:
                self.stop()
                raise

    def set_faults(self, faults: Faults, every: int = 1, slow: float = 2.0) -> None:
        """Replace the fault schedule (None: no faults) and restart the ranged-GET numbering; ``slow`` in seconds."""
        _check_faults(faults)
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        self._control("config", {"faults": faults, "every": every, "slow": slow})

    def set_latency(self, seconds: float) -> None:
        """Set the delay added before forwarding each request."""
        self._control("config", {"latency": seconds})

    def counts(self) -> dict[str, Any]:
        """Counters since start, control calls left out: {"requests": n, "ranged_gets": n, "faults": {kind: n},
        "bytes": response body bytes sent to clients, "connections": client connections that carried requests}."""
        return self._control("counts")

    def _control(self, name: str, body: dict[str, Any] | None = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        with urllib.request.urlopen(urllib.request.Request(f"{self.endpoint}{CONTROL_PREFIX}{name}", data=data), timeout=10) as r:
            return json.loads(r.read())


def start_server() -> S3Server:
    """Start moto's S3 server in a child process on 127.0.0.1 (free port); returns once it accepts connections."""
    return S3Server()


def start_proxy(upstream: str, latency: float = 0.0, faults: Faults = None, every: int = 1, slow: float = 2.0) -> ProxyHandle:
    """Start a FaultProxy in front of ``upstream`` (an endpoint URL) in a child process; see the module docstring."""
    return ProxyHandle(upstream, latency, faults, every, slow)


def client(target: _Child | str, **config: Any) -> Any:
    """A boto3 S3 client for ``target`` (a server, proxy or endpoint URL); ``config`` goes to botocore's Config."""
    import boto3
    from botocore.config import Config

    endpoint = target if isinstance(target, str) else target.endpoint
    return boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=CREDENTIALS["AWS_ACCESS_KEY_ID"],
        aws_secret_access_key=CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
        region_name=CREDENTIALS["AWS_DEFAULT_REGION"],
        config=Config(**config),
    )


def upload(target: _Child | str, source: str | os.PathLike[str], bucket: str, prefix: str = "") -> list[str]:
    """Upload a file, or every file under a folder (recursively), to ``bucket`` (created if needed); returns the keys.

    A file goes to ``prefix/NAME``; a folder's files to ``prefix/RELATIVE/PATH`` (no prefix: no leading part).
    """
    s3 = client(target)
    try:
        s3.create_bucket(Bucket=bucket)
    except s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    source = Path(source)
    files = (
        [(source, source.name)]
        if source.is_file()
        else [(p, p.relative_to(source).as_posix()) for p in sorted(source.rglob("*")) if p.is_file()]
    )
    keys = []
    for path, name in files:
        key = f"{prefix.strip('/')}/{name}" if prefix.strip("/") else name
        s3.upload_file(str(path), bucket, key)
        keys.append(key)
    return keys


def _check_faults(faults: Faults) -> dict[int, str] | list[str] | None:
    """The schedule as a list or a dict with int keys; ValueError for unknown kinds."""
    if faults is None:
        return None
    if isinstance(faults, str):
        faults = [faults]
    names = list(faults.values()) if isinstance(faults, dict) else list(faults)
    unknown = [name for name in names if name not in FAULTS]
    if unknown or not names:
        raise ValueError(f"faults must be a non-empty list or dict of {FAULTS}, got {faults!r}")
    return {int(n): name for n, name in faults.items()} if isinstance(faults, dict) else names


# ----------------------------------------------------------------------------------------------- the child side


def _announce_ready(endpoint: str) -> None:
    """Print the ready line, send any later stdout to /dev/null, and exit at stdin EOF if stdin is a pipe."""
    sys.stdout.write(f"{READY_PREFIX}{endpoint}\n")
    sys.stdout.flush()
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.close(devnull)
    if stat.S_ISFIFO(os.fstat(0).st_mode):

        def watch() -> None:
            while os.read(0, 65536):
                pass
            os._exit(0)

        threading.Thread(target=watch, daemon=True).start()


def _serve_s3() -> None:
    import logging

    from moto.moto_server.threaded_moto_server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # no line per request on stderr
    server = ThreadedMotoServer(ip_address=HOST, port=0, verbose=False)
    server.start()  # returns once the socket listens
    host, port = server.get_host_and_port()
    _announce_ready(f"http://{host}:{port}")
    threading.Event().wait()  # the server thread is a daemon; we run until killed or stdin EOF


class _State:
    """The proxy's settings and counters, shared by the handler threads."""

    def __init__(self, upstream: str, latency: float) -> None:
        url = urllib.parse.urlsplit(upstream)
        if url.scheme != "http" or not url.hostname:
            raise ValueError(f"upstream must be an http:// URL, got {upstream!r}")
        self.upstream = (url.hostname, url.port or 80)
        self.latency = latency
        self.lock = threading.Lock()
        self.faults: list[str] | dict[int, str] | None = None
        self.every = 1
        self.slow = 2.0
        self.ranged = 0  # ranged GETs since the schedule was set
        self.counts: dict[str, Any] = {"requests": 0, "ranged_gets": 0, "faults": {}, "bytes": 0, "connections": 0}

    def configure(self, config: dict[str, Any]) -> None:
        with self.lock:
            if "faults" in config:
                self.faults = _check_faults(config["faults"])
                self.every = max(1, int(config.get("every", 1)))
                self.slow = float(config.get("slow", 2.0))
                self.ranged = 0
            if "latency" in config:
                self.latency = float(config["latency"])

    def next_fault(self, ranged_get: bool, new_connection: bool) -> str | None:
        """Count a request; the fault for it, if any."""
        with self.lock:
            self.counts["requests"] += 1
            self.counts["connections"] += new_connection
            if not ranged_get:
                return None
            self.counts["ranged_gets"] += 1
            self.ranged += 1
            if isinstance(self.faults, dict):
                fault = self.faults.get(self.ranged)
            elif self.faults and self.ranged % self.every == 0:
                fault = self.faults[(self.ranged // self.every - 1) % len(self.faults)]
            else:
                fault = None
            if fault:
                self.counts["faults"][fault] = self.counts["faults"].get(fault, 0) + 1
            return fault

    def sent(self, n: int) -> None:
        with self.lock:
            self.counts["bytes"] += n


class FaultProxy(ThreadingHTTPServer):
    """The proxy server (run in the child): listens on 127.0.0.1:``port`` (0: a free one), forwards to ``upstream``."""

    daemon_threads = True

    def __init__(self, upstream: str, latency: float = 0.0, port: int = 0) -> None:
        self.state = _State(upstream, latency)
        super().__init__((HOST, port), _ProxyHandler)

    def handle_error(self, request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], OSError):  # clients hanging up are routine here
            super().handle_error(request, client_address)


class _ProxyHandler(BaseHTTPRequestHandler):
    """Forwards each request to the upstream over one kept-alive connection per client connection."""

    protocol_version = "HTTP/1.1"
    server: FaultProxy
    _upstream: http.client.HTTPConnection | None = None
    _served = 0  # proxied requests on this client connection

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def finish(self) -> None:
        super().finish()
        if self._upstream is not None:
            self._upstream.close()

    def _request_body(self) -> bytes | None:
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            parts = []
            while size := int(self.rfile.readline().split(b";")[0], 16):
                parts.append(self.rfile.read(size))
                self.rfile.readline()
            while self.rfile.readline() not in (b"\r\n", b"\n", b""):  # trailers
                pass
            return b"".join(parts)
        length = self.headers.get("Content-Length")
        return self.rfile.read(int(length)) if length else None

    def _forward(self, body: bytes | None, ranged: bool = True) -> tuple[int, str, list[tuple[str, str]], bytes]:
        headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP and (ranged or k.lower() != "range")}
        if body is not None:
            headers["Content-Length"] = str(len(body))
        while True:  # a kept-alive upstream connection may have been closed meanwhile: then retry on a new one
            fresh = self._upstream is None
            if self._upstream is None:
                self._upstream = http.client.HTTPConnection(*self.server.state.upstream, timeout=60)
            try:
                self._upstream.request(self.command, self.path, body=body, headers=headers)
                response = self._upstream.getresponse()
                data = response.read()
                if response.will_close:
                    self._upstream.close()
                return response.status, response.reason, response.getheaders(), data
            except (ConnectionError, http.client.HTTPException, OSError):
                self._upstream.close()
                self._upstream = None
                if fresh:
                    raise

    def _reply(
        self, status: int, reason: str | None, headers: list[tuple[str, str]], body: bytes, length: int | None = None
    ) -> None:
        """Send a response; Content-Length is ``length`` (default: that of ``body``) except for bodiless ones."""
        bodiless = self.command == "HEAD" or status in (204, 304) or status < 200
        self.send_response_only(status, reason)
        for name, value in headers:
            if name.lower() not in _HOP_BY_HOP and (bodiless or name.lower() != "content-length"):
                self.send_header(name, value)
        if not bodiless:
            self.send_header("Content-Length", str(len(body) if length is None else length))
        self.end_headers()
        if not bodiless and body:
            self.wfile.write(body)
            self.server.state.sent(len(body))

    def _control(self) -> None:
        state = self.server.state
        name = self.path[len(CONTROL_PREFIX) :]
        status, answer = 200, {}
        try:
            if name == "config" and self.command == "POST":
                state.configure(json.loads(self._request_body() or b"{}"))
            elif name == "counts":
                with state.lock:
                    answer = json.loads(json.dumps(state.counts))
            else:
                status, answer = 404, {"error": f"no control {self.command} {name}"}
        except (ValueError, TypeError) as e:
            status, answer = 400, {"error": str(e)}
        self._reply(status, None, [("Content-Type", "application/json")], json.dumps(answer).encode())

    def _proxy(self) -> None:
        if self.path.startswith(CONTROL_PREFIX):
            return self._control()
        state = self.server.state
        body = self._request_body()
        fault = state.next_fault(self.command == "GET" and "Range" in self.headers, new_connection=not self._served)
        self._served += 1
        if state.latency > 0:
            time.sleep(state.latency)  # simulated network latency
        if fault == "drop":
            self.close_connection = True
            return
        if fault == "503":
            return self._reply(503, "Slow Down", [("Content-Type", "application/xml")], _SLOWDOWN)
        try:
            status, reason, headers, data = self._forward(body, ranged=fault != "norange")
        except (ConnectionError, http.client.HTTPException, OSError) as e:
            return self._reply(502, "Bad Gateway", [("Content-Type", "text/plain")], f"s3local proxy: upstream: {e!r}".encode())
        if fault == "slow":
            time.sleep(state.slow)
        elif fault == "flip" and data:
            flipped = bytearray(data)
            flipped[len(data) // 2] ^= 0xFF
            data = bytes(flipped)
        elif fault == "truncate":
            data = data[: len(data) // 2]
        elif fault == "reset":
            self._reply(status, reason, headers, data[: len(data) // 2], length=len(data))
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close sends RST
            self.close_connection = True
            return
        self._reply(status, reason, headers, data)

    do_GET = do_HEAD = do_PUT = do_POST = do_DELETE = do_PATCH = do_OPTIONS = _proxy


def _serve_proxy(upstream: str, latency: float, faults: list[str] | None, every: int, slow: float) -> None:
    server = FaultProxy(upstream, latency)
    server.state.configure({"faults": faults, "every": every, "slow": slow})
    _announce_ready(f"http://{HOST}:{server.server_address[1]}")
    server.serve_forever()


def main(argv: list[str] | None = None) -> None:
    """CLI: ``server`` or ``proxy --upstream URL [--latency S] [--faults 503,flip --every K --slow S]``; each prints
    the ready line and runs until killed or (stdin a pipe) stdin EOF."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("server", help="moto's S3 server")
    proxy = commands.add_parser("proxy", help="a fault-injecting proxy in front of an S3 endpoint")
    proxy.add_argument("--upstream", required=True, help="the S3 endpoint URL to forward to")
    proxy.add_argument("--latency", type=float, default=0.0, help="seconds added before forwarding each request")
    proxy.add_argument("--faults", type=lambda text: text.split(","), help=f"comma-separated kinds among {','.join(FAULTS)}")
    proxy.add_argument("--every", type=int, default=1, help="fault every k-th ranged GET (default 1)")
    proxy.add_argument("--slow", type=float, default=2.0, help="seconds of delay for the 'slow' fault (default 2)")
    args = parser.parse_args(argv)
    if args.command == "server":
        _serve_s3()
    else:
        _serve_proxy(args.upstream, args.latency, args.faults, args.every, args.slow)


if __name__ == "__main__":
    main()
