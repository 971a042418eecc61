"""The dtypes and layouts a device batch may take, by name: NumPy only, read where torch is not imported.

``DTYPE_NAMES``: the output dtypes of a device stage ("uint8", "float16", "bfloat16", "float32";
torch's names). ``LAYOUT_NAMES``: its output layouts ("NCHW"; "channels_last", NCHW-shaped with
channels-last strides; "NHWC"). ``devicemap`` checks a view's ``dtype=`` and ``layout=`` against
them in the loader's workers; ``batchpixels`` maps them to torch dtypes and lays batches out.
"""

from __future__ import annotations

__all__ = ["DTYPE_NAMES", "LAYOUT_NAMES"]

LAYOUT_NAMES = ("NCHW", "channels_last", "NHWC")
DTYPE_NAMES = ("uint8", "float16", "bfloat16", "float32")
