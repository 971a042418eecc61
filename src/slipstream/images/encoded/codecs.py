"""Image codecs and resizing for packed files: raw, JPEG (libjpeg-turbo), PNG (Pillow), QOI.

Images are uint8 arrays of shape (height, width, channels), channels 1 (grayscale) or 3 (RGB).
Every encoder is deterministic (same pixels and settings, same bytes), so rewriting a dataset gives
a byte-identical file. The heavy calls (JPEG, PNG and QOI coding, resizing) release the GIL.

Other inputs are brought to that form one way everywhere (``pil_to_array``): grayscale modes give
one channel, every other mode (RGBA, LA's colour cousins, palette, CMYK, YCbCr) three, alpha
dropped as Pillow's ``convert("RGB")`` drops it; 16-bit samples keep their high byte (``v >> 8``,
what Pillow does to 16-bit colour PNGs, so a 16-bit gray and a 16-bit colour file agree);
floating-point images are refused (no known range). ``to_channels`` converts between 1 and 3.

JPEG goes through slipstream's compiled extension (``images.compiled.EXTENSION``: libjpeg-turbo's
libjpeg API, strict: any libjpeg warning is an error) wherever it was built; its pixels and encoded
bytes are those simplejpeg gives with the same libjpeg (encoding with the fast forward DCT below
quality 96, as TurboJPEG does). Without it, Pillow does the work, with these differences: Pillow
refuses truncated data (with ``ImageFile.LOAD_TRUNCATED_IMAGES`` off, its default) but not every
corrupt-data warning libjpeg gives; ``fast`` decoding is the accurate one; encoding uses the
accurate forward DCT at every quality (bytes, and pixels by a level or so, differ from the
extension's below quality 96). Decoded pixels are the same (the same libjpeg decodes them), CMYK
converted to RGB by simplejpeg's rule on both paths.
"""

from __future__ import annotations

import io
from typing import Any

import numpy as np

from ...core.optional import require
from .. import compiled as _compiled
from .headers import check_encoded_size, header_mismatch, header_size, jpeg_header, jpeg_info

__all__ = [
    "CODECS",
    "as_image",
    "check_encoded_size",
    "decode",
    "decode_jpeg_scaled",
    "encode",
    "header_mismatch",
    "header_size",
    "jpeg_header",
    "jpeg_info",
    "pil_to_array",
    "resize_area",
    "sniff",
    "target_size",
    "to_channels",
    "verify_jpeg",
]

# Codes stored per sample; the mapping is written into each file's schema metadata too.
CODECS = {"raw": 0, "jpeg": 1, "png": 2, "qoi": 3}


def _pil():
    return require("PIL.Image", extra="files", purpose="image fields need Pillow", package="Pillow")


def _qoi():
    return require("qoi", extra="qoi", purpose="QOI images need qoi")


def sniff(data: bytes | memoryview) -> str | None:
    """The codec of encoded image bytes, from their magic number (None when unknown)."""
    head = bytes(data[:8])
    if head[:3] == b"\xff\xd8\xff":
        return "jpeg"
    if head == b"\x89PNG\r\n\x1a\n":
        return "png"
    if head[:4] == b"qoif":
        return "qoi"
    return None


_GRAY_MODES = ("1", "L", "LA", "La")


def pil_to_array(pil: Any, where: str = "image") -> np.ndarray:
    """A PIL image as a uint8 (H, W, C) array, C in {1, 3} (the rule of the module doc).

    Grayscale ("1", "L", "LA") gives one channel; 16-bit grayscale ("I;16*", and "I" holding
    values in 0..65535, as older Pillows read 16-bit PNGs) one channel of ``v >> 8``; every other
    mode three channels through ``convert("RGB")``. Raises ``ValueError`` naming ``where`` for a
    floating-point image, 32-bit values beyond 16 bits, or a mode Pillow cannot convert to RGB.
    """
    mode = pil.mode
    if mode.startswith("I;16") or mode == "I":
        values = np.asarray(pil)
        if mode == "I" and values.size and (int(values.min()) < 0 or int(values.max()) > 65535):
            raise ValueError(
                f"{where}: a 32-bit integer image (PIL mode 'I') with values {int(values.min())}..{int(values.max())}, "
                f"expected 8- or 16-bit samples; scale it to uint8 first"
            )
        return (values >> 8).astype(np.uint8)[:, :, None]
    if mode == "F":
        raise ValueError(f"{where}: a floating-point image (PIL mode 'F') has no fixed range; scale it to uint8 first")
    try:
        converted = pil.convert("L" if mode in _GRAY_MODES else "RGB")
    except ValueError as exc:
        raise ValueError(f"{where}: cannot convert a PIL {mode!r} image to RGB: {exc}") from exc
    array = np.asarray(converted)
    return array[:, :, None] if array.ndim == 2 else array


