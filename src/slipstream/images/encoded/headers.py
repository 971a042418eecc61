"""What an encoded image's header declares, and whether its bytes can hold it.

``header_size`` and ``jpeg_info`` read the (height, width) an encoded image says it has (JPEG's
SOF, PNG's IHDR, QOI's header) without decoding it; ``check_encoded_size`` refuses a header that
disagrees with the stored shape or declares more pixels than its bytes can encode, so that no
buffer is ever sized from a damaged (or forged) header. ``images.encoded.codecs`` re-exports them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import compiled as _compiled

__all__ = ["check_encoded_size", "header_mismatch", "header_size", "jpeg_frame", "jpeg_header", "jpeg_info"]


_SPACES = {1: "Gray", 2: "RGB", 3: "YCbCr", 4: "CMYK", 5: "YCCK"}  # libjpeg's J_COLOR_SPACE codes


def jpeg_info(data: Any) -> tuple[int, int, str]:
    """(height, width, colour space) from a JPEG's header, the colour space as libjpeg names it
    ("Gray", "YCbCr", "RGB", "CMYK", "YCCK"); ``ValueError`` when unreadable or of no such colour
    space. libjpeg reads it where the compiled extension is built (any warning about the header is
    an error); otherwise the markers are read here, by libjpeg's rule (``_jpeg_space``)."""
    ext = _compiled.EXTENSION
    if ext is not None:
        height, width, _, code = ext.read_header(data)
        space = _SPACES.get(code)
    else:
        view = _as_view(data)
        frame, space = jpeg_frame(view), _jpeg_space(view)
        if frame is None:
            raise ValueError("JPEG header error: no frame header (SOFn) after readable markers")
        _, height, width, _ = frame
        if height == 0 or width == 0:
            raise ValueError(f"JPEG header error: an empty {height}x{width} frame")
    if space is None:
        raise ValueError("JPEG header error: a colour space libjpeg does not know (neither 1, 3 nor 4 components)")
    return int(height), int(width), space


def jpeg_header(data: bytes) -> tuple[int, int, int] | None:
    """(height, width, channels) of a JPEG that decodes to RGB or grayscale as it is; None for CMYK etc."""
    height, width, colorspace = jpeg_info(data)
    if colorspace == "Gray":
        return height, width, 1
    if colorspace in ("YCbCr", "RGB"):
        return height, width, 3
    return None


def header_size(codec: str, data: Any, complete: bool = False) -> tuple[int, int] | None:
    """(height, width) as the encoded header says: JPEG's SOF, PNG's IHDR, QOI's header; None for
    raw pixels (and any other codec name) and a header that cannot be read. With ``complete``, also None for a header shorter than the bytes that hold the sizes
    (PNG: 24, through IHDR's height; QOI: its 14-byte header) and for a size of 0 (without it, a
    cut header's sizes are read from the bytes there are)."""
    size: tuple[int, int] | None = None
    if codec in ("png", "qoi"):
        head = bytes(data[:24]) if isinstance(data, (bytes, np.ndarray)) else bytes(memoryview(data).cast("B")[:24])
        if codec == "png" and head[12:16] == b"IHDR" and (len(head) >= 24 or not complete):
            size = int.from_bytes(head[20:24], "big"), int.from_bytes(head[16:20], "big")
        elif codec == "qoi" and head[:4] == b"qoif" and (len(head) >= 14 or not complete):
            size = int.from_bytes(head[8:12], "big"), int.from_bytes(head[4:8], "big")
    elif codec == "jpeg":
        try:
            size = tuple(int(v) for v in jpeg_info(data)[:2])  # type: ignore[assignment]
        except ValueError:
            return None
    if complete and size is not None and (size[0] <= 0 or size[1] <= 0):
        return None
    return size


