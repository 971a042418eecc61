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

Random parameters are counter-based draws (``core.draws``): a pure function of the loader's seed,
the epoch, the sample's index and the op's stream (the count of ops that draw before it), drawn for
a whole chunk of a batch at once; the same seed gives bit-identical batches with any number of
workers, on any backend, on the compiled task path and the per-sample path alike. Two fields
mapped with the same random ops draw the same numbers (a mask cropped like its image). Outside a
loader (``ds[i]`` by hand) they are fresh random numbers. Semantics follow torchvision (RandomResizedCrop: scale (0.08, 1), ratio
(3/4, 4/3), 10 attempts, then the center fallback; CenterCrop after an optional shorter-side
resize; Normalize with mean/std on the [0, 1] scale).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["Apply", "CenterCrop", "Decode", "Normalize", "Op", "RandomHorizontalFlip", "RandomResizedCrop", "Resize", "ToCHW", "ToRGB"]


_ATTEMPTS = 10  # RandomResizedCrop's tries before its fallback (torchvision's)


def _pair(size: int | Sequence[int], name: str) -> tuple[int, int]:
    if isinstance(size, (int, np.integer)) and not isinstance(size, bool):
        size = (int(size), int(size))
    if not isinstance(size, Sequence) or len(size) != 2 or not all(isinstance(s, (int, np.integer)) and s >= 1 for s in size):
        raise ValueError(f"{name} size must be a positive int or (height, width), got {size!r}")
    return int(size[0]), int(size[1])


class Window:
    """One sample's geometry: a window of the source image (floats, source pixels), the size it
    becomes, and whether it is mirrored (a row of ``Windows``)."""

    __slots__ = ("top", "left", "height", "width", "out_h", "out_w", "flip")

    def __init__(self, height: int, width: int):
        self.top, self.left, self.height, self.width = 0.0, 0.0, float(height), float(width)
        self.out_h, self.out_w, self.flip = height, width, False


class Windows:
    """The geometry so far of ``n`` samples, as arrays (``top``, ``left``, ``height``, ``width``:
    float64 windows of the source images; ``out_h``, ``out_w``: int64 sizes they become; ``flip``).
    Geometric ops map the windows to the next ones, all samples at once."""

    __slots__ = ("top", "left", "height", "width", "out_h", "out_w", "flip")

    def __init__(self, heights: np.ndarray, widths: np.ndarray):
        self.out_h = np.asarray(heights, np.int64)
        self.out_w = np.asarray(widths, np.int64)
        self.top, self.left = np.zeros(len(self.out_h)), np.zeros(len(self.out_h))
        self.height, self.width = self.out_h.astype(np.float64), self.out_w.astype(np.float64)
        self.flip = np.zeros(len(self.out_h), bool)

    def __len__(self) -> int:
        return len(self.out_h)

    def crop(self, top: Any, left: Any, height: Any, width: Any, out_h: Any, out_w: Any) -> None:
        """Keep the part (top, left, height, width) of each current output, and make it out_h x out_w."""
        sy, sx = self.height / self.out_h, self.width / self.out_w
        left = np.where(self.flip, self.out_w - left - width, left)  # a mirrored output: its left is the window's right
        self.top, self.left = self.top + top * sy, self.left + left * sx
        self.height, self.width = height * sy, width * sx
        n = len(self.out_h)
        self.out_h = np.full(n, out_h, np.int64) if isinstance(out_h, int) else np.asarray(out_h, np.int64)
        self.out_w = np.full(n, out_w, np.int64) if isinstance(out_w, int) else np.asarray(out_w, np.int64)

    def row(self, i: int) -> Window:
        """Sample ``i``'s window."""
        window = Window.__new__(Window)
        window.top, window.left, window.height, window.width = float(self.top[i]), float(self.left[i]), float(self.height[i]), float(self.width[i])
        window.out_h, window.out_w, window.flip = int(self.out_h[i]), int(self.out_w[i]), bool(self.flip[i])
        return window


class WindowError(ValueError):
    """A geometric op cannot apply to the sample at ``position`` of the windows it was given."""

    def __init__(self, position: int, message: str):
        super().__init__(message)
        self.position = position


class Op:
    """Base class of pipeline operations."""

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in vars(self).items() if not k.startswith("_"))
        return f"ops.{type(self).__name__}({args})"


