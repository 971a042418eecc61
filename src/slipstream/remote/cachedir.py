"""The page cache's folder: private to its user, held open, and the key its pages are sealed with.

Why both a private folder and a key. A cached page is used as if it had come from the store, so
whoever can write a file there decides what the loader reads; a CRC-32 (the index's checksum)
guards against accidents only, since anyone can forge bytes that match it. So:

* **The folder is private** (``open_private``): made mode 0700 when slipstream creates it; a folder
  that exists must belong to this user (the effective uid) and be writable by no one else, or it
  is refused with a ``PermissionError`` that names it, its owner and mode, and the fix (``chmod
  700``, or another ``SLIPSTREAM_CACHE_DIR`` / ``cache_dir``). One of ours that others may read or
  enter is made 0700 on the spot (its pages are a dataset's data). Files in it are made 0600. The
  folder is held by a descriptor for the cache's life and every entry is reached through it, so
  a folder renamed or replaced after the check (by whoever can write its parent) is never used;
  another process checks it again when it opens the cache.
* **Each page is sealed** (``seal``): a 32-byte HMAC-SHA256, keyed with this folder's secret (a
  random 32-byte ``.key`` file, 0600, made once by whichever process comes first, under the
  cache's lock), over the entry's name, length and bytes, written after the page at write time and
  checked at every read. A page is therefore used only if a slipstream process holding this
  cache's key wrote it: a file placed there any other way (by another tool, a restored backup, a
  copy from another cache, while the folder was shared or before its mode was fixed) is not
  served, even with a matching CRC, and a damaged one is caught by 256 bits, not 32. Every process
  on the node reads the same key file, so they all accept the same pages. The key is as secret
  as the folder: anyone who can read it (this user, root) can seal pages; they can also change
  this user's code, so the cache claims no more than that.

Entries are opened with ``O_NOFOLLOW | O_NONBLOCK`` and used only when they are regular files of
the expected size (``open_entry``): a symbolic link, FIFO, socket, device or folder under an
entry's name is a miss, never a wait. A folder that cannot be made or written (a read-only file
system) gives no descriptor or no key: the cache is then empty and takes nothing, and every page
is served from memory.
"""

from __future__ import annotations

import contextlib
import errno
import hmac
import os
import secrets
import shutil
import stat
import struct
from collections.abc import Callable
from pathlib import Path
from typing import ContextManager

__all__ = ["KEY", "TAG", "default_limit", "load_key", "open_entry", "open_private", "seal"]

KEY = ".key"  # the folder's secret
TAG = 32  # bytes of the seal after each page
_KEY_BYTES = 32
_DEFAULT_LIMIT = 20 * 10**9
_DOMAIN = b"slipstream page seal v1\0"  # what the MAC is of, and the seal's format
_READ = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_CANNOT_WRITE = frozenset({errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOSPC, errno.EDQUOT})
NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC  # a file this process makes, private


def open_private(folder: Path) -> int | None:
    """A descriptor of ``folder`` (made 0700 if missing, and so is its parent: the ``cache_dir``)
    once it is known to be private (see the module doc); None when it cannot be made (a read-only
    or unwritable place). Raises ``PermissionError`` for a folder of another user, one that others
    can write, or a symbolic link in the folder's place (its parents may be links)."""
    try:
        for made in (folder.parent, folder):
            _make(made)
    except OSError as exc:
        if exc.errno in _CANNOT_WRITE:  # no cache: pages are served from memory
            return None
        raise
    try:  # (never through a link: one planted where the folder goes would aim the cache at another's folder)
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR) or not folder.is_symlink():
            raise
        raise PermissionError(
            f"slipstream: refusing the page cache folder {folder}: it is a symbolic link (to {os.readlink(folder)}), "
            f"which slipstream never makes there, so someone else may have put it there to aim the cache at another "
            f"folder. Remove the link, or set SLIPSTREAM_CACHE_DIR (or ss.open(..., cache_dir=...)) to a folder of your own"
        ) from None
    try:
        st = os.fstat(fd)
        mode = stat.S_IMODE(st.st_mode)
        if st.st_uid != os.geteuid():
            raise PermissionError(
                f"slipstream: refusing the page cache folder {folder}: it belongs to uid {st.st_uid} ({_user(st.st_uid)}), "
                f"mode {mode:04o}, not to this user (uid {os.geteuid()}), so the pages in it may have been written by "
                f"someone else. Use a folder of your own: set SLIPSTREAM_CACHE_DIR (or ss.open(..., cache_dir=...)) to a "
                f"path that does not exist yet, and slipstream creates it private (mode 0700)"
            )
        if mode & 0o022:
            raise PermissionError(
                f"slipstream: refusing the page cache folder {folder}: its mode is {mode:04o} (owner uid {st.st_uid}), "
                f"writable by its group or by others, who could plant or change cached pages (and read a private "
                f"dataset's). Make it private with `chmod 700 {folder}`, or set SLIPSTREAM_CACHE_DIR (or "
                f"ss.open(..., cache_dir=...)) to another folder, which slipstream creates private (mode 0700)"
            )
        if mode & 0o077:  # ours, readable by others: private from now on
            with contextlib.suppress(OSError):  # (a read-only file system: nothing more is written there)
                os.fchmod(fd, mode & ~0o077)
    except BaseException:
        os.close(fd)
        raise
    return fd


