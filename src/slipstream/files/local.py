"""A packed file on local disk as a *page source*: what ``PackedDataset`` reads pages from.

A page source (this one, or ``remote.pages.RemotePages`` for an object in a store) offers:
``name`` (what errors name), ``size`` (bytes), ``schema`` (the Arrow schema), ``page_table()``
(each page's custom metadata: first sample, rows, checksum, schema checksum), ``batch(p)`` (page
``p`` as an Arrow record batch), ``check()`` (raise when the bytes under the reader changed),
``identity``, ``recent`` (the bound on pages kept decoded, a ``pagememory.RecentPages``; None to
keep them all), ``local`` (whether whole-column gathers over every page are cheap) and
``prefetch(pages)`` (a hint; nothing to do here).

``LocalFile(path, cache)`` memory-maps the file (``cache="os"``) or reads it into memory
(``"ram"``), checking its ends first (``identity.check_ends``) and reporting Arrow's complaints as
``CorruptFileError`` naming the path.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..core.errors import CorruptFileError
from . import format as _format
from .field import pyarrow_module as _pa
from .identity import FileIdentity, check_ends, identity

__all__ = ["LocalFile", "PageMeta"]

PageMeta = tuple[int, int, int, int]  # (first sample, rows, checksum, schema checksum); -1 where absent


class LocalFile:
    """A local packed file's pages (see the module doc)."""

    recent = None
    local = True

    def __init__(self, path: str | os.PathLike, cache: str = "os"):
        pa = _pa()
        import pyarrow.ipc  # noqa: F401

        if cache not in ("os", "ram"):
            raise ValueError(f"cache must be 'os' (memory-mapped, shared through the page cache) or 'ram', got {cache!r}")
        self.name = self.path = Path(path)
        self.cache = cache
        check_ends(self.path)
        self._file = FileIdentity(self.path) if cache == "os" else None
        self.identity = self._file.seen if self._file is not None else identity(self.path)
        self.size = self.identity[1]
        try:
            source = pa.memory_map(str(self.path)) if cache == "os" else pa.py_buffer(self.path.read_bytes())
            self._reader = pa.ipc.open_file(source)
        except (pa.ArrowException, OSError) as exc:  # Arrow reports some damage as a bare OSError
            if isinstance(exc, (FileNotFoundError, PermissionError, IsADirectoryError)):
                raise
            raise CorruptFileError(self.path, f"Arrow cannot read the file's structure: {exc}") from None
        self.schema = self._reader.schema

    def page_table(self) -> list[PageMeta]:
        pa = _pa()
        table = []
        try:
            for p in range(self._reader.num_record_batches):
                batch, meta = self._reader.get_batch_with_custom_metadata(p)
                table.append(page_meta(meta or {}))
                if table[-1][1] != batch.num_rows:
                    raise CorruptFileError(self.path, f"page {p} says it holds {table[-1][1]} samples but has {batch.num_rows}")
        except (pa.ArrowException, OSError) as exc:
            raise CorruptFileError(self.path, f"page structure is damaged: {exc}") from None
        except (ValueError, TypeError) as exc:
            if isinstance(exc, CorruptFileError):
                raise
            raise CorruptFileError(self.path, f"page metadata is damaged: {exc}") from None
        return table

    def batch(self, p: int) -> Any:
        """Page ``p``'s record batch (``CorruptFileError`` when Arrow cannot read it)."""
        try:
            return self._reader.get_batch(p)
        except Exception as exc:  # noqa: BLE001 - any failure to map a page is damage
            raise CorruptFileError(self.path, f"page {p} cannot be read: {exc}") from exc

    def check(self) -> None:
        if self._file is not None:
            self._file.check()

    def prefetch(self, pages: Any) -> None:
        """Nothing to fetch: the file is here."""


def page_meta(meta: Any) -> PageMeta:
    """(first, rows, checksum, schema checksum) from a page's custom metadata (a mapping of bytes;
    -1 for an absent key); ``ValueError`` for values that are not integers."""
    keys = (_format.PAGE_FIRST, _format.PAGE_ROWS, _format.PAGE_CRC, _format.PAGE_SCHEMA_CRC)
    first, rows, crc, schema_crc = (int(meta.get(key, -1)) for key in keys)
    return first, rows, crc, schema_crc
