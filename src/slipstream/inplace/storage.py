"""A table column as its field stores it: what a page read in place is made of.

``stored_array(column, array, first_row, where)`` turns one raw column of a part (a Parquet row
group, a batch of a Hugging Face dataset, the members of a tar shard) into an Arrow array of
``column.field.arrow_type()``: the array a packed page holds, so every reader of packed pages
(zero-copy columns, image pipelines, compiled tasks, the device stage) reads it unchanged.

* numbers, bools, strings, bytes and token lists: one cast, no Python per row;
* images (encoded bytes, or Hugging Face ``{bytes, path}`` structs): JPEG (gray, YCbCr, RGB) and PNG
  bytes kept as they are, each image's stored shape read from its header, never decoded here (a
  damaged image fails where it is decoded, naming its sample). The other rows (CMYK/YCCK JPEGs,
  QOI, and WEBP, GIF, BMP, TIFF or any format Pillow reads: its first frame) are decoded once, by
  the conversion's rule (``images.encoded.codecs.as_image`` / ``pil_to_array``: alpha dropped,
  palette and CMYK to RGB, 16-bit samples' high byte, 1 or 3 channels, ``field.channels``
  honoured), and stored as raw pixels (codec "raw", shape (H, W, C)) in the same column. What such
  a row decodes to is bounded before anything is allocated for it: the size its header declares
  against ``MAX_DECODED_PIXELS`` and (JPEG, QOI) against what its bytes can encode
  (``check_encoded_size``); Pillow's own decompression-bomb refusal is reported too. Fields that
  resize at write time are refused: convert those with ``ss.write``;
* anything else (JSON values, arrays): each value encoded by its field, as ``ss.write`` encodes it.

A null is refused naming its row (packed pages hold none). Errors are ``ValueError`` naming
``where`` (the file and part), the column and the row; callers add nothing but the page.
"""

from __future__ import annotations

import io
import struct
from typing import Any

import numpy as np

from ..convert.columns import Column, ImageStructValues, first_null, is_binary, is_image_struct, plain
from ..core.optional import require
from ..files import field_kinds as F
from ..files.field import binary_views
from ..files.field import pyarrow_module as _pa
from ..images.encoded import codecs as _imaging
from ..images.encoded.headers import check_encoded_size, header_size, jpeg_header

__all__ = ["MAX_DECODED_PIXELS", "decoded_image", "image_shape", "stored_array"]

MAX_DECODED_PIXELS = 89_478_485  # the most pixels a row decoded here may declare (Pillow's own warning limit)

_PNG_GRAY = (0, 4)  # IHDR colour types that decode to one channel (gray, gray + alpha)
_MAGIC = ((b"GIF8", "GIF"), (b"BM", "BMP"), (b"II*\0", "TIFF"), (b"MM\0*", "TIFF"), (b"RIFF", "WEBP"))
# what Pillow raises for damaged bytes of a format it knows (DecompressionBombError is caught apart)
_PIL_DAMAGE = (OSError, ValueError, SyntaxError, EOFError, IndexError, TypeError, KeyError, struct.error)
_CAST = (F.Int, F.Float, F.Bool, F.Text, F.Bytes, F.Tokens)


def stored_array(column: Column, array: Any, first_row: int, where: str) -> Any:
    """``array`` (one column of a part, rows ``first_row`` ..) as ``column.field`` stores it (see the
    module doc); ``ValueError`` naming ``where``, the column and the row otherwise."""
    pa = _pa()
    if isinstance(array, pa.ChunkedArray):  # (one chunk as it is: combine_chunks copies even one)
        array = array.chunk(0) if array.num_chunks == 1 else array.combine_chunks()
    field = column.field
    if isinstance(field, F.Image):
        return _images(column, array, first_row, where)
    if array.null_count:
        raise ValueError(f"{where}: column {column.name!r} is null at row {first_row + first_null(array)}; fill or drop the nulls first")
    target = field.arrow_type()
    if isinstance(field, _CAST):
        flat = plain(array)
        if isinstance(field, F.Tokens) and flat.flatten().null_count:
            column.values(flat, first_row)  # raises naming the row that holds a null token
        try:
            return flat if flat.type == target else flat.cast(target)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            raise ValueError(f"{where}: column {column.name!r} of type {array.type} cannot be read as {field!r}: {exc}") from None
    values = column.values(array, first_row)
    encoded = [field.encode(value, first_row + k, f"{where}: column {column.name!r}, row {first_row + k}") for k, value in enumerate(values)]
    return field.to_arrow(encoded)


