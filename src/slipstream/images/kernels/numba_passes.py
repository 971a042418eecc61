"""The numba resampler of uint8 images: Pillow's coefficients and its two 1-D passes.

Contract: ``resample_u8(src, edges, out_h, out_w, box_filter, flip, chw, dst)`` writes the resized,
mirrored uint8 image into the flat ``dst`` laid out (C, out_h, out_w) with ``chw`` or (out_h, out_w,
C) without, bit for bit as Pillow and ``numpy_path`` compute it: the same double-precision
coefficient windows, 22-bit fixed-point weights, pass order (``constants.horizontal_first``) and
rounding, all from ``constants``. The arguments are checked already (``checks``); ``src`` is a
read-only C-contiguous (H, W, C) array (one compiled signature). Every function is compiled with
``jit.jit`` (no GIL, cached on disk).
"""

from __future__ import annotations

import math

import numpy as np

from .constants import BILINEAR_SUPPORT, BOX_SUPPORT, HALF, ONE, PRECISION_BITS, horizontal_first
from .jit import jit

__all__ = ["resample_u8"]

# Hot loops index with unsigned integers: numba then skips its negative-index wraparound.
_U = np.uint64
_horizontal_first = jit(horizontal_first)  # the pass-order rule, the one the NumPy path uses


@jit
def coeffs(in_size, in0, in1, out_size, box_filter):
    """(bounds (out_size, 2): first tap and tap count, int32 fixed-point coefficients)."""
    # in0, in1 are float32: their difference is taken in float32, like Pillow's
    scale = np.float64(in1 - in0) / out_size
    filterscale = scale
    if filterscale < 1.0:
        filterscale = 1.0
    support = (BOX_SUPPORT if box_filter else BILINEAR_SUPPORT) * filterscale
    ksize = int(math.ceil(support)) * 2 + 1
    bounds = np.empty((out_size, 2), np.int64)
    kk = np.zeros((out_size, ksize), np.int32)
    w = np.empty(ksize, np.float64)
    ss = 1.0 / filterscale
    start = np.float64(in0)
    for xx in range(out_size):
        center = start + (xx + 0.5) * scale
        ww = 0.0
        xmin = int(center - support + 0.5)
        if xmin < 0:
            xmin = 0
        xmax = int(center + support + 0.5)
        if xmax > in_size:
            xmax = in_size
        xmax -= xmin
        if xmax < 0:
            xmax = 0
        for x in range(xmax):
            arg = ((x + xmin) - center + 0.5) * ss
            if box_filter:
                wt = 1.0 if (arg > -0.5 and arg <= 0.5) else 0.0
            else:
                if arg < 0.0:
                    arg = -arg
                wt = 1.0 - arg if arg < 1.0 else 0.0
            w[x] = wt
            ww += wt
        for x in range(xmax):
            k = w[x]
            if ww != 0.0:
                k = k / ww
            if k < 0:
                kk[xx, x] = int(-0.5 + k * ONE)
            else:
                kk[xx, x] = int(0.5 + k * ONE)
        bounds[xx, 0] = xmin
        bounds[xx, 1] = xmax
    return bounds, kk


@jit
def pad_taps(xb, kh, in_size, flip):
    """Give every output the same number of taps (zero weights added) without reading past the
    source: (first tap per output, uint64 coefficients (out_size, taps)). Same sums, and the
    tap loops get a fixed trip count (unrolled below for up to 4 taps). With ``flip`` the rows
    come in reverse order: each output is computed on its own, so this mirrors exactly."""
    out_size = xb.shape[0]
    taps = 1
    for i in range(out_size):
        taps = max(taps, xb[i, 1])
    taps = min(taps, in_size)
    start = np.empty(out_size, np.int64)
    kp = np.zeros((out_size, taps), np.uint64)
    for i in range(out_size):
        j = out_size - 1 - i if flip else i
        s = min(xb[i, 0], in_size - taps)
        start[j] = s
        for t in range(xb[i, 1]):
            kp[j, xb[i, 0] - s + t] = np.uint64(kh[i, t])
    return start, kp


