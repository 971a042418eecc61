"""The footers of remote Parquet objects kept on disk, so that opening them again reads none.

``FooterIndex(folder)`` keeps one small index file per opened set (a folder prefix, a list of
objects, one object), named by a hash of what was opened: ``load(name)`` gives ``{url: (size, tag,
footer)}`` as last saved, ``save(name, footers)`` replaces it. The caller uses an entry only when
the object's size and tag (its ETag or modification time, from a listing) are still the ones
recorded, so an object changed since is read again; the footer bytes are parsed again as well.

Who can put an index there: the folder is private (``remote.cachedir.open_private``: made 0700, one
of another user or writable by others refused with a ``PermissionError``), its files are made
0600, and each index is sealed as the page cache's pages are (HMAC-SHA256 keyed with the folder's
own secret, ``remote.cachedir.seal``), checked on every load: a file not written by slipstream
for this folder, damaged, truncated or of another format is ignored (the footers are read from
the store again), never trusted. An index is written to a temporary name and renamed over the
old one (``os.replace``): a reader sees a whole index, old or new. A folder that cannot be made or
written (a read-only file system) keeps nothing, and every open reads the footers.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import secrets
import stat
import struct
import time
from collections.abc import Iterator
from hmac import compare_digest
from pathlib import Path

from ..remote.cachedir import NEW, TAG, load_key, open_private, seal

__all__ = ["Footer", "FooterIndex", "index_name"]

Footer = tuple[int, str, bytes]  # (object size, tag: ETag or modification time, the footer's bytes with the 8 after it)

_MAGIC = b"SSPQFTR1"  # the index format
_SUFFIX = ".footers"
_TEMPORARY = ".tmp"
_MAX_INDEX = 1 << 30  # an index larger than this is not read (nor written)
_ORPHAN_AGE = 600.0  # a temporary file older than this (seconds) is a crashed writer's
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


def index_name(opened: str) -> str:
    """The index file's name for an opened set, given as one string (a URL, or URLs joined)."""
    return hashlib.sha256(opened.encode()).hexdigest()[:40] + _SUFFIX


class FooterIndex:
    """Footer index files in ``folder`` (see the module doc)."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self._fd = open_private(self.folder)  # (PermissionError for a folder others could write)
        self._key = None if self._fd is None else load_key(self._fd, self._locked)

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        assert self._fd is not None
        fd = os.open(".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=self._fd)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # (releases the record lock)

    def load(self, name: str) -> dict[str, Footer]:
        """The footers saved under ``name``; empty when there is no index, or one that fails its seal or
        cannot be read."""
        if self._fd is None or self._key is None:
            return {}
        try:
            fd = os.open(name, _READ, dir_fd=self._fd)
        except OSError:
            return {}
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or not len(_MAGIC) + 8 + TAG <= st.st_size <= _MAX_INDEX:
                return {}
            data = _read_all(fd, st.st_size)
        except OSError:
            return {}
        finally:
            os.close(fd)
        body, mac = data[:-TAG], data[-TAG:]
        if len(data) != st.st_size or not compare_digest(mac, seal(self._key, name, body)):
            return {}
        return _parse(body)

    def save(self, name: str, footers: dict[str, Footer]) -> bool:
        """Replace the index ``name`` with ``footers``; whether it was written (a folder that cannot be
        written keeps nothing)."""
        if self._fd is None or self._key is None:
            return False
        header = json.dumps([[url, int(size), str(tag), len(footer)] for url, (size, tag, footer) in footers.items()]).encode()
        body = b"".join([_MAGIC, struct.pack("<Q", len(header)), header, *(footer for _, _, footer in footers.values())])
        if len(body) + TAG > _MAX_INDEX:
            return False
        data = body + seal(self._key, name, body)
        self._remove_orphans(name)
        temporary = f"{name}.{os.getpid()}.{secrets.token_hex(4)}{_TEMPORARY}"
        try:
            fd = os.open(temporary, NEW, 0o600, dir_fd=self._fd)
            try:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            os.replace(temporary, name, src_dir_fd=self._fd, dst_dir_fd=self._fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(temporary, dir_fd=self._fd)
            return False
        return True

    def _remove_orphans(self, name: str) -> None:
        """Temporary files of ``name`` left by writers that died (old enough that none still writes)."""
        assert self._fd is not None
        now = time.time()
        with contextlib.suppress(OSError):
            for entry in os.scandir(self._fd):
                if entry.name.startswith(name + ".") and entry.name.endswith(_TEMPORARY):
                    with contextlib.suppress(OSError):
                        if now - entry.stat(follow_symlinks=False).st_mtime > _ORPHAN_AGE:
                            os.unlink(entry.name, dir_fd=self._fd)

    def __del__(self) -> None:
        fd, self._fd = getattr(self, "_fd", None), None
        if fd is not None:
            with contextlib.suppress(OSError):
                os.close(fd)


def _read_all(fd: int, size: int) -> bytes:
    parts, left = [], size
    while left > 0:
        part = os.read(fd, left)
        if not part:
            break
        parts.append(part)
        left -= len(part)
    return b"".join(parts)


def _parse(body: bytes) -> dict[str, Footer]:
    """The entries of a sealed index body (empty when its layout is not this format's)."""
    if not body.startswith(_MAGIC) or len(body) < len(_MAGIC) + 8:
        return {}
    (length,) = struct.unpack_from("<Q", body, len(_MAGIC))
    start = len(_MAGIC) + 8
    if length > len(body) - start:
        return {}
    try:
        header = json.loads(body[start : start + length])
    except ValueError:
        return {}
    if not isinstance(header, list):
        return {}
    out: dict[str, Footer] = {}
    offset = start + length
    for entry in header:
        if not (isinstance(entry, list) and len(entry) == 4 and isinstance(entry[0], str) and isinstance(entry[2], str)):
            return {}
        url, size, tag, n = entry
        if not (isinstance(size, int) and isinstance(n, int) and 0 <= n <= len(body) - offset):
            return {}
        out[url] = (size, tag, body[offset : offset + n])
        offset += n
    return out if offset == len(body) else {}
