"""``F.Image``: a uint8 image per sample, with per-sample codecs (raw, JPEG, PNG, QOI) and write-time resizing."""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core import streams
from ..core.nodes import VarNode
from ..images.encoded import codecs as _imaging
from .field import Column, Field, binary_views, pyarrow_module, slice_row

__all__ = ["Image", "ImageColumn"]

_CODE_NAMES = {code: name for name, code in _imaging.CODECS.items()}


class ImageColumn(Column):
    """One page of an image field: per-sample codec, stored shape and encoded bytes, read zero-copy."""

    def __init__(self, array: Any):
        self.codes = array.field("codec").to_numpy(zero_copy_only=False)
        self.heights = array.field("height").to_numpy(zero_copy_only=False)
        self.widths = array.field("width").to_numpy(zero_copy_only=False)
        self.channels = array.field("channels").to_numpy(zero_copy_only=False)
        self.offsets, self.data = binary_views(array.field("data"))

    def shape(self, row: int) -> tuple[int, int, int]:
        """The stored (H, W, C), checked against the stored bytes (``ValueError`` for damage: a header
        that disagrees, or one that declares more pixels than the bytes can encode, stored shape and
        all: ``images.encoded.codecs.check_encoded_size``), so no buffer is ever sized from a damaged header."""
        shape = int(self.heights[row]), int(self.widths[row]), int(self.channels[row])
        _check_shape(self.codec(row), self.encoded(row), shape)
        return shape

    def stored_shape(self, row: int) -> tuple[int, int, int]:
        """The stored (H, W, C), checked only for what costs no parsing (sides, channels, a raw
        image's byte count): for a decoder that checks the encoded header against it itself (the
        image pipeline reads each JPEG's header once, and Pillow/QOI decodes are compared)."""
        shape = int(self.heights[row]), int(self.widths[row]), int(self.channels[row])
        _check_shape(self.codec(row), self.encoded(row), shape, header=False)
        return shape

    def codec(self, row: int) -> str:
        name = _CODE_NAMES.get(int(self.codes[row]))
        if name is None:
            raise ValueError(f"unknown image codec code {int(self.codes[row])}")
        return name

    def encoded(self, row: int) -> np.ndarray:
        """The stored bytes of the image, zero-copy (a read-only uint8 view into the page)."""
        return slice_row(self.offsets, self.data, row)

    def table(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Every row's codec code (uint8), the address and size of its bytes in this page's memory
        (uint64; valid while the page is), and its stored (H, W, C) (int32, unchecked)."""
        starts = self.offsets[:-1].astype(np.uint64)
        addrs = starts + np.uint64(self.data.ctypes.data)
        sizes = (self.offsets[1:] - self.offsets[:-1]).astype(np.uint64)
        shapes = np.stack([self.heights, self.widths, self.channels], axis=1).astype(np.int32)
        codes = self.codes.astype(np.int64)  # NumPy 2.5 refuses 255 beside an int8 array in np.where
        codes = np.where((codes >= 0) & (codes < 256), codes, 255).astype(np.uint8)
        return codes, addrs, sizes, shapes

    def get(self, row: int) -> Any:
        return _imaging.decode(self.codec(row), self.encoded(row), self.shape(row))

    def batch_node(self, row: int) -> Any:
        hint = "to batch images of several sizes, crop them to one: ds.map(<field>=[ops.RandomResizedCrop(...)])"
        return VarNode(self.shape(row), np.dtype(np.uint8), hint)  # sizes may vary: a guess

    def into(self, buffer: Any, row: int) -> Any:
        if isinstance(buffer, np.ndarray) and buffer.shape == self.shape(row) and buffer.dtype == np.uint8:
            return _imaging.decode(self.codec(row), self.encoded(row), self.shape(row), out=buffer)
        return self.get(row)


def _check_shape(codec: str, data: np.ndarray, shape: tuple[int, int, int], header: bool = True) -> None:
    """``ValueError`` unless ``shape`` is a possible image shape that the stored bytes agree with
    (their size for raw pixels, and with ``header``, the encoded header's size for JPEG, PNG and QOI)."""
    height, width, channels = shape
    if height < 1 or width < 1 or channels not in (1, 3):
        raise ValueError(f"the stored image shape {shape} is impossible (sides >= 1, 1 or 3 channels)")
    if codec == "raw":
        if data.size != height * width * channels:
            raise ValueError(f"{data.size} raw bytes cannot hold an image of shape {shape}")
        return
    if not header:
        return
    found = _imaging.header_size(codec, data)
    if found != (height, width):
        raise ValueError(_imaging.header_mismatch(shape, codec, found))
    _imaging.check_encoded_size(codec, data)  # a header the bytes cannot fill (stored shape and all): damage


class Image(Field):
    """A uint8 image per sample, (height, width, channels) with 1 (grayscale) or 3 (RGB) channels.

    ``codec``: "raw", "jpeg", "png" or "qoi". ``max_side`` / ``min_side`` downscale at write time
    (area interpolation, never upscaling) so the longer side is at most ``max_side`` and the shorter
    at most ``min_side``. ``policy``: None (every image uses ``codec``), "smart" (only images whose
    raw size exceeds ``threshold`` bytes are compressed, the rest stored raw) or "proportion" (a
    fraction ``proportion`` of images, chosen by a seeded coin per sample index, is compressed).
    Input: a uint8 array, a PIL image, or encoded image bytes (JPEG, PNG, QOI, or any format
    Pillow reads); JPEG bytes that need no resize and are to be stored as JPEG are kept as they are
    (no second lossy encode).

    ``channels``: None keeps each image's own (1 for grayscale, 3 otherwise: a folder that mixes
    them gives batches that fail at the first odd one); 3 makes every image RGB, as torchvision's
    ImageFolder does (use it for photo datasets such as ImageNet); 1 makes every image grayscale
    (Pillow's luma; a colour JPEG kept as it is decodes to its luma plane). Encoded inputs follow
    one rule: alpha is dropped, palette/CMYK/YCbCr images become RGB, 16-bit samples keep their
    high byte (``v >> 8``), floating-point images are refused. The conversion costs nothing at
    read time: a grayscale image stored as RGB is kept as a grayscale JPEG or PNG (smaller) that
    the decoder outputs as RGB directly; raw and QOI store the converted pixels.
    """

    kind = "image"
    version = 2  # 2: the ``channels`` setting; files without it are written as version 1

    def __init__(
        self,
        codec: str = "raw",
        quality: int = 90,
        max_side: int | None = None,
        min_side: int | None = None,
        policy: str | None = None,
        threshold: int = 1 << 18,
        proportion: float = 0.5,
        seed: int = 0,
        channels: int | None = None,
    ):
        if codec not in _imaging.CODECS:
            raise ValueError(f"unknown image codec {codec!r}; expected one of {sorted(_imaging.CODECS)}")
        if policy not in (None, "smart", "proportion"):
            raise ValueError(f"policy must be None, 'smart' or 'proportion', got {policy!r}")
        if not 1 <= int(quality) <= 100:
            raise ValueError(f"quality must be in 1..100, got {quality}")
        for name, side in (("max_side", max_side), ("min_side", min_side)):
            if side is not None and int(side) < 1:
                raise ValueError(f"{name} must be >= 1 or None, got {side}")
        if not 0.0 <= float(proportion) <= 1.0:
            raise ValueError(f"proportion must be in [0, 1], got {proportion}")
        if channels not in (None, 1, 3) or isinstance(channels, bool):
            raise ValueError(f"channels must be None (each image's own), 1 (grayscale) or 3 (RGB), got {channels!r}")
        self.codec, self.quality, self.max_side, self.min_side = codec, int(quality), max_side, min_side
        self.policy, self.threshold, self.proportion, self.seed = policy, int(threshold), float(proportion), int(seed)
        self.channels = channels

    def params(self) -> dict[str, Any]:
        params = {
            "codec": self.codec,
            "quality": self.quality,
            "max_side": self.max_side,
            "min_side": self.min_side,
            "policy": self.policy,
            "threshold": self.threshold,
            "proportion": self.proportion,
            "seed": self.seed,
        }
        if self.channels is not None:  # files without it stay as they were (version 1, same bytes)
            params["channels"] = self.channels
        return params

    def spec(self) -> dict[str, Any]:
        """Version 1 unless ``channels`` is set: a slipstream that predates it then refuses the
        file by its version instead of failing on an unknown setting."""
        return {**super().spec(), "version": 1 if self.channels is None else self.version}

    def _codec_for(self, index: int, raw_size: int) -> str:
        if self.policy == "smart":
            return self.codec if raw_size > self.threshold else "raw"
        if self.policy == "proportion":
            coin = np.random.Generator(np.random.PCG64(np.random.SeedSequence(self.seed, spawn_key=(streams.CODEC_CHOICE, index)))).random()
            return self.codec if coin < self.proportion else "raw"
        return self.codec

    def encode(self, value: Any, index: int, where: str) -> Any:
        kept = self._kept_jpeg(value, index, where)
        if kept is not None:
            return kept
        image = _imaging.as_image(value, where)
        height, width = _imaging.target_size(image.shape[0], image.shape[1], self.max_side, self.min_side)
        channels = self.channels or image.shape[2]
        if image.shape[2] > channels:  # to gray before resizing: a third of the work
            image = _imaging.to_channels(image, channels)
        image = _imaging.resize_area(image, height, width)
        codec = self._codec_for(index, height * width * channels)
        if codec in ("raw", "qoi"):  # they store the pixels they give back; JPEG and PNG keep gray and decode to RGB
            image = _imaging.to_channels(image, channels)
        return (_imaging.CODECS[codec], height, width, channels, _imaging.encode(codec, image, self.quality))

    def _kept_jpeg(self, value: Any, index: int, where: str) -> tuple | None:
        """The encoded sample for JPEG bytes stored as they are (no resize needed, JPEG chosen),
        with the stored channel count the decoder will output; None when they must be re-encoded."""
        if not isinstance(value, (bytes, bytearray, memoryview)) or _imaging.sniff(value) != "jpeg":
            return None
        try:
            header = _imaging.jpeg_header(bytes(value))
        except ValueError as exc:
            raise ValueError(f"{where}: the JPEG bytes do not decode: {exc}") from exc
        if header is None:  # CMYK/YCCK: decoded to RGB and re-encoded
            return None
        height, width, own = header
        channels = self.channels or own
        fits = _imaging.target_size(height, width, self.max_side, self.min_side) == (height, width)
        if not fits or self._codec_for(index, height * width * channels) != "jpeg":
            return None
        _imaging.verify_jpeg(value, where)  # stored as it is: make sure it decodes
        return (_imaging.CODECS["jpeg"], height, width, channels, bytes(value))

    def nbytes(self, encoded: Any) -> int:
        return len(encoded[4]) + 24

    def arrow_type(self) -> Any:
        pa = pyarrow_module()
        return pa.struct(
            [("codec", pa.int8()), ("height", pa.int32()), ("width", pa.int32()), ("channels", pa.int8()), ("data", pa.large_binary())]
        )

    def to_arrow(self, encoded: list[Any]) -> Any:
        pa = pyarrow_module()
        columns = list(zip(*encoded)) if encoded else [[], [], [], [], []]
        arrays = [
            pa.array(np.asarray(columns[0], np.int8)),
            pa.array(np.asarray(columns[1], np.int32)),
            pa.array(np.asarray(columns[2], np.int32)),
            pa.array(np.asarray(columns[3], np.int8)),
            pa.array(list(columns[4]), type=pa.large_binary()),
        ]
        return pa.StructArray.from_arrays(arrays, names=["codec", "height", "width", "channels", "data"])

    def column(self, array: Any) -> Column:
        return ImageColumn(array)
