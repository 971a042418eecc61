"""A tar shard's index cached, and the two ways to have one: ``tar_index(path)`` of a local file,
``remote_tar_index(fetcher, url, size, tag)`` of an object in a store.

A local file's pass (``tarindex.scan``) reads its headers through windows of ``WINDOW`` bytes; an
object's reads ``REMOTE_WINDOWS`` ranges of ``REMOTE_WINDOW`` bytes at once from each header it
has not got yet, skipping members larger than that: a shard of small members is downloaded once,
whole, by that pass (nothing of it is kept but the index), a shard of large ones only around its
headers. The object's pass runs inside ``Fetcher.read_checked``: a header that fails its checks is
read again (a damaged transfer) before the object is called damaged, and the same bytes three times
raise ``CorruptFileError`` naming it.

The cache: ``cache_dir/tarindex/`` (``cache_dir`` default ``$SLIPSTREAM_CACHE_DIR`` or
``~/.cache/slipstream``), private (mode 0700, refused when another user owns it or others can write
it, as the page cache's folder is), one entry per file keyed by its absolute path and identity (an object: its name, size and tag),
written to a temporary name and renamed into place; it holds the members and their grouping, so
loading it runs no pass and no grouping. An entry is used only when its digest (BLAKE2b) matches,
it names the same path and identity, and it is consistent with itself and the file (members
aligned, ascending and inside it, names and keys UTF-8, each sample's members consecutive with no
extension twice); anything else is rebuilt from the file and the entry replaced, never trusted. A
folder that cannot be written leaves the index uncached (``TarIndex.cached`` False).

"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import stat
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..remote.cachedir import open_private
from ..remote.open import default_cache_dir
from .remoteobjects import ObjectCheck
from .tarindex import BLOCK, Strings, TarIndex, file_identity, group, object_identity, scan

__all__ = ["REMOTE_WINDOW", "REMOTE_WINDOWS", "WINDOW", "remote_tar_index", "tar_index"]

WINDOW = 64 << 10  # bytes read at a time by a local file's pass over the headers
REMOTE_WINDOW = 4 << 20  # bytes of one ranged read of an object's pass
REMOTE_WINDOWS = 4  # ranged reads of an object's pass made at once
_MAGIC = b"slipstream tar index\0v3\0"
_DIGEST = 32


def _entry_name(path: str, identity: tuple[Any, ...]) -> str:
    key = json.dumps([path, *identity], ensure_ascii=False)
    return hashlib.sha256(key.encode("utf-8", "surrogateescape")).hexdigest()[:40] + ".idx"


def _encode(index: TarIndex) -> bytes:
    header = {"path": index.path, "identity": list(index.identity), "members": len(index.names), "samples": len(index.keys),
              "extensions": index.extensions, "names": len(index.names.blob), "keys": len(index.keys.blob)}  # fmt: skip
    raw = json.dumps(header).encode()
    arrays = [index.names.ends, index.offsets, index.sizes, index.codes, index.keys.ends, index.starts]
    parts = [
        _MAGIC,
        struct.pack("<Q", len(raw)),
        raw,
        index.names.blob,
        index.keys.blob,
        *(a.astype("<i8").tobytes() for a in arrays),
        index.named.astype(np.uint8).tobytes(),
    ]
    body = b"".join(parts)
    return body + hashlib.blake2b(body, digest_size=_DIGEST).digest()


def _strings(blob: bytes, ends: np.ndarray) -> Strings | None:
    """``Strings`` when ``ends`` cut ``blob`` (valid UTF-8) into non-empty strings at character starts."""
    if len(ends) and (ends[-1] != len(blob) or np.any(np.diff(ends, prepend=0) <= 0)):
        return None
    if not len(ends) and blob:
        return None
    try:
        blob.decode("utf-8")
    except UnicodeDecodeError:
        return None
    cuts = np.frombuffer(blob, np.uint8)[ends[:-1]] if len(ends) > 1 else np.zeros(0, np.uint8)
    return Strings(blob, ends) if not np.any((cuts & 0xC0) == 0x80) else None


def _decode(raw: bytes, path: str, identity: tuple[Any, ...]) -> TarIndex | None:
    """The index an entry holds, or None when it is damaged (digest), another file's (path and
    identity), or inconsistent (with itself or the file's size)."""
    if len(raw) < len(_MAGIC) + 8 + _DIGEST or not raw.startswith(_MAGIC):
        return None
    body, digest = raw[:-_DIGEST], raw[-_DIGEST:]
    if hashlib.blake2b(body, digest_size=_DIGEST).digest() != digest:
        return None
    at = len(_MAGIC) + 8
    (length,) = struct.unpack_from("<Q", body, len(_MAGIC))
    try:
        header = json.loads(body[at : at + length])
        m, n, extensions = int(header["members"]), int(header["samples"]), list(header["extensions"])
        name_bytes, key_bytes = int(header["names"]), int(header["keys"])
        if header["path"] != path or tuple(header["identity"]) != tuple(identity) or min(m, n, name_bytes, key_bytes) < 0:
            return None
    except (ValueError, KeyError, TypeError):
        return None
    at += length
    counts = [m, m, m, m, n, n + 1]
    if len(body) != at + name_bytes + key_bytes + 8 * sum(counts) + m:
        return None
    if not all(isinstance(e, str) for e in extensions) or len(set(extensions)) != len(extensions):
        return None
    names, keys = body[at : at + name_bytes], body[at + name_bytes : at + name_bytes + key_bytes]
    at += name_bytes + key_bytes
    arrays = []
    for count in counts:
        arrays.append(np.frombuffer(body, "<i8", count, at).astype(np.int64))
        at += 8 * count
    name_ends, offsets, sizes, codes, key_ends, starts = arrays
    named = np.frombuffer(body, np.uint8, m, at)
    if np.any(named > 1):
        return None
    name_strings, key_strings = _strings(names, name_ends), _strings(keys, key_ends)
    if name_strings is None or key_strings is None or starts[0] != 0 or starts[-1] != m or np.any(np.diff(starts) <= 0):
        return None
    if m and (np.any(sizes < 0) or np.any(offsets < BLOCK) or np.any(offsets % BLOCK) or np.any(offsets + sizes > identity[1])):
        return None
    if m > 1 and np.any(offsets[1:] < offsets[:-1] + -(-sizes[:-1] // BLOCK) * BLOCK + BLOCK):
        return None
    if m and (np.any(codes < 0) or np.any(codes >= len(extensions))):
        return None
    owners = np.repeat(np.arange(n, dtype=np.int64), np.diff(starts))
    if len(np.unique(owners * max(1, len(extensions)) + codes)) != m:  # an extension twice in a sample
        return None
    return TarIndex(
        path, identity, name_strings, offsets, sizes, key_strings, starts, extensions, codes.astype(np.int32), named.astype(bool)
    )


def _folder(cache_dir: str | os.PathLike | None) -> int | None:
    return open_private(Path(cache_dir if cache_dir is not None else default_cache_dir()) / "tarindex")


def _load(dir_fd: int, entry: str, path: str, identity: tuple[Any, ...]) -> TarIndex | None:
    try:
        fd = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        bound = 4096 + 2 * identity[1] + len(path.encode("utf-8", "surrogateescape"))  # an index is smaller than its file
        if not stat.S_ISREG(st.st_mode) or st.st_size > bound:
            return None
        raw = os.read(fd, st.st_size)
    except OSError:
        return None
    finally:
        os.close(fd)
    return _decode(raw, path, identity)


def _store(dir_fd: int, entry: str, index: TarIndex) -> bool:
    """Whether ``index`` could be written as ``entry`` (atomically: a temporary file, renamed)."""
    temporary = f"{entry}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
        try:
            os.write(fd, _encode(index))
        finally:
            os.close(fd)
        os.replace(temporary, entry, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except OSError:  # a full or read-only disk: the index stays uncached
        with contextlib.suppress(OSError):
            os.unlink(temporary, dir_fd=dir_fd)
        return False
    return True


class _Window:
    """``read(offset, n)`` of a file through windows of ``WINDOW`` bytes: the headers of small
    members that share a window cost one system call."""

    def __init__(self, fd: int):
        self.fd, self.start, self.data = fd, 0, b""

    def __call__(self, offset: int, n: int) -> bytes:
        if self.start <= offset and offset + n <= self.start + len(self.data):
            return self.data[offset - self.start : offset + n - self.start]
        if n > WINDOW:
            return os.pread(self.fd, n, offset)
        self.start, self.data = offset, os.pread(self.fd, WINDOW, offset)
        return self.data[:n]


def _scan_file(path: Path, fd: int, size: int) -> tuple[list[str], list[int], list[int], list[bool]]:
    return scan(_Window(fd), size, path)


def _cached(
    path: str, identity: tuple[Any, ...], cache_dir: str | os.PathLike | None, cache: bool, build: Callable[[], TarIndex],
    confirm: Callable[[], None] | None = None,
) -> TarIndex:  # fmt: skip
    """The index of ``path`` with ``identity`` from its cache entry when one matches, else ``build()``,
    then ``confirm()`` (which raises when what was read may not be ``identity``'s), stored in the
    cache when ``cache``."""
    dir_fd = _folder(cache_dir) if cache else None
    try:
        entry = _entry_name(path, identity)
        index = _load(dir_fd, entry, path, identity) if dir_fd is not None else None
        if index is not None:
            index.cached = True
            return index
        index = build()
        if confirm is not None:
            confirm()
        if dir_fd is not None:
            index.cached = _store(dir_fd, entry, index)
        return index
    finally:
        if dir_fd is not None:
            os.close(dir_fd)


def tar_index(path: str | os.PathLike, *, cache_dir: str | os.PathLike | None = None, cache: bool = True) -> TarIndex:
    """The index of the local tar shard at ``path`` (see the module doc): from its cache entry when
    one matches, else by one pass over the headers (stored in the cache when ``cache``)."""
    path = Path(path)
    absolute = str(path.absolute())
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        st = os.fstat(fd)
        identity = file_identity(st)

        def build() -> TarIndex:
            names, offsets, sizes, named = _scan_file(path, fd, st.st_size)
            return group(absolute, identity, names, offsets, sizes, path, named)

        return _cached(absolute, identity, cache_dir, cache, build)
    finally:
        os.close(fd)


class _Windows:
    """``read(offset, n)`` of an object through ``reads`` (a ``Fetcher.read_checked`` attempt's): a
    miss fetches the ``REMOTE_WINDOWS`` windows of ``REMOTE_WINDOW`` bytes from ``offset`` at once
    (not past the object's end), so the headers of the members in them cost no further request, and
    a member larger than that is skipped, not downloaded."""

    def __init__(self, reads: Any, size: int):
        self.reads, self.size, self.start, self.data = reads, size, 0, b""

    def __call__(self, offset: int, n: int) -> bytes:
        if self.start <= offset and offset + n <= self.start + len(self.data):
            return self.data[offset - self.start : offset + n - self.start]
        stop = min(self.size, offset + max(n, REMOTE_WINDOW * REMOTE_WINDOWS))
        if offset >= stop:
            return b""
        spans = [(at, min(stop, at + REMOTE_WINDOW)) for at in range(offset, stop, REMOTE_WINDOW)]
        parts = self.reads.ranges(spans)
        self.start, self.data = offset, parts[0] if len(parts) == 1 else b"".join(parts)
        return self.data[:n]


def remote_tar_index(
    fetcher: Any, url: str, size: int, tag: str, *, cache_dir: str | os.PathLike | None = None, cache: bool = True
) -> TarIndex:
    """The index of the tar object ``url`` in a store, of ``size`` bytes and ``tag`` (its ETag or
    modification time) as listed: from its cache entry when one matches (no request), else by one
    pass over the headers through ``fetcher.read_checked`` (a header that fails its checks is read
    again, within the fetcher's budget, before the object is called damaged), then one HEAD: an
    object no longer of that size and tag (replaced while it was read) raises ``ShardMismatchError``
    and is not indexed under the identity listed before."""
    identity = object_identity(size, tag)

    def build() -> TarIndex:
        def parse(reads: Any) -> TarIndex:
            names, offsets, sizes, named = scan(_Windows(reads, int(size)), int(size), url)  # type: ignore[arg-type]
            return group(url, identity, names, offsets, sizes, url, named)

        return fetcher.read_checked(url, parse, "its tar headers")

    confirm = ObjectCheck(fetcher, url, size, tag, "it was listed, before its headers were read")
    return _cached(url, identity, cache_dir, cache, build, lambda: confirm(again=True))
