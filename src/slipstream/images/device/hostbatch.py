"""The CPU side of the device stage: what a worker does for a batch without decoding a pixel.

``HostReader(dataset, field, pipeline).read(indices, seed, epoch)`` returns a ``HostBatch``: each
sample's stored bytes (zero-copy views into the packed file's pages), its codec, its size as its
own header says it (JPEG SOF, PNG IHDR, QOI header; raw pixels: the stored shape), checked against
the stored shape, and the window the CPU pipeline draws for it: ``Pipeline.windows`` over those
sizes with ``Draws(seed, epoch, indices)``, the draws ``ss.open(p).map(field=ops)`` uses when a
loader reads samples ``indices`` of ``epoch`` under ``seed``; with pixel ops, the steps
(``Pipeline.pixel_program``) and the boxes of each ``RandomErasing`` after the formats
(``Pipeline.erase_boxes``) that the CPU pipeline compiles from the same draws for the output
size. The windows are in source pixels: the device decodes every image at full size (no DCT
downscale, as ``ops.Decode(exact=True)``).

Errors name the sample: a stored shape its header disagrees with raises ``CorruptFileError`` (as
the CPU path does when it decodes those bytes), and so does a header that declares more pixels
than its bytes can encode (``images.encoded.codecs.check_encoded_size``: no buffer, on the host or the
device, is sized by it), a window an op cannot place (a crop larger than the
image) ``ValueError``, samples of different channel counts (a file packed with each image's own
channels, without ``ops.ToRGB()``) ``ValueError``, and outputs of different sizes (a ``Resize`` that keeps the aspect ratio)
``ValueError``: one batch tensor needs one size.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ...core.draws import Draws
from ...core.errors import CorruptFileError
from ..encoded import codecs as _imaging
from ..imageops import Op, WindowError
from ..kernels.pixel_steps import WORDS
from ..pipeline import Pipeline
from .geometry import MixedSizeError, boxes_of

__all__ = ["HostBatch", "HostReader", "header_size"]


class HostBatch:
    """One batch as the CPU workers hand it to the device: per sample ``indices`` (the loader's),
    ``codecs`` (names), ``data`` (encoded bytes, uint8 arrays), ``shapes`` int64 (n, 3) (height,
    width from the header; channels the decoder outputs), and the resampling arguments ``boxes``
    float64 (n, 4) (top, left, height, width in source pixels), ``flips`` bool (n,), ``size``
    (out_h, out_w); also ``stored`` int64 (n, 3), the stored shapes, and ``colorspaces``, each
    JPEG's colour space as libjpeg names it ("YCbCr", "Gray", "RGB", "CMYK", "YCCK"; None for the
    other codecs), from the one header parse. The pixel ops': ``steps`` float64 (n, S,
    ``pixel_steps.WORDS``) (S may be 0) and ``erase`` int64 (E, n, 4), the boxes (top, left,
    height, width; height -1: not erased) of the pipeline's E ``RandomErasing`` after its formats
    (``Pipeline.erasing``), in order."""

    __slots__ = ("boxes", "codecs", "colorspaces", "data", "erase", "flips", "indices", "shapes", "size", "steps", "stored")

    def __init__(self, indices: list[int], codecs: list[str], data: list[Any], shapes: np.ndarray, boxes: np.ndarray, flips: np.ndarray, size: tuple[int, int], stored: np.ndarray, colorspaces: list[str | None], steps: np.ndarray | None = None, erase: np.ndarray | None = None):
        self.indices, self.codecs, self.data, self.shapes = indices, codecs, data, shapes
        self.boxes, self.flips, self.size = boxes, flips, size
        self.stored, self.colorspaces = stored, colorspaces
        n = len(indices)
        self.steps = np.zeros((n, 0, WORDS)) if steps is None else steps
        self.erase = np.zeros((0, n, 4), np.int64) if erase is None else erase

    def __len__(self) -> int:
        return len(self.indices)


def header_size(codec: str, data: Any) -> tuple[int, int] | None:
    """(height, width) as the encoded header says (JPEG's SOF, PNG's IHDR, QOI's header); None for
    raw pixels (they have no header), for a header that cannot be read, one shorter than the bytes
    that hold the sizes (PNG: 24, through IHDR's height; QOI: its 14-byte header), and a size of 0.
    (``images.encoded.codecs.header_size`` with ``complete=True``.)"""
    return _imaging.header_size(codec, data, complete=True)


def _pipeline(ops: Any) -> Pipeline:
    pipeline = ops if isinstance(ops, Pipeline) else Pipeline(list(ops))
    if pipeline.tail:
        raise ValueError("the device stage runs the built-in ops only (crop/resize, flip, Normalize, ToCHW, ToRGB, Decode), not custom ops")
    if any(op.channels == 1 for _, op in pipeline.pixel):
        raise ValueError(
            "the device stage does not run ops.Grayscale(num_output_channels=1) (a batch of one channel out of three): "
            "use ops.Grayscale(3) (three equal channels), or map the field without device= to run it on the CPU"
        )
    return pipeline


def _index_array(indices: Any) -> np.ndarray:
    """``indices`` as a 1-d int64 array; ``TypeError`` for anything but integers (floats, bools)."""
    array = np.asarray(indices)
    if array.dtype.kind not in "iu" or array.ndim > 1:
        raise TypeError(f"indices must be a 1-d sequence of integers, got {array.dtype} of shape {array.shape}")
    return array.reshape(-1).astype(np.int64)


class HostReader:
    """Reads batches of image field ``field`` of ``dataset`` (a packed dataset: ``encoded``,
    ``source_of``) for ``ops`` (a list of ``slipstream.ops`` or a ``Pipeline``; see the module doc)."""

    def __init__(self, dataset: Any, field: str, ops: Sequence[Op] | Pipeline):
        if not callable(getattr(dataset, "encoded", None)) or not callable(getattr(dataset, "source_of", None)):
            raise TypeError(f"the device stage reads packed files (ss.open(path)), got {type(dataset).__name__}")
        if field not in dataset.fields:
            raise KeyError(f"no field {field!r} to read; the data has {list(dataset.fields)}")
        self.dataset, self.field, self.pipeline = dataset, field, _pipeline(ops)

    def _where(self, index: int) -> str:
        return f"sample {index}, field {self.field!r}"

    def _sample(self, index: int) -> tuple[str, Any, tuple[int, int, int], tuple[int, int, int], str | None]:
        """(codec, bytes, (height, width, decoded channels), stored shape, JPEG colour space) of one
        sample, its header parsed once and checked."""
        codec, data, stored = self.dataset.encoded(index, self.field)
        stored = tuple(int(v) for v in stored)
        space = None
        if codec == "jpeg":
            try:
                height, width, space = _imaging.jpeg_info(data)
                found: tuple[int, int] | None = (int(height), int(width))
            except (ValueError, RuntimeError, OSError):
                found = None
        elif codec != "raw":
            found = header_size(codec, data)
        if codec != "raw" and found != stored[:2]:
            message = _imaging.header_mismatch(stored, codec, found)
            raise CorruptFileError(self.dataset.source_of(index), f"{self._where(index)}: {message}")
        if codec != "raw":  # a header (and stored shape) the bytes cannot fill sizes no buffer, here or on the device
            try:
                _imaging.check_encoded_size(codec, data)
            except ValueError as exc:
                raise CorruptFileError(self.dataset.source_of(index), f"{self._where(index)}: {exc}") from None
        return codec, data, (stored[0], stored[1], int(self.pipeline.channels or stored[2])), stored, space

    def read(self, indices: Sequence[int] | np.ndarray, seed: int, epoch: int) -> HostBatch:
        """Samples ``indices`` (the loader's indices, which key the draws) of ``epoch`` under
        ``seed``: their bytes, header sizes and windows (module doc)."""
        keys = _index_array(indices)
        if len(keys) and int(keys.min()) < 0:
            raise IndexError(f"sample index {int(keys.min())} is negative: the draws are keyed by the loader's (non-negative) indices")
        return self.read_draws(keys, Draws(seed, epoch, keys))

    def read_draws(self, indices: Sequence[int] | np.ndarray, draws: Draws) -> HostBatch:
        """``read`` of dataset samples ``indices`` with sample ``k`` drawing ``draws.take([k])`` (in a
        loader: ``sample_draws``, keyed by the loader's indices, which differ from the dataset's
        under a view)."""
        indices = _index_array(indices).tolist()
        if not indices:
            raise ValueError("a batch needs at least one index")
        if len(draws) != len(indices):
            raise ValueError(f"{len(draws)} draws for {len(indices)} samples")
        samples = [self._sample(i) for i in indices]
        shapes = np.array([sample[2] for sample in samples], np.int64)
        mixed = shapes[:, 2] != shapes[0, 2]
        if mixed.any():
            k = int(np.argmax(mixed))
            raise ValueError(
                f"{self._where(indices[k])}: {shapes[k, 2]} channel(s), but sample {indices[0]} has {shapes[0, 2]} "
                "(one batch needs one channel count: add ops.ToRGB() to the ops)"
            )
        try:
            windows = self.pipeline.windows(shapes[:, 0], shapes[:, 1], draws)
        except WindowError as exc:
            raise ValueError(f"{self._where(indices[exc.position])}: {exc}") from exc
        try:
            boxes, flips, size = boxes_of(windows)
        except MixedSizeError as exc:
            k = exc.position
            raise ValueError(
                f"{self._where(indices[k])}: output size {windows.out_h[k]}x{windows.out_w[k]} differs from sample "
                f"{indices[0]}'s {windows.out_h[0]}x{windows.out_w[0]} (one batch needs one output size: crop to it)"
            ) from None
        codecs, data, _, stored, spaces = (list(column) for column in zip(*samples))
        steps, erase = self._pixel_work(draws, len(indices), size)
        return HostBatch(indices, codecs, data, shapes, boxes, flips, size, np.array(stored, np.int64), spaces, steps, erase)

    def _pixel_work(self, draws: Draws, n: int, size: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
        """The pixel ops' steps (n, S, WORDS) and the erasing boxes (E, n, 4) for outputs of ``size``."""
        pipeline = self.pipeline
        heights, widths = np.full(n, size[0], np.int64), np.full(n, size[1], np.int64)
        steps = pipeline.pixel_program(draws, heights, widths) if pipeline.pixel else np.zeros((n, 0, WORDS))
        boxes = [b for _, b in pipeline.erase_boxes(draws, heights, widths)]
        erase = np.stack(boxes).astype(np.int64) if boxes else np.zeros((0, n, 4), np.int64)
        return np.ascontiguousarray(steps, np.float64), erase
