"""Compiled image pipelines: decode fused with the geometry, one resampling pass into the slot.

``Pipeline(ops).run(source, out, draws)`` takes an ``ImageSource`` (encoded bytes and their codec,
or a decoded array), places the geometry ops' window with the sample's counter-based draws
(``core.draws``; by default those of the sample being loaded, ``sample_draws``), decodes the JPEG
at the smallest DCT scale (1/2, 1/4, 1/8) that still covers the window at the output size (into a
per-thread scratch buffer that is reused), and resamples the window straight into ``out`` (the
batch slot), flipped, laid out and normalized in the same pass. Custom ``ops.Apply`` steps break
the fusion: the geometry then goes to a uint8 HxWxC image that they are given in turn.
``Pipeline.windows`` places many samples' windows at once (what ``images.imagetasks`` runs a whole
chunk of a batch from, in one compiled call).
"""

from __future__ import annotations

import threading
from time import perf_counter as clock
from typing import Any

import numpy as np

from ..core import timings
from ..core.draws import Draws
from ..core.rng import sample_draws
from . import compiled as _compiled
from . import kernels as _kernels
from .encoded import codecs as _imaging
from .imageops import Apply, Decode, Geometry, Normalize, Op, ToCHW, ToRGB, Windows
from .kernels import pixel_steps as _pixel_steps
from .pixelops import PixelOp, RandomErasing
from .placement import place

__all__ = ["ImageDecodeError", "ImageSource", "Pipeline", "region_decoder", "region_decoder_status"]


class ImageDecodeError(ValueError):
    """The image's bytes do not decode (damaged or truncated). Raised by ``ImageSource.decode``;
    ``MappedFields`` re-raises it naming the sample and field (``CorruptFileError`` for a packed file)."""


_scratch = threading.local()


# The compiled region decoder, unless missing (no compiler or libjpeg headers at install) or
# disabled with SLIPSTREAM_NO_ROIJPEG=1.
_roi: Any = _compiled.EXTENSION
_roi_status = _compiled.STATUS
ROI_DECODE = _roi is not None  # whether JPEGs are decoded window by window (see ``ImageSource.decode``)


def region_decoder() -> Any:
    """The compiled ``_roijpeg`` extension (region decoding and whole image tasks), or None."""
    return _roi


def region_decoder_status() -> str:
    """Whether JPEGs are decoded window by window (the compiled ``_roijpeg`` extension): "active",
    "disabled by SLIPSTREAM_NO_ROIJPEG", "not built" (no C compiler or libjpeg headers when
    slipstream was installed: whole JPEGs are decoded, then cropped) or "failed to import (...)"."""
    return _roi_status


def _scratch_buffer(nbytes: int, which: str = "decode") -> np.ndarray:
    """This thread's reusable buffer ``which``, at least ``nbytes`` long."""
    buffer = getattr(_scratch, which, None)
    if buffer is None or buffer.nbytes < nbytes:
        buffer = np.empty(max(nbytes, 1 << 20), np.uint8)
        setattr(_scratch, which, buffer)
    return buffer


REGION, WHOLE = 1, 2  # ImageSource.checked: how these bytes decoded strictly before


