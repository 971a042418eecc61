"""``DeviceFinisher``: a device-mapped view's batch finisher (``loading.finishing``).

``finish(batch)`` runs in the loader's finish thread: each mapped field's ``StagedImage`` rows
become one tensor on the device (``field``): the device rows decoded at full size
(``decode.decode_batch``: nvJPEG on CUDA) and resampled (``batchpixels.resample``: crop, antialiased
resize, flip, bucketed by region size), the CPU rows (already resampled by the workers) uploaded,
both joined at their rows, run through the pixel ops' steps the workers compiled for them, normalized, cast
and laid out together, then erased by a ``RandomErasing`` after the formats (``pixelstage.finish``; without
pixel ops ``batchpixels.finalize``). On CUDA
the work is queued on the finisher's own stream and an event recorded after it; ``handoff`` (in the
consumer's thread) makes the consumer's current stream wait for that event (a GPU-side wait) and
marks the batch's tensors as used on it (``record_stream``), so the caching allocator keeps their
memory until the consumer's queued work is done. Elsewhere both are plain calls. (``decode_batch``
waits, in this thread, for the side stream's earlier work before each nvJPEG call: torchvision's
decoder writes from its own stream into memory allocated on ours.)

Errors: bytes that do not decode raise ``CorruptFileError`` naming the file, sample and field; a
pixel step the output cannot take (a blur kernel wider than it) ``pixel_steps.StepError`` naming
the sample and field;
rows of different channel counts or output sizes (possible across the chunks different workers
read) ``ValueError`` naming the samples and field; a field that is not a list of rows (a
``collate=`` that changed it) ``TypeError``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from ...core.errors import CorruptFileError
from ..kernels.pixel_steps import StepError
from .batchpixels import finalize, resample
from .decode import SampleDecodeError, decode_batch, nvjpeg_available
from .hostfield import StagedImage
from .pixelstage import finish

__all__ = ["DeviceFinisher"]


class _Finished:
    __slots__ = ("batch", "event")

    def __init__(self, batch: Any, event: Any):
        self.batch, self.event = batch, event


def _check_rows(name: str, rows: Any) -> tuple[int, tuple[int, int]]:
    """(channels, size) of a field's rows, checked to agree."""
    if not isinstance(rows, list) or not rows or not all(isinstance(row, StagedImage) for row in rows):
        raise TypeError(f"field {name!r} of the batch must be the loader's list of StagedImage rows, got {type(rows).__name__} (a collate= must keep it)")
    first = rows[0]
    for row in rows:
        channels = int(row.shape[2]) if row.on_device else int(row.pixels.shape[2])  # type: ignore[union-attr]
        if row is first:
            expected = channels
        if channels != expected or row.size != first.size:
            raise ValueError(
                f"sample {row.index}, field {name!r}: {channels} channel(s) at {row.size[0]}x{row.size[1]}, but sample "
                f"{first.index} has {expected} at {first.size[0]}x{first.size[1]} (one batch: one of each; add "
                "ops.ToRGB() and a fixed-size crop)"
            )
    return expected, first.size


class DeviceFinisher:
    """Finishes batches of ``view`` (a ``devicemap.DeviceMapped``) on its device (module doc)."""

    def __init__(self, view: Any):
        self.view, self.device = view, torch.device(view.device)
        if self.device.type == "cuda" and not torch.cuda.is_available():
            raise RuntimeError(f"device {view.device!r}: CUDA is not available to this torch ({torch.__version__})")
        if self.device.type == "cuda" and not nvjpeg_available(self.device):
            warnings.warn(
                "slipstream: torchvision (>= 0.19, built for this torch) is not importable, so the device stage "
                "decodes every JPEG on the CPU in one thread; install it (pip install 'slipstream[gpu]'), or use "
                "cpu_share=1.0 to spread the decoding over the loader's workers",
                RuntimeWarning,
                stacklevel=3,
            )
        self.stream = torch.cuda.Stream(device=self.device) if self.device.type == "cuda" else None

    def field(self, name: str, rows: list[Any]) -> torch.Tensor:
        """Mapped field ``name``'s rows as one tensor (on the current stream)."""
        channels, size = _check_rows(name, rows)
        pipeline, device = self.view.pipelines[name], self.device
        gpu = [k for k, row in enumerate(rows) if row.on_device]
        cpu = [k for k, row in enumerate(rows) if not row.on_device]
        parts = []
        if gpu:
            chosen = [rows[k] for k in gpu]
            try:
                images = decode_batch(
                    [r.data for r in chosen], device, [r.codec for r in chosen], [r.shape for r in chosen],
                    channels, [r.index for r in chosen], pipeline.decode.fast,
                )  # fmt: skip
            except SampleDecodeError as exc:
                raise CorruptFileError(self.view.source_of(exc.index), f"sample {exc.index}, field {name!r}: {exc.reason}") from exc
            boxes = np.array([r.box for r in chosen], np.float64)
            flips = np.array([r.flip for r in chosen], bool)
            parts.append((gpu, resample(images, boxes, size, flips, "CHW", pipeline.filter)))
        if cpu:
            host = torch.from_numpy(np.stack([rows[k].pixels for k in cpu]))
            if device.type == "cuda":
                host = host.pin_memory()
            parts.append((cpu, host.to(device, non_blocking=True).permute(0, 3, 1, 2).to(torch.float32)))
        if len(parts) == 1:
            values = parts[0][1].contiguous()
        else:
            values = torch.empty((len(rows), channels, *size), dtype=torch.float32, device=device)
            for positions, part in parts:
                values[torch.tensor(positions, device=device)] = part
        dtype, layout = self.view.dtypes[name], self.view.layouts[name]
        if not pipeline.pixel and not pipeline.erasing:
            normalize = pipeline.normalize
            mean, std = (normalize.mean, normalize.std) if normalize else (None, None)
            return finalize(values, mean, std, dtype, layout)
        steps = np.stack([row.steps for row in rows])
        boxes = np.stack([row.erase for row in rows], axis=1)
        try:
            return finish(values, pipeline, steps, boxes, dtype, layout)
        except StepError as exc:  # a step the output cannot take (a blur kernel wider than it): name the sample
            raise StepError(f"sample {rows[getattr(exc, 'sample', 0)].index}, field {name!r}: {exc}") from exc

    def _finish_fields(self, batch: Any) -> Any:
        if not isinstance(batch, Mapping):
            raise TypeError(f"a device-mapped batch is a dict of fields, got {type(batch).__name__} (a collate= must keep it)")
        out = dict(batch)
        for name in self.view.pipelines:
            rows = batch[name]
            # one sample (a loader without batching: torch's batch_size=None): its row, as a (C, H, W) tensor
            out[name] = self.field(name, [rows])[0] if isinstance(rows, StagedImage) else self.field(name, rows)
        return out

    def finish(self, batch: Any, then: Callable[[Any], Any] | None = None) -> _Finished:
        """``batch`` with each mapped field a device tensor, queued on this finisher's stream; then
        ``then(batch)`` (the loader's ``batch_ops``) on the same stream, before the event."""
        if self.stream is None:
            out = self._finish_fields(batch)
            return _Finished(out if then is None else then(out), None)
        with torch.cuda.stream(self.stream):
            out = self._finish_fields(batch)
            if then is not None:
                out = then(out)
            event = torch.cuda.Event()
            event.record(self.stream)
        return _Finished(out, event)

    def handoff(self, finished: _Finished) -> Any:
        """The finished batch, usable on the consumer's current stream (module doc)."""
        if finished.event is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_event(finished.event)
            for name in self.view.pipelines:
                finished.batch[name].record_stream(current)
        return finished.batch
