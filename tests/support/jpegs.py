"""JPEG test data and reference decodes by Pillow, independent of slipstream's codec.

``encode_jpeg(image, quality, colorspace, colorsubsampling)`` encodes a uint8 (H, W, 3) RGB or
(H, W, 1) / (H, W) gray image with Pillow (libjpeg's accurate DCT; subsampling "444", "422", "420",
or "Gray": a grayscale JPEG, also from RGB). ``decode_jpeg(data, colorspace)`` decodes one whole
as (H, W, 3) RGB or (H, W, 1) gray, Pillow's pixels (libjpeg's accurate DCT and fancy upsampling,
what slipstream decodes by default); with ``fast`` it is the compiled extension's whole decode with
libjpeg's fast DCT and upsampling (Pillow has no fast upsampling).
"""

from __future__ import annotations

import io

import numpy as np
from PIL import Image

_SUBSAMPLING = {"444": 0, "422": 1, "420": 2}


def encode_jpeg(image: np.ndarray, quality: int = 85, colorspace: str = "RGB", colorsubsampling: str = "444") -> bytes:
    """``image`` as a baseline JPEG by Pillow (see the module doc)."""
    array = np.asarray(image)
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if colorspace.upper() == "GRAY" and array.ndim != 2:
        raise ValueError(f"a GRAY image has one channel, got shape {array.shape}")
    buffer = io.BytesIO()
    pil = Image.fromarray(np.ascontiguousarray(array))
    if colorsubsampling.lower() == "gray":
        pil.convert("L").save(buffer, format="JPEG", quality=quality)
    elif array.ndim == 2:
        raise ValueError(f"a gray image is encoded with colorsubsampling 'Gray', got {colorsubsampling!r}")
    else:
        pil.save(buffer, format="JPEG", quality=quality, subsampling=_SUBSAMPLING[colorsubsampling])
    return buffer.getvalue()


def decode_jpeg(data: bytes, colorspace: str = "RGB", fast: bool = False) -> np.ndarray:
    """The whole JPEG as (H, W, 3) RGB or (H, W, 1) gray (see the module doc); Pillow's errors for damage."""
    gray = colorspace.upper() == "GRAY"
    if fast:
        from slipstream.images import _roijpeg

        return _roijpeg.decode_jpeg(data, colorspace="GRAY" if gray else "RGB", fast=True)
    with Image.open(io.BytesIO(data)) as pil:
        if gray and pil.mode != "L":
            pil.draft("L", pil.size)
        array = np.asarray(pil.convert("L" if gray else "RGB"))
    return array[:, :, None] if array.ndim == 2 else array