class ImageSource:
    """An image to run a pipeline on: ``codec`` and encoded ``data`` (zero-copy bytes), or
    ``codec="array"`` and a decoded uint8 (H, W, C) array as ``data``; ``shape`` is (H, W, C).
    ``checked``: 0, or these very bytes decoded strictly before (a packed file's sample seen in an
    earlier epoch): ``REGION`` by the region decoder, ``WHOLE`` only whole (CMYK, progressive with
    scans missing). Then their header is not parsed again, and a region decode does not read the
    rest of the file for damage. ``decode`` sets it when it succeeds."""

    __slots__ = ("checked", "codec", "data", "shape")

    def __init__(self, codec: str, data: Any, shape: tuple[int, int, int]):
        self.codec, self.data, self.shape = codec, data, shape
        self.checked = 0

    @classmethod
    def of(cls, value: Any, where: str = "image") -> ImageSource:
        """From a container's field value: encoded image bytes, or an image array (H, W) / (H, W, C)."""
        if isinstance(value, ImageSource):
            return value
        if isinstance(value, (bytes, bytearray, memoryview)):
            codec = _imaging.sniff(value)
            if codec == "jpeg":
                try:
                    header = _imaging.jpeg_header(value)
                except ValueError as exc:
                    raise ValueError(f"{where}: cannot decode jpeg image: {exc}") from exc
                if header is not None:
                    return cls("jpeg", value, header)
            image = _imaging.as_image(value, where)
            return cls("array", image, image.shape)
        image = _imaging.as_image(value, where)
        return cls("array", image, image.shape)

    def decode(
        self, windows: Windows, options: Decode, channels: int | None = None
    ) -> tuple[np.ndarray, tuple[float, float, float, float]]:
        """The decoded pixels that cover the (one) window, and the window's box in them (top, left,
        height, width). A JPEG is decoded at a reduced DCT scale when the window stays at least its
        output size (unless ``exact``), and, when the ``_roijpeg`` extension is built, only the rows
        and columns around the window (with a margin wider than the resampling filter reaches):
        ``placement.place`` says which, as for a whole task. ``channels`` (1 or 3; default the
        source's own) is what the decoder outputs: libjpeg converts a grayscale JPEG to RGB itself,
        PNG and QOI convert as they decode, and arrays (raw pixels) are converted into a new array.

        Bytes that do not decode raise ``ImageDecodeError``, on every path alike: a JPEG is refused
        when libjpeg warns anywhere in the file (truncated, corrupt data), even below the window.
        """
        height, width, own = self.shape
        channels = own if channels is None else channels
        jpeg = self.codec == "jpeg"
        factor, dec_h, dec_w, box, region = place(windows, [height], [width], np.array([jpeg]), options.exact).row(0)
        if self.codec == "array":
            return _imaging.to_channels(self.data, channels), box
        if not jpeg:
            try:
                return _imaging.decode(self.codec, self.data, self.shape, channels=channels), box
            except ValueError as exc:
                raise ImageDecodeError(str(exc)) from exc
        if self.checked:
            use_region = self.checked == REGION and _roi is not None
        else:
            try:
                use_region = self._check_jpeg_size() and _roi is not None
            except ValueError as exc:
                raise ImageDecodeError(f"cannot decode jpeg image: {exc}") from exc
        try:
            if use_region:
                try:
                    image = self._decode_region(region, options, factor, (dec_h, dec_w, channels))
                    self.checked = REGION
                    return image, box
                except NotImplementedError:
                    pass  # a progressive JPEG with scans missing: only a whole decode gives the same pixels
            image = self._decode_whole(options, factor, (dec_h, dec_w, channels))
            self.checked = WHOLE if _roi is not None else 0
            return image, box
        except ValueError as exc:
            raise ImageDecodeError(f"cannot decode jpeg image: {exc}") from exc

    def _check_jpeg_size(self) -> bool:
        """Check the JPEG's own size against ``shape`` (the stored one, for a packed file: damage
        there must not size the buffers, nor reshape the pixels on one path and fail on another).
        A header that declares more pixels than the bytes can encode is damage too, stored shape and
        all (``codecs.check_encoded_size``). Returns whether the region decoder handles its colour
        space (not CMYK/YCCK: those are decoded whole, and converted to RGB)."""
        height, width, colorspace = _imaging.jpeg_info(self.data)
        if (height, width) != self.shape[:2]:
            raise ValueError(f"the jpeg image is {height}x{width} but its stored shape is {self.shape}")
        _imaging.check_encoded_size("jpeg", self.data)  # a header (and stored shape) the bytes cannot fill: no buffer for it
        return colorspace in ("Gray", "YCbCr", "RGB")

    def _decode_region(
        self, region: tuple[int, int, int, int], options: Decode, factor: int, shape: tuple[int, int, int]
    ) -> np.ndarray:
        """The JPEG at 1/factor scale in a per-thread canvas of ``shape``, decoded only in the rows
        and columns of ``region`` (top, left, rows, cols: the box and the resampling filter's
        reach), placed where a whole decode puts them: the kernel then computes exactly what it
        computes on a whole image. The band's own edges may upsample chroma differently; the
        kernel never reads them."""
        dec_h, dec_w, channels = shape
        canvas = _scratch_buffer(dec_h * dec_w * channels, "canvas")[: dec_h * dec_w * channels]
        row0, col0, rows, cols = _roi.decode_region(
            self.data,
            *region,
            canvas,
            fast=options.fast,
            gray=channels == 1,
            scale=factor,
            whole=True,
            check_rest=not self.checked,
        )
        if row0 + rows > dec_h or col0 + cols > dec_w:
            raise ValueError(f"the region decoder returned rows {row0}+{rows}, columns {col0}+{cols} of a {dec_h}x{dec_w} image")
        return canvas.reshape(dec_h, dec_w, channels)

    def _decode_whole(self, options: Decode, factor: int, shape: tuple[int, int, int]) -> np.ndarray:
        """The whole JPEG at 1/factor scale (``codecs.decode_jpeg_scaled``, strict), in a per-thread buffer of ``shape``."""
        dec_h, dec_w, channels = shape
        buffer = _scratch_buffer(dec_h * dec_w * channels)
        colorspace = "GRAY" if channels == 1 else "RGB"
        image = _imaging.decode_jpeg_scaled(self.data, colorspace, buffer, options.fast, factor, dec_h, dec_w)
        if image.ndim == 2:
            image = image[:, :, None]
        if image.shape != shape:
            raise ValueError(f"the jpeg image decodes to shape {image.shape}, expected {shape}")
        return image


