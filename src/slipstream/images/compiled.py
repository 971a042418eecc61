"""The compiled image core, ``slipstream.images._roijpeg``, probed once for every module that uses it.

``EXTENSION`` is the imported extension, or None when it was not built (no C compiler or libjpeg
headers when slipstream was built from source), failed to import, or ``SLIPSTREAM_NO_ROIJPEG`` was
set when this module was first imported; ``STATUS`` says which: "active", "disabled by
SLIPSTREAM_NO_ROIJPEG", "not built" or "failed to import (<the error>)". Every user of the
extension (region decoding, the image tasks, the resampler, the JPEG codec) reads these two names,
so one process never mixes a compiled path with a fallback for the same work.
"""

from __future__ import annotations

from typing import Any

from ..core.optional import probe

__all__ = ["EXTENSION", "STATUS"]

EXTENSION: Any
EXTENSION, STATUS = probe(f"{__package__}._roijpeg", disable_env="SLIPSTREAM_NO_ROIJPEG", missing="not built")
