"""The numba implementation of ``resample_into``: whether numba is active, the uint8 passes, the
float outputs, and the background compiler.

Availability: ``NUMBA`` is True when numba imports and ``SLIPSTREAM_NO_NUMBA`` was not set when this
module was first imported; ``status()`` says which (``"active"``, ``"disabled by
SLIPSTREAM_NO_NUMBA"``, ``"missing"`` or ``"failed to import (...)"``), ``version()`` numba's
version. ``jit`` is the decorator every kernel here uses (``nogil=True``, ``cache=True``, no
fastmath: bit-exact integer and float32 arithmetic, run without the GIL, compiled once per machine
into numba's on-disk cache). Without numba ``jit`` leaves the functions as plain Python, defined
but never called: ``resample`` raises ``RuntimeError`` then. ``warn_once(key, message)`` issues a
``RuntimeWarning`` the first time it is called with ``key`` in this process and never again
(whatever the warning filters say): numba failing to compile, and numba missing when an image first
runs on the NumPy fallback (``fallback_used``).

Passes: ``resample_u8(src, edges, out_h, out_w, box_filter, flip, chw, dst)`` writes the resized,
mirrored uint8 image into the flat ``dst`` laid out (C, out_h, out_w) with ``chw`` or (out_h, out_w,
C) without, bit for bit as Pillow and ``numpy_path`` compute it: the same double-precision
coefficient windows, 22-bit fixed-point weights, pass order (``contract.horizontal_first``) and
rounding, all from ``contract``. Its arguments are checked already; ``src`` is a read-only
C-contiguous (H, W, C) array (one compiled signature).

``resample(src, box, out, *, flip, filter, chw, scale, offset)`` takes and checks the arguments of
``resample_into`` (``contract.run``) and writes the same bits as ``numpy_path``: uint8 outputs
straight from ``resample_u8``; float32/float16 outputs through a table of the 256 normalized values
per channel (``float32(v) * scale[c] + offset[c]`` in float32, then rounded to float16 half to even,
as NumPy's ``astype`` rounds, by ``half_bits``: numba has no float16 on the CPU). Each output dtype
so compiles a small writer, not a whole kernel.

Compiler: ``ready[dtype]`` (an ``Event`` per output dtype of ``contract.OUT_DTYPES``) is set once
the kernels for that dtype are compiled or loaded from numba's disk cache, never before;
``compile_in_background()`` starts the one compiling thread on its first call (later calls return
it), and ``warm_up(dtype)`` waits for it. The thread compiles one output dtype after another (uint8
first: what training batches use) for every channel count, layout and filter; calls run on the
bit-identical NumPy path until their dtype is ready, so no batch waits for the compiler (a cold
compile takes several seconds per dtype; a cached load ~0.4 s in all). When numba fails to compile
here it warns once and no event is set: everything stays on the NumPy path.
"""

from __future__ import annotations

import math
import threading
import time
import warnings

import numpy as np

from ...core.optional import probe
from .contract import BILINEAR_SUPPORT, BOX_SUPPORT, FILTERS, HALF, ONE, OUT_DTYPES, PRECISION_BITS, horizontal_first, run

__all__ = [
    "NUMBA",
    "compile_in_background",
    "fallback_used",
    "half_bits",
    "jit",
    "ready",
    "resample",
    "resample_u8",
    "status",
    "version",
    "warm_up",
    "warn_once",
    "write_lut",
]

# Whether numba is active, the one decorator, the one-time warnings.

# not installed, or broken against this NumPy (which raises more than ImportError): the NumPy path
_numba, _status = probe("numba", disable_env="SLIPSTREAM_NO_NUMBA", errors=(Exception,))
NUMBA = _numba is not None

if _numba is not None:
    jit = _numba.njit(nogil=True, cache=True)
else:

    def jit(function):
        return function


def status() -> str:
    """Why the numba kernels are or are not active: "active", "disabled by SLIPSTREAM_NO_NUMBA",
    "missing", or "failed to import (<the error>)"."""
    return _status


def version() -> str | None:
    """numba's version when it is active, else None."""
    return getattr(_numba, "__version__", None)


_warned: set[str] = set()
_warned_lock = threading.Lock()


def warn_once(key: str, message: str, stacklevel: int = 2) -> None:
    """A ``RuntimeWarning`` with ``message``, the first time ``key`` is given in this process only."""
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    warnings.warn(message, RuntimeWarning, stacklevel=stacklevel + 1)


