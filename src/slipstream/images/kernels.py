"""Pixel kernels: one fused pass of crop + resize + flip + layout (+ normalize) into a batch slot.

``resample_into(src, box, out)`` reproduces Pillow's antialiased separable resampling
(``Image.resize(size, BILINEAR | BOX, box=...)``, ``libImaging/Resample.c``) bit for bit on uint8
images: the box edges rounded to float32 (as Pillow's C API receives them), the same per-output
coefficient windows computed in double precision, the same 22-bit fixed-point coefficients, and two
1-D passes, each rounded and clipped to uint8. The pass order is Pillow 13's: horizontal first,
unless the height shrinks more than twice as much as the width (in pixels, full image against
output), then vertical first. Pillow < 13 always ran the horizontal pass first, so in that second
case older Pillow versions can differ by one grey level. The uint8 result is then mirrored, laid
out (HWC or CHW), normalized (``float32(v) * scale[c] + offset[c]``, in float32) and stored in
``out``'s dtype while it is written.

Two implementations give bit-identical results: numba kernels (``nogil=True, cache=True``, no
fastmath), and a vectorized NumPy fallback used when numba is missing or ``SLIPSTREAM_NO_NUMBA=1``
is set when this module is imported. ``NUMBA`` says which is available. The first call compiles the
numba kernels in a background thread (or loads them from numba's on-disk cache) and runs on the
NumPy path until they are ready, so no batch waits for the compiler; ``warm_up()`` waits for them.
"""

from __future__ import annotations

import math
import os
import threading
import time
import warnings
from numbers import Real

import numpy as np

__all__ = ["NUMBA", "resample_into", "warm_up"]

_PRECISION_BITS = 22  # Pillow: 32 - 8 - 2
_HALF = 1 << (_PRECISION_BITS - 1)
_ONE = float(1 << _PRECISION_BITS)
_FILTERS = {"bilinear": False, "box": True}  # name -> is the box filter
_OUT_DTYPES = (np.dtype(np.uint8), np.dtype(np.float32), np.dtype(np.float16))


def _numba_disabled() -> bool:
    return os.environ.get("SLIPSTREAM_NO_NUMBA", "").strip().lower() not in ("", "0", "false", "no", "off")


if _numba_disabled():
    NUMBA = False
else:
    try:
        import numba as _numba
    except Exception:  # not installed, or broken against this NumPy: fall back to NumPy
        NUMBA = False
    else:
        NUMBA = True


# ----------------------------------------------------------------------------------------------
# argument checking (shared by both implementations)


def _check(src, box, out, flip, filter, chw, scale, offset):
    """Validate the arguments; return what both kernels need."""
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
    if out.dtype not in _OUT_DTYPES:
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

    if not isinstance(filter, str) or filter not in _FILTERS:
        raise ValueError(f"filter must be 'bilinear' or 'box', got {filter!r}")

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

    if (scale is not None or offset is not None) and out.dtype == np.uint8:
        raise ValueError("scale/offset need a float32 or float16 out")
    scale = _per_channel(scale, 1.0, channels, "scale")
    offset = _per_channel(offset, 0.0, channels, "offset")
    return src, edges, out, (out_h, out_w), bool(flip), _FILTERS[filter], bool(chw), scale, offset


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


def _run(kernel, src, box, out, flip, filter, chw, scale, offset):
    src, edges, out, size, flip, box_filter, chw, scale, offset = _check(src, box, out, flip, filter, chw, scale, offset)
    target = out if out.flags.c_contiguous else np.empty(out.shape, out.dtype)
    kernel(src, edges, target, size, flip, box_filter, chw, scale, offset)
    if target is not out:
        out[...] = target
    return out


# ----------------------------------------------------------------------------------------------
# NumPy implementation (vectorized over pixels; Python loops only over filter taps)


def _horizontal_first(height: int, width: int, out_h: int, out_w: int) -> bool:
    """Pillow >= 13's pass order: vertical first when the height shrinks more than twice the width."""
    return not (height - out_h > 0 and height - out_h > (width - out_w) * 2)


def _np_coeffs(in_size: int, in0, in1, out_size: int, box_filter: bool):
    """Pillow's precompute_coeffs + normalize_coeffs_8bpc: (xmin, count, int32 coefficients)."""
    scale = float(np.float32(in1) - np.float32(in0)) / out_size
    filterscale = 1.0 if scale < 1.0 else scale
    support = (0.5 if box_filter else 1.0) * filterscale
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
    k *= _ONE
    fixed = np.where(k < 0, -0.5 + k, 0.5 + k).astype(np.int32)  # truncation toward zero, as (int)
    return xmin, count, fixed


