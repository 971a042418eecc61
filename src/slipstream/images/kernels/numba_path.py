"""The numba implementation of ``resample_into``: uint8 passes, then a per-channel lookup table for float outputs.

Contract: ``resample(src, box, out, *, flip, filter, chw, scale, offset)`` takes and checks the
arguments of ``resample_into`` and writes the same bits as ``numpy_path``: uint8 outputs straight
from ``numba_passes``; float32/float16 outputs through a table of the 256 normalized values per
channel (``float32(v) * scale[c] + offset[c]`` in float32, then rounded to float16 half to even,
as NumPy's ``astype`` rounds, by ``half_bits``: numba has no float16 on the CPU). Each output
dtype so compiles a small writer, not a whole kernel. ``RuntimeError`` when numba is not active.
"""

from __future__ import annotations

import numpy as np

from .checks import run
from .jit import NUMBA, jit
from .numba_passes import resample_u8

__all__ = ["half_bits", "resample", "write_lut"]

# Hot loops index with unsigned integers: numba then skips its negative-index wraparound.
_U = np.uint64


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
    """The checked call (see ``checks``): resample, mirror, normalize and lay out into ``out``."""
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
