"""The NumPy implementation of ``resample_into``: vectorized over pixels, Python loops only over filter taps.

Contract: ``resample(src, box, out, *, flip, filter, chw, scale, offset)`` takes and checks the
arguments of ``resample_into`` and writes the same bits as the C path (``c_path``), with Pillow's
constants and pass order from ``contract``. Always available (NumPy alone): the reference, and what
runs when the compiled extension is not built or ``SLIPSTREAM_NO_ROIJPEG`` is set.
"""

from __future__ import annotations

import math

import numpy as np

from .contract import BILINEAR_SUPPORT, BOX_SUPPORT, HALF, ONE, PRECISION_BITS, horizontal_first, run

__all__ = ["resample"]


def coeffs(in_size: int, in0, in1, out_size: int, box_filter: bool):
    """Pillow's precompute_coeffs + normalize_coeffs_8bpc: (xmin, count, int32 coefficients)."""
    scale = float(np.float32(in1) - np.float32(in0)) / out_size
    filterscale = 1.0 if scale < 1.0 else scale
    support = (BOX_SUPPORT if box_filter else BILINEAR_SUPPORT) * filterscale
    ksize = int(math.ceil(support)) * 2 + 1
    center = float(in0) + (np.arange(out_size) + 0.5) * scale
    ss = 1.0 / filterscale
    xmin = np.maximum((center - support + 0.5).astype(np.int64), 0)
    count = np.maximum(np.minimum((center + support + 0.5).astype(np.int64), in_size) - xmin, 0)
    taps = np.arange(ksize)
    x = ((xmin[:, None] + taps).astype(np.float64) - center[:, None] + 0.5) * ss
    if box_filter:
        w = ((x > -0.5) & (x <= 0.5)).astype(np.float64)
    else:
        a = np.abs(x)
        w = np.where(a < 1.0, 1.0 - a, 0.0)
    w[taps[None, :] >= count[:, None]] = 0.0
    ww = np.cumsum(w, axis=1)[:, -1:]  # accumulate is sequential, in C's order
    k = np.divide(w, ww, out=w.copy(), where=ww != 0.0)
    k *= ONE
    fixed = np.where(k < 0, -0.5 + k, 0.5 + k).astype(np.int32)  # truncation toward zero, as (int)
    return xmin, count, fixed


def _clip8(acc):
    return np.clip(acc >> PRECISION_BITS, 0, 255).astype(np.uint8)


def horizontal(rows, xmin, count, kk):
    """rows (R, W, C) uint8 -> (R, len(xmin), C) uint8."""
    acc = np.full((rows.shape[0], len(xmin), rows.shape[2]), HALF, np.int32)
    last = rows.shape[1] - 1
    for t in range(int(count.max(initial=0))):
        acc += rows[:, np.minimum(xmin + t, last), :] * kk[:, t][None, :, None]
    return _clip8(acc)


def vertical(cols, ymin, count, kk):
    """cols (H, X, C) uint8 -> (len(ymin), X, C) uint8."""
    acc = np.full((len(ymin), cols.shape[1], cols.shape[2]), HALF, np.int32)
    last = cols.shape[0] - 1
    for t in range(int(count.max(initial=0))):
        acc += cols[np.minimum(ymin + t, last)] * kk[:, t][:, None, None]
    return _clip8(acc)


def kernel(src, edges, out, size, flip, box_filter, chw, scale, offset) -> None:
    """The checked call (see ``contract.run``): resample, mirror, normalize and lay out into ``out``."""
    height, width, channels = src.shape
    out_h, out_w = size
    ymin, ycount, kv = coeffs(height, edges[0], edges[1], out_h, box_filter)
    xmin, xcount, kh = coeffs(width, edges[2], edges[3], out_w, box_filter)
    if horizontal_first(height, width, out_h, out_w):
        first, last = int(ymin[0]), int(ymin[-1] + ycount[-1])
        tmp = horizontal(src[first:last], xmin, xcount, kh)
        result = vertical(tmp, ymin - first, ycount, kv)
    else:
        first, last = int(xmin[0]), int(xmin[-1] + xcount[-1])
        tmp = vertical(src[:, first:last], ymin, ycount, kv)
        result = horizontal(tmp, xmin - first, xcount, kh)
    if flip:
        result = result[:, ::-1]
    if out.dtype != np.uint8:  # scale 1 and offset 0 (the defaults) leave the values exact
        result = result.astype(np.float32) * scale + offset
    if chw:
        result = result.transpose(2, 0, 1)
    with np.errstate(over="ignore", invalid="ignore"):  # float16 overflows to inf, silently, as in C
        out[...] = result


def resample(src, box, out, *, flip=False, filter="bilinear", chw=False, scale=None, offset=None) -> np.ndarray:
    """``resample_into`` with the NumPy implementation, whether or not the C one is active."""
    return run(kernel, src, box, out, flip, filter, chw, scale, offset)
