"""The device stage after its geometry: the pixel ops' steps, the formats, then the erasing.

``finish(values, pipeline, steps, boxes, dtype, layout)`` is the CPU pipeline's order
(``Pipeline._run_pixel``) on a batch: ``values`` (float32 (n, C, H, W) holding the geometry's uint8
values: ``batchpixels.resample``'s output, or rows resampled on the CPU) become uint8, run their
samples' ``steps`` (``pixelsteps.run_steps``; op by op where an op sets the channel count, as the
CPU pipeline goes), are normalized, cast and laid out
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

from ..kernels.pixel_steps import WORDS
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


def _run_ops(pixels: torch.Tensor, pixel_ops: Sequence[Any], steps: np.ndarray) -> torch.Tensor:
    """``steps`` on uint8 NCHW ``pixels``, op by op where an op sets the channel count
    (``PixelOp.channels``: a 1-channel batch becomes three equal channels at a ``Grayscale(3)``,
    as the CPU pipeline repeats it), in one ``run_steps`` between such ops."""
    start = end = 0
    for op in pixel_ops:
        end += op.steps
        channels = op.channels
        if channels is None:
            continue
        if end > start:
            pixels = run_steps(pixels, steps[:, start:end])
        start = end
        if channels == 3 and pixels.shape[1] == 1:
            pixels = pixels.expand(-1, 3, -1, -1).contiguous()
        elif channels == 1 and pixels.shape[1] == 3:
            pixels = pixels[:, :1].contiguous()
    if steps.shape[1] > start:
        pixels = run_steps(pixels, steps[:, start:])
    return pixels


def finish(values: torch.Tensor, pipeline: Any, steps: Any, boxes: Any, dtype: Any, layout: str) -> torch.Tensor:
    """The batch after its geometry (module doc): ``values`` float32 (n, C, H, W) of uint8 values
    through ``pipeline``'s (an ``images.pipeline.Pipeline``) pixel ops, formats and erasing:
    ``steps`` float64 (n, S, WORDS) on the host, its pixel ops' steps (S may be 0); ``boxes`` int64
    (E, n, 4), the boxes of its E ``RandomErasing`` after the formats, in order; ``dtype`` and
    ``layout``: ``finalize``'s (its ``Normalize`` gives the mean and std)."""
    steps = np.asarray(steps, np.float64).reshape(len(values), -1, WORDS)
    if steps.shape[1] != sum(op.steps for _, op in pipeline.pixel):
        raise ValueError(
            f"the pipeline's pixel ops take {sum(op.steps for _, op in pipeline.pixel)} steps a sample, got {steps.shape[1]}"
        )
    if steps.shape[1]:
        values = _run_ops(values.to(torch.uint8), [op for _, op in pipeline.pixel], steps).to(torch.float32)
    normalize = pipeline.normalize
    mean, std = (normalize.mean, normalize.std) if normalize is not None else (None, None)
    out = finalize(values, mean, std, dtype, layout)
    boxes = np.asarray(boxes, np.int64).reshape(-1, len(values), 4)
    if len(boxes) != len(pipeline.erasing):
        raise ValueError(f"the pipeline has {len(pipeline.erasing)} RandomErasing after its formats, got boxes for {len(boxes)}")
    for (_, op), op_boxes in zip(pipeline.erasing, boxes):
        erase(out, op_boxes, op.values, layout)
    return out