def _np_clip8(acc):
    return np.clip(acc >> _PRECISION_BITS, 0, 255).astype(np.uint8)


def _np_horizontal(rows, xmin, count, kk):
    """rows (R, W, C) uint8 -> (R, len(xmin), C) uint8."""
    acc = np.full((rows.shape[0], len(xmin), rows.shape[2]), _HALF, np.int32)
    last = rows.shape[1] - 1
    for t in range(int(count.max(initial=0))):
        acc += rows[:, np.minimum(xmin + t, last), :] * kk[:, t][None, :, None]
    return _np_clip8(acc)


def _np_vertical(cols, ymin, count, kk):
    """cols (H, X, C) uint8 -> (len(ymin), X, C) uint8."""
    acc = np.full((len(ymin), cols.shape[1], cols.shape[2]), _HALF, np.int32)
    last = cols.shape[0] - 1
    for t in range(int(count.max(initial=0))):
        acc += cols[np.minimum(ymin + t, last)] * kk[:, t][:, None, None]
    return _np_clip8(acc)


def _np_resample(src, edges, out, size, flip, box_filter, chw, scale, offset):
    height, width, channels = src.shape
    out_h, out_w = size
    ymin, ycount, kv = _np_coeffs(height, edges[0], edges[1], out_h, box_filter)
    xmin, xcount, kh = _np_coeffs(width, edges[2], edges[3], out_w, box_filter)
    if _horizontal_first(height, width, out_h, out_w):
        first, last = int(ymin[0]), int(ymin[-1] + ycount[-1])
        tmp = _np_horizontal(src[first:last], xmin, xcount, kh)
        result = _np_vertical(tmp, ymin - first, ycount, kv)
    else:
        first, last = int(xmin[0]), int(xmin[-1] + xcount[-1])
        tmp = _np_vertical(src[:, first:last], ymin, ycount, kv)
        result = _np_horizontal(tmp, xmin - first, xcount, kh)
    if flip:
        result = result[:, ::-1]
    if out.dtype != np.uint8:  # scale 1 and offset 0 (the defaults) leave the values exact
        result = result.astype(np.float32) * scale + offset
    if chw:
        result = result.transpose(2, 0, 1)
    with np.errstate(over="ignore", invalid="ignore"):  # float16 overflows to inf, silently, as in numba
        out[...] = result


def _resample_numpy(src, box, out, *, flip=False, filter="bilinear", chw=False, scale=None, offset=None):
    """``resample_into`` with the NumPy implementation, whatever ``NUMBA`` says."""
    return _run(_np_resample, src, box, out, flip, filter, chw, scale, offset)


# ----------------------------------------------------------------------------------------------
# numba implementation

