"""Objects in a store as the in-place readers see them: listed, HEADed, and checked to be still the
one opened.

``listing(fetcher, url)`` lists a folder prefix once (its subfolders too): each object's path
under it, size and tag (its ETag or modification time, "" when the store gives none) coming with
the listing; ``list_objects(fetcher, url, suffix)`` is the objects whose names end with ``suffix``,
in path order. ``object_info`` is one object's (one HEAD), ``object_infos`` many at once.
``ObjectCheck(fetcher, url, size, tag, what)`` is the check a reader runs before its first download
in each process (one HEAD) and again when a range fails its checks: an object whose size or tag
differs from the one opened raises ``ShardMismatchError`` naming it, a removed one
``MissingShardError``. An object without a tag cannot be told from one rewritten at its size:
readers reuse nothing of such an object across opens (see each reader).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..core.errors import MissingShardError, ShardMismatchError
from ..core.processlock import ProcessLock
from ..remote.fetch import Fetcher
from ..remote.retry import retrying
from ..remote.store import join

__all__ = ["HEADS", "ObjectCheck", "ObjectInfo", "list_objects", "listing", "object_info", "object_infos", "retried", "tag_of"]

HEADS = 32  # HEADs sent at once
_TAG_KEYS = ("ETag", "etag", "e_tag", "LastModified", "last_modified", "mtime", "updated", "modified", "created")

ObjectInfo = tuple[str, int, str]  # (name, size, tag: ETag or modification time, "" when the store gives none)


def tag_of(info: dict[str, Any]) -> str:
    """An fsspec ``info`` dict's tag: its ETag, else its modification (or creation) time, else ""."""
    for key in _TAG_KEYS:
        value = info.get(key)
        if value is not None and value != "":
            return str(value)
    return ""


def retried(fetcher: Fetcher, url: str, call: Callable[[], Any], what: str) -> Any:
    """``call()`` (a listing or a HEAD of ``url``) retried within the fetcher's budget."""
    store = fetcher.store
    return retrying(
        call, url, 0, 0, fetcher.budget, attempt_timeout=max(fetcher.budget, getattr(store, "timeout", 0) or 0), what=what,
        prepare=lambda: store.connect(url),
    )  # fmt: skip


def object_info(fetcher: Fetcher, url: str) -> ObjectInfo:
    """(name, size, tag) of the object ``url`` (one HEAD, retried); ``FileNotFoundError`` when there is
    none (a folder prefix is none)."""

    def head() -> ObjectInfo:
        fs, path = fetcher.store.filesystem(url)
        if type(fs).__module__.startswith("pyarrow"):
            info = fs.get_file_info(path)
            if info.type.name != "File":
                raise FileNotFoundError(url)
            return url, int(info.size), str(info.mtime_ns or "")
        if hasattr(fs, "invalidate_cache"):
            fs.invalidate_cache(path)  # (never an answer remembered from before: the object may have changed)
        info = fs.info(path)
        if info.get("type") == "directory":
            raise FileNotFoundError(url)
        return url, int(info["size"]), tag_of(info)

    return retried(fetcher, url, head, "its size and identity")


def object_infos(fetcher: Fetcher, urls: list[str], threads: int = HEADS) -> list[ObjectInfo]:
    """(name, size, tag) of each of ``urls`` (HEADs, ``threads`` at once); ``MissingShardError`` for one not there."""

    def one(url: str) -> ObjectInfo:
        try:
            return object_info(fetcher, url)
        except FileNotFoundError:
            raise MissingShardError(url, "no such object") from None

    if len(urls) <= 1:
        return [one(u) for u in urls]
    with ThreadPoolExecutor(max(1, min(int(threads), len(urls))), thread_name_prefix="slipstream-heads") as pool:
        return list(pool.map(one, urls))


def listing(fetcher: Fetcher, url: str) -> list[ObjectInfo]:
    """(path under the folder prefix ``url``, size, tag) of each object under it, its subfolders too
    (in the store's order); one listing, retried."""
    base = url.rstrip("/") + "/"

    def listed() -> list[ObjectInfo]:
        fs, path = fetcher.store.filesystem(base)
        root = path.rstrip("/") + "/"
        found: list[ObjectInfo] = []
        if type(fs).__module__.startswith("pyarrow"):
            import pyarrow.fs as pafs

            for info in fs.get_file_info(pafs.FileSelector(root.rstrip("/"), recursive=True, allow_not_found=True)):
                if info.type.name == "File" and info.path.startswith(root):
                    found.append((info.path[len(root) :], int(info.size), str(info.mtime_ns or "")))
        else:
            if hasattr(fs, "invalidate_cache"):
                fs.invalidate_cache(path)
            try:
                entries = fs.find(root, detail=True)
            except FileNotFoundError:
                entries = {}
            for key, info in entries.items():
                key = fs._strip_protocol(key)
                if info.get("type", "file") != "directory" and key.startswith(root):
                    found.append((key[len(root) :], int(info["size"]), tag_of(info)))
        return found

    return retried(fetcher, base, listed, "its listing")


def list_objects(fetcher: Fetcher, url: str, suffix: str, found: list[ObjectInfo] | None = None) -> list[ObjectInfo]:
    """(name, size, tag) of each object whose name ends with ``suffix`` under the folder prefix
    ``url`` (its subfolders too), in path order: from ``found`` (a ``listing`` of it) or one listing."""
    base = url.rstrip("/")
    chosen = [entry for entry in (listing(fetcher, url) if found is None else found) if entry[0].endswith(suffix)]
    chosen.sort(key=lambda entry: entry[0].split("/"))  # (the order of local paths, part by part)
    return [(join(base, relative), size, tag) for relative, size, tag in chosen]


class ObjectCheck:
    """``check()``: the object ``url`` is still the one of ``size`` bytes and ``tag`` that was opened
    (see the module doc); ``what`` says what was read with that identity (in the error). One HEAD per
    process (before its first download), or every time with ``again``. Picklable: a process it is
    sent to checks for itself."""

    def __init__(self, fetcher: Fetcher, url: str, size: int, tag: str, what: str):
        self.fetcher, self.url, self.size, self.tag, self.what = fetcher, url, int(size), str(tag or ""), what
        self._lock = ProcessLock()
        self._done = False

    def __call__(self, again: bool = False) -> None:
        if self._done and not again:
            return
        try:
            _, size, tag = object_info(self.fetcher, self.url)
        except FileNotFoundError:
            raise MissingShardError(
                self.url, f"the object is missing from the store (deleted or moved since {self.what})"
            ) from None
        if size != self.size or (tag and self.tag and tag != self.tag):
            now = f"{size} bytes" + (f", tag {tag}" if tag else "")
            was = f"{self.size} bytes" + (f", tag {self.tag}" if self.tag else "")
            raise ShardMismatchError(self.url, f"is {now} but was {was} when {self.what}: it changed since; open it again")
        with self._lock:
            self._done = True

    def __getstate__(self) -> dict[str, Any]:
        return {"fetcher": self.fetcher, "url": self.url, "size": self.size, "tag": self.tag, "what": self.what}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]