# One horizontal pass over two rows at once. packed[p] holds byte p of the first row in its
# low 32 bits and of the second row in its high 32 bits: the coefficients are non-negative and
# sum to about 1 << 22, so each half's sum (Pillow's int sum) stays below 2**31 and never
# carries into the other. Output (xx, c) of the rows goes to dst[o0 or o1 + xx * sx + c * sc].
_ROW_BITS = 32
_LOW_ROW = (1 << _ROW_BITS) - 1  # the first row's sum
_HALF_PAIR = HALF | (HALF << _ROW_BITS)  # the rounding half, added to both sums
_HIGH_SHIFT = _ROW_BITS + PRECISION_BITS  # the second row's sum, shifted down as Pillow shifts


@jit
def hrow3(packed, dst, o0, o1, start, kp, out_w, taps, sx, sc):
    half = _U(_HALF_PAIR)
    low = _U(_LOW_ROW)
    a0, a1, a2 = _U(o0), _U(o0 + sc), _U(o0 + 2 * sc)
    b0, b1, b2 = _U(o1), _U(o1 + sc), _U(o1 + 2 * sc)
    for xx in range(out_w):
        base = _U(start[xx]) * _U(3)
        s0 = s1 = s2 = half
        for t in range(taps):
            k = kp[xx, _U(t)]
            p = base + _U(3) * _U(t)
            s0 += packed[p] * k
            s1 += packed[p + _U(1)] * k
            s2 += packed[p + _U(2)] * k
        q = _U(xx) * _U(sx)
        dst[a0 + q] = min((s0 & low) >> _U(PRECISION_BITS), _U(255))
        dst[a1 + q] = min((s1 & low) >> _U(PRECISION_BITS), _U(255))
        dst[a2 + q] = min((s2 & low) >> _U(PRECISION_BITS), _U(255))
        dst[b0 + q] = min(s0 >> _U(_HIGH_SHIFT), _U(255))
        dst[b1 + q] = min(s1 >> _U(_HIGH_SHIFT), _U(255))
        dst[b2 + q] = min(s2 >> _U(_HIGH_SHIFT), _U(255))


@jit
def hrow1(packed, dst, o0, o1, start, kp, out_w, taps, sx, sc):
    half = _U(_HALF_PAIR)
    low = _U(_LOW_ROW)
    a0, b0 = _U(o0), _U(o1)
    for xx in range(out_w):
        base = _U(start[xx])
        s0 = half
        for t in range(taps):
            s0 += packed[base + _U(t)] * kp[xx, _U(t)]
        q = _U(xx) * _U(sx)
        dst[a0 + q] = min((s0 & low) >> _U(PRECISION_BITS), _U(255))
        dst[b0 + q] = min(s0 >> _U(_HIGH_SHIFT), _U(255))


@jit
def horizontal(a, row0, nrows, shift, start, kp, channels, dst, dbase, drow, sx, sc):
    """Horizontal pass of rows a[row0 + r] (r < nrows; interleaved pixels whose first is source
    column `shift`): output (r, xx, c) goes to dst[dbase + r * drow + xx * sx + c * sc]."""
    out_w = start.shape[0]
    taps = kp.shape[1]
    if shift != 0:
        start = start - shift
    n = 0  # the columns read: up to the furthest window's end
    for xx in range(out_w):
        n = max(n, (start[xx] + taps) * channels)
    packed = np.empty(n, np.uint64)
    for r in range(0, nrows, 2):
        r1 = min(r + 1, nrows - 1)  # an odd last row is paired with itself
        lo = a[row0 + r]
        hi = a[row0 + r1]
        for p in range(n):
            packed[p] = _U(lo[p]) | (_U(hi[p]) << _U(32))
        o0 = dbase + r * drow
        o1 = dbase + r1 * drow
        # constant channel and tap counts (typed int64, not literals, so that the cache works):
        # once LLVM inlines these calls, their loops unroll
        if channels == 3:
            if taps == 1:
                hrow3(packed, dst, o0, o1, start, kp, out_w, np.int64(1), sx, sc)
            elif taps == 2:
                hrow3(packed, dst, o0, o1, start, kp, out_w, np.int64(2), sx, sc)
            elif taps == 3:
                hrow3(packed, dst, o0, o1, start, kp, out_w, np.int64(3), sx, sc)
            elif taps == 4:
                hrow3(packed, dst, o0, o1, start, kp, out_w, np.int64(4), sx, sc)
            else:
                hrow3(packed, dst, o0, o1, start, kp, out_w, taps, sx, sc)
        else:
            if taps == 1:
                hrow1(packed, dst, o0, o1, start, kp, out_w, np.int64(1), sx, sc)
            elif taps == 2:
                hrow1(packed, dst, o0, o1, start, kp, out_w, np.int64(2), sx, sc)
            elif taps == 3:
                hrow1(packed, dst, o0, o1, start, kp, out_w, np.int64(3), sx, sc)
            elif taps == 4:
                hrow1(packed, dst, o0, o1, start, kp, out_w, np.int64(4), sx, sc)
            else:
                hrow1(packed, dst, o0, o1, start, kp, out_w, taps, sx, sc)