if NUMBA:
    _jit = _numba.njit(nogil=True, cache=True)
    # Hot loops index with unsigned integers: numba then skips its negative-index wraparound.
    _U = np.uint64

    @_jit
    def _nb_coeffs(in_size, in0, in1, out_size, box_filter):
        """(bounds (out_size, 2): first tap and tap count, int32 fixed-point coefficients)."""
        # in0, in1 are float32: their difference is taken in float32, like Pillow's
        scale = np.float64(in1 - in0) / out_size
        filterscale = scale
        if filterscale < 1.0:
            filterscale = 1.0
        support = (0.5 if box_filter else 1.0) * filterscale
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
                    kk[xx, x] = int(-0.5 + k * 4194304.0)
                else:
                    kk[xx, x] = int(0.5 + k * 4194304.0)
            bounds[xx, 0] = xmin
            bounds[xx, 1] = xmax
        return bounds, kk

    @_jit
    def _nb_pad_taps(xb, kh, in_size, flip):
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

    @_jit
    def _nb_hrow3(packed, dst, o0, o1, start, kp, out_w, taps, sx, sc):
        half = _U((1 << 21) | (1 << 53))
        low = _U(0xFFFFFFFF)
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
            dst[a0 + q] = min((s0 & low) >> _U(22), _U(255))
            dst[a1 + q] = min((s1 & low) >> _U(22), _U(255))
            dst[a2 + q] = min((s2 & low) >> _U(22), _U(255))
            dst[b0 + q] = min(s0 >> _U(54), _U(255))
            dst[b1 + q] = min(s1 >> _U(54), _U(255))
            dst[b2 + q] = min(s2 >> _U(54), _U(255))

    @_jit
    def _nb_hrow1(packed, dst, o0, o1, start, kp, out_w, taps, sx, sc):
        half = _U((1 << 21) | (1 << 53))
        low = _U(0xFFFFFFFF)
        a0, b0 = _U(o0), _U(o1)
        for xx in range(out_w):
            base = _U(start[xx])
            s0 = half
            for t in range(taps):
                s0 += packed[base + _U(t)] * kp[xx, _U(t)]
            q = _U(xx) * _U(sx)
            dst[a0 + q] = min((s0 & low) >> _U(22), _U(255))
            dst[b0 + q] = min(s0 >> _U(54), _U(255))

    @_jit
    def _nb_horizontal(a, row0, nrows, shift, start, kp, channels, dst, dbase, drow, sx, sc):
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
                    _nb_hrow3(packed, dst, o0, o1, start, kp, out_w, np.int64(1), sx, sc)
                elif taps == 2:
                    _nb_hrow3(packed, dst, o0, o1, start, kp, out_w, np.int64(2), sx, sc)
                elif taps == 3:
                    _nb_hrow3(packed, dst, o0, o1, start, kp, out_w, np.int64(3), sx, sc)
                elif taps == 4:
                    _nb_hrow3(packed, dst, o0, o1, start, kp, out_w, np.int64(4), sx, sc)
                else:
                    _nb_hrow3(packed, dst, o0, o1, start, kp, out_w, taps, sx, sc)
            else:
                if taps == 1:
                    _nb_hrow1(packed, dst, o0, o1, start, kp, out_w, np.int64(1), sx, sc)
                elif taps == 2:
                    _nb_hrow1(packed, dst, o0, o1, start, kp, out_w, np.int64(2), sx, sc)
                elif taps == 3:
                    _nb_hrow1(packed, dst, o0, o1, start, kp, out_w, np.int64(3), sx, sc)
                elif taps == 4:
                    _nb_hrow1(packed, dst, o0, o1, start, kp, out_w, np.int64(4), sx, sc)
                else:
                    _nb_hrow1(packed, dst, o0, o1, start, kp, out_w, taps, sx, sc)

    @_jit
    def _nb_vertical(a, col0, n, yb, kv, shift, dst, nseg, gs, rs):
        """Vertical pass over columns col0 .. col0 + n of a (whose first row is source row `shift`),
        in int32 (Pillow's int sums: they fit, the weights being >= 0 and summing to ~1). Output
        row yy is cut into nseg equal segments; segment g goes to dst[g * gs + yy * rs + i]."""
        un = _U(n)
        acc = np.empty(n, np.int32)
        c0 = _U(col0)
        seg = _U(n // nseg)
        for yy in range(yb.shape[0]):
            for i in range(un):
                acc[i] = 1 << 21
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
                    v = acc[o + i] >> 22
                    dst[d + i] = 0 if v < 0 else (255 if v > 255 else v)

    @_jit
    def _nb_resample_u8(src, edges, out_h, out_w, box_filter, flip, chw, dst):
        """The resized, mirrored uint8 image in Pillow's pass order, written straight into dst: the
        flat (C, out_h, out_w) or (out_h, out_w, C) output."""
        height, width, channels = src.shape
        flat = src.reshape(height, width * channels)
        yb, kv = _nb_coeffs(height, edges[0], edges[1], out_h, box_filter)
        xb, kh = _nb_coeffs(width, edges[2], edges[3], out_w, box_filter)
        start, kp = _nb_pad_taps(xb, kh, width, flip)
        plane = out_h * out_w
        if not (height - out_h > 0 and height - out_h > (width - out_w) * 2):
            first = yb[0, 0]
            last = yb[out_h - 1, 0] + yb[out_h - 1, 1]
            m = channels * out_w
            tmp = np.empty((last - first, m), np.uint8)
            if chw:  # tmp rows planar, [c * out_w + xx]: each channel's segment goes to its plane
                _nb_horizontal(flat, first, last - first, 0, start, kp, channels, tmp.reshape(-1), 0, m, 1, out_w)
                _nb_vertical(tmp, 0, m, yb, kv, first, dst, channels, plane, out_w)
            else:  # tmp rows interleaved like the output rows
                _nb_horizontal(flat, first, last - first, 0, start, kp, channels, tmp.reshape(-1), 0, m, channels, 1)
                _nb_vertical(tmp, 0, m, yb, kv, first, dst, 1, 0, m)
        else:  # Pillow >= 13 runs the vertical pass first when the height shrinks much more
            first = start.min()
            last = start.max() + kp.shape[1]
            m = (last - first) * channels
            tmp = np.empty((out_h, m), np.uint8)
            _nb_vertical(flat, first * channels, m, yb, kv, 0, tmp.reshape(-1), 1, 0, m)
            if chw:
                _nb_horizontal(tmp, 0, out_h, first, start, kp, channels, dst, 0, out_w, 1, plane)
            else:
                _nb_horizontal(tmp, 0, out_h, first, start, kp, channels, dst, 0, out_w * channels, channels, 1)

    @_jit
    def _nb_write_lut(res, out, lut, chw):
        """out = lut[c, v] for each v of the planar uint8 result res (C, oh, ow), laid out as out:
        lut[c, v] is the normalized value of v for channel c (float32, or float16 bits)."""
        channels, out_h, out_w = res.shape
        n = _U(out_w)
        for yy in range(out_h):
            if chw:
                for c in range(channels):
                    src = res[c, yy]
                    dst = out[c, yy]
                    table = lut[c]
                    for xx in range(n):
                        dst[xx] = table[src[xx]]
            elif channels == 3:
                dst = out[yy].reshape(out_w * 3)
                r0 = res[0, yy]
                r1 = res[1, yy]
                r2 = res[2, yy]
                t0 = lut[0]
                t1 = lut[1]
                t2 = lut[2]
                for xx in range(n):
                    p = xx * _U(3)
                    dst[p] = t0[r0[xx]]
                    dst[p + _U(1)] = t1[r1[xx]]
                    dst[p + _U(2)] = t2[r2[xx]]
            else:
                dst = out[yy].reshape(out_w * channels)
                nc = _U(channels)
                for c in range(channels):
                    src = res[c, yy]
                    cc = _U(c)
                    table = lut[c]
                    for xx in range(n):
                        dst[xx * nc + cc] = table[src[xx]]

    @_jit
    def _nb_lut_float32(channels, scale, offset):
        """lut[c, v] = float32(v) * scale[c] + offset[c], in float32."""
        lut = np.empty((channels, 256), np.float32)
        for c in range(channels):
            for v in range(256):
                lut[c, v] = np.float32(v) * scale[c] + offset[c]
        return lut

    @_jit
    def _nb_half_bits(f):
        """float32 bits (as int64) -> float16 bits, as NumPy's astype (round half to even)."""
        sign = (f >> 16) & 0x8000
        a = f & 0x7FFFFFFF
        if a >= 0x7F800000:  # inf or nan (nan keeps the top of its payload, as in NumPy)
            if a == 0x7F800000:
                return sign | 0x7C00
            h = 0x7C00 + ((a & 0x7FFFFF) >> 13)
            if h == 0x7C00:
                h += 1
            return sign | h
        if a >= 0x47800000:  # >= 65536: overflow
            return sign | 0x7C00
        if a < 0x38800000:  # below the smallest normal half: subnormal or zero
            if a < 0x33000000:
                return sign
            e = a >> 23
            m = (a & 0x7FFFFF) | 0x800000
            shift = 126 - e
            q = m >> shift
            r = m & ((1 << shift) - 1)
            half = 1 << (shift - 1)
            if r > half or (r == half and (q & 1) == 1):
                q += 1
            return sign | q
        q = (((a >> 23) - 112) << 10) | ((a & 0x7FFFFF) >> 13)
        r = a & 0x1FFF
        if r > 0x1000 or (r == 0x1000 and (q & 1) == 1):
            q += 1
        return sign | q

    @_jit
    def _nb_lut_float16(channels, scale, offset):
        """The float32 table rounded to float16, as uint16 bits (numba has no float16 on the CPU)."""
        lut32 = _nb_lut_float32(channels, scale, offset)
        bits = lut32.view(np.uint32)
        lut = np.empty(lut32.shape, np.uint16)
        for c in range(channels):
            for v in range(256):
                lut[c, v] = _nb_half_bits(np.int64(bits[c, v]))
        return lut

    def _nb_resample(src, edges, out, size, flip, box_filter, chw, scale, offset):
        # compiled in steps, so that each output dtype adds a small writer, not a whole kernel
        if src.flags.writeable:  # one compiled signature: the kernel only ever sees read-only sources
            src = src.view()
            src.flags.writeable = False
        out_h, out_w = size
        if out.dtype == np.uint8:  # the passes write straight into out
            _nb_resample_u8(src, edges, out_h, out_w, box_filter, flip, chw, out.reshape(-1))
            return
        channels = src.shape[2]
        res = np.empty((channels, out_h, out_w), np.uint8)
        _nb_resample_u8(src, edges, out_h, out_w, box_filter, flip, True, res.reshape(-1))
        if out.dtype == np.float32:
            _nb_write_lut(res, out, _nb_lut_float32(channels, scale, offset), chw)
        else:
            _nb_write_lut(res, out.view(np.uint16), _nb_lut_float16(channels, scale, offset), chw)


def _resample_numba(src, box, out, *, flip=False, filter="bilinear", chw=False, scale=None, offset=None):
    """``resample_into`` with the numba kernels (RuntimeError when numba is not active)."""
    if not NUMBA:
        raise RuntimeError("the numba kernels are not available (numba missing or SLIPSTREAM_NO_NUMBA set)")
    return _run(_nb_resample, src, box, out, flip, filter, chw, scale, offset)


# ----------------------------------------------------------------------------------------------
# public API


def resample_into(src, box, out, *, flip=False, filter="bilinear", chw=False, scale=None, offset=None) -> np.ndarray:
    """Crop ``box`` from ``src``, resize it to ``out``'s size, optionally mirror and normalize; write into ``out``.

    - ``src``: uint8 (H, W, C) with C in {1, 3} (copied first if not C-contiguous).
    - ``box``: (top, left, height, width) in source pixels, fractions allowed, inside the image
      (checked after rounding the edges to float32, as Pillow does).
    - ``out``: (oh, ow, C), or (C, oh, ow) with ``chw=True``; uint8, float32 or float16.
    - ``filter``: "bilinear" or "box" (Pillow's antialiasing BILINEAR / BOX).
    - ``flip``: mirror the result left-right.
    - ``scale``/``offset``: per-channel (or scalar) float32, float outputs only:
      ``out = float32(resized_uint8) * scale[c] + offset[c]`` in float32, then cast to ``out``'s dtype.

    The uint8 result equals ``Image.fromarray(src).resize((ow, oh), BILINEAR|BOX,
    box=(left, top, left + width, top + height))`` exactly. Returns ``out``.
    """
    if NUMBA:
        if _ready[out.dtype].is_set():
            return _resample_numba(src, box, out, flip=flip, filter=filter, chw=chw, scale=scale, offset=offset)
        _compile_in_background()
    return _resample_numpy(src, box, out, flip=flip, filter=filter, chw=chw, scale=scale, offset=offset)


# The first call starts compiling (or loading from numba's disk cache) the kernels in a background
# thread, one output dtype after another (uint8 first: what training batches use), and calls run on
# the bit-identical NumPy path until their dtype is ready: no batch waits for the compiler (a cold
# compile takes several seconds per dtype; a cached load ~0.4 s in all).
_ready = {dtype: threading.Event() for dtype in _OUT_DTYPES}
_compile_lock = threading.Lock()
_compiler: threading.Thread | None = None


def _compile_all() -> None:
    try:
        for dtype in _OUT_DTYPES:
            for channels in (1, 3):
                src = np.zeros((4, 4, channels), np.uint8)
                norm = {} if dtype == np.uint8 else {"scale": np.ones(channels, np.float32), "offset": np.zeros(channels, np.float32)}
                for chw in (False, True):
                    for filter in _FILTERS:
                        out = np.empty((3, 2, channels) if not chw else (channels, 3, 2), dtype)
                        _resample_numba(src, (0.5, 0, 3, 4), out, chw=chw, filter=filter, **norm)
            _ready[dtype].set()
    except Exception as exc:  # noqa: BLE001 - numba cannot compile here: stay on the NumPy path
        warnings.warn(f"slipstream: numba kernels failed to compile, using the NumPy fallback: {exc}", RuntimeWarning, stacklevel=2)


def _compile_in_background() -> threading.Thread:
    global _compiler
    with _compile_lock:
        if _compiler is None:
            _compiler = threading.Thread(target=_compile_all, name="slipstream-numba-compile", daemon=True)
            _compiler.start()
        return _compiler


def warm_up(dtype: str | None = None) -> float:
    """Compile the numba kernels (or load them from numba's on-disk cache) now and wait for them:
    for one output ``dtype`` ("uint8", "float32" or "float16") or, by default, all. Returns the
    seconds spent (0.0 when NumPy is active). Optional: without it the first batches run on the
    NumPy path while the kernels compile in the background."""
    if not NUMBA:
        return 0.0
    start = time.perf_counter()
    compiler = _compile_in_background()
    if dtype is None:
        compiler.join()
    else:
        ready = _ready[np.dtype(dtype)]
        while not ready.wait(0.05) and compiler.is_alive():
            pass
    return time.perf_counter() - start
