"""Pages of encoded rows into a packed file: how a write gathers samples into pages and writes them.

``paged`` gathers encoded rows into pages of about ``page_size`` bytes (``Chunking`` learns how
many samples one encoding task should take); ``write_pages`` writes pages as Arrow record batches,
each with its page metadata and checksum (``format``), to a file or an in-memory stream;
``naming`` says how errors name a sample's field, ``field_value`` reads one, ``is_container`` tells
a container from an iterable. Shared by ``writer`` (``ss.write``), ``planned``
(its probe) and ``shardwrite`` (one shard of a planned write).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ..core.containers import numobs
from ..files import format as _format
from ..files.field import Field
from ..files.field import pyarrow_module as _pa

__all__ = ["Chunking", "field_value", "is_container", "naming", "paged", "write_pages"]


class Chunking:
    """How many samples go in one encoding task: about ``target`` encoded bytes, learned as samples come."""

    def __init__(self, target: int = 1 << 20, first: int = 4, most: int = 64):
        self.size, self.target, self.most = first, target, most
        self._bytes = self._samples = 0

    def observe(self, samples: int, nbytes: int) -> None:
        self._samples += samples
        self._bytes += nbytes
        per_sample = max(1, self._bytes // max(1, self._samples))
        self.size = max(1, min(self.most, self.target // per_sample))


def naming(origin: Callable[[int], str] | None) -> Callable[[int, str], str]:
    """``where(index, name)``: how errors name a sample's field ("sample 3 (file x.jpg), field 'image'")."""

    def where(index: int, name: str) -> str:
        try:
            named = origin(index) if origin is not None else None
        except Exception:  # noqa: BLE001 - naming the sample must not hide the error itself
            named = None
        if not named:
            return f"sample {index}, field {name!r}"
        return f"sample {index} ({named}), field {name!r}"

    return where


def paged(fields: dict[str, Field], chunks: Iterator[list[tuple[Any, ...]]], page_size: int, chunking: Chunking, bar: Any) -> Iterator[list[tuple[Any, ...]]]:
    """The encoded rows of ``chunks`` gathered into pages of about ``page_size`` bytes."""
    names = list(fields)
    page: list[tuple[Any, ...]] = []
    size = 0
    for rows in chunks:
        chunk_bytes = 0
        for row in rows:
            page.append(row)
            row_bytes = sum(fields[n].nbytes(v) for n, v in zip(names, row))
            chunk_bytes += row_bytes
            size += row_bytes
            if size >= page_size:
                yield page
                page, size = [], 0
        chunking.observe(len(rows), chunk_bytes)
        if bar is not None:
            bar.update(len(rows))
    if page:
        yield page


def write_pages(partial: Path | Any, schema: Any, fields: dict[str, Field], pages: Iterator[list[tuple[Any, ...]]], stop: Callable[[int], bool] = lambda nbytes: False) -> bool:
    """Write ``pages`` of encoded rows to ``partial`` (a path, or a pyarrow output stream such as
    ``pa.BufferOutputStream()``; samples numbered from 0) until ``stop(bytes written so far)`` says
    the file is full after a page; True when ``pages`` ran out (a last page may still follow,
    without samples, when it ran out exactly as the file filled: False then)."""
    pa = _pa()
    names = list(fields)
    schema_crc = _format.metadata_checksum(schema.metadata[_format.META_KEY])
    opened = pa.OSFile(str(partial), "wb") if isinstance(partial, (str, os.PathLike)) else contextlib.nullcontext(partial)
    with opened as sink, pa.ipc.new_file(sink, schema) as writer:
        first_row = 0
        for page in pages:
            first_row = _flush(writer, schema, fields, names, page, first_row, schema_crc)
            if stop(sink.tell()):
                return False
    return True


def _flush(
    writer: Any, schema: Any, fields: dict[str, Field], names: list[str], page: list[tuple[Any, ...]], first_row: int, schema_crc: int
) -> int:
    pa = _pa()
    columns = list(zip(*page))
    arrays = [fields[n].to_arrow(list(col)) for n, col in zip(names, columns)]
    batch = pa.record_batch(arrays, schema=schema)
    writer.write_batch(batch, custom_metadata=_format.page_metadata(batch, first_row, schema_crc))
    return first_row + len(page)


def is_container(data: Any) -> bool:
    """Whether ``data`` is a container (``len`` and ``[i]``), not an iterable to stream."""
    if isinstance(data, (str, bytes)) or not hasattr(data, "__getitem__"):
        return False
    try:
        numobs(data)
    except TypeError:
        return False
    return True


def field_value(sample: Any, name: str, index: int) -> Any:
    """Field ``name`` of a dict sample, or an error naming the sample and what it holds."""
    if not isinstance(sample, Mapping):
        raise TypeError(f"sample {index}: expected a dict of field values, got {type(sample).__name__}")
    try:
        return sample[name]
    except KeyError:
        raise ValueError(f"sample {index} lacks field {name!r} (it has {sorted(map(str, sample))})") from None