def image_shape(field: F.Image, data: Any, where: str) -> tuple[int, int, int, int] | None:
    """(codec code, height, width, channels) of encoded image bytes kept as they are (JPEG that
    decodes to gray or RGB as it is, PNG), from their header; None for bytes that are not kept but
    decoded (``decoded_image``); ``ValueError`` naming ``where`` for a JPEG or PNG header that cannot be read."""
    codec = _imaging.sniff(data)
    if codec == "jpeg":
        try:
            header = jpeg_header(data)
        except (ValueError, RuntimeError) as exc:
            raise ValueError(f"{where}: the JPEG header cannot be read: {exc}") from None
        if header is None:  # CMYK / YCCK
            return None
        height, width, own = header
    elif codec == "png":
        size = header_size("png", data, complete=True)
        if size is None or len(data) < 26:
            raise ValueError(f"{where}: the PNG header cannot be read")
        height, width = size
        own = 1 if int(data[25]) in _PNG_GRAY else 3
    else:
        return None
    return _imaging.CODECS[codec], height, width, field.channels or own


def decoded_image(field: F.Image, data: Any, where: str) -> np.ndarray:
    """Encoded image bytes that are not kept as they are (see the module doc) as the uint8 (H, W, C)
    pixels ``field`` stores, C = ``field.channels`` or the image's own (1 or 3); the size they
    declare checked before they are decoded. ``ValueError`` naming ``where`` otherwise."""
    pil = require("PIL.Image", extra="files", purpose="images read in place that are not JPEG or PNG need Pillow", package="Pillow")
    raw = bytes(data)
    codec = _imaging.sniff(raw)
    try:
        if codec is not None:  # a CMYK/YCCK JPEG, QOI (PNG and other JPEGs are kept)
            try:
                size = check_encoded_size(codec, raw)  # a header its bytes cannot fill: refused here
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from None
            if size is None:
                raise ValueError(f"{where}: the {codec.upper()} header cannot be read")
            _check_pixels(codec.upper(), *size, where)
            image = _imaging.as_image(raw, where)
        else:
            kind = _format_name(raw)
            try:
                opened = pil.open(io.BytesIO(raw))  # reads the header only
            except pil.UnidentifiedImageError:
                damaged = f": a damaged {kind} header" if kind != "image" else ""
                raise ValueError(
                    f"{where}: the image bytes are neither JPEG nor PNG nor an image Pillow reads (they start {raw[:8]!r}{damaged})"
                ) from None
            except _PIL_DAMAGE as exc:
                raise ValueError(f"{where}: the {kind} image does not decode: {exc}") from None
            with opened:
                kind = opened.format or kind
                _check_pixels(kind, opened.size[1], opened.size[0], where)
                try:
                    opened.load()
                except _PIL_DAMAGE as exc:
                    raise ValueError(f"{where}: the {kind} image does not decode: {exc}") from None
                image = _imaging.as_image(_imaging.pil_to_array(opened, where), where)
    except pil.DecompressionBombError as exc:
        raise ValueError(f"{where}: Pillow refuses the image as a decompression bomb: {exc}") from None
    return _imaging.to_channels(image, field.channels or image.shape[2])