def to_channels(image: np.ndarray, channels: int) -> np.ndarray:
    """``image`` (H, W, 1 or 3) with ``channels`` (1 or 3) channels; the same array when it has them.

    Gray to RGB repeats the plane (a new array); RGB to gray is Pillow's ``convert("L")``
    (ITU-R 601-2 luma, ``L = R * 299/1000 + G * 587/1000 + B * 114/1000``, rounded).
    """
    have = image.shape[2]
    if have == channels:
        return image
    if channels == 3 and have == 1:
        return np.repeat(image, 3, axis=2)
    if channels == 1 and have == 3:
        return np.asarray(_pil().fromarray(np.ascontiguousarray(image)).convert("L"))[:, :, None]
    raise ValueError(f"cannot convert an image of {have} channels to {channels}; expected 1 or 3 channels each")


def as_image(value: Any, where: str) -> np.ndarray:
    """``value`` as a uint8 (H, W, C) array, C in {1, 3}: arrays, PIL images and encoded bytes are
    accepted (PIL images and image files through ``pil_to_array``'s rule; arrays must be uint8)."""
    if isinstance(value, (bytes, bytearray, memoryview)):
        codec = sniff(value)
        if codec is None:  # another format Pillow may know (BMP, TIFF, WebP...)
            try:
                with _pil().open(io.BytesIO(value)) as pil:
                    pil.load()
                    value = pil.copy()
            except Exception:  # noqa: BLE001 - Pillow raises many types for unknown data
                raise ValueError(f"{where}: bytes that are not an image Pillow can read (starting {bytes(value[:8])!r})") from None
        else:
            try:
                return decode(codec, value, None)
            except ValueError as exc:
                raise ValueError(f"{where}: {exc}") from exc
    if not isinstance(value, np.ndarray) and hasattr(value, "mode") and hasattr(value, "convert"):  # a PIL image
        value = pil_to_array(value, where)
    array = np.asarray(value)
    if array.dtype != np.uint8:
        raise TypeError(f"{where}: an image must be uint8, got {array.dtype} (scale and convert it first)")
    if array.ndim == 2:
        array = array[:, :, None]
    if array.ndim != 3 or array.shape[2] not in (1, 3):
        raise ValueError(f"{where}: an image must have shape (H, W), (H, W, 1) or (H, W, 3), got {array.shape}")
    if array.shape[0] == 0 or array.shape[1] == 0:
        raise ValueError(f"{where}: an image must not be empty, got shape {array.shape}")
    return np.ascontiguousarray(array)


def target_size(height: int, width: int, max_side: int | None, min_side: int | None) -> tuple[int, int]:
    """The (height, width) after downscaling to fit ``max_side`` (longer side) and ``min_side``
    (shorter side); never larger than the input, never below 1 pixel."""
    scale = 1.0
    if max_side is not None and max(height, width) > max_side:
        scale = min(scale, max_side / max(height, width))
    if min_side is not None and min(height, width) > min_side:
        scale = min(scale, min_side / min(height, width))
    if scale >= 1.0:
        return height, width
    return max(1, round(height * scale)), max(1, round(width * scale))


def resize_area(image: np.ndarray, height: int, width: int) -> np.ndarray:
    """Downscale with area interpolation (Pillow's BOX filter: each output pixel averages the input area it covers)."""
    if (height, width) == image.shape[:2]:
        return image
    Image = _pil()
    pil = Image.fromarray(image[:, :, 0] if image.shape[2] == 1 else image)
    out = np.asarray(pil.resize((width, height), Image.Resampling.BOX))
    return out[:, :, None] if out.ndim == 2 else out


def encode(codec: str, image: np.ndarray, quality: int) -> bytes:
    """Encode a uint8 (H, W, C) image."""
    if codec == "raw":
        return image.tobytes()
    if codec == "jpeg":
        return _encode_jpeg(image, quality)
    if codec == "png":
        buffer = io.BytesIO()
        _pil().fromarray(image[:, :, 0] if image.shape[2] == 1 else image).save(buffer, format="PNG", compress_level=6)
        return buffer.getvalue()
    if codec == "qoi":
        rgb = np.repeat(image, 3, axis=2) if image.shape[2] == 1 else image  # QOI stores RGB(A) only
        return _qoi().encode(np.ascontiguousarray(rgb))
    raise ValueError(f"unknown image codec {codec!r}; expected one of {sorted(CODECS)}")


