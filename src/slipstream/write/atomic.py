"""Atomic file writes: a temporary file beside the target, renamed over it only once complete.

``temporary(path, tag)`` makes a new empty file with a name no other writer uses, in ``path``'s
folder, with the permissions a plain ``open(path, "w")`` would give; ``commit(partial, path)``
flushes it to disk, renames it over ``path`` and syncs the folder: a reader opens the old file or
the new one, never a mix, and a crash never leaves a file at ``path`` that looks complete.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

__all__ = ["commit", "temporary"]


def _umask() -> int:
    """The process's umask (read without changing it where /proc allows; ``os.umask`` round trip elsewhere)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            for line in status:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def temporary(path: Path, tag: str = "") -> Path:
    """A new, empty file with a name no other writer uses, in ``path``'s folder (so the final rename
    stays on one file system), with the permissions a plain ``open(path, "w")`` would give:
    ``.<name>.<tag>.<random>.partial`` (``.<name>.<random>.partial`` without a tag)."""
    prefix = f".{path.name}.{tag}." if tag else f".{path.name}."
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=prefix, suffix=".partial")
    try:
        os.fchmod(handle, 0o666 & ~_umask())
    finally:
        os.close(handle)
    return Path(name)


def commit(partial: Path, path: Path) -> None:
    """Flush ``partial`` to disk, rename it over ``path`` (atomic: a reader opens the old file or the
    new one), then sync the folder so the rename itself survives a crash (where the OS allows)."""
    with open(partial, "rb+") as handle:
        os.fsync(handle.fileno())
    os.replace(partial, path)
    try:
        folder = os.open(path.parent, os.O_RDONLY)
    except OSError:  # pragma: no cover - folders cannot be opened on some platforms
        return
    try:
        os.fsync(folder)
    except OSError:  # pragma: no cover - some file systems refuse fsync on a folder
        pass
    finally:
        os.close(folder)
