"""Host-side geometry of a batched resample: check each sample's window, and describe its
resampling filter compactly enough to upload in one copy.

Contract: ``plan(shapes, boxes, size, flips, filter)`` takes each image's (height, width), its
window (top, left, height, width in source pixels, fractions allowed), the output (out_h, out_w),
the flip flags and the filter ("bilinear" or "box": Pillow's antialiased filters, the ones the CPU
path ``slipstream.images.kernels.resample_into`` uses), and returns a ``Plan``:

- ``rows`` / ``cols``: per sample, the first source row / column the filter reads and how many
  (the *region*; a pixel outside it has weight 0 for every output pixel), as int64 (n, 2);
- ``params``: float32 (n, 4, out_h + out_w), the vertical then the horizontal axis side by side;
  per output pixel ``i``: row 0 ``rel`` (the filter's centre in region coordinates, minus 0.5),
  rows 1 and 2 ``lo`` and ``hi`` (integers: the taps ``lo <= j < hi`` of the region that count),
  row 3 the filter's ``ss`` (1 / the downscale factor, at least 1). Centres, supports and tap
  ranges are Pillow's ``precompute_coeffs``, computed here in float64. Bilinear: the weight of
  region pixel ``j`` is ``max(0, 1 - |(j - rel[i]) * ss|)`` on the taps, computed on the device in
  float32 from ``rel`` (so it differs from Pillow's float64 weight by float32 rounding), normalized
  to sum 1. Box: ``lo``/``hi`` are the taps Pillow's box test ``-0.5 < x <= 0.5`` selects, decided
  here in float64, and each has weight 1 / (hi - lo): the device never decides a tap by a float32
  comparison (a centre rounded to float32 can drop the only tap of a row: a black row). Both
  without Pillow's 22-bit fixed-point rounding. Every row has a tap by construction (checked:
  ``RuntimeError`` otherwise), so no weight row sums to 0. A flipped sample's horizontal rows are
  reversed (the mirror costs nothing).

Windows follow the CPU path's rule (``kernels.contract``): the edges are rounded to float32, as
Pillow receives them, and must lie inside the image with positive size. A window that does not
raises ``ValueError`` naming the image's position in the batch ("image k of the batch", not a
dataset index).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..kernels.contract import BILINEAR_SUPPORT, BOX_SUPPORT, FILTERS

__all__ = ["MixedSizeError", "Plan", "SUPPORTS", "boxes_of", "plan"]

SUPPORTS = {name: BOX_SUPPORT if is_box else BILINEAR_SUPPORT for name, is_box in FILTERS.items()}  # Pillow's filter supports


class MixedSizeError(ValueError):
    """``boxes_of``'s refusal of windows with different output sizes; ``position`` is the first
    image (its position in the batch) whose size differs from image 0's."""

    def __init__(self, position: int, message: str):
        super().__init__(message)
        self.position = position


class Plan:
    """See the module doc: ``rows``, ``cols`` (n, 2) int64 (first, count), ``params`` float32
    (n, 4, out_h + out_w), ``size`` (out_h, out_w) and ``box_filter``."""

    __slots__ = ("box_filter", "cols", "params", "rows", "size")

    def __init__(self, rows: np.ndarray, cols: np.ndarray, params: np.ndarray, size: tuple[int, int], box_filter: bool):
        self.rows, self.cols, self.params, self.size, self.box_filter = rows, cols, params, size, box_filter


def _size(size: int | Sequence[int]) -> tuple[int, int]:
    if isinstance(size, (int, np.integer)) and not isinstance(size, bool):
        size = (int(size), int(size))
    if not isinstance(size, Sequence) or len(size) != 2 or not all(isinstance(s, (int, np.integer)) and not isinstance(s, bool) and s >= 1 for s in size):
        raise ValueError(f"size must be a positive int or (height, width), got {size!r}")
    return int(size[0]), int(size[1])


def check_windows(shapes: np.ndarray, boxes: Any) -> np.ndarray:
    """``boxes`` as float64 (n, 4) (top, left, height, width), checked against ``shapes`` (n, 2)
    with the CPU resampler's rule; returns the float32 edges (n, 4): top, bottom, left, right."""
    n = len(shapes)
    try:
        boxes = np.asarray(boxes, np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"windows must be numbers (top, left, height, width) per sample, got {boxes!r}") from None
    if boxes.shape != (n, 4):
        raise ValueError(f"windows must have shape ({n}, 4): (top, left, height, width) per image, got {boxes.shape}")
    with np.errstate(invalid="ignore", over="ignore"):
        edges = np.stack([boxes[:, 0], boxes[:, 0] + boxes[:, 2], boxes[:, 1], boxes[:, 1] + boxes[:, 3]], axis=1).astype(np.float32)
    for k in range(n):
        top, left, height, width = boxes[k]
        image = f"{shapes[k, 0]}x{shapes[k, 1]} image"
        where = f"image {k} of the batch: window (top={top:g}, left={left:g}, height={height:g}, width={width:g})"
        if not np.isfinite(boxes[k]).all():
            raise ValueError(f"{where} is not finite")
        if height <= 0 or width <= 0:
            raise ValueError(f"{where} is empty (height and width must be > 0)")
        if edges[k, 0] < 0 or edges[k, 2] < 0 or edges[k, 1] > shapes[k, 0] or edges[k, 3] > shapes[k, 1]:
            raise ValueError(f"{where} lies outside the {image}")
        if not (edges[k, 1] > edges[k, 0] and edges[k, 3] > edges[k, 2]):
            raise ValueError(f"{where} is too small to resample from (its float32 edges meet)")
    return edges