def _format_name(data: bytes) -> str:
    """The image format ``data`` starts like, for messages ("image" when none is known)."""
    for magic, name in _MAGIC:
        if data.startswith(magic) and (name != "WEBP" or data[8:12] == b"WEBP"):
            return name
    return "image"


def _check_pixels(kind: str, height: int, width: int, where: str) -> None:
    """``ValueError`` naming ``where`` for a declared size past ``MAX_DECODED_PIXELS`` (or empty)."""
    if height < 1 or width < 1:
        raise ValueError(f"{where}: the {kind} image declares {height}x{width} pixels: an empty image")
    if height * width > MAX_DECODED_PIXELS:
        raise ValueError(
            f"{where}: the {kind} image declares {height}x{width} pixels, more than the {MAX_DECODED_PIXELS} decoded here: "
            "convert the data with ss.write (max_side= to shrink it)"
        )


def _images(column: Column, array: Any, first_row: int, where: str) -> Any:
    """An image column's encoded bytes as ``F.Image`` stores them: bytes kept, shapes from headers, or
    (the rows ``image_shape`` does not keep) raw pixels, decoded."""
    pa = _pa()
    field = column.field
    if field.max_side is not None or field.min_side is not None:
        raise ValueError(f"{where}: column {column.name!r}: {field!r} resizes at write time; read in place, images keep their size")
    data = array.field("bytes") if is_image_struct(array.type) else plain(array)
    if data.null_count or array.null_count:
        if array.null_count or not isinstance(column.values, ImageStructValues):
            raise ValueError(f"{where}: column {column.name!r} is null at row {first_row + first_null(array if array.null_count else data)}")
        data = pa.array(column.values(array, first_row), type=pa.large_binary())  # rows without bytes: read from their paths
    elif not is_binary(data.type):
        raise ValueError(f"{where}: column {column.name!r} of type {array.type} holds no image bytes")
    data = data if data.type == pa.large_binary() else data.cast(pa.large_binary())
    offsets, bytes_ = binary_views(data)
    n = len(data)
    codes, heights, widths, channels = (np.empty(n, np.int8), np.empty(n, np.int32), np.empty(n, np.int32), np.empty(n, np.int8))
    decoded: dict[int, np.ndarray] = {}
    for k in range(n):
        row, row_where = bytes_[offsets[k] : offsets[k + 1]], f"{where}: column {column.name!r}, row {first_row + k}"
        shape = image_shape(field, row, row_where)
        if shape is None:
            image = decoded[k] = decoded_image(field, row, row_where)
            shape = (_imaging.CODECS["raw"], *image.shape)
        codes[k], heights[k], widths[k], channels[k] = shape
    if decoded:
        data = _with_rows(offsets, bytes_, decoded)
    arrays = [pa.array(codes), pa.array(heights), pa.array(widths), pa.array(channels), data]
    return pa.StructArray.from_arrays(arrays, names=["codec", "height", "width", "channels", "data"])


def _with_rows(offsets: np.ndarray, data: np.ndarray, rows: dict[int, np.ndarray]) -> Any:
    """A large_binary array of the rows ``offsets`` cut from ``data``, rows ``rows`` replaced by
    those pixels' bytes (the kept rows copied in runs between them)."""
    pa = _pa()
    lengths = np.diff(offsets)
    for k, image in rows.items():
        lengths[k] = image.nbytes
    out_offsets = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=out_offsets[1:])
    out = np.empty(int(out_offsets[-1]), np.uint8)
    start = 0  # the first row of the run of kept rows being copied
    for k in [*sorted(rows), len(lengths)]:
        if k > start:
            out[out_offsets[start] : out_offsets[k]] = data[offsets[start] : offsets[k]]
        if k < len(lengths):
            out[out_offsets[k] : out_offsets[k + 1]] = rows[k].reshape(-1)
        start = k + 1
    return pa.LargeBinaryArray.from_buffers(pa.large_binary(), len(lengths), [None, pa.py_buffer(out_offsets), pa.py_buffer(out)])
