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
is set when this package is imported. ``NUMBA`` says which is available, ``numba_status()`` why
(active, missing, disabled, failed to import). When numba is missing, the first image resampled on
the NumPy fallback warns once (``RuntimeWarning``, with the install hint; not when
``SLIPSTREAM_NO_NUMBA`` switched it off). The first call compiles the
numba kernels in a background thread (or loads them from numba's on-disk cache) and runs on the
NumPy path until they are ready, so no batch waits for the compiler; ``warm_up()`` waits for them.

The modules, one role each:

- ``contract``: Pillow's constants, the pass-order rule and the argument checks both
  implementations share;
- ``numpy_path``: the NumPy implementation;
- ``numba_path``: the numba implementation (whether numba is active and why not, the uint8 passes,
  the float outputs, ``warn_once``), its background compiler and ``warm_up``.
"""

from __future__ import annotations

import numpy as np

from . import numba_path, numpy_path
from .numba_path import NUMBA, compile_in_background, fallback_used, ready, warm_up
from .numba_path import status as numba_status
from .numba_path import version as numba_version

__all__ = ["NUMBA", "numba_status", "numba_version", "resample_into", "warm_up"]


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
        if ready[out.dtype].is_set():
            return numba_path.resample(src, box, out, flip=flip, filter=filter, chw=chw, scale=scale, offset=offset)
        compile_in_background()
    else:
        fallback_used()
    return numpy_path.resample(src, box, out, flip=flip, filter=filter, chw=chw, scale=scale, offset=offset)
