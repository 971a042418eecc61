"""slipstream.gpu: image pixel work on a torch device (issue 14), first slice.

``resize_crops(images, windows, size, flips, mean, std, dtype, layout)`` turns a ragged list of
decoded uint8 images (any device) and each sample's window into one batch: crop, antialiased
resize (Pillow's filters, as the CPU pipeline), flip, normalize, cast and lay out, in a number of
torch ops that does not depend on the batch size. ``boxes_of(windows)`` converts the windows the
CPU pipeline draws (``ops.Windows``) into its arguments.

Nothing in slipstream imports this package; it needs torch.
"""

from __future__ import annotations

from .geometry import boxes_of
from .stage import DTYPES, LAYOUTS, resize_crops

__all__ = ["DTYPES", "LAYOUTS", "boxes_of", "resize_crops"]
