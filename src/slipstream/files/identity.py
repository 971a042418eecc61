"""The packed file on disk, before and while it is read: its ends checked, its identity watched.

Contract: ``check_ends(path)`` raises ``NotAPackedFileError`` (empty, or not an Arrow IPC file) or
``TruncatedFileError`` (cut short) before Arrow parses anything. ``identity(path)`` is the file's
(inode, size, mtime in ns). ``FileIdentity(path)`` keeps a descriptor of its own on the file it
opened and its identity then (``seen``); ``check()`` (one ``fstat``) raises ``CorruptFileError``
when that file has changed in place since (truncated, or copied over), which would otherwise kill
a read of its memory map with SIGBUS. A file *renamed* over it is harmless (the mapping keeps the
old inode) and is not reported. ``check_unchanged(data)`` is that check for an opened packed file
(or every shard of a ``ShardedDataset``), for readers of pages mapped before (``ss.pack``).
"""

from __future__ import annotations

import os
import weakref
from pathlib import Path
from typing import Any

from ..core.errors import CorruptFileError, NotAPackedFileError, TruncatedFileError
from . import format as _format

__all__ = ["FileIdentity", "check_ends", "check_unchanged", "identity"]


def check_ends(path: Path) -> None:
    """Tell a cut file from a foreign one before Arrow looks at it."""
    size = path.stat().st_size
    with path.open("rb") as handle:
        head = handle.read(len(_format.MAGIC))
        handle.seek(max(0, size - len(_format.MAGIC)))
        tail = handle.read(len(_format.MAGIC))
    if size == 0:
        raise NotAPackedFileError(path, "the file is empty; expected a packed (Arrow IPC) file written by slipstream.write")
    if head != _format.MAGIC[: len(head)]:
        raise NotAPackedFileError(path, f"not an Arrow IPC file (it starts with {head!r}, expected {_format.MAGIC!r})")
    if len(head) < len(_format.MAGIC) or tail != _format.MAGIC or size < 2 * len(_format.MAGIC) + 8:
        raise TruncatedFileError(path, f"the file is cut short ({size} bytes, and no Arrow footer at its end): rewrite or copy it again")


def identity(path: Path) -> tuple[int, int, int]:
    """(inode, size, mtime) of the file at ``path``: which file it is, and whether it changed."""
    st = os.stat(path)
    return st.st_ino, st.st_size, st.st_mtime_ns


class FileIdentity:
    """The memory-mapped file's identity (inode, size, mtime) through a descriptor of our own (see the module doc)."""

    def __init__(self, path: Path):
        self.path = path
        self.fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        self._close = weakref.finalize(self, os.close, self.fd)
        self.seen = self._stamp()

    def _stamp(self) -> tuple[int, int, int]:
        st = os.fstat(self.fd)
        return st.st_ino, st.st_size, st.st_mtime_ns

    def check(self) -> None:
        """``CorruptFileError`` when the file changed since it was opened (one ``fstat``)."""
        now = self._stamp()
        if now != self.seen:
            raise CorruptFileError(
                self.path,
                f"the file changed under the reader (size {self.seen[1]} -> {now[1]} bytes, or rewritten in place): "
                "replace packed files by renaming a new one over them (ss.write does), never by copying or "
                "truncating in place; reopen it to read the new contents",
            )


def check_unchanged(data: Any) -> None:
    """``CorruptFileError`` when the file of ``data`` (a ``PackedDataset``; each shard of a
    ``ShardedDataset``) changed in place since it was opened: one ``fstat`` each, the test each of
    their own reads makes (nothing for a remote object, whose pages are checked as they arrive)."""
    for shard in getattr(data, "shards", None) or (data,):
        source = getattr(shard, "_source", None)
        if source is not None:
            source.check()
