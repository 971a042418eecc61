"""Image operations for ``.map(field=[ops...])`` pipelines.

``from slipstream import ops``; ``ss.open("train.arrow").map(image=[ops.RandomResizedCrop(224),
ops.RandomHorizontalFlip(), ops.ToCHW()])``. A pipeline is compiled once into stages:

1. decode, fused with the geometry (every crop, resize and flip before the first custom op): the
   JPEG is decoded at the smallest DCT scale that still covers the crop at the output size, into
   a reused per-thread scratch buffer, and one resampling pass (antialiased, Pillow's algorithm)
   writes the crop, resized and flipped, straight into the batch slot;
2. the output format (``Normalize``, ``ToCHW``), fused into that same pass when no custom op sits
   between;
3. custom per-sample ops (``ops.Apply(fn)``: a NumPy function, or a numba ``@njit(nogil=True)``
   one), in order, on the uint8 HxWxC image they are given.

``ToRGB`` (every image with three channels) and ``Decode`` (how JPEGs are decoded) set up stage 1.

Random parameters come from ``ss.sample_rng()``: the same seed gives bit-identical batches with
any number of workers. Semantics follow torchvision (RandomResizedCrop: scale (0.08, 1), ratio
(3/4, 4/3), 10 attempts, then the center fallback; CenterCrop after an optional shorter-side
resize; Normalize with mean/std on the [0, 1] scale).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["Apply", "CenterCrop", "Decode", "Normalize", "Op", "RandomHorizontalFlip", "RandomResizedCrop", "Resize", "ToCHW", "ToRGB"]


def _pair(size: int | Sequence[int], name: str) -> tuple[int, int]:
    if isinstance(size, (int, np.integer)) and not isinstance(size, bool):
        size = (int(size), int(size))
    if not isinstance(size, Sequence) or len(size) != 2 or not all(isinstance(s, (int, np.integer)) and s >= 1 for s in size):
        raise ValueError(f"{name} size must be a positive int or (height, width), got {size!r}")
    return int(size[0]), int(size[1])


class Window:
    """The geometry so far: a window of the source image (floats, source pixels), the size it
    becomes, and whether it is mirrored. Geometric ops map one window to the next."""

    __slots__ = ("top", "left", "height", "width", "out_h", "out_w", "flip")

    def __init__(self, height: int, width: int):
        self.top, self.left, self.height, self.width = 0.0, 0.0, float(height), float(width)
        self.out_h, self.out_w, self.flip = height, width, False

    def crop(self, top: float, left: float, height: float, width: float, out_h: int, out_w: int) -> None:
        """Keep the part (top, left, height, width) of the current output, and make it out_h x out_w."""
        sy, sx = self.height / self.out_h, self.width / self.out_w
        if self.flip:  # the current output is mirrored: a box on its left is on the window's right
            left = self.out_w - left - width
        self.top, self.left = self.top + top * sy, self.left + left * sx
        self.height, self.width = height * sy, width * sx
        self.out_h, self.out_w = out_h, out_w


class Op:
    """Base class of pipeline operations."""

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items())
        return f"ops.{type(self).__name__}({args})"


class Geometry(Op):
    """An op that moves the window (crops, resizes, flips); fused into the decode-and-resample pass."""

    def apply(self, window: Window, rng: Callable[[], np.random.Generator]) -> None:
        raise NotImplementedError


class RandomResizedCrop(Geometry):
    """A random crop of random area (``scale``) and aspect ratio (``ratio``), resized to ``size``
    (torchvision's algorithm: 10 tries, then a center crop clamped to the ratio range)."""

    def __init__(self, size: int | Sequence[int], scale: Sequence[float] = (0.08, 1.0), ratio: Sequence[float] = (3 / 4, 4 / 3), interpolation: str = "bilinear"):
        self.size = _pair(size, "RandomResizedCrop")
        if not (0 < scale[0] <= scale[1]) or not (0 < ratio[0] <= ratio[1]):
            raise ValueError(f"scale and ratio must be increasing positive ranges, got {scale} and {ratio}")
        self.scale, self.ratio = (float(scale[0]), float(scale[1])), (float(ratio[0]), float(ratio[1]))
        self.interpolation = _check_interpolation(interpolation)

    def box(self, height: int, width: int, rng: np.random.Generator) -> tuple[int, int, int, int]:
        """(top, left, h, w) of the crop in a height x width image."""
        area = height * width
        log_ratio = (math.log(self.ratio[0]), math.log(self.ratio[1]))
        for _ in range(10):
            target = area * rng.uniform(self.scale[0], self.scale[1])
            aspect = math.exp(rng.uniform(log_ratio[0], log_ratio[1]))
            w = int(round(math.sqrt(target * aspect)))
            h = int(round(math.sqrt(target / aspect)))
            if 0 < w <= width and 0 < h <= height:
                top = int(rng.integers(0, height - h + 1))
                left = int(rng.integers(0, width - w + 1))
                return top, left, h, w
        in_ratio = width / height  # fallback: the whole image, clamped to the ratio range
        if in_ratio < self.ratio[0]:
            w, h = width, int(round(width / self.ratio[0]))
        elif in_ratio > self.ratio[1]:
            h, w = height, int(round(height * self.ratio[1]))
        else:
            w, h = width, height
        return (height - h) // 2, (width - w) // 2, h, w

    def apply(self, window: Window, rng: Callable[[], np.random.Generator]) -> None:
        top, left, h, w = self.box(window.out_h, window.out_w, rng())
        window.crop(top, left, h, w, *self.size)


class Resize(Geometry):
    """Resize: an int makes the shorter side that long (keeping the aspect ratio, torchvision's
    rounding); (height, width) resizes to exactly that."""

    def __init__(self, size: int | Sequence[int], interpolation: str = "bilinear"):
        self.size = int(size) if isinstance(size, (int, np.integer)) else _pair(size, "Resize")
        if isinstance(self.size, int) and self.size < 1:
            raise ValueError(f"Resize size must be >= 1, got {size}")
        self.interpolation = _check_interpolation(interpolation)

    def target(self, height: int, width: int) -> tuple[int, int]:
        if not isinstance(self.size, int):
            return self.size
        if height <= width:
            return self.size, int(self.size * width / height)
        return int(self.size * height / width), self.size

    def apply(self, window: Window, rng: Callable[[], np.random.Generator]) -> None:
        window.crop(0, 0, window.out_h, window.out_w, *self.target(window.out_h, window.out_w))


class CenterCrop(Geometry):
    """The central ``size`` crop, after resizing the shorter side to ``resize`` when given
    (torchvision's ``Resize(resize)`` then ``CenterCrop(size)``, in one resampling pass)."""

    def __init__(self, size: int | Sequence[int], resize: int | None = None, interpolation: str = "bilinear"):
        self.size = _pair(size, "CenterCrop")
        self.resize = None if resize is None else Resize(resize, interpolation)
        self.interpolation = _check_interpolation(interpolation)

    def apply(self, window: Window, rng: Callable[[], np.random.Generator]) -> None:
        if self.resize is not None:
            self.resize.apply(window, rng)
        h, w = self.size
        if h > window.out_h or w > window.out_w:
            raise ValueError(f"CenterCrop of {self.size} is larger than the {window.out_h}x{window.out_w} image (resize it first)")
        top = int(round((window.out_h - h) / 2.0))
        left = int(round((window.out_w - w) / 2.0))
        window.crop(top, left, h, w, h, w)


class RandomHorizontalFlip(Geometry):
    """Mirror left-right with probability ``p``."""

    def __init__(self, p: float = 0.5):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p must be in [0, 1], got {p}")
        self.p = float(p)

    def apply(self, window: Window, rng: Callable[[], np.random.Generator]) -> None:
        if self.p > 0 and rng().random() < self.p:
            window.flip = not window.flip


class Normalize(Op):
    """``(x / 255 - mean) / std`` per channel, as ``dtype`` (float32 or float16); mean and std on
    the [0, 1] scale, as in torchvision (ImageNet: mean (0.485, 0.456, 0.406), std (0.229, 0.224, 0.225))."""

    def __init__(self, mean: Sequence[float], std: Sequence[float], dtype: str = "float32"):
        self.mean = tuple(float(m) for m in np.atleast_1d(mean))
        self.std = tuple(float(s) for s in np.atleast_1d(std))
        if len(self.mean) != len(self.std) or any(s <= 0 for s in self.std):
            raise ValueError(f"mean and std need one entry per channel and std > 0, got {mean} and {std}")
        self.dtype = np.dtype(dtype).name
        if self.dtype not in ("float32", "float16"):
            raise ValueError(f"Normalize dtype must be float32 or float16, got {dtype}")

    def coefficients(self, channels: int) -> tuple[np.ndarray, np.ndarray]:
        """float32 (scale, offset) with ``out = x * scale + offset``."""
        mean = np.resize(np.asarray(self.mean, np.float64), channels)
        std = np.resize(np.asarray(self.std, np.float64), channels)
        return (1.0 / (255.0 * std)).astype(np.float32), (-mean / std).astype(np.float32)


class Decode(Op):
    """How to decode JPEGs (place it anywhere before custom ops). ``fast=True`` uses libjpeg-turbo's
    fast integer DCT and fast chroma upsampling (what FFCV uses): about 10% faster decoding for a
    small loss in quality (off by default). ``exact=True`` never decodes at a reduced DCT scale.

    Damage is refused the same way on every path: a JPEG that libjpeg warns about anywhere in the
    file (truncated, corrupt data, extraneous bytes) raises, as ``ds[i]`` and simplejpeg do; the
    region decoder entropy-decodes the rows below the crop to find it."""

    def __init__(self, fast: bool = False, exact: bool = False):
        self.fast, self.exact = bool(fast), bool(exact)


class ToCHW(Op):
    """Channels first: (C, H, W) instead of the default (H, W, C)."""


class ToRGB(Op):
    """Three channels for every image: grayscale ones are made RGB (R = G = B), RGB ones pass.

    For files packed with each image's own channel count (``F.Image(channels=None)``), where a
    grayscale sample would otherwise break the batch. Before the custom ops it costs no extra copy
    for JPEG (the decoder outputs RGB directly), PNG and QOI (converted as they decode); raw
    grayscale pixels and arrays are repeated into a new array. After a custom op it converts the
    (H, W, 1 or 3) array that op returned. Packing with ``F.Image(channels=3)`` does this once,
    at write time, instead."""


class Apply(Op):
    """A custom per-sample op: ``fn(image) -> image`` on a uint8 (H, W, C) array, or on whatever the
    previous custom op returned. A numba ``@njit(nogil=True)`` function runs without the GIL. For
    randomness, call ``ss.sample_rng()`` in Python and pass the values into the compiled kernel."""

    def __init__(self, fn: Callable[[np.ndarray], Any]):
        if not callable(fn):
            raise TypeError(f"ops.Apply needs a callable, got {type(fn).__name__}")
        self.fn = fn


def _check_interpolation(name: str) -> str:
    if name not in ("bilinear", "box"):
        raise ValueError(f"interpolation must be 'bilinear' or 'box' (area), got {name!r}")
    return name