# What the fewest stored bytes can encode, for the size an encoded header declares: a damaged (or
# forged) header must not size a buffer that the decoder then fills from nothing. Each bound is
# one no real image of that codec can fall below:
# - JPEG with Huffman coding (SOF0-3: baseline, extended, progressive, lossless): every block of
#   a component a scan codes takes at least one bit (a Huffman code is >= 1 bit; a DC scan has no
#   runs), and an image decodes without warnings only when at least one component was scanned
#   whole; so at least the smallest component's block count, in bits. Arithmetic coding (SOF9-11)
#   can spend far less than a bit a block: no bound (the region decoder, where built, still stops
#   at the first damaged row).
# - PNG: deflate turns at most 1032 output bytes out of one input byte (a 258-byte match in two
#   one-bit codes); the filtered rows hold at least height x width x bits per pixel.
# - QOI: one byte encodes a run of at most 62 pixels.
_DEFLATE_MAX_RATIO = 1032
_QOI_MAX_RUN = 62
_SOF_HUFFMAN = (0xC0, 0xC1, 0xC2, 0xC3)
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}  # IHDR colour type -> samples per pixel


def _as_view(data: Any) -> memoryview:
    """``data`` (bytes, a buffer, a uint8 array) as a flat memoryview of bytes, without a copy
    where it is contiguous."""
    if isinstance(data, np.ndarray):
        if data.ndim != 1 or data.dtype != np.uint8 or not data.flags.c_contiguous:
            data = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        return memoryview(data)
    view = memoryview(data)
    return view if view.format == "B" and view.ndim == 1 else view.cast("B")


def jpeg_frame(data: Any) -> tuple[int, int, int, list[tuple[int, int]]] | None:
    """(SOF marker, height, width, each component's (horizontal, vertical) sampling factors) from
    a JPEG's frame header, the first SOFn, as libjpeg reads it; None when the markers before it
    cannot be read (the decoder then says why)."""
    view = data if isinstance(data, memoryview) and data.format == "B" else _as_view(data)
    n = len(view)
    if n < 4 or view[0] != 0xFF or view[1] != 0xD8:
        return None
    i = 2
    while i + 4 <= n:
        if view[i] != 0xFF:
            return None
        marker = view[i + 1]
        if marker == 0xFF:  # a fill byte
            i += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:  # TEM, RSTn: no length
            i += 2
            continue
        if marker in (0xD8, 0xD9, 0xDA):  # SOI again, EOI, SOS: no frame before
            return None
        length = (view[i + 2] << 8) | view[i + 3]
        if length < 2:
            return None
        if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):  # SOFn (not DHT, JPG, DAC)
            segment = view[i + 4 : i + 2 + length]
            if len(segment) < 6 or len(segment) < 6 + 3 * segment[5]:
                return None
            sampling = [(segment[7 + 3 * k] >> 4, segment[7 + 3 * k] & 15) for k in range(segment[5])]
            return marker, (segment[1] << 8) | segment[2], (segment[3] << 8) | segment[4], sampling
        i += 2 + length
    return None


def _jpeg_space(view: memoryview) -> str | None:
    """The colour space libjpeg gives the frame (jdapimin.c's rule): 1 component Gray; 3 YCbCr,
    RGB under an Adobe marker with transform 0 or, without JFIF and Adobe markers, component ids
    R, G, B; 4 CMYK, YCCK under an Adobe marker with transform other than 0. None when the
    markers cannot be read or there are 2 or more than 4 components."""
    n, i = len(view), 2
    jfif, adobe = False, None
    if n < 4 or view[0] != 0xFF or view[1] != 0xD8:
        return None
    while i + 4 <= n and view[i] == 0xFF:
        marker = view[i + 1]
        if marker == 0xFF:
            i += 1
            continue
        if marker == 0x01 or 0xD0 <= marker <= 0xD7:
            i += 2
            continue
        if marker in (0xD8, 0xD9, 0xDA):
            return None
        length = (view[i + 2] << 8) | view[i + 3]
        segment = view[i + 4 : i + 2 + length]
        if marker == 0xE0 and bytes(segment[:5]) == b"JFIF\0":
            jfif = True
        elif marker == 0xEE and len(segment) >= 12 and bytes(segment[:5]) == b"Adobe":
            adobe = segment[11]
        elif 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC):
            count = segment[5] if len(segment) >= 6 else 0
            if count == 1:
                return "Gray"
            if count == 3:
                if jfif:
                    return "YCbCr"
                if adobe is not None:
                    return "RGB" if adobe == 0 else "YCbCr"
                ids = bytes(segment[6 + 3 * k] for k in range(3) if 6 + 3 * k < len(segment))
                return "RGB" if ids == b"RGB" else "YCbCr"
            if count == 4:
                return "YCCK" if adobe is not None and adobe != 0 else "CMYK"
            return None
        if length < 2:
            return None
        i += 2 + length
    return None


