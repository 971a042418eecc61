"""The host part of a field staged for a device: what a CPU worker makes of each sample (NumPy only).

``StagedField(dataset, field, ops, cpu_share).rows(indices, draws)`` returns one ``StagedImage`` per
sample of a chunk of a batch, in the loader's worker, without importing torch:

- a *device row* (``pixels is None``): the stored bytes (zero-copy), the codec, the size from the
  header (checked against the stored shape: ``hostbatch.HostReader``), the window the CPU pipeline draws
  for the sample (``Pipeline.windows`` with ``draws``, the loader's ``sample_draws``: same seed,
  same windows, any worker count) in source pixels, and the flip; the device decodes it at full
  size and resamples it (``images.device.finisher``);
- a *CPU row* (``pixels`` a uint8 (out_h, out_w, C) array): the CPU pipeline's crop, resize and flip
  run here (its crop-aware decode included); the device only normalizes and lays it out with the
  rest. Rows go to the CPU when the device cannot decode them (PNG, QOI, raw pixels, CMYK/YCCK
  JPEGs) and for a ``cpu_share`` of the JPEGs: sample ``i`` (the loader's index) when a uniform
  draw of its own, from a stream no op uses, is below ``cpu_share``. Which samples go is a pure
  function of (seed, epoch, index), so batches repeat with the seed whatever the worker count.

Both kinds carry the sample's pixel-op work, compiled here from the same draws as the CPU
pipeline's (``HostReader``): ``steps`` (its rows of ``Pipeline.pixel_program``) and ``erase`` (its
box for each ``RandomErasing`` after the formats); the device runs both on every row (a CPU row's
pixels are the geometry's uint8 output only).

Errors name the file, sample and field: ``CorruptFileError`` for bytes whose header disagrees with
the stored shape or that do not decode on the CPU; ``ValueError`` for a window an op cannot place,
mixed channel counts or mixed output sizes (``HostReader``'s messages).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...core.draws import Draws
from ...core.errors import CorruptFileError
from ..imageops import Normalize, Op, ToCHW, WindowError
from ..kernels.pixel_steps import WORDS
from ..pipeline import ImageDecodeError, ImageSource, Pipeline
from ..pixelops import PixelOp
from .hostbatch import HostBatch, HostReader

__all__ = ["SHARE_STREAM", "StagedField", "StagedImage"]

SHARE_STREAM = 1 << 20  # the draw stream of the CPU share (ops draw from streams 0, 1, 2...)
_DEVICE_SPACES = ("YCbCr", "Gray", "RGB")  # JPEG colour spaces nvJPEG decodes to RGB or gray as they are


class StagedImage:
    """One sample of a staged field, as a worker hands it over (module doc). ``index``: the
    sample's index in the dataset (errors name it); ``size``: the output (out_h, out_w); a device
    row has ``codec``, ``data`` (uint8 bytes), ``shape`` (height, width, channels decoded),
    ``box`` (top, left, height, width; floats) and ``flip``; a CPU row has ``pixels``. Every row:
    ``steps`` float64 (S, ``pixel_steps.WORDS``), its pixel ops' steps (S may be 0), and ``erase``
    int64 (E, 4), its box for each of the pipeline's E ``RandomErasing`` after the formats
    (``RandomErasing.boxes``: height -1 when not erased)."""

    __slots__ = ("box", "codec", "data", "erase", "flip", "index", "pixels", "shape", "size", "steps")

    def __init__(self, index: int, size: tuple[int, int], *, codec: str = "", data: Any = None, shape: Any = None, box: Any = None, flip: bool = False, pixels: np.ndarray | None = None, steps: np.ndarray | None = None, erase: np.ndarray | None = None):
        self.index, self.size, self.codec, self.data, self.shape = index, size, codec, data, shape
        self.box, self.flip, self.pixels = box, flip, pixels
        self.steps = np.zeros((0, WORDS)) if steps is None else steps
        self.erase = np.zeros((0, 4), np.int64) if erase is None else erase

    def __getstate__(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__slots__)

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for name, value in zip(self.__slots__, state):
            setattr(self, name, value)

    @property
    def on_device(self) -> bool:
        """Whether the device decodes and resamples this sample (else the CPU did)."""
        return self.pixels is None

    def __repr__(self) -> str:
        where = f"{self.codec} {self.shape}" if self.on_device else f"CPU pixels {self.pixels.shape}"  # type: ignore[union-attr]
        return f"StagedImage(sample {self.index}, {where} -> {self.size})"


def _geometry_only(pipeline: Pipeline) -> Pipeline:
    """``pipeline`` without its Normalize, ToCHW and pixel ops: uint8 (H, W, C) crops, the same
    draws (the geometry comes before every pixel op, so its ops keep their streams: see
    ``Pipeline.streams``)."""
    return Pipeline([op for op in pipeline.ops if not isinstance(op, (Normalize, ToCHW, PixelOp))])


class StagedField:
    """The host part of image field ``field`` of a packed ``dataset`` through ``ops`` (module doc)."""

    def __init__(self, dataset: Any, field: str, ops: Sequence[Op] | Pipeline, cpu_share: float = 0.0):
        self.reader = HostReader(dataset, field, ops)
        self.dataset, self.field, self.cpu_share = dataset, field, float(cpu_share)  # checked by devicemap.device_map
        self.pipeline = self.reader.pipeline
        self.cpu_pipeline = _geometry_only(self.pipeline)

    def _cpu_rows(self, batch: HostBatch, draws: Draws) -> np.ndarray:
        """Which samples the CPU resamples (module doc)."""
        mask = np.array([codec != "jpeg" or space not in _DEVICE_SPACES for codec, space in zip(batch.codecs, batch.colorspaces)], bool)
        if self.cpu_share > 0.0:
            mask |= draws.uniforms(SHARE_STREAM, 1)[:, 0] < self.cpu_share
        return mask

    def rows(self, indices: Sequence[int] | np.ndarray, draws: Draws) -> list[StagedImage]:
        """The staged rows of dataset samples ``indices`` (sample ``k`` drawing ``draws.take([k])``)."""
        batch = self.reader.read_draws(indices, draws)
        size = batch.size
        on_cpu = self._cpu_rows(batch, draws)
        out = []
        for k, index in enumerate(batch.indices):
            if on_cpu[k]:
                source = ImageSource(batch.codecs[k], batch.data[k], tuple(int(v) for v in batch.stored[k]))
                pixels = self._resample_here(index, source, draws.take([k]))
                out.append(StagedImage(index, size, pixels=pixels, steps=batch.steps[k], erase=batch.erase[:, k]))
            else:
                box = tuple(float(v) for v in batch.boxes[k])
                out.append(StagedImage(index, size, codec=batch.codecs[k], data=batch.data[k], shape=tuple(int(v) for v in batch.shapes[k]), box=box, flip=bool(batch.flips[k]), steps=batch.steps[k], erase=batch.erase[:, k]))
        return out

    def _resample_here(self, index: int, source: ImageSource, draws: Draws) -> np.ndarray:
        """The CPU pipeline's uint8 (out_h, out_w, C) crop of one sample."""
        try:
            return self.cpu_pipeline.run(source, draws=draws)
        except ImageDecodeError as exc:
            raise CorruptFileError(self.dataset.source_of(index), f"sample {index}, field {self.field!r}: {exc}") from exc
        except WindowError as exc:
            raise ValueError(f"sample {index}, field {self.field!r}: {exc}") from exc
