"""Object storage behind one small face: the size of an object, a byte range of it, a whole small one.

``Store(filesystem=None, storage_options=None, timeout=30)`` picks the client for each URL:

* a URL (``s3://``, ``gs://``, ``az://``/``abfs://``, ``https://``, any scheme fsspec knows) is
  opened with fsspec (``s3fs``, ``gcsfs``, ``adlfs``, its own HTTP), whose clients read
  credentials and endpoints the usual way: for S3, ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``,
  ``AWS_SECRET_ACCESS_KEY``, ``AWS_DEFAULT_REGION``, ``~/.aws/config``; ``storage_options`` are
  passed to the filesystem. For S3 made here, the client's own retries are turned down to one
  attempt and requests time out after ``timeout`` seconds, so ``remote.retry`` governs retries
  within its time budget;
* ``filesystem=`` takes a ready fsspec filesystem or a ``pyarrow.fs.FileSystem`` as it is (its own
  retries and timeouts apply too).

A store is picklable and fork-safe: the filesystem is rebuilt in a new process (from the URL and
options, or by pickling the one given), never shared across a fork. Errors are the client's:
``FileNotFoundError`` for a missing object, ``PermissionError`` for refused credentials, other
``OSError``\\ s and client errors for the rest (``remote.retry`` tells which to retry).

Credentials in a URL (``https://user:password@host/...``, a signed URL's ``?X-Amz-Signature=``)
never leave the store: ``name(url)`` is the name slipstream uses for the object everywhere (its
datasets' ``path``, reprs, errors, cache keys), the URL with its credentials redacted
(``core.redact``); the store reads the real URL for a name it gave, or for a name joined under one
(a folder's ``index.json`` and shards). The secrets are remembered for redaction in every process
the store is sent to, and so are those of ``storage_options``. An ``s3://`` or ``gs://`` URL
cannot carry credentials (the client would read ``key:secret@bucket`` as the bucket's name):
``name`` refuses one with a ``ValueError`` saying where they go, before any request.
"""

from __future__ import annotations

import os
import pickle
import threading
from typing import Any

from ..core.optional import require
from ..core.redact import redact, redact_url, remember, remember_options

__all__ = ["Store", "is_url", "join"]


def is_url(path: Any) -> bool:
    """Whether ``path`` names an object in a store (``scheme://...``) rather than a local path."""
    return isinstance(path, str) and "://" in path and not path.startswith("file://")


def join(url: str, name: str) -> str:
    return url.rstrip("/") + "/" + name