def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _declared(codec: str, view: memoryview) -> tuple[int, int, int] | None:
    """(height, width, the fewest bytes that encode an image of that size) as the header says; None
    when there is no header to read (raw pixels, unknown codecs, a header that cannot be read)."""
    if codec == "jpeg":
        frame = jpeg_frame(view)
        if frame is None:
            return None
        marker, height, width, sampling = frame
        if marker not in _SOF_HUFFMAN or not sampling or not all(1 <= h <= 4 and 1 <= v <= 4 for h, v in sampling):
            return height, width, 0  # arithmetic coding (no bound), or a frame libjpeg refuses itself
        h_max, v_max = max(h for h, _ in sampling), max(v for _, v in sampling)
        block = 1 if marker == 0xC3 else 8  # lossless: each sample is coded, as a block is
        blocks = min(_ceil_div(width * h, h_max * block) * _ceil_div(height * v, v_max * block) for h, v in sampling)
        return height, width, _ceil_div(blocks, 8)
    if codec in ("png", "qoi"):
        head = bytes(view[:26])
        if codec == "png" and len(head) >= 26 and head[12:16] == b"IHDR":
            width, height = int.from_bytes(head[16:20], "big"), int.from_bytes(head[20:24], "big")
            depth, channels = head[24], _PNG_CHANNELS.get(head[25], 0)
            bits = width * height * channels * (depth if depth in (1, 2, 4, 8, 16) else 0)
            return height, width, _ceil_div(bits, 8) // _DEFLATE_MAX_RATIO
        if codec == "qoi" and len(head) >= 14 and head[:4] == b"qoif":
            height, width = int.from_bytes(head[8:12], "big"), int.from_bytes(head[4:8], "big")
            return height, width, _ceil_div(height * width, _QOI_MAX_RUN)
    return None


def check_encoded_size(codec: str, data: Any, shape: Any = None) -> tuple[int, int] | None:
    """The (height, width) the encoded header declares, checked before anything is allocated for
    it: ``ValueError`` when it differs from ``shape`` (the stored one, when given) or when the bytes
    are too few to encode an image that large (a damaged header: see the bounds above). None where
    there is no header to check (raw pixels; a header that cannot be read: the decoder says why)."""
    if codec not in ("jpeg", "png", "qoi"):
        return None
    view = _as_view(data)
    declared = _declared(codec, view)
    if declared is None:
        return None
    height, width, needed = declared
    if shape is not None and (height, width) != (int(shape[0]), int(shape[1])):
        raise ValueError(header_mismatch(tuple(int(v) for v in shape), codec, (height, width)))
    size = len(view)
    if size < needed:
        raise ValueError(
            f"the {codec} header declares a {height}x{width} image, which takes at least {needed} bytes to encode, "
            f"but there are {size}: the header is damaged"
        )
    return height, width


def header_mismatch(shape: Any, codec: str, found: tuple[int, int] | None) -> str:
    """The sentence for a stored image ``shape`` that its ``codec`` header (``found``) disagrees with."""
    return f"the stored image shape {shape} disagrees with its {codec} bytes (which say {found or 'nothing readable'})"
