"""Objects in a store as the in-place readers see them: listed under a folder prefix by suffix, and
checked to be still the one opened.

``list_objects(fetcher, url, suffix)`` lists a folder prefix once (its subfolders too, in path
order), each object's size and ETag or modification time coming with the listing.
``ObjectCheck(fetcher, url, size, tag, what)`` is the check a reader runs before its first download
in each process (one HEAD, as ``remotefooters.object_info``) and again when a range fails its
checks: an object whose size or tag differs from the one opened raises ``ShardMismatchError``
naming it, a removed one ``MissingShardError``.
"""

from __future__ import annotations

from typing import Any

from ..core.errors import MissingShardError, ShardMismatchError
from ..core.processlock import ProcessLock
from ..remote.fetch import Fetcher
from ..remote.store import join
from .remotefooters import _retried, _tag, object_info

__all__ = ["ObjectCheck", "list_objects"]


def list_objects(fetcher: Fetcher, url: str, suffix: str) -> list[tuple[str, int, str]]:
    """(name, size, tag) of each object whose name ends with ``suffix`` under the folder prefix
    ``url`` (its subfolders too), in path order; one listing, retried."""
    base = url.rstrip("/") + "/"

    def listing() -> list[tuple[str, int, str]]:
        fs, path = fetcher.store.filesystem(base)
        root = path.rstrip("/") + "/"
        found: list[tuple[str, int, str]] = []
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
                    found.append((key[len(root) :], int(info["size"]), _tag(info)))
        chosen = [entry for entry in found if entry[0].endswith(suffix)]
        chosen.sort(key=lambda entry: entry[0].split("/"))  # (the order of local paths, part by part)
        return [(join(base.rstrip("/"), relative), size, tag) for relative, size, tag in chosen]

    return _retried(fetcher, base, listing, "its listing")


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
