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

from .imageops import Windows

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
    if not exact:  # 1 -> 2 -> 4 -> 8 while the window stays at least its output size: h / k >= out_h,
        # written h >= out_h * k (k a power of two: the same comparison, exactly)
        for k in (2, 4, 8):
            factor += (factor * 2 == k) * jpeg * (windows.height >= windows.out_h * k) * (windows.width >= windows.out_w * k) * (k // 2)
    dec_h, dec_w = (heights + factor - 1) // factor, (widths + factor - 1) // factor
    sy, sx = dec_h / heights, dec_w / widths
    box = np.empty((len(windows), 4))
    top, left, box_h, box_w = box[:, 0], box[:, 1], box[:, 2], box[:, 3]
    np.multiply(windows.top, sy, out=top)
    np.multiply(windows.left, sx, out=left)
    np.multiply(windows.height, sy, out=box_h)
    np.multiply(windows.width, sx, out=box_w)
    bottom, right = top + box_h, left + box_w
    margin = np.ceil(np.maximum(np.maximum(1.0, box_h / windows.out_h), box_w / windows.out_w)) + 2
    r0 = np.maximum(0, np.floor(top) - margin)
    r1 = np.minimum(dec_h, np.ceil(bottom) + margin)
    c0 = np.maximum(0, np.floor(left) - margin)
    c1 = np.minimum(dec_w, np.ceil(right) + margin)
    placement = Placement()
    placement.factor, placement.dec_h, placement.dec_w, placement.box = factor, dec_h, dec_w, box
    placement.region = np.stack([r0, c0, r1 - r0, c1 - c0], axis=1).astype(np.int64)
    edges = placement.edges = np.stack([top, bottom, left, right], axis=1).astype(np.float32)
    with np.errstate(invalid="ignore"):
        placement.valid = (
            np.isfinite(box).all(axis=1)
            & (box_h > 0) & (box_w > 0)
            & (edges[:, 0] >= 0) & (edges[:, 2] >= 0)
            & (edges[:, 1] <= dec_h) & (edges[:, 3] <= dec_w)
            & (edges[:, 1] > edges[:, 0]) & (edges[:, 3] > edges[:, 2])
            & (r1 > r0) & (c1 > c0)
        )
    return placement
