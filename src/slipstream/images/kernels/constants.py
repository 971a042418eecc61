"""Pillow's resampling constants and rules, named once for both implementations.

Contract: the values are Pillow's (``libImaging/Resample.c``, 8 bits per channel) and the NumPy and
numba paths read them from here (numba freezes them into the compiled kernels), so the two paths
cannot drift apart. ``horizontal_first`` is the one pass-order rule; nothing here imports numba.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "BILINEAR_SUPPORT",
    "BOX_SUPPORT",
    "FILTERS",
    "HALF",
    "ONE",
    "OUT_DTYPES",
    "PRECISION_BITS",
    "horizontal_first",
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
