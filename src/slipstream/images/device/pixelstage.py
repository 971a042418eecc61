"""The device stage after its geometry: the pixel ops' steps, the formats, then the erasing.

``finish(values, steps, erase, erasing, mean, std, dtype, layout)`` is the CPU pipeline's order
(``Pipeline._run_pixel``) on a batch: ``values`` (float32 (n, C, H, W) holding the geometry's uint8
values: ``batchpixels.resample``'s output, or rows resampled on the CPU) become uint8, run their
samples' ``steps`` (``pixelsteps.run_steps``), are normalized, cast and laid out
(``batchpixels.finalize``), and then each ``RandomErasing`` placed after the formats erases its
boxes in the formatted batch (``erase``), with its value cast to the batch's dtype as the CPU path
casts it (NumPy's cast for uint8, float16 and float32; torch's for bfloat16, which NumPy lacks).
Without steps and erasing it is ``finalize`` itself.

The steps and boxes come from the host (``hostbatch.HostReader``: ``Pipeline.pixel_program`` and
``Pipeline.erase_boxes`` with the CPU pipeline's draws for the batch's output size), so a batch
gets the CPU path's draws; given the same uint8 geometry output it gets the CPU path's pixels
(``tests/images/device/test_device_pixelops.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from .batchpixels import finalize
from .pixelsteps import run_steps, upload

__all__ = ["erase", "finish"]


def _cast(values: Sequence[float], dtype: torch.dtype) -> list[float]:
    """``values`` cast to ``dtype`` on the host, as Python numbers (exact in ``dtype``)."""
    array = np.asarray(values, np.float64)
    if dtype == torch.uint8:
        if not all(0 <= v <= 255 for v in array.tolist()):
            raise ValueError(f"RandomErasing of uint8 outputs: value must be in 0..255, got {list(values)!r}")
        return array.astype(np.uint8).tolist()
    if dtype == torch.bfloat16:
        return torch.from_numpy(array).to(torch.bfloat16).tolist()
    numpy_dtype = {torch.float16: np.float16, torch.float32: np.float32}.get(dtype)
    if numpy_dtype is None:
        raise ValueError(f"RandomErasing erases uint8, float16, bfloat16 or float32 batches, got {dtype}")
    with np.errstate(over="ignore"):  # out of float16's range: inf, as NumPy casts it
        return array.astype(numpy_dtype).astype(np.float64).tolist()


def erase(out: torch.Tensor, boxes: Any, values: Sequence[float], layout: str) -> torch.Tensor:
    """Set each sample's box (``boxes`` int64 (n, 4): top, left, height, width, as
    ``RandomErasing.boxes``; height -1: not erased) of the formatted batch ``out`` (laid out
    ``layout``: "NHWC" is (n, H, W, C), "NCHW" and "channels_last" (n, C, H, W)) to ``values``
    (3 per-channel values; a 1-channel batch takes the first), cast to ``out``'s dtype. In place;
    returns ``out``."""
    boxes = np.asarray(boxes, np.int64).reshape(-1, 4)
    n = out.shape[0]
    if len(boxes) != n:
        raise ValueError(f"erase needs one box per sample ({n}), got {len(boxes)}")
    erased = boxes[:, 2] >= 0
    if not erased.any():
        return out
    if (boxes[erased] < 0).any():
        raise ValueError(
            f"erasing boxes must be non-negative (top, left, height, width), got {boxes[erased][(boxes[erased] < 0).any(axis=1)][0].tolist()}"
        )
    nhwc = layout == "NHWC"
    channels, height, width = (out.shape[3], out.shape[1], out.shape[2]) if nhwc else (out.shape[1], out.shape[2], out.shape[3])
    cast = _cast(list(values)[: 1 if channels == 1 else 3], out.dtype)
    top, left, tall, wide = boxes.T
    bounds = np.stack(
        [np.minimum(top, height), np.minimum(top + tall, height), np.minimum(left, width), np.minimum(left + wide, width)], axis=1
    )
    bounds[~erased] = 0  # an empty box: nothing to set
    b = upload(bounds, out.device)
    rows = torch.arange(height, device=out.device).view(1, height, 1)
    cols = torch.arange(width, device=out.device).view(1, 1, width)
    mask = (
        (rows >= b[:, 0, None, None])
        & (rows < b[:, 1, None, None])
        & (cols >= b[:, 2, None, None])
        & (cols < b[:, 3, None, None])
    )
    for c in range(channels):
        (out[..., c] if nhwc else out[:, c]).masked_fill_(mask, cast[c])
    return out


def finish(
    values: torch.Tensor,
    steps: Any,
    boxes: Any,
    erasing: Sequence[Any],
    mean: Sequence[float] | None,
    std: Sequence[float] | None,
    dtype: Any,
    layout: str,
) -> torch.Tensor:
    """The batch after its geometry (module doc): ``values`` float32 (n, C, H, W) of uint8 values;
    ``steps`` float64 (n, S, WORDS) on the host (S may be 0); ``boxes`` int64 (E, n, 4), the boxes
    of the E ops ``erasing`` (``RandomErasing``, in order); ``mean``, ``std``, ``dtype``, ``layout``:
    ``finalize``'s."""
    steps = np.asarray(steps, np.float64)
    if steps.ndim == 3 and steps.shape[1]:
        values = run_steps(values.to(torch.uint8), steps).to(torch.float32)
    out = finalize(values, mean, std, dtype, layout)
    boxes = np.asarray(boxes, np.int64).reshape(-1, len(values), 4)
    if len(boxes) != len(erasing):
        raise ValueError(f"{len(erasing)} RandomErasing op(s) but boxes for {len(boxes)}")
    for op, op_boxes in zip(erasing, boxes):
        erase(out, op_boxes, op.values, layout)
    return out