def verify_jpeg(data: Any, where: str) -> None:
    """Raise ``ValueError`` unless ``data`` is a whole, decodable JPEG (decoded at 1/8 scale: cheap;
    at full scale when a side is under 8 pixels, which Pillow cannot scale by 1/8; a header that
    declares more than the bytes can encode is refused before that: ``check_encoded_size``)."""
    try:
        size = check_encoded_size("jpeg", data)
        _jpeg_decode(data, "RGB", None, 1 if size is not None and min(size) < 8 else 8, False)
    except ValueError as exc:
        raise ValueError(f"{where}: the JPEG bytes do not decode: {exc}") from exc


def decode(
    codec: str, data: Any, shape: tuple[int, int, int] | None, out: np.ndarray | None = None, channels: int | None = None
) -> np.ndarray:
    """Decode ``data`` to a uint8 (H, W, C) array (into ``out`` when given and the shape fits).

    ``shape`` (from the file) is checked against the header before decoding and against the decoded
    image after: a mismatch means damage, as does a header that declares more pixels than the bytes
    can encode (``check_encoded_size``: nothing is allocated for it).
    ``channels`` (1 or 3) asks for that many channels instead of the stored ``shape[2]``: JPEG
    decodes to it directly (libjpeg converts gray to RGB, or keeps a colour image's luma plane),
    PNG and QOI convert as they decode, raw pixels are converted after (``to_channels``). Without
    ``shape`` the image keeps its own channels (``pil_to_array``'s rule for PNG).
    """
    want = channels if channels is not None else (shape[2] if shape is not None else None)
    try:
        if codec != "raw":  # before the decoder allocates what a damaged header says
            found = check_encoded_size(codec, data)
            if shape is not None and found is not None and found != tuple(shape[:2]):
                raise ValueError(f"the {codec} image decodes to shape {(*found, want)} but its stored shape is {tuple(shape)}")
        if codec == "raw":
            if shape is None:
                raise ValueError("raw pixels need their shape")
            image = np.frombuffer(data, np.uint8)
            if image.size != shape[0] * shape[1] * shape[2]:
                raise ValueError(f"{image.size} raw bytes cannot hold an image of shape {shape}")
            image = image.reshape(shape)
        elif codec == "jpeg":
            image = _decode_jpeg(data, shape, want, out)
        elif codec == "png":
            with _pil().open(io.BytesIO(data)) as pil:
                image = pil_to_array(pil, "png image")
        elif codec == "qoi":
            image = _qoi().decode(bytes(data))[:, :, :3]
            if want == 1:  # slipstream stores gray as R = G = B
                image = image[:, :, :1]
        else:
            raise ValueError(f"unknown image codec {codec!r}")
    except (ValueError, OSError, RuntimeError, SyntaxError, _pil().DecompressionBombError) as exc:
        raise ValueError(f"cannot decode {codec} image: {exc}") from exc
    if want is not None:
        image = to_channels(image, want)
    if shape is not None and image.shape != (shape[0], shape[1], want):
        raise ValueError(f"the {codec} image decodes to shape {image.shape} but its stored shape is {tuple(shape)}")
    if out is not None and image is not out:
        if out.shape != image.shape:
            raise ValueError(f"an image of shape {image.shape} does not fit a buffer of shape {out.shape}")
        np.copyto(out, image)
        return out
    return image


def _decode_jpeg(data: Any, shape: tuple[int, int, int] | None, channels: int | None, out: np.ndarray | None) -> np.ndarray:
    """A whole JPEG (strict: any libjpeg warning raises) as ``channels`` channels (default: the
    file's own), straight into ``out`` when it has the stored size and those channels."""
    if channels is None:
        header = jpeg_header(data)
        channels = 1 if header is not None and header[2] == 1 else 3
    colorspace = "GRAY" if channels == 1 else "RGB"
    fits = (
        out is not None
        and shape is not None
        and out.shape == (shape[0], shape[1], channels)
        and out.dtype == np.uint8
        and out.flags.c_contiguous
        and out.flags.writeable
    )
    return _jpeg_decode(data, colorspace, out if fits else None, 1, False)


def decode_jpeg_scaled(
    data: Any, colorspace: str, buffer: np.ndarray, fast: bool, factor: int, height: int, width: int
) -> np.ndarray:
    """A whole JPEG decoded strictly into ``buffer`` (a contiguous uint8 array of at least
    ``height * width * channels`` bytes, any shape): as ``colorspace`` ("RGB" or "GRAY"), with
    libjpeg's fast DCT and upsampling when ``fast``, and at 1/``factor`` scale (1, 2, 4 or 8:
    libjpeg's DCT scaling) to a ``height`` x ``width`` image (``ValueError`` when it decodes to
    another size). Returns the decoded (H, W, C) array, a view of ``buffer``."""
    channels = 1 if colorspace == "GRAY" else 3
    need = height * width * channels
    flat = buffer.reshape(-1)
    if flat.size < need:
        raise ValueError(f"a buffer of {flat.size} bytes cannot hold the {height}x{width}x{channels} image")
    return _jpeg_decode(data, colorspace, flat[:need].reshape(height, width, channels), factor, fast)


