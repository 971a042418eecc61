"""The packed-file format: an Apache Arrow IPC *file* whose schema metadata says what slipstream wrote.

* One column per field (its type chosen by the field), no nulls.
* Record batches are *pages* of about ``page_size`` bytes (8 MiB by default) holding whole samples.
  Each page's custom metadata holds its first sample index, its row count and a CRC-32 of its
  serialized Arrow message, which ``validate()`` recomputes.
* The schema metadata key ``slipstream`` holds JSON: the format name and version, every field's
  kind, version and settings, the image codec codes, and under ``metadata`` the writer's own JSON
  metadata (``ss.write(metadata=...)``; absent when none, as in older files, which read as ``{}``).
  The pages' schema checksum covers all of it.

Any Arrow reader (pyarrow, polars, duckdb) opens the file; slipstream reads samples zero-copy from
a memory map.
"""

from __future__ import annotations

import json
import zlib
from typing import Any

from ..images.encoded import codecs as _imaging

FORMAT = "slipstream.packed"
VERSION = 1
META_KEY = b"slipstream"
PAGE_CRC = b"slipstream.crc32"
PAGE_FIRST = b"slipstream.first"
PAGE_ROWS = b"slipstream.rows"
PAGE_SCHEMA_CRC = b"slipstream.schema_crc32"  # every page vouches for the schema metadata it was written under
MAGIC = b"ARROW1"


def schema_metadata(field_specs: dict[str, dict[str, Any]], page_size: int, user: dict[str, Any] | None = None) -> dict[bytes, bytes]:
    """The schema metadata of a packed file; ``user`` (the writer's own JSON metadata) under ``"metadata"``
    when not empty."""
    meta = {"format": FORMAT, "version": VERSION, "fields": field_specs, "codecs": _imaging.CODECS, "page_size": page_size}
    if user:
        meta["metadata"] = user
    return {META_KEY: json.dumps(meta, sort_keys=True, separators=(",", ":")).encode()}


def user_metadata(meta: dict[str, Any]) -> dict[str, Any]:
    """The writer's own metadata in a file's parsed ``slipstream`` schema metadata (empty when none,
    as in files written before it existed)."""
    user = meta.get("metadata")
    return user if isinstance(user, dict) else {}


def page_checksum(batch: Any) -> int:
    """CRC-32 of a record batch's serialized Arrow message (what the file holds for that page)."""
    return zlib.crc32(batch.serialize())


def page_metadata(batch: Any, first: int, schema_crc: int) -> dict[bytes, bytes]:
    return {
        PAGE_CRC: str(page_checksum(batch)).encode(),
        PAGE_FIRST: str(first).encode(),
        PAGE_ROWS: str(batch.num_rows).encode(),
        PAGE_SCHEMA_CRC: str(schema_crc).encode(),
    }


def metadata_checksum(raw: bytes) -> int:
    return zlib.crc32(raw)
