"""Where a packed file's pages lie, read from its bytes without Arrow reading the pages.

An Arrow IPC file ends with a footer (a flatbuffer), its length (int32) and ``ARROW1``; the footer
lists each record batch's *block*: its offset, the length of its message header (prefix and
padding included) and of its body. A page is the byte range ``[offset, offset + length)`` of one
block, and its header holds the page's custom metadata (first sample, rows, checksum).

Contract: ``footer_length(tail)`` reads the footer's length from the file's last 10 bytes;
``page_blocks(footer)`` gives every page's ``(offset, length, header_length)``;
``header_metadata(header)`` the custom metadata of one block's header bytes;
``header_counts(header)`` its row count, body length and header length, as its message says them
(for checking a block against the header it points to). Each raises
``ValueError`` saying what is malformed; a reader over a remote object fetches just these ranges
(the tail, then each page's header) instead of the whole file. Only the flatbuffer reads these
three need are implemented (tables, vectors of structs and of tables, strings).
"""

from __future__ import annotations

import struct

from . import format as _format

__all__ = ["TAIL", "footer_length", "header_counts", "header_metadata", "page_blocks"]

TAIL = 4 + len(_format.MAGIC)  # int32 footer length, then the magic
_CONTINUATION = b"\xff\xff\xff\xff"
_FOOTER_RECORD_BATCHES = 3  # Footer: version, schema, dictionaries, recordBatches, custom_metadata
_MESSAGE_CUSTOM_METADATA = 4  # Message: version, header_type, header, bodyLength, custom_metadata
_MESSAGE_HEADER, _MESSAGE_BODY_LENGTH = 2, 3
_RECORD_BATCH_LENGTH = 0  # RecordBatch: length (rows), nodes, buffers, compression
_BLOCK = struct.Struct("<qi4xq")  # offset, metaDataLength, (padding), bodyLength


def footer_length(tail: bytes) -> int:
    """The footer's length from the file's last ``TAIL`` bytes."""
    if len(tail) != TAIL or tail[4:] != _format.MAGIC:
        raise ValueError(f"no Arrow footer at the end (the last bytes are {tail[-TAIL:]!r})")
    (length,) = struct.unpack("<i", tail[:4])
    if length <= 0:
        raise ValueError(f"the footer length {length} is not positive")
    return length


def page_blocks(footer: bytes) -> list[tuple[int, int, int]]:
    """``(offset, length, header_length)`` of each record batch (page) the footer lists."""
    fb = _Flatbuffer(footer)
    vector = fb.vector(fb.root(), _FOOTER_RECORD_BATCHES)
    if vector is None:
        return []
    start, count = vector
    blocks = []
    for k in range(count):
        offset, header, body = fb.unpack(_BLOCK, start + k * _BLOCK.size)
        if offset < 0 or header <= 0 or body < 0:
            raise ValueError(f"page {k}'s block is malformed (offset {offset}, header {header}, body {body} bytes)")
        blocks.append((offset, header + body, header))
    return blocks


def _message(header: bytes) -> _Flatbuffer:
    """The flatbuffer of a record batch's message header (``header_length`` bytes of its block)."""
    if header[:4] == _CONTINUATION:
        header = header[4:]
    if len(header) < 4:
        raise ValueError("the page header is cut short")
    (length,) = struct.unpack_from("<i", header)
    if not 0 < length <= len(header) - 4:
        raise ValueError(f"the page header says {length} bytes but {len(header) - 4} are there")
    return _Flatbuffer(header[4 : 4 + length])


def header_counts(header: bytes) -> tuple[int, int, int]:
    """(rows, body length, header length) in bytes that a record batch's message header says: the
    last is the length its block should give it (its prefix, flatbuffer and padding)."""
    prefix = 8 if header[:4] == _CONTINUATION else 4
    fb = _message(header)
    declared = prefix + len(fb.data)
    root = fb.root()
    at = fb.field(root, _MESSAGE_BODY_LENGTH)
    body = fb.unpack(_I64, at)[0] if at is not None else 0
    at = fb.field(root, _MESSAGE_HEADER)
    if at is None:
        raise ValueError("the page header holds no record batch")
    batch = fb.indirect(at)
    at = fb.field(batch, _RECORD_BATCH_LENGTH)
    return (fb.unpack(_I64, at)[0] if at is not None else 0), body, declared


def header_metadata(header: bytes) -> dict[bytes, bytes]:
    """The custom metadata in a record batch's message header (``header_length`` bytes of its block)."""
    fb = _message(header)
    vector = fb.vector(fb.root(), _MESSAGE_CUSTOM_METADATA)
    if vector is None:
        return {}
    start, count = vector
    out = {}
    for k in range(count):
        pair = fb.indirect(start + 4 * k)
        key, value = fb.string(pair, 0), fb.string(pair, 1)
        out[key] = value
    return out


class _Flatbuffer:
    """The few flatbuffer reads above, each bounds-checked (``ValueError`` past the buffer's end)."""

    def __init__(self, data: bytes):
        self.data = memoryview(data)

    def unpack(self, fmt: struct.Struct, at: int) -> tuple:
        if at < 0 or at + fmt.size > len(self.data):
            raise ValueError(f"a flatbuffer read at byte {at} runs past its end ({len(self.data)} bytes)")
        return fmt.unpack_from(self.data, at)

    def indirect(self, at: int) -> int:
        (offset,) = self.unpack(_U32, at)
        return at + offset

    def root(self) -> int:
        return self.indirect(0)

    def field(self, table: int, index: int) -> int | None:
        """The position of field ``index`` of the table at ``table``, or None when absent."""
        (back,) = self.unpack(_I32, table)
        vtable = table - back
        (size,) = self.unpack(_U16, vtable)
        entry = 4 + 2 * index
        if entry + 2 > size:
            return None
        (offset,) = self.unpack(_U16, vtable + entry)
        return table + offset if offset else None

    def vector(self, table: int, index: int) -> tuple[int, int] | None:
        """(first element's position, length) of a vector field, or None when absent."""
        at = self.field(table, index)
        if at is None:
            return None
        start = self.indirect(at)
        (count,) = self.unpack(_U32, start)
        return start + 4, count

    def string(self, table: int, index: int) -> bytes:
        vector = self.vector(table, index)
        if vector is None:
            return b""
        start, count = vector
        if start + count > len(self.data):
            raise ValueError("a flatbuffer string runs past its end")
        return bytes(self.data[start : start + count])


_U16, _U32, _I32, _I64 = struct.Struct("<H"), struct.Struct("<I"), struct.Struct("<i"), struct.Struct("<q")
