"""``DeviceStage``: a batch of sample indices of a packed image field to one batch tensor on a device.

By hand, without a loader (a loader over ``ss.open(p).map(..., device=...)`` does the same work,
split into its workers and its finish thread: ``images.device.devicemap``). The work is split where a loader
splits it: ``stage.host(indices, seed, epoch)`` runs on CPU workers (``hostbatch.HostReader``: stored
bytes, header sizes and the CPU pipeline's windows, no pixels decoded) and
``stage.device_batch(batch)`` in the training process (``decode.decode_batch`` at full size, then
``batchpixels.resize_crops``: crop, antialiased resize, flip, normalize, cast and layout, batched;
with pixel ops, ``batchpixels.resample``, then ``pixelstage.finish``: the pixel ops' steps on the
uint8 crops, the formats, then a ``RandomErasing`` placed after them, in the CPU pipeline's order).
``stage(indices, seed, epoch)`` does both. The indices key the draws, as a loader's indices do
over the dataset itself (not a view of it).

The output matches what the CPU pipeline ``ss.open(p).map(field=ops)`` gives for the same samples,
seed and epoch when it decodes at full size (``ops.Decode(exact=True)``), up to the resampler's
rounding (``resize_crops``: at most 1 level on a pixel). The CPU pipeline's default decodes a
JPEG at a reduced DCT scale when the window allows, so it differs from this stage by what that
scale costs (bounded in ``tests/images/device/test_gpu_device.py``). ``ops.Decode(fast=True)`` is honoured by
the CPU decoders only; nvJPEG has one DCT.

Output: dtype the pipeline's ``Normalize`` dtype (uint8 without one) unless ``dtype`` says
otherwise ("bfloat16" too), layout the CPU pipeline's ("NCHW" with ``ops.ToCHW``, else "NHWC")
unless ``layout`` says otherwise ("channels_last" too). Bytes that do not decode raise
``CorruptFileError`` naming the file, sample and field, as the CPU path does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ...core.errors import CorruptFileError
from ..imageops import Op
from ..kernels.pixel_steps import StepError
from ..pipeline import Pipeline
from .batchpixels import resample, resize_crops
from .decode import SampleDecodeError, decode_batch
from .devicemap import DeviceMapped
from .hostbatch import HostBatch, HostReader
from .pixelstage import finish

__all__ = ["DeviceStage"]


def _unmapped(dataset: Any, field: str, ops: Any) -> tuple[Any, Any]:
    """(packed dataset, ops) from a packed dataset and ops, or a mapped one (``ss.open(p).map(...)``)."""
    pipelines = getattr(dataset, "pipelines", None)
    if isinstance(pipelines, dict) and hasattr(dataset, "data"):
        if ops is not None:
            raise ValueError("a mapped dataset brings its own ops: pass ops with ss.open(path) only")
        if field not in pipelines:
            raise KeyError(f"field {field!r} is not mapped (mapped: {sorted(pipelines)})")
        return dataset.data, pipelines[field]
    if ops is None:
        raise ValueError("the device stage needs ops (or a mapped dataset: ss.open(path).map(field=[...]))")
    return dataset, ops


class DeviceStage:
    """Batches of image field ``field`` of ``dataset`` through ``ops`` on ``device`` (module doc).

    ``dataset``: ``ss.open(path)`` with ``ops`` (a list of ``slipstream.ops``), or
    ``ss.open(path).map(field=ops)``. ``dtype`` / ``layout``: see ``resize_crops``; default the CPU
    pipeline's."""

    def __init__(
        self,
        dataset: Any,
        field: str = "image",
        ops: Sequence[Op] | Pipeline | None = None,
        device: Any = None,
        *,
        dtype: Any = None,
        layout: str | None = None,
    ):
        packed, ops = _unmapped(dataset, field, ops)
        self.reader = HostReader(packed, field, ops)
        view = dataset if isinstance(dataset, DeviceMapped) else None  # its device, dtype and layout by default
        if device is None:
            device = view.device if view is not None else "cpu"
        self.field, self.device = field, torch.device(device)
        pipeline = self.reader.pipeline
        self.normalize = pipeline.normalize
        if dtype is None:
            dtype = view.dtypes[field] if view is not None else (self.normalize.dtype if self.normalize else "uint8")
        if layout is None:
            layout = view.layouts[field] if view is not None else ("NCHW" if pipeline.chw else "NHWC")
        self.dtype, self.layout = dtype, layout
        self.filter, self.fast = pipeline.filter, pipeline.decode.fast

    def host(self, indices: Sequence[int] | np.ndarray, seed: int, epoch: int) -> HostBatch:
        """The CPU workers' part: ``HostReader.read`` (bytes, header sizes, windows)."""
        return self.reader.read(indices, seed, epoch)

    def device_batch(self, batch: HostBatch) -> torch.Tensor:
        """The device's part: decode ``batch`` at full size and resample it into one tensor."""
        try:
            images = decode_batch(batch.data, self.device, batch.codecs, batch.shapes, [int(c) for c in batch.shapes[:, 2]], batch.indices, self.fast)
        except SampleDecodeError as exc:
            dataset = self.reader.dataset
            raise CorruptFileError(dataset.source_of(exc.index), f"sample {exc.index}, field {self.field!r}: {exc.reason}") from exc
        mean, std = (self.normalize.mean, self.normalize.std) if self.normalize else (None, None)
        pipeline = self.reader.pipeline
        if not pipeline.pixel and not pipeline.erasing:
            return resize_crops(images, batch.boxes, batch.size, batch.flips, mean, std, self.dtype, self.layout, "CHW", self.filter)
        values = resample(images, batch.boxes, batch.size, batch.flips, "CHW", self.filter)
        try:
            return finish(values, pipeline, batch.steps, batch.erase, self.dtype, self.layout)
        except StepError as exc:
            raise StepError(f"sample {batch.indices[getattr(exc, 'sample', 0)]}, field {self.field!r}: {exc}") from exc

    def __call__(self, indices: Sequence[int] | np.ndarray, seed: int, epoch: int) -> torch.Tensor:
        """Samples ``indices`` of ``epoch`` under ``seed`` as one batch tensor on the device."""
        return self.device_batch(self.host(indices, seed, epoch))
