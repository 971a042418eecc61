"""Whether the numba kernels are available, and the one way they are compiled.

Contract: ``NUMBA`` is True when numba imports and ``SLIPSTREAM_NO_NUMBA`` was not set when this
module was first imported; ``jit`` is the decorator every numba kernel uses (``nogil=True``,
``cache=True``, no fastmath: bit-exact integer and float32 arithmetic, run without the GIL,
compiled once per machine into numba's on-disk cache). Without numba ``jit`` leaves the functions
as plain Python, defined but never called: ``numba_path.resample`` refuses to run then.
"""

from __future__ import annotations

from ...core.optional import optional

__all__ = ["NUMBA", "jit"]

# not installed, or broken against this NumPy (which raises more than ImportError): the NumPy path
_numba = optional("numba", disable_env="SLIPSTREAM_NO_NUMBA", errors=(Exception,))
NUMBA = _numba is not None

if _numba is not None:
    jit = _numba.njit(nogil=True, cache=True)
else:

    def jit(function):
        return function