class Store:
    """Reads objects by URL (see the module doc)."""

    def __init__(self, filesystem: Any = None, storage_options: dict[str, Any] | None = None, timeout: float = 30.0):
        self._given = filesystem
        self.storage_options = dict(storage_options or {})
        remember_options(self.storage_options)
        self.timeout = float(timeout)
        self._fs: dict[str, Any] = {}  # protocol -> filesystem, in the process that made them
        self._pid = self._given_pid = os.getpid()
        self._lock = threading.Lock()
        self._real: dict[str, str] = {}  # name (credentials redacted) -> the URL it stands for

    # -- names: credentials stay here ----------------------------------------------------------
    def name(self, url: str) -> str:
        """The name of ``url`` to use everywhere else: the URL itself, or with its credentials
        redacted (reads of that name, and of names under it, read ``url``). ``ValueError`` for
        credentials in an ``s3://`` or ``gs://`` URL, and for a second URL that differs from one
        named before only in its credentials."""
        url = str(url)
        shown = redact_url(url)
        if shown == url:
            return url
        remember(url)
        protocol = url.split("://", 1)[0].lower()
        if protocol in _NO_USERINFO and shown.split("://", 1)[1].startswith("***@"):
            raise ValueError(
                f"{shown}: a {protocol}:// URL cannot carry credentials (the client would read them as part of the bucket's "
                "name): give them in storage_options (for S3: key=..., secret=...; for GCS: token=...) or in the environment "
                "(AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY; GOOGLE_APPLICATION_CREDENTIALS)"
            )
        with self._lock:
            known = self._real.setdefault(shown, url)
        if known != url:
            raise ValueError(f"{shown}: two URLs that differ only in their credentials cannot be opened together")
        return shown

    def _resolved(self, name: str) -> str:
        """The URL a name stands for (``name`` itself when it names no credentials)."""
        if not self._real:
            return name
        real = self._real.get(name)
        if real is not None:
            return real
        for shown, url in list(self._real.items()):  # a name joined under one given (a folder's objects)
            base = shown.rstrip("/") + "/"
            if name.startswith(base) and "?" not in shown:
                return url.rstrip("/") + "/" + name[len(base) :]
        return name

    # -- the filesystem, per process ------------------------------------------------------------
    def filesystem(self, url: str) -> tuple[Any, str]:
        """(filesystem, path within it) for ``url`` (a name this store gave, or a plain URL)."""
        url = self._resolved(url)
        if self._pid != os.getpid():  # a forked child: nothing of the parent's client is usable here
            self._fs, self._pid, self._lock = {}, os.getpid(), threading.Lock()
        protocol = url.split("://", 1)[0] if "://" in url else ""  # (a plain path, for a filesystem given)
        with self._lock:
            fs = self._fs.get(protocol)
            if fs is None:
                fs = self._fs[protocol] = self._make(protocol)
        if _is_pyarrow(fs):
            return fs, url.split("://", 1)[-1]
        return fs, fs._strip_protocol(url)

    def _make(self, protocol: str) -> Any:
        if self._given is not None:  # a copy in a forked child (its connections belong to the parent)
            return self._given if self._given_pid == os.getpid() else pickle.loads(pickle.dumps(self._given))
        fsspec = require("fsspec", extra="remote", purpose=f"reading {protocol}:// URLs needs fsspec")
        options = dict(self.storage_options)
        if protocol in ("s3", "s3a"):
            require("s3fs", extra="remote", purpose="reading s3:// URLs needs s3fs")
            config = dict(options.pop("config_kwargs", {}) or {})
            config.setdefault("retries", {"total_max_attempts": 1})
            config.setdefault("connect_timeout", self.timeout)
            config.setdefault("read_timeout", self.timeout)
            options["config_kwargs"] = config
        key = (os.getpid(), protocol, repr(sorted(options.items())), tuple(os.environ.get(name) for name in _ENVIRONMENT))
        fs = _CLIENTS.get(key)
        if fs is None:  # (made once per process for the same options and credentials: a client costs ~0.3 s)
            fs = _CLIENTS[key] = fsspec.filesystem(protocol, skip_instance_cache=True, **options)
            if protocol in ("s3", "s3a"):
                fs.retries = 1  # one attempt per call: remote.retry retries, within its budget
                fs.connect()  # the botocore client now (its service model loads, no request), not in the first request
        return fs

    # -- reads -------------------------------------------------------------------------------
    def connect(self, url: str) -> None:
        """Make the client for ``url`` now (imports, credentials, a session): work that is not a
        request, kept out of the requests' time limits."""
        self.filesystem(url)

    def size(self, url: str) -> int:
        """The object's size; ``FileNotFoundError`` when there is none, a folder prefix included (a
        store's listing shows one as a directory of size 0: it is no object to read)."""
        fs, path = self.filesystem(url)
        if _is_pyarrow(fs):
            info = fs.get_file_info(path)
            if info.type.name != "File":
                raise FileNotFoundError(redact(url))
            return int(info.size)
        info = fs.info(path)
        if info.get("type") == "directory":
            raise FileNotFoundError(redact(url))
        return int(info["size"])

    def read(self, url: str, start: int, stop: int) -> bytes:
        """Bytes ``start``..``stop`` of ``url`` (one ranged GET); may return fewer when cut short."""
        fs, path = self.filesystem(url)
        if _is_pyarrow(fs):
            with fs.open_input_file(path) as handle:
                data = handle.read_at(stop - start, start)
                return data if isinstance(data, bytes) else data.to_pybytes()
        return bytes(fs.cat_file(path, start=start, end=stop))

    def read_all(self, url: str) -> bytes:
        fs, path = self.filesystem(url)
        if _is_pyarrow(fs):
            with fs.open_input_stream(path) as handle:
                return handle.read()
        return bytes(fs.cat_file(path))

    # -- pickling: options travel, connections do not --------------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        return {"filesystem": self._given, "storage_options": self.storage_options, "timeout": self.timeout, "names": dict(self._real)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["filesystem"], state["storage_options"], state["timeout"])  # type: ignore[misc]
        for url in state.get("names", {}).values():
            self.name(url)  # (its secrets remembered for redaction in this process too)

    def __repr__(self) -> str:
        return f"Store({type(self._given).__name__ if self._given is not None else 'fsspec'}, {len(self.storage_options)} storage options)"


# what the clients read from the environment: a change makes another client (fsspec's own instance
# cache keys on arguments only, so it would keep using a client made for other credentials or endpoints)
_ENVIRONMENT = (
    "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION",
    "AWS_REGION", "AWS_PROFILE", "GOOGLE_APPLICATION_CREDENTIALS", "AZURE_STORAGE_ACCOUNT_NAME", "AZURE_STORAGE_CONNECTION_STRING",
)  # fmt: skip
_CLIENTS: dict[tuple, Any] = {}
_NO_USERINFO = ("s3", "s3a", "gs", "gcs")  # schemes whose clients read a URL's user information as the bucket's name


def _is_pyarrow(fs: Any) -> bool:
    return type(fs).__module__.startswith("pyarrow")
