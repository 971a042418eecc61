"""The C implementation of ``resample_into``: the ``_roijpeg`` extension's ``resample`` (``csrc/resample.c``).

Availability: ``AVAILABLE`` is True when the compiled ``slipstream.images._roijpeg`` extension
imports and ``SLIPSTREAM_NO_ROIJPEG`` was not set when this module was first imported; ``status()``
says which (``"active"``, ``"disabled by SLIPSTREAM_NO_ROIJPEG"``, ``"not built"`` or ``"failed to
import (...)"``). Nothing to compile at run time: the first call is as fast as the next.

``resample(src, box, out, *, flip, filter, chw, scale, offset)`` takes the arguments of
``resample_into`` and writes the same bits as ``numpy_path``, without the GIL. The extension checks
the arguments (``TypeError``/``ValueError`` naming the argument, what was expected and what was
found, before any pixel is written); this wrapper only copies a non-C-contiguous ``src`` first,
resamples into a scratch array copied into a non-C-contiguous ``out`` afterwards, and turns
``scale``/``offset`` into the float32 arrays the extension takes.
"""

from __future__ import annotations

import numpy as np

from .. import compiled as _compiled

__all__ = ["AVAILABLE", "resample", "status"]

_roi, _status = _compiled.EXTENSION, _compiled.STATUS
AVAILABLE = _roi is not None


def status() -> str:
    """Why the C resampler is or is not active: "active", "disabled by SLIPSTREAM_NO_ROIJPEG",
    "not built" (no C compiler or libjpeg headers when slipstream was installed) or
    "failed to import (<the error>)"."""
    return _status


def _float32(value, name: str):
    if value is None:
        return None
    try:
        return np.ascontiguousarray(value, dtype=np.float32)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be per-channel numbers, got {value!r}") from None


def resample(src, box, out, *, flip=False, filter="bilinear", chw=False, scale=None, offset=None) -> np.ndarray:
    """``resample_into`` with the C implementation (``RuntimeError`` when the extension is not active)."""
    if _roi is None:
        raise RuntimeError(f"the C resampler is not available: images._roijpeg is {_status}")
    if isinstance(src, np.ndarray) and not src.flags.c_contiguous:
        src = np.ascontiguousarray(src)
    scale, offset = _float32(scale, "scale"), _float32(offset, "offset")
    if isinstance(out, np.ndarray) and not out.flags.c_contiguous and out.flags.writeable:
        target = np.empty(out.shape, out.dtype)
        _roi.resample(src, box, target, flip, filter, chw, scale, offset)
        out[...] = target
        return out
    _roi.resample(src, box, out, flip, filter, chw, scale, offset)
    return out