def _jpeg_decode(data: Any, colorspace: str, out: np.ndarray | None, factor: int, fast: bool) -> np.ndarray:
    """The whole JPEG as a uint8 (H, W, C) array (C = 3 for "RGB", 1 for "GRAY") at 1/``factor``
    scale, into ``out`` when given (of exactly that shape); ``ValueError`` for damage."""
    ext = _compiled.EXTENSION
    if ext is not None:
        return ext.decode_jpeg(data, out, colorspace=colorspace, scale_denom=factor, fast=fast)
    return _pillow_decode_jpeg(data, colorspace, out, factor)


def _pillow_decode_jpeg(data: Any, colorspace: str, out: np.ndarray | None, factor: int) -> np.ndarray:
    """``_jpeg_decode`` by Pillow (no extension): libjpeg's accurate DCT and fancy upsampling at
    every setting; DCT scaling through ``draft``; CMYK/YCCK converted as simplejpeg converts them."""
    Image = _pil()
    gray = colorspace == "GRAY"
    try:
        with Image.open(io.BytesIO(data)) as pil:
            if pil.format not in ("JPEG", "MPO"):  # MPO: a JPEG with more images after it (its first is decoded, as libjpeg does)
                raise ValueError(f"not a JPEG (Pillow reads {pil.format})")
            width, height = pil.size
            want = (-(-height // factor), -(-width // factor))
            if factor > 1 or (gray and pil.mode == "RGB"):
                pil.draft("L" if gray and pil.mode == "RGB" else pil.mode, (max(1, width // factor), max(1, height // factor)))
            pil.load()
            mode, array = pil.mode, np.asarray(pil)
    except (OSError, SyntaxError, EOFError, Image.DecompressionBombError) as exc:  # Pillow's ways of saying damaged
        raise ValueError(f"Pillow cannot decode the JPEG: {exc}") from exc
    if mode == "CMYK":  # Pillow inverts Adobe CMYK: the libjpeg values are 255 - these
        array = _cmyk_to_rgb(array, gray)
    elif array.ndim == 2:
        array = array[:, :, None]
    if array.shape[2] != (1 if gray else 3):
        array = to_channels(array, 1 if gray else 3)
    if array.shape[:2] != want:
        raise ValueError(f"Pillow decodes the {height}x{width} JPEG at 1/{factor} scale to {array.shape[:2]}, expected {want}")
    if out is None:
        return np.ascontiguousarray(array)
    if out.shape != array.shape:
        raise ValueError(f"out must have shape {array.shape}, got {out.shape}")
    np.copyto(out, array)
    return out


def _cmyk_to_rgb(inverted: np.ndarray, gray: bool) -> np.ndarray:
    """Pillow's (inverted) CMYK as simplejpeg converts libjpeg's CMYK: R = K - ((255 - C) * K >> 8)
    (C, K libjpeg's values, so 255 - C is Pillow's), gray from that RGB by ITU-R 601 in 14 bits."""
    values = inverted.astype(np.uint32)
    k = 255 - values[:, :, 3:4]
    rgb = k - ((values[:, :, :3] * k) >> 8)
    if gray:
        return ((rgb[:, :, 0:1] * 4899 + rgb[:, :, 1:2] * 9617 + rgb[:, :, 2:3] * 1868 + 8192) >> 14).astype(np.uint8)
    return rgb.astype(np.uint8)


def _encode_jpeg(image: np.ndarray, quality: int) -> bytes:
    """A uint8 (H, W, 1 or 3) image as a baseline JPEG: 4:2:0 for RGB, grayscale for one channel;
    the extension's bytes are simplejpeg's (fast forward DCT below quality 96), Pillow's without it."""
    gray = image.shape[2] == 1
    ext = _compiled.EXTENSION
    if ext is not None:
        return ext.encode_jpeg(
            np.ascontiguousarray(image), quality, colorspace="GRAY" if gray else "RGB", subsampling="gray" if gray else "420", fast=quality < 96
        )
    buffer = io.BytesIO()
    if gray:
        _pil().fromarray(np.ascontiguousarray(image[:, :, 0])).save(buffer, format="JPEG", quality=quality)
    else:
        _pil().fromarray(np.ascontiguousarray(image)).save(buffer, format="JPEG", quality=quality, subsampling=2)
    return buffer.getvalue()
