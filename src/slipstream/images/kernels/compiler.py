"""The background compiler of the numba kernels, and ``warm_up``.

Contract: ``ready[dtype]`` (an ``Event`` per output dtype of ``constants.OUT_DTYPES``) is set once
the numba kernels for that dtype are compiled or loaded from numba's disk cache, never before;
``compile_in_background()`` starts the one compiling thread on its first call (later calls return
it), and ``warm_up(dtype)`` waits for it. The thread compiles one output dtype after another (uint8
first: what training batches use) for every channel count, layout and filter; calls run on the
bit-identical NumPy path until their dtype is ready, so no batch waits for the compiler (a cold
compile takes several seconds per dtype; a cached load ~0.4 s in all). When numba fails to compile
here it warns once and no event is set: everything stays on the NumPy path.
"""

from __future__ import annotations

import threading
import time

import numpy as np

from . import numba_path
from .constants import FILTERS, OUT_DTYPES
from .jit import NUMBA, warn_once

__all__ = ["compile_in_background", "ready", "warm_up"]

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
                        numba_path.resample(src, (0.5, 0, 3, 4), out, chw=chw, filter=filter, **norm)
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