class Pipeline:
    """A list of ops compiled into fused stages (see the module doc)."""

    def __init__(self, ops: list[Op]):
        if not isinstance(ops, (list, tuple)) or not all(isinstance(op, Op) or callable(op) for op in ops):
            raise TypeError(f"a pipeline is a list of slipstream.ops operations, got {ops!r}")
        ops = [op if isinstance(op, Op) else Apply(op) for op in ops]
        first_custom = next((k for k, op in enumerate(ops) if isinstance(op, Apply)), len(ops))
        head, self.tail = ops[:first_custom], ops[first_custom:]
        # each op that draws random numbers draws from its own stream: the count of such ops before
        # it, so ops that draw nothing (ToRGB, Normalize, Resize...) can come and go without changing them
        self.streams = list(np.cumsum([0] + [getattr(op, "draws", 0) > 0 for op in ops[:-1]]).tolist()) if ops else []
        self.geometry = [(self.streams[k], op) for k, op in enumerate(head) if isinstance(op, Geometry)]  # (stream, op)
        self.draw_streams = tuple((stream, op.draws) for stream, op in self.geometry if op.draws)  # what ``windows`` draws
        decodes = [op for op in head if isinstance(op, Decode)]
        if len(decodes) > 1:
            raise ValueError("a pipeline takes at most one Decode, before its custom ops")
        self.decode = decodes[0] if decodes else Decode()
        formats = [op for op in head if isinstance(op, (Normalize, ToCHW))]
        self.normalize = next((op for op in formats if isinstance(op, Normalize)), None)
        self.chw = any(isinstance(op, ToCHW) for op in formats)
        self.channels = 3 if any(isinstance(op, ToRGB) for op in head) else None  # None: each image's own
        if sum(isinstance(op, Normalize) for op in formats) > 1 or sum(isinstance(op, ToCHW) for op in formats) > 1:
            raise ValueError("a pipeline takes at most one Normalize and one ToCHW before its custom ops")
        self.filter = next((op.interpolation for _, op in reversed(self.geometry) if hasattr(op, "interpolation")), "bilinear")
        self.pixel, self.erasing = _pixel_stages(head, self.streams)
        self.ops = ops
        _compiled.warn_if_missing()  # once per process, when the compiled image core is missing

    def __repr__(self) -> str:
        return f"Pipeline({self.ops!r})"

    def windows(self, heights: Any, widths: Any, draws: Draws) -> Windows:
        """The fused geometry's windows over images of ``heights`` x ``widths``, one per sample of
        ``draws`` (each op that draws from its own stream, see ``streams``). Raises
        ``ops.WindowError`` naming the position of a sample an op cannot apply to."""
        windows = Windows(heights, widths)
        u = draws.block(self.draw_streams) if self.draw_streams else np.empty((len(windows), 0))
        column = 0
        for _, op in self.geometry:
            op.place(windows, u[:, column : column + op.draws])
            column += op.draws
        return windows

    @property
    def pixel_streams(self) -> tuple[tuple[int, int], ...]:
        """(stream, draws) of the pixel ops that draw (read as the ops are now: they may change between epochs)."""
        return tuple((stream, op.draws) for stream, op in self.pixel if op.draws)

    @property
    def erasing_streams(self) -> tuple[tuple[int, int], ...]:
        return tuple((stream, op.draws) for stream, op in self.erasing)

    @property
    def out_channels(self) -> int | None:
        """The channel count a ``Grayscale`` among the pixel ops gives (None: the decoded image's)."""
        return next((op.channels for _, op in reversed(self.pixel) if op.channels is not None), None)

    def pixel_program(self, draws: Draws, heights: Any, widths: Any) -> np.ndarray:
        """The pixel ops' steps ((n, steps, ``pixel_steps.WORDS``) float64) of the samples of
        ``draws``, whose geometry outputs are ``heights`` x ``widths`` (each op drawing from its
        own stream, see ``streams``)."""
        heights, widths = np.asarray(heights, np.int64), np.asarray(widths, np.int64)
        u = draws.block(self.pixel_streams) if self.pixel_streams else np.empty((len(heights), 0))
        parts, column = [], 0
        for _, op in self.pixel:
            parts.append(op.program(u[:, column : column + op.draws], heights, widths))
            column += op.draws
        return np.concatenate(parts, axis=1) if parts else np.zeros((len(heights), 0, _pixel_steps.WORDS))

    def erase_boxes(self, draws: Draws, heights: Any, widths: Any) -> list[tuple[RandomErasing, np.ndarray]]:
        """Each ``RandomErasing`` after the format ops with its (n, 4) boxes (``RandomErasing.boxes``)."""
        if not self.erasing:
            return []
        heights, widths = np.asarray(heights, np.int64), np.asarray(widths, np.int64)
        u = draws.block(self.erasing_streams)
        boxes, column = [], 0
        for _, op in self.erasing:
            boxes.append((op, op.boxes(u[:, column : column + op.draws], heights, widths)))
            column += op.draws
        return boxes

    def output(self, channels: int, out_h: int, out_w: int) -> tuple[tuple[int, int, int], np.dtype]:
        """The fused stages' output (shape, dtype) for a window of that size with ``channels``
        (a ``Grayscale(1)`` among the pixel ops makes it 1)."""
        channels = self.out_channels or channels
        dtype = numpy_dtype(self.normalize) if self.normalize else np.dtype(np.uint8)
        return ((channels, out_h, out_w) if self.chw else (out_h, out_w, channels)), dtype

    def run(self, source: ImageSource, out: np.ndarray | None = None, draws: Draws | None = None) -> np.ndarray:
        """Run on one image, with ``draws`` (one sample's; default ``sample_draws(1)``: the sample
        being loaded); write into ``out`` when its shape fits and its dtype casts safely into
        ``out``'s, else return a new array (never a lossy copy into ``out``)."""
        height, width, own = source.shape
        channels = self.channels or own
        draws = sample_draws(1) if draws is None else draws
        windows = self.windows([height], [width], draws)
        window = windows.row(0)
        began = clock()
        image, box = source.decode(windows, self.decode, channels)
        decoded = clock()
        timings.add("decode", decoded - began)
        if self.pixel or self.erasing:
            result = self._run_pixel(image, box, window, draws, channels, out)
            timings.add("augment", clock() - decoded)
            if not self.tail:
                return result
        elif not self.tail:
            shape, dtype = self.output(channels, window.out_h, window.out_w)
            target = out if out is not None and out.shape == shape and out.dtype == dtype else np.empty(shape, dtype)
            scale, offset = self.normalize.coefficients(channels) if self.normalize else (None, None)
            result = _kernels.resample_into(
                image, box, target, flip=window.flip, filter=self.filter, chw=self.chw, scale=scale, offset=offset
            )
            timings.add("augment", clock() - decoded)
            return result
        else:
            result = _kernels.resample_into(
                image, box, np.empty((window.out_h, window.out_w, channels), np.uint8), flip=window.flip, filter=self.filter
            )
            if self.normalize is not None or self.chw:  # formats placed before the custom ops still apply first
                result = _format(result, self.normalize, self.chw)
        for k in range(len(self.ops) - len(self.tail), len(self.ops)):
            result = _step(self.ops[k], result, draws, self.streams[k], any(isinstance(op, ToCHW) for op in self.ops[:k]))
        result = np.asarray(result)
        timings.add("augment", clock() - decoded)
        if out is not None and result.shape == out.shape and np.can_cast(result.dtype, out.dtype, casting="safe"):
            np.copyto(out, result, casting="safe")
            return out
        return result  # the caller checks it (float64 into a float32 batch is refused, as default_collate does)

    def _run_pixel(
        self, image: np.ndarray, box: Any, window: Any, draws: Draws, channels: int, out: np.ndarray | None
    ) -> np.ndarray:
        """The fused geometry into uint8, the pixel ops' steps, the formats, then the erasing after them."""
        pixels = _kernels.resample_into(
            image, box, np.empty((window.out_h, window.out_w, channels), np.uint8), flip=window.flip, filter=self.filter
        )
        program = self.pixel_program(draws, [window.out_h], [window.out_w])[0]
        start = 0
        for _, op in self.pixel:  # op by op: Grayscale(1) changes the channel count between them
            pixels = run_steps(pixels, program[start : start + op.steps])
            start += op.steps
            pixels = _to_channels(pixels, op.channels)
        shape, dtype = self.output(pixels.shape[2], window.out_h, window.out_w)
        target = (
            out if out is not None and not self.tail and out.shape == shape and out.dtype == dtype else np.empty(shape, dtype)
        )
        formatted = _format(pixels, self.normalize, self.chw)
        target[...] = formatted
        for op, boxes in self.erase_boxes(draws, [window.out_h], [window.out_w]):
            op.erase([target], boxes, self.chw)
        return target