@jit
def vertical(a, col0, n, yb, kv, shift, dst, nseg, gs, rs):
    """Vertical pass over columns col0 .. col0 + n of a (whose first row is source row `shift`),
    in int32 (Pillow's int sums: they fit, the weights being >= 0 and summing to ~1). Output
    row yy is cut into nseg equal segments; segment g goes to dst[g * gs + yy * rs + i]."""
    un = _U(n)
    acc = np.empty(n, np.int32)
    c0 = _U(col0)
    seg = _U(n // nseg)
    for yy in range(yb.shape[0]):
        for i in range(un):
            acc[i] = HALF
        ymin = yb[yy, 0] - shift
        for t in range(yb[yy, 1]):
            k = kv[yy, t]
            row = a[ymin + t]
            for i in range(un):
                acc[i] += np.int32(row[c0 + i]) * k
        for g in range(nseg):
            d = _U(g * gs + yy * rs)
            o = _U(g) * seg
            for i in range(seg):
                v = acc[o + i] >> PRECISION_BITS
                dst[d + i] = 0 if v < 0 else (255 if v > 255 else v)


@jit
def resample_u8(src, edges, out_h, out_w, box_filter, flip, chw, dst):
    """The resized, mirrored uint8 image in Pillow's pass order, written straight into dst: the
    flat (C, out_h, out_w) or (out_h, out_w, C) output."""
    height, width, channels = src.shape
    flat = src.reshape(height, width * channels)
    yb, kv = coeffs(height, edges[0], edges[1], out_h, box_filter)
    xb, kh = coeffs(width, edges[2], edges[3], out_w, box_filter)
    start, kp = pad_taps(xb, kh, width, flip)
    plane = out_h * out_w
    if _horizontal_first(height, width, out_h, out_w):
        first = yb[0, 0]
        last = yb[out_h - 1, 0] + yb[out_h - 1, 1]
        m = channels * out_w
        tmp = np.empty((last - first, m), np.uint8)
        if chw:  # tmp rows planar, [c * out_w + xx]: each channel's segment goes to its plane
            horizontal(flat, first, last - first, 0, start, kp, channels, tmp.reshape(-1), 0, m, 1, out_w)
            vertical(tmp, 0, m, yb, kv, first, dst, channels, plane, out_w)
        else:  # tmp rows interleaved like the output rows
            horizontal(flat, first, last - first, 0, start, kp, channels, tmp.reshape(-1), 0, m, channels, 1)
            vertical(tmp, 0, m, yb, kv, first, dst, 1, 0, m)
    else:  # Pillow >= 13 runs the vertical pass first when the height shrinks much more
        first = start.min()
        last = start.max() + kp.shape[1]
        m = (last - first) * channels
        tmp = np.empty((out_h, m), np.uint8)
        vertical(flat, first * channels, m, yb, kv, 0, tmp.reshape(-1), 1, 0, m)
        if chw:
            horizontal(tmp, 0, out_h, first, start, kp, channels, dst, 0, out_w, 1, plane)
        else:
            horizontal(tmp, 0, out_h, first, start, kp, channels, dst, 0, out_w * channels, channels, 1)