def _box_taps(center: np.ndarray, ss: np.ndarray, xmin: np.ndarray, xmax: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The box filter's taps per output pixel, decided in float64 as Pillow decides them: source
    pixel ``j`` of ``[xmin, xmax)`` counts when ``((j - center) + 0.5) * ss`` lies in (-0.5, 0.5].
    Returns the integer range [lo, hi) (contiguous: the test is monotone in ``j``); raises
    ``RuntimeError`` if an output pixel would have no tap (a weight row summing to 0)."""
    taps = max(int((xmax - xmin).max()), 1)
    j = xmin[..., None] + np.arange(taps)  # (n, out, taps)
    x = ((j - center[..., None]) + 0.5) * ss[:, None, None]
    inside = (j < xmax[..., None]) & (x > -0.5) & (x <= 0.5)
    count = inside.sum(axis=2)
    if (count == 0).any():
        k, i = np.argwhere(count == 0)[0]
        raise RuntimeError(f"image {k} of the batch: the box filter has no tap for output pixel {i} (center {center[k, i]!r}): please report this")
    lo = xmin + inside.argmax(axis=2)
    return lo, lo + count


def _axis(in_size: np.ndarray, in0: np.ndarray, in1: np.ndarray, out_size: int, support0: float, box: bool) -> tuple[np.ndarray, np.ndarray]:
    """One axis for all samples: the region (n, 2) and the params (n, 4, out_size) (float64)."""
    scale = (in1 - in0).astype(np.float64) / out_size  # float32 subtraction, as Pillow's C does
    filterscale = np.maximum(scale, 1.0)
    support = support0 * filterscale
    center = in0.astype(np.float64)[:, None] + (np.arange(out_size) + 0.5)[None, :] * scale[:, None]
    xmin = np.maximum(np.trunc(center - support[:, None] + 0.5), 0)  # C's (int) truncates toward zero
    xmax = np.minimum(np.trunc(center + support[:, None] + 0.5), in_size[:, None].astype(np.float64))
    xmax = np.maximum(xmax, xmin)
    if box:
        xmin, xmax = _box_taps(center, 1.0 / filterscale, xmin, xmax)
    else:
        # The bilinear weight of the source pixel holding the centre is 1 - |x| >= 0.5 (|x| <= 0.5 / filterscale),
        # and that pixel lies in [xmin, xmax): no weight row can sum to 0. Checked, as it is cheap.
        nearest = np.minimum(np.floor(center), in_size[:, None] - 1)
        if ((nearest < xmin) | (nearest >= xmax)).any():
            raise RuntimeError("the bilinear filter misses the pixel under an output pixel's centre: please report this")
    first, last = xmin.min(axis=1), xmax.max(axis=1)
    region = np.stack([first, np.maximum(last - first, 1)], axis=1).astype(np.int64)
    params = np.empty((len(in_size), 4, out_size), np.float64)
    params[:, 0] = center - first[:, None] - 0.5
    params[:, 1] = xmin - first[:, None]
    params[:, 2] = xmax - first[:, None]
    params[:, 3] = (1.0 / filterscale)[:, None]
    return region, params


def plan(shapes: Any, boxes: Any, size: int | Sequence[int], flips: Any = None, filter: str = "bilinear") -> Plan:
    """The plan of resampling ``boxes`` of images of ``shapes`` (n, 2) to ``size`` (module doc)."""
    if filter not in SUPPORTS:
        raise ValueError(f"filter must be 'bilinear' or 'box', got {filter!r}")
    out_h, out_w = _size(size)
    shapes = np.asarray(shapes, np.int64).reshape(-1, 2)
    n = len(shapes)
    flips = np.zeros(n, bool) if flips is None else np.asarray(flips, bool).reshape(-1)
    if len(flips) != n:
        raise ValueError(f"flips must have one flag per image ({n}), got {len(flips)}")
    edges = check_windows(shapes, boxes)
    box = filter == "box"
    rows, vertical = _axis(shapes[:, 0], edges[:, 0], edges[:, 1], out_h, SUPPORTS[filter], box)
    cols, horizontal = _axis(shapes[:, 1], edges[:, 2], edges[:, 3], out_w, SUPPORTS[filter], box)
    horizontal[flips] = horizontal[flips, :, ::-1]
    params = np.concatenate([vertical, horizontal], axis=2).astype(np.float32)
    return Plan(rows, cols, params, (out_h, out_w), box)


def boxes_of(windows: Any) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """An ``ops.Windows`` (what ``images.pipeline.Pipeline.windows`` draws on the CPU) as
    ``resize_crops`` arguments: boxes (n, 4) float64, flips (n,) bool and the one output size.
    Raises ``ValueError`` when the samples' output sizes differ (they cannot share a batch)."""
    boxes = np.stack([windows.top, windows.left, windows.height, windows.width], axis=1).astype(np.float64)
    out_h, out_w = np.asarray(windows.out_h), np.asarray(windows.out_w)
    if len(out_h) and ((out_h != out_h[0]).any() or (out_w != out_w[0]).any()):
        k = int(np.argmax((out_h != out_h[0]) | (out_w != out_w[0])))
        raise MixedSizeError(k, f"image {k} of the batch: output size {out_h[k]}x{out_w[k]} differs from image 0's {out_h[0]}x{out_w[0]}")
    size = (int(out_h[0]), int(out_w[0])) if len(out_h) else (1, 1)
    return boxes, np.asarray(windows.flip, bool).copy(), size