def run_steps(image: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """``steps`` on ``image`` (uint8 (H, W, 1 or 3), C-contiguous, in place): the compiled executor
    when the extension is active, else the NumPy reference (the same bits)."""
    if not len(steps):
        return image
    executor = getattr(_compiled.EXTENSION, "pixel_steps", None)
    if executor is not None:
        executor(image, np.ascontiguousarray(steps, np.float64))
        return image
    return _pixel_steps.run(image, steps)


def _pixel_stages(head: list[Op], streams: list[int]) -> tuple[list[tuple[int, PixelOp]], list[tuple[int, RandomErasing]]]:
    """The pixel ops that run on uint8 pixels and the ``RandomErasing`` after ``Normalize`` (on
    its output), as (stream, op); ``ValueError`` for an order the fused stages cannot run. (``ToCHW``
    only sets the output layout: pixel ops may come before or after it.)"""
    pixel: list[tuple[int, PixelOp]] = []
    erasing: list[tuple[int, RandomErasing]] = []
    normalize = None
    for k, op in enumerate(head):
        if isinstance(op, Normalize):
            normalize = normalize or op
        elif isinstance(op, RandomErasing) and normalize is not None:
            erasing.append((streams[k], op))
        elif isinstance(op, PixelOp):
            if normalize is not None:
                raise ValueError(f"{op!r} works on uint8 pixels: put it before {normalize!r} (only ops.RandomErasing may follow ops.Normalize)")
            if isinstance(op, RandomErasing):
                op.check_uint8()
            pixel.append((streams[k], op))
        elif isinstance(op, Geometry) and (pixel or erasing):
            raise ValueError(
                f"{op!r} comes after {(pixel or erasing)[0][1]!r}: crops, resizes and flips come before the pixel ops (they are fused into the "
                "decode); move it before them, or run the later geometry in an ops.Apply"
            )
    return pixel, erasing


def _to_channels(pixels: np.ndarray, channels: int | None) -> np.ndarray:
    """uint8 (H, W, C) pixels with ``channels`` (None: as they are): the first channel of equal
    ones, or one repeated three times."""
    if channels == 1 and pixels.shape[2] != 1:
        return np.ascontiguousarray(pixels[:, :, :1])
    if channels == 3 and pixels.shape[2] == 1:
        return np.repeat(pixels, 3, axis=2)
    return pixels


def numpy_dtype(normalize: Normalize) -> np.dtype:
    """``normalize``'s output dtype on the CPU; ``ValueError`` for bfloat16 (a device stage's only)."""
    if normalize.dtype == "bfloat16":
        raise ValueError(
            "ops.Normalize(dtype='bfloat16') runs on a device stage only (ss.open(p).map(image=[...], device=...)): NumPy has no bfloat16"
        )
    return np.dtype(normalize.dtype)


def _format(image: np.ndarray, normalize: Normalize | None, chw: bool) -> np.ndarray:
    if normalize is not None:
        scale, offset = normalize.coefficients(image.shape[-1])
        image = (image.astype(np.float32) * scale + offset).astype(numpy_dtype(normalize))
    return np.ascontiguousarray(image.transpose(2, 0, 1)) if chw else image


def _step(op: Op, image: Any, draws: Draws, stream: int, chw: bool = False) -> Any:
    """One op after the fused stages, in NumPy (an op that draws draws from ``stream``; ``chw``:
    a ``ToCHW`` came before it)."""
    if isinstance(op, RandomErasing) and not (isinstance(image, np.ndarray) and image.dtype == np.uint8 and image.ndim == 3 and image.shape[2] in (1, 3) and not chw):
        # any other image (normalized, channels first, a tensor): erased in its own units and layout,
        # channels first after ops.ToCHW or when only axis 0 holds 1 or 3 entries
        array = image.clone() if hasattr(image, "clone") else np.array(image)
        if array.ndim != 3:
            raise TypeError(f"{op!r} after a custom op needs an (H, W, C) or (C, H, W) image, got shape {tuple(array.shape)}")
        first = chw or (array.shape[0] in (1, 3) and array.shape[2] not in (1, 3))
        height, width = array.shape[1:] if first else array.shape[:2]
        op.erase([array], op.boxes(draws.uniforms(stream, op.draws), [height], [width]), first)
        return array
    if isinstance(op, PixelOp):
        array = np.ascontiguousarray(np.asarray(image))
        if array.dtype != np.uint8 or array.ndim != 3 or array.shape[2] not in (1, 3) or chw:
            raise TypeError(
                f"{op!r} after a custom op needs a uint8 (H, W, 1 or 3) image, got {array.dtype} {array.shape}{' (after ops.ToCHW)' if chw else ''}"
            )
        array = array.copy()
        steps = op.program(draws.uniforms(stream, op.draws), np.array([array.shape[0]]), np.array([array.shape[1]]))[0]
        array = run_steps(array, steps)
        return _to_channels(array, op.channels)
    if isinstance(op, Apply):
        result = op.fn(image)
        return image if result is None else result  # an in-place op may return nothing
    if isinstance(op, Normalize):
        return _format(np.asarray(image), op, False)
    if isinstance(op, ToCHW):
        return np.ascontiguousarray(np.asarray(image).transpose(2, 0, 1))
    if isinstance(op, ToRGB):
        array = np.asarray(image)
        array = array[:, :, None] if array.ndim == 2 else array
        if array.ndim != 3 or array.shape[2] not in (1, 3):
            raise TypeError(f"ops.ToRGB after a custom op needs an (H, W), (H, W, 1) or (H, W, 3) image, got shape {array.shape}")
        return _imaging.to_channels(array, 3)
    if isinstance(op, Decode):
        raise TypeError("ops.Decode must come before the custom ops (it sets how the image is decoded)")
    if isinstance(op, Geometry):
        array = np.ascontiguousarray(np.asarray(image))
        if array.dtype != np.uint8 or array.ndim != 3:
            raise TypeError(f"{op!r} after a custom op needs a uint8 (H, W, C) image, got {array.dtype} {array.shape}")
        windows = Windows([array.shape[0]], [array.shape[1]])
        op.place(windows, draws.uniforms(stream, op.draws))
        window = windows.row(0)
        target = np.empty((window.out_h, window.out_w, array.shape[2]), np.uint8)
        return _kernels.resample_into(
            array,
            (window.top, window.left, window.height, window.width),
            target,
            flip=window.flip,
            filter=getattr(op, "interpolation", "bilinear"),
        )
    raise TypeError(f"unknown op {op!r}")
