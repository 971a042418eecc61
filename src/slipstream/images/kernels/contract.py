"""The Python side of ``resample_into``'s contract: Pillow's constants, its pass-order rule, and the
argument checks of the NumPy path.

Contract: the constants are Pillow's (``libImaging/Resample.c``, 8 bits per channel), the ones
``csrc/resample.c`` uses too; the NumPy path and the device geometry read them from here.
``horizontal_first`` is the pass-order rule (``csrc/resample.c`` applies the same one).

``run(kernel, src, box, out, flip, filter, chw, scale, offset)`` validates the public arguments
(raising the ``TypeError``/``ValueError`` that ``resample_into`` documents, before any pixel is
written), normalizes them to what a kernel takes, calls
``kernel(src, edges, target, (out_h, out_w), flip, box_filter, chw, scale, offset)`` with a
C-contiguous ``target`` (``out`` itself, or a scratch array copied into ``out`` afterwards) and
returns ``out``. A kernel receives: ``src`` uint8 (H, W, C) C-contiguous; ``edges`` float32
(top, bottom, left, right), Pillow's box as the C floats it receives; ``scale``/``offset``
float32 arrays of C values.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from numbers import Real
from typing import Any

import numpy as np

__all__ = [
    "BILINEAR_SUPPORT",
    "BOX_SUPPORT",
    "FILTERS",
    "HALF",
    "ONE",
    "OUT_DTYPES",
    "PRECISION_BITS",
    "check",
    "horizontal_first",
    "run",
]

PRECISION_BITS = 22  # Pillow: 32 - 8 - 2, the fraction bits of the fixed-point coefficients
ONE = float(1 << PRECISION_BITS)  # a coefficient of 1.0 in fixed point
HALF = 1 << (PRECISION_BITS - 1)  # added before the shift: round half up

FILTERS = {"bilinear": False, "box": True}  # name -> is the box filter
BOX_SUPPORT = 0.5  # Pillow's BOX filter reaches half a pixel either side
BILINEAR_SUPPORT = 1.0  # its BILINEAR (triangle) filter one pixel

OUT_DTYPES = (np.dtype(np.uint8), np.dtype(np.float32), np.dtype(np.float16))


def horizontal_first(height: int, width: int, out_h: int, out_w: int) -> bool:
    """Pillow >= 13's pass order for a (height, width) image resampled to (out_h, out_w): the
    horizontal pass first, unless the height shrinks more than twice as much as the width (in
    pixels), then the vertical pass first. (Pillow < 13 always ran the horizontal pass first.)"""
    return not (height - out_h > 0 and height - out_h > (width - out_w) * 2)


def check(src, box, out, flip, filter, chw, scale, offset) -> tuple[Any, ...]:
    """Validate the arguments; return what a kernel needs:
    (src, edges, out, (out_h, out_w), flip, box_filter, chw, scale, offset)."""
    if not isinstance(src, np.ndarray):
        raise TypeError(f"src must be a numpy array, got {type(src).__name__}")
    if src.dtype != np.uint8:
        raise TypeError(f"src must be uint8, got {src.dtype}")
    if src.ndim != 3:
        raise ValueError(f"src must have shape (H, W, C), got {src.shape}")
    height, width, channels = src.shape
    if channels not in (1, 3):
        raise ValueError(f"src must have 1 or 3 channels, got {channels}")
    if height < 1 or width < 1:
        raise ValueError(f"src is empty: {src.shape}")
    if not src.flags.c_contiguous:
        src = np.ascontiguousarray(src)

    if not isinstance(out, np.ndarray):
        raise TypeError(f"out must be a numpy array, got {type(out).__name__}")
    if out.dtype not in OUT_DTYPES:
        raise TypeError(f"out must be uint8, float32 or float16, got {out.dtype}")
    if out.ndim != 3:
        raise ValueError(f"out must have shape {'(C, oh, ow)' if chw else '(oh, ow, C)'}, got {out.shape}")
    if chw:
        out_c, out_h, out_w = out.shape
    else:
        out_h, out_w, out_c = out.shape
    if out_c != channels:
        layout = "(C, oh, ow)" if chw else "(oh, ow, C)"
        raise ValueError(f"out shape {out.shape} does not match {layout} with C={channels} channels of src")
    if out_h < 1 or out_w < 1:
        raise ValueError(f"out is empty: {out.shape}")
    if not out.flags.writeable:
        raise ValueError("out is read-only")

    if not isinstance(filter, str) or filter not in FILTERS:
        raise ValueError(f"filter must be 'bilinear' or 'box', got {filter!r}")

    edges = _edges(box, height, width)

    if (scale is not None or offset is not None) and out.dtype == np.uint8:
        raise ValueError("scale/offset need a float32 or float16 out")
    scale = _per_channel(scale, 1.0, channels, "scale")
    offset = _per_channel(offset, 0.0, channels, "offset")
    return src, edges, out, (out_h, out_w), bool(flip), FILTERS[filter], bool(chw), scale, offset


def _edges(box, height: int, width: int) -> np.ndarray:
    """The box (top, left, height, width) as float32 edges (top, bottom, left, right), checked."""
    try:
        values = tuple(box)
    except TypeError:
        raise TypeError(f"box must be a sequence (top, left, height, width), got {box!r}") from None
    if len(values) != 4:
        raise ValueError(f"box must be (top, left, height, width), got {box!r}")
    if not all(isinstance(v, (Real, np.integer, np.floating)) and not isinstance(v, bool) for v in values):
        raise TypeError(f"box must hold real numbers, got {box!r}")
    top, left, box_h, box_w = (float(v) for v in values)
    if not all(math.isfinite(v) for v in (top, left, box_h, box_w)):
        raise ValueError(f"box must be finite, got {box!r}")
    if box_h <= 0 or box_w <= 0:
        raise ValueError(f"box height and width must be > 0, got {box!r}")
    # Pillow receives the box as C floats (left, top, right, bottom) and checks them as such
    edges = np.array([top, top + box_h, left, left + box_w], np.float32)
    if edges[0] < 0 or edges[2] < 0:
        raise ValueError(f"box {box!r} starts outside the {height}x{width} image")
    if edges[1] > height or edges[3] > width:
        raise ValueError(f"box {box!r} ends outside the {height}x{width} image")
    if not (edges[1] > edges[0] and edges[3] > edges[2]):
        raise ValueError(f"box {box!r} is too small to resample from")
    return edges


def _per_channel(value, default, channels, name):
    if value is None:
        return np.full(channels, default, np.float32)
    try:
        array = np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be per-channel numbers, got {value!r}") from None
    if array.ndim == 0 or array.shape == (1,):
        return np.full(channels, array.reshape(()), np.float32)
    if array.shape != (channels,):
        raise ValueError(f"{name} must have shape ({channels},), got {array.shape}")
    return np.ascontiguousarray(array)


def run(kernel: Callable[..., None], src, box, out, flip, filter, chw, scale, offset) -> np.ndarray:
    """Check the arguments, run ``kernel`` into a C-contiguous target, return ``out`` (see the module doc)."""
    src, edges, out, size, flip, box_filter, chw, scale, offset = check(src, box, out, flip, filter, chw, scale, offset)
    target = out if out.flags.c_contiguous else np.empty(out.shape, out.dtype)
    kernel(src, edges, target, size, flip, box_filter, chw, scale, offset)
    if target is not out:
        out[...] = target
    return out