def default_limit(folder: Path) -> int:
    """The default ``cache_limit`` for ``folder``: 20 GB or half the free space where it is (or
    would be made), whichever is less."""
    place = Path(folder).absolute()
    while not place.exists() and place != place.parent:
        place = place.parent
    try:
        return min(_DEFAULT_LIMIT, shutil.disk_usage(place).free // 2)
    except OSError:
        return 0


def open_entry(dir_fd: int, name: str, size: int) -> int | None:
    """A read descriptor of entry ``name`` when it is a regular file of ``size`` bytes, else None
    (missing, a link, a FIFO or any other kind of file, another size, unreadable)."""
    try:
        fd = os.open(name, _READ, dir_fd=dir_fd)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
    except OSError:
        st = None
    if st is None or not stat.S_ISREG(st.st_mode) or st.st_size != size:
        os.close(fd)
        return None
    return fd


def seal(key: bytes, name: str, data: bytes | memoryview) -> bytes:
    """The MAC stored after entry ``name``'s bytes ``data`` (see the module doc)."""
    mac = hmac.new(key, _DOMAIN, "sha256")  # (OpenSSL's: about 1.7 GB/s a core, the GIL released)
    mac.update(name.encode())
    mac.update(struct.pack("<Q", len(data)))
    mac.update(data)
    return mac.digest()


def load_key(dir_fd: int, locked: Callable[[], ContextManager[object]]) -> bytes | None:
    """The folder's key, made if missing or unusable (under ``locked()``: the cache's lock, so the
    processes that start together agree on one); None when it can be neither read nor made (a
    read-only file system without one)."""
    key = _read_key(dir_fd)
    if key is not None:
        return key
    try:
        with locked():
            key = _read_key(dir_fd)  # made meanwhile by another process
            if key is None:
                key = secrets.token_bytes(_KEY_BYTES)
                temporary = f"{KEY}.{os.getpid()}.{secrets.token_hex(4)}.tmp"  # (an orphan goes with the next put)
                fd = os.open(temporary, NEW, 0o600, dir_fd=dir_fd)
                try:
                    os.write(fd, key)
                finally:
                    os.close(fd)
                os.replace(temporary, KEY, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)  # (replaces one that is not a key)
    except OSError:
        return None
    return key


def _read_key(dir_fd: int) -> bytes | None:
    fd = open_entry(dir_fd, KEY, _KEY_BYTES)
    if fd is None:
        return None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or stat.S_IMODE(st.st_mode) & 0o077:
            return None
        key = os.read(fd, _KEY_BYTES)
    except OSError:
        return None
    finally:
        os.close(fd)
    return key if len(key) == _KEY_BYTES else None


def _make(folder: Path) -> None:
    """``folder`` made private (its parents as the system makes them), unless it is a folder already."""
    if not folder.is_dir():
        os.makedirs(folder.parent, exist_ok=True)
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            if not folder.is_dir():
                message = "slipstream: a file is where the page cache's folder goes"
                raise NotADirectoryError(errno.ENOTDIR, message, str(folder)) from None


def _user(uid: int) -> str:
    try:
        import pwd

        return pwd.getpwuid(uid).pw_name
    except (ImportError, KeyError):
        return "no user name"
