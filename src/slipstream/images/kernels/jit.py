"""Whether the numba kernels are available, why not, the one way they are compiled, and the one
way the kernels warn.

Contract: ``NUMBA`` is True when numba imports and ``SLIPSTREAM_NO_NUMBA`` was not set when this
module was first imported; ``status()`` says which (``"active"``, ``"disabled by
SLIPSTREAM_NO_NUMBA"``, ``"missing"`` or ``"failed to import (...)"``); ``jit`` is the decorator
every numba kernel uses (``nogil=True``, ``cache=True``, no fastmath: bit-exact integer and float32
arithmetic, run without the GIL, compiled once per machine into numba's on-disk cache). Without
numba ``jit`` leaves the functions as plain Python, defined but never called:
``numba_path.resample`` refuses to run then.

``warn_once(key, message)`` issues a ``RuntimeWarning`` the first time it is called with ``key``
in this process and never again (whatever the warning filters say): numba failing to compile, and
numba missing when an image first runs on the NumPy fallback (``fallback_used``).
"""

from __future__ import annotations

import threading
import warnings

from ...core.optional import probe

__all__ = ["NUMBA", "fallback_used", "jit", "status", "version", "warn_once"]

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
