"""Where each sample's window lies in the pixels that get decoded, for many samples at once.

``place(windows, heights, widths, jpeg, exact)`` takes the windows the geometry ops placed
(``ops.Windows``, in source pixels) and returns a ``Placement``: per sample, the DCT scale factor a
JPEG is decoded at (the largest of 1, 2, 4, 8 at which the window still covers its output size,
unless ``exact``; 1 for other codecs), the size of the image at that scale, the window's box in it,
the rows and columns a region decode must produce (the box plus a margin wider than the resampling
filter reaches), and the box as the float32 edges the resampler receives. Every sample's numbers
are computed by the same array operations whether one sample or a whole task is placed, so the
compiled task path and the per-sample path decode and resample exactly the same pixels.
"""

from __future__ import annotations

import numpy as np

from ..ops import Windows

__all__ = ["Placement", "place"]


class Placement:
    """Per sample (arrays of n): ``factor``, ``dec_h``, ``dec_w`` (int64), ``box`` (n, 4) float64
    (top, left, height, width in the decoded image), ``region`` (n, 4) int64 (top, left, rows, cols
    to decode), ``edges`` (n, 4) float32 (top, bottom, left, right) and ``valid``: whether the box
    lies inside the decoded image as the resampler checks it (else the per-sample path raises)."""

    __slots__ = ("factor", "dec_h", "dec_w", "box", "region", "edges", "valid")

    def row(self, i: int) -> tuple[int, int, int, tuple[float, float, float, float], tuple[int, int, int, int]]:
        """Sample ``i``'s (factor, dec_h, dec_w, box, region) as Python numbers."""
        box = tuple(float(v) for v in self.box[i])
        region = tuple(int(v) for v in self.region[i])
        return int(self.factor[i]), int(self.dec_h[i]), int(self.dec_w[i]), box, region  # type: ignore[return-value]


def place(windows: Windows, heights: np.ndarray, widths: np.ndarray, jpeg: np.ndarray, exact: bool) -> Placement:
    """The placement of ``windows`` over images of ``heights`` x ``widths`` (``jpeg``: which may be
    decoded at a reduced scale); see the module doc."""
    heights, widths = np.asarray(heights, np.int64), np.asarray(widths, np.int64)
    factor = np.ones(len(windows), np.int64)
    if not exact:
        for _ in range(3):  # 1 -> 2 -> 4 -> 8, while the window stays at least its output size
            grow = jpeg & (factor < 8) & (windows.height / (2 * factor) >= windows.out_h) & (windows.width / (2 * factor) >= windows.out_w)
            factor = np.where(grow, factor * 2, factor)
    dec_h, dec_w = (heights + factor - 1) // factor, (widths + factor - 1) // factor
    sy, sx = dec_h / heights, dec_w / widths
    top, left, box_h, box_w = windows.top * sy, windows.left * sx, windows.height * sy, windows.width * sx
    margin = np.ceil(np.maximum(np.maximum(1.0, box_h / windows.out_h), box_w / windows.out_w)).astype(np.int64) + 2
    r0 = np.maximum(0, np.floor(top).astype(np.int64) - margin)
    r1 = np.minimum(dec_h, np.ceil(top + box_h).astype(np.int64) + margin)
    c0 = np.maximum(0, np.floor(left).astype(np.int64) - margin)
    c1 = np.minimum(dec_w, np.ceil(left + box_w).astype(np.int64) + margin)
    placement = Placement()
    placement.factor, placement.dec_h, placement.dec_w = factor, dec_h, dec_w
    placement.box = np.stack([top, left, box_h, box_w], axis=1)
    placement.region = np.stack([r0, c0, r1 - r0, c1 - c0], axis=1)
    edges = np.stack([top, top + box_h, left, left + box_w], axis=1).astype(np.float32)
    placement.edges = edges
    with np.errstate(invalid="ignore"):
        placement.valid = (
            np.isfinite(placement.box).all(axis=1)
            & (box_h > 0) & (box_w > 0)
            & (edges[:, 0] >= 0) & (edges[:, 2] >= 0)
            & (edges[:, 1] <= dec_h) & (edges[:, 3] <= dec_w)
            & (edges[:, 1] > edges[:, 0]) & (edges[:, 3] > edges[:, 2])
            & (r1 > r0) & (c1 > c0)
        )
    return placement