# the one-time hint, unless numba is active or the user switched it off on purpose
_hint_pending = _status not in ("active", "disabled by SLIPSTREAM_NO_NUMBA")


def fallback_used() -> None:
    """Called when an image is resampled on the NumPy fallback for want of numba (not while numba
    compiles): warns once when numba is missing or failed to import."""
    global _hint_pending
    if _hint_pending:
        _hint_pending = False
        warn_once(
            "numba-missing",
            f"slipstream: numba {'is not installed' if _status == 'missing' else _status}, so image pipelines run on "
            "the NumPy fallback, about 4x slower: "
            "pip install 'slipstream[files]' (or pip install numba); set SLIPSTREAM_NO_NUMBA=1 to silence this",
            stacklevel=3,
        )


# The uint8 resampler: Pillow's coefficients and its two 1-D passes.

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


# Float outputs through a per-channel table, and the checked call.

@jit
def write_lut(res, out, lut, chw):
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


@jit
def lut_float32(channels, scale, offset):
    """lut[c, v] = float32(v) * scale[c] + offset[c], in float32."""
    lut = np.empty((channels, 256), np.float32)
    for c in range(channels):
        for v in range(256):
            lut[c, v] = np.float32(v) * scale[c] + offset[c]
    return lut


@jit
def half_bits(f):
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


@jit
def lut_float16(channels, scale, offset):
    """The float32 table rounded to float16, as uint16 bits (numba has no float16 on the CPU)."""
    lut32 = lut_float32(channels, scale, offset)
    bits = lut32.view(np.uint32)
    lut = np.empty(lut32.shape, np.uint16)
    for c in range(channels):
        for v in range(256):
            lut[c, v] = half_bits(np.int64(bits[c, v]))
    return lut


def kernel(src, edges, out, size, flip, box_filter, chw, scale, offset) -> None:
    """The checked call (see ``contract.run``): resample, mirror, normalize and lay out into ``out``."""
    # compiled in steps, so that each output dtype adds a small writer, not a whole kernel
    if src.flags.writeable:  # one compiled signature: the kernel only ever sees read-only sources
        src = src.view()
        src.flags.writeable = False
    out_h, out_w = size
    if out.dtype == np.uint8:  # the passes write straight into out
        resample_u8(src, edges, out_h, out_w, box_filter, flip, chw, out.reshape(-1))
        return
    channels = src.shape[2]
    res = np.empty((channels, out_h, out_w), np.uint8)
    resample_u8(src, edges, out_h, out_w, box_filter, flip, True, res.reshape(-1))
    if out.dtype == np.float32:
        write_lut(res, out, lut_float32(channels, scale, offset), chw)
    else:
        write_lut(res, out.view(np.uint16), lut_float16(channels, scale, offset), chw)


def resample(src, box, out, *, flip=False, filter="bilinear", chw=False, scale=None, offset=None) -> np.ndarray:
    """``resample_into`` with the numba kernels (RuntimeError when numba is not active)."""
    if not NUMBA:
        raise RuntimeError("the numba kernels are not available (numba missing or SLIPSTREAM_NO_NUMBA set)")
    return run(kernel, src, box, out, flip, filter, chw, scale, offset)


# The background compiler.

ready = {dtype: threading.Event() for dtype in OUT_DTYPES}
_lock = threading.Lock()
_compiler: threading.Thread | None = None


def _compile_all() -> None:
    try:
        for dtype in OUT_DTYPES:
            for channels in (1, 3):
                src = np.zeros((4, 4, channels), np.uint8)
                norm = {} if dtype == np.uint8 else {"scale": np.ones(channels, np.float32), "offset": np.zeros(channels, np.float32)}
                for chw in (False, True):
                    for filter in FILTERS:
                        out = np.empty((3, 2, channels) if not chw else (channels, 3, 2), dtype)
                        resample(src, (0.5, 0, 3, 4), out, chw=chw, filter=filter, **norm)
            ready[dtype].set()
    except Exception as exc:  # noqa: BLE001 - numba cannot compile here: stay on the NumPy path
        warn_once("numba-compile", f"slipstream: numba kernels failed to compile, using the NumPy fallback: {exc}")


def compile_in_background() -> threading.Thread:
    """The compiling thread, started on the first call."""
    global _compiler
    with _lock:
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
    compiler = compile_in_background()
    if dtype is None:
        compiler.join()
    else:
        event = ready[np.dtype(dtype)]
        while not event.wait(0.05) and compiler.is_alive():
            pass
    return time.perf_counter() - start
