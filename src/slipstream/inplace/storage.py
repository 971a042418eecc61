"""A table column as its field stores it: what a page read in place is made of.

``stored_array(column, array, first_row, where)`` turns one raw column of a part (a Parquet row
group, a batch of a Hugging Face dataset, the members of a tar shard) into an Arrow array of
``column.field.arrow_type()``: the array a packed page holds, so every reader of packed pages
(zero-copy columns, image pipelines, compiled tasks, the device stage) reads it unchanged.

* numbers, bools, strings, bytes and token lists: one cast, no Python per row;
* images (encoded bytes, or Hugging Face ``{bytes, path}`` structs): the bytes kept as they are,
  each image's stored shape read from its header, never decoded here (a damaged image fails where
  it is decoded, naming its sample). JPEG and PNG are read in place; other codecs, CMYK JPEGs and
  fields that resize at write time are refused, naming the row: convert those with ``ss.write``;
* anything else (JSON values, arrays): each value encoded by its field, as ``ss.write`` encodes it.

A null is refused naming its row (packed pages hold none). Errors are ``ValueError`` naming
``where`` (the file and part), the column and the row; callers add nothing but the page.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..convert.columns import Column, ImageStructValues, first_null, is_binary, is_image_struct, plain
from ..files import field_kinds as F
from ..files.field import binary_views
from ..files.field import pyarrow_module as _pa
from ..images.encoded import codecs as _imaging
from ..images.encoded.headers import header_size, jpeg_header

__all__ = ["image_shape", "stored_array"]

_PNG_GRAY = (0, 4)  # IHDR colour types that decode to one channel (gray, gray + alpha)
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


def image_shape(field: F.Image, data: Any, where: str) -> tuple[int, int, int, int]:
    """(codec code, height, width, channels) of encoded image bytes stored as they are, from their
    header; ``ValueError`` naming ``where`` for bytes that are not a JPEG or PNG read in place."""
    codec = _imaging.sniff(data)
    if codec == "jpeg":
        try:
            header = jpeg_header(data)
        except (ValueError, RuntimeError) as exc:
            raise ValueError(f"{where}: the JPEG header cannot be read: {exc}") from None
        if header is None:
            raise ValueError(f"{where}: a CMYK/YCCK JPEG, which is read only once converted to RGB: convert the data with ss.write")
        height, width, own = header
    elif codec == "png":
        size = header_size("png", data, complete=True)
        if size is None or len(data) < 26:
            raise ValueError(f"{where}: the PNG header cannot be read")
        height, width = size
        own = 1 if int(data[25]) in _PNG_GRAY else 3
    else:
        found = "QOI" if codec == "qoi" else "neither JPEG nor PNG"
        raise ValueError(f"{where}: the image bytes are {found}; images are read in place as JPEG or PNG: convert the data with ss.write")
    return _imaging.CODECS[codec], height, width, field.channels or own


def _images(column: Column, array: Any, first_row: int, where: str) -> Any:
    """An image column's encoded bytes as ``F.Image`` stores them (bytes kept, shapes from headers)."""
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
    for k in range(n):
        codes[k], heights[k], widths[k], channels[k] = image_shape(
            field, bytes_[offsets[k] : offsets[k + 1]], f"{where}: column {column.name!r}, row {first_row + k}"
        )
    arrays = [pa.array(codes), pa.array(heights), pa.array(widths), pa.array(channels), data]
    return pa.StructArray.from_arrays(arrays, names=["codec", "height", "width", "channels", "data"])
