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
``out``'s dtype while it is written (float16 rounded half to even, overflowing to inf).

Two implementations give bit-identical results: C (``csrc/resample.c`` in the compiled ``_roijpeg``
extension, run without the GIL, nothing compiled at run time), the one the image pipelines use, and
a vectorized NumPy reference, used when the extension is not built or ``SLIPSTREAM_NO_ROIJPEG=1``
was set when this package was imported (the first fallback call warns once when it is missing:
``images.compiled.warn_if_missing``). ``C_RESAMPLER`` says whether the C one is active,
``resampler_status()`` why not (as ``c_path.status``).

The modules, one role each:

- ``contract``: Pillow's constants, the pass-order rule and the argument checks of the NumPy path;
- ``numpy_path``: the NumPy implementation (the reference);
- ``c_path``: the C implementation, whether it is active and why not.
"""

from __future__ import annotations

import numpy as np

from .. import compiled as _compiled
from . import c_path, numpy_path
from .c_path import status as resampler_status

__all__ = ["C_RESAMPLER", "resample_into", "resampler_status"]

C_RESAMPLER = c_path.AVAILABLE


def resample_into(src, box, out, *, flip=False, filter="bilinear", chw=False, scale=None, offset=None) -> np.ndarray:
    """Crop ``box`` from ``src``, resize it to ``out``'s size, optionally mirror and normalize; write into ``out``.

    - ``src``: uint8 (H, W, C) with C in {1, 3} (copied first if not C-contiguous).
    - ``box``: (top, left, height, width) in source pixels, fractions allowed, inside the image
      (checked after rounding the edges to float32, as Pillow does).
    - ``out``: (oh, ow, C), or (C, oh, ow) with ``chw=True``; uint8, float32 or float16; writable,
      any strides (a non-C-contiguous ``out`` is written through a scratch copy); not sharing
      memory with ``src``.
    - ``filter``: "bilinear" or "box" (Pillow's antialiasing BILINEAR / BOX).
    - ``flip``: mirror the result left-right.
    - ``scale``/``offset``: per-channel (or scalar) float32, float outputs only:
      ``out = float32(resized_uint8) * scale[c] + offset[c]`` in float32, then cast to ``out``'s dtype.

    The uint8 result equals ``Image.fromarray(src).resize((ow, oh), BILINEAR|BOX,
    box=(left, top, left + width, top + height))`` exactly; both implementations write the same
    bits. Bad arguments raise ``TypeError`` (a wrong type or dtype) or ``ValueError`` (a wrong
    shape, box, filter or normalization) before any pixel is written. Returns ``out``.
    """
    if c_path.AVAILABLE:
        return c_path.resample(src, box, out, flip=flip, filter=filter, chw=chw, scale=scale, offset=offset)
    _compiled.warn_if_missing()
    return numpy_path.resample(src, box, out, flip=flip, filter=filter, chw=chw, scale=scale, offset=offset)
