"""The compiled image core, ``slipstream.images._roijpeg``, probed once for every module that uses it.

``EXTENSION`` is the imported extension, or None when it was not built (no C compiler or libjpeg
headers when slipstream was built from source), failed to import, or ``SLIPSTREAM_NO_ROIJPEG`` was
set when this module was first imported; ``STATUS`` says which: "active", "disabled by
SLIPSTREAM_NO_ROIJPEG", "not built", "not built (<the build's reason>)" when the build left a
report (``core.buildreport``: "no C compiler: 'gcc' was not found", "the libjpeg headers are
missing (jpeglib.h not found)", ...), or "failed to import (<the error>)". Every user of the
extension (region decoding, the image tasks, the resampler, the JPEG codec) reads these two names,
so one process never mixes a compiled path with a fallback for the same work.

``warn_if_missing()``: the first call in a process issues one ``RuntimeWarning`` naming what runs slower
and how to get the extension, when it is not built or failed to import; later calls, and every call when
it is active or was switched off with ``SLIPSTREAM_NO_ROIJPEG``, do nothing (a cheap check: the image
pipeline and the resampler's fallback call it as they are used).
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

from ...core.buildreport import not_built
from ...core.optional import probe

__all__ = ["EXTENSION", "STATUS", "warn_if_missing"]

NAME = f"{__package__.rpartition('.')[0]}._roijpeg"  # the extension lives beside this package, in images/
EXTENSION: Any
EXTENSION, STATUS = probe(NAME, disable_env="SLIPSTREAM_NO_ROIJPEG", missing="not built")
if STATUS == "not built":
    STATUS = not_built(NAME)

_quiet = EXTENSION is not None or STATUS.startswith("disabled")  # True once warned, or when there is nothing to say
_lock = threading.Lock()


def warn_if_missing() -> None:
    """Warn once per process that the compiled image core is missing (see the module doc)."""
    global _quiet
    if _quiet:
        return
    with _lock:
        if _quiet:
            return
        _quiet = True
    warnings.warn(
        f"slipstream's compiled image core ({NAME}) is {STATUS}: JPEGs are decoded whole (by Pillow) and resized by "
        "the NumPy reference, the same pixels several times slower. To get it, install slipstream's binary wheel "
        "(pip install --force-reinstall --only-binary slipstream slipstream), or install a C compiler and the "
        "libjpeg-turbo headers (Debian/Ubuntu: apt-get install gcc libjpeg62-turbo-dev) and reinstall from source "
        "(pip install -v --force-reinstall --no-binary slipstream slipstream); `slipstream info` shows what is active. "
        "SLIPSTREAM_NO_ROIJPEG=1 silences this.",
        RuntimeWarning,
        stacklevel=3,
    )