class Geometry(Op):
    """An op that moves the windows (crops, resizes, flips); fused into the decode-and-resample pass.

    ``place(windows, u)`` moves every sample's window at once; ``u`` holds each sample's
    ``draws`` uniform numbers in [0, 1) (``core.draws``: a pure function of the seed, epoch, sample
    and the op's position in its pipeline), which are all of the op's randomness."""

    draws = 0

    def place(self, windows: Windows, u: np.ndarray) -> None:
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

    draws = 2 * _ATTEMPTS + 2  # an area and a log-ratio per attempt, then the top and left

    def place(self, windows: Windows, u: np.ndarray) -> None:
        """torchvision's algorithm for every sample at once: of ``_ATTEMPTS`` (area, ratio) draws
        the first whose crop fits the image, placed at a uniform position; the center crop
        clamped to the ratio range when none fits."""
        height, width = windows.out_h, windows.out_w
        area = (height * width).astype(np.float64)[:, None]
        log_lo, log_hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        target = area * (self.scale[0] + (self.scale[1] - self.scale[0]) * u[:, :_ATTEMPTS])
        aspect = _exp(log_lo + (log_hi - log_lo) * u[:, _ATTEMPTS : 2 * _ATTEMPTS], self.halvings)
        w = np.rint(np.sqrt(target * aspect))  # whole numbers, as floats until one is picked
        h = np.rint(np.sqrt(target / aspect))
        fits = (w > 0) & (w <= width[:, None]) & (h > 0) & (h <= height[:, None])
        rows, first = np.arange(len(windows)), np.argmax(fits, axis=1)
        w, h = w[rows, first].astype(np.int64), h[rows, first].astype(np.int64)
        top = np.floor(u[:, -2] * (height - h + 1)).astype(np.int64)
        left = np.floor(u[:, -1] * (width - w + 1)).astype(np.int64)
        fallback = ~fits.any(axis=1)
        if fallback.any():  # the whole image, clamped to the ratio range, centered
            in_ratio = width / height
            fw = np.where(in_ratio > self.ratio[1], np.rint(height * self.ratio[1]).astype(np.int64), width)
            fh = np.where(in_ratio < self.ratio[0], np.rint(width / self.ratio[0]).astype(np.int64), height)
            w, h = np.where(fallback, fw, w), np.where(fallback, fh, h)
            top = np.where(fallback, (height - h) // 2, top)
            left = np.where(fallback, (width - w) // 2, left)
        windows.crop(top, left, h, w, *self.size)

    @property
    def halvings(self) -> int:
        """How often ``_exp`` halves its argument for this ratio range (see ``_exp``)."""
        reach = max(abs(math.log(self.ratio[0])), abs(math.log(self.ratio[1])))
        return max(0, math.ceil(math.log2(reach * 16))) if reach > 0 else 0


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

    def place(self, windows: Windows, u: np.ndarray) -> None:
        if isinstance(self.size, int):  # the shorter side becomes size, the other int(size * ratio)
            tall = windows.out_h > windows.out_w
            out_h = np.where(tall, (self.size * windows.out_h / windows.out_w).astype(np.int64), self.size)
            out_w = np.where(tall, self.size, (self.size * windows.out_w / windows.out_h).astype(np.int64))
        else:
            out_h, out_w = self.size
        windows.crop(0, 0, windows.out_h, windows.out_w, out_h, out_w)


class CenterCrop(Geometry):
    """The central ``size`` crop, after resizing the shorter side to ``resize`` when given
    (torchvision's ``Resize(resize)`` then ``CenterCrop(size)``, in one resampling pass)."""

    def __init__(self, size: int | Sequence[int], resize: int | None = None, interpolation: str = "bilinear"):
        self.size = _pair(size, "CenterCrop")
        self.resize = None if resize is None else Resize(resize, interpolation)
        self.interpolation = _check_interpolation(interpolation)

    def place(self, windows: Windows, u: np.ndarray) -> None:
        if self.resize is not None:
            self.resize.place(windows, u)
        h, w = self.size
        small = (windows.out_h < h) | (windows.out_w < w)
        if small.any():
            k = int(np.argmax(small))
            raise WindowError(k, f"CenterCrop of {self.size} is larger than the {windows.out_h[k]}x{windows.out_w[k]} image (resize it first)")
        top = np.rint((windows.out_h - h) / 2.0).astype(np.int64)
        left = np.rint((windows.out_w - w) / 2.0).astype(np.int64)
        windows.crop(top, left, h, w, h, w)


class RandomHorizontalFlip(Geometry):
    """Mirror left-right with probability ``p``."""

    def __init__(self, p: float = 0.5):
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p must be in [0, 1], got {p}")
        self.p = float(p)

    draws = 1

    def place(self, windows: Windows, u: np.ndarray) -> None:
        windows.flip = windows.flip ^ (u[:, 0] < self.p)


class Normalize(Op):
    """``(x / 255 - mean) / std`` per channel, as ``dtype`` (float32 or float16; bfloat16 on a device
    stage only, ``.map(..., device=...)``: NumPy has none); mean and std on
    the [0, 1] scale, as in torchvision (ImageNet: mean (0.485, 0.456, 0.406), std (0.229, 0.224, 0.225))."""

    def __init__(self, mean: Sequence[float], std: Sequence[float], dtype: str = "float32"):
        self.mean = tuple(float(m) for m in np.atleast_1d(mean))
        self.std = tuple(float(s) for s in np.atleast_1d(std))
        if len(self.mean) != len(self.std) or any(s <= 0 for s in self.std):
            raise ValueError(f"mean and std need one entry per channel and std > 0, got {mean} and {std}")
        self.dtype = "bfloat16" if dtype == "bfloat16" else np.dtype(dtype).name
        if self.dtype not in ("float32", "float16", "bfloat16"):
            raise ValueError(f"Normalize dtype must be float32, float16 or bfloat16 (device stages only), got {dtype}")

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
    file (truncated, corrupt data, extraneous bytes) raises, as ``ds[i]`` does; the
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


_EXP_TERMS = tuple(1.0 / k for k in range(9, 0, -1))  # Horner's 1/k of e**y's Taylor series to y**9


def _exp(x: np.ndarray, halvings: int) -> np.ndarray:
    """e**x from additions and multiplications alone (libm's and NumPy's SIMD exp may differ in the
    last bit between machines and array lengths; these operations are correctly rounded IEEE
    everywhere): x is halved ``halvings`` times (exact) into |x| <= 1/16, a degree-9 Taylor
    polynomial taken there (Horner), and squared back. Relative error below 1e-13 for
    |x| <= 2**halvings / 16."""
    y = x * (0.5**halvings)
    total = y * _EXP_TERMS[0] + 1.0
    for inverse in _EXP_TERMS[1:]:
        total *= y
        total *= inverse
        total += 1.0
    for _ in range(halvings):
        total *= total
    return total


def _check_interpolation(name: str) -> str:
    if name not in ("bilinear", "box"):
        raise ValueError(f"interpolation must be 'bilinear' or 'box' (area), got {name!r}")
    return name
