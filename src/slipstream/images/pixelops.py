"""Pixel ops: colour, tone, blur, rotation and erasing, with torchvision v2's definitions.

``ops.RandAugment(2, 9)``, ``ops.TrivialAugmentWide()``, ``ops.AutoAugment()``, ``ops.ColorJitter(0.4, 0.4, 0.4)``,
``ops.RandomErasing(0.25)``... take the same arguments as their torchvision v2 namesakes and draw
their parameters the same way (the same ranges, magnitude tables, probabilities and op choices),
so a recipe translates one to one. In a pipeline they come after the crops, resizes and flips
(which are fused into the decode) and before ``Normalize``/``ToCHW``; ``RandomErasing`` may also
come after ``Normalize``, as in torchvision's reference recipes, and then erases the normalized
output (its ``value`` in output units: 0 is the dataset mean).

Each op compiles a sample's random numbers into *steps* (``kernels.pixel_steps``: opcodes with
float parameters, computed here, in Python, once per chunk): ``program(u, heights, widths)`` gives
the (n, ``steps``, ``WORDS``) rows of n samples from their ``draws`` uniforms each (a pure function
of the seed, epoch, sample and the op's stream, as for the geometry). The NumPy executor and the
compiled one run the same steps to the same bits.

Differences from torchvision v2, all documented on the op: uniforms come from slipstream's
counter-based draws, not torch's generator (the same distributions, other numbers); ColorJitter's
order is a uniformly random permutation drawn as the argsort of four uniforms; the Gaussian blur's
taps are computed in double (they differ from torchvision's float32 softmax in the last bits, so
outputs can differ by one grey level on rare pixels); BILINEAR resampling sums its four taps in
float32 in one fixed order (one grey level on about 0.02% of pixels); ``RandomErasing`` on uint8
pixels takes values in 0..255 (torchvision wraps others around) and has no ``value="random"``.
Not provided: AugMix (it blends several augmented copies in float, outside this model of in-place
steps), RandomPhotometricDistort, ``expand=True`` rotations.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from numbers import Real
from typing import Any

import numpy as np

from .imageops import Op, _exp
from .kernels import pixel_steps as ps

__all__ = [
    "AutoAugment",
    "ColorJitter",
    "GaussianBlur",
    "Grayscale",
    "PixelOp",
    "RandAugment",
    "RandomAffine",
    "RandomApply",
    "RandomAdjustSharpness",
    "RandomAutocontrast",
    "RandomChoice",
    "RandomEqualize",
    "RandomErasing",
    "RandomGrayscale",
    "RandomInvert",
    "RandomPosterize",
    "RandomRotation",
    "RandomSolarize",
    "TrivialAugmentWide",
    "inverse_affine_matrix",
    "linspace32",
]

_f32 = np.float32
_INTERPOLATIONS = {"nearest": 0, "bilinear": 1}


class PixelOp(Op):
    """An op on a sample's uint8 pixels after the geometry: ``draws`` uniforms per sample, at most
    ``steps`` steps per sample; ``program(u, heights, widths)`` compiles them (see the module doc).
    ``channels`` is the channel count it outputs (None: its input's)."""

    draws = 0
    steps = 1
    channels: int | None = None

    def program(self, u: np.ndarray, heights: np.ndarray, widths: np.ndarray) -> np.ndarray:
        raise NotImplementedError


def _rows(n: int, steps: int) -> np.ndarray:
    return np.zeros((n, steps, ps.WORDS))


def _probability(p: float, name: str) -> float:
    if not isinstance(p, Real) or not 0.0 <= float(p) <= 1.0:
        raise ValueError(f"{name}: p must be a probability in [0, 1], got {p!r}")
    return float(p)


def _finite(op: str, **settings: Any) -> None:
    """``ValueError`` naming the first setting that holds a number that is not finite."""
    for name, value in settings.items():
        values = [value] if isinstance(value, Real) else list(value) if isinstance(value, Sequence) else []
        if not all(isinstance(v, Real) and math.isfinite(v) for v in values):
            raise ValueError(f"{op}: {name} must be finite numbers, got {value!r}")


def _interpolation(name: str, op: str) -> str:
    if name not in _INTERPOLATIONS:
        raise ValueError(f"{op}: interpolation must be 'nearest' or 'bilinear', got {name!r}")
    return name


def _fill(fill: Any, op: str) -> tuple[float, float, float] | None:
    """None (zeros outside, torchvision's fill=None) or three per-channel values."""
    if fill is None:
        return None
    values = [fill] if isinstance(fill, Real) else list(fill)
    if len(values) not in (1, 3) or not all(isinstance(v, Real) and 0 <= v <= 255 for v in values):
        raise ValueError(f"{op}: fill must be None, or 1 or 3 numbers in 0..255 (uint8 pixels), got {fill!r}")
    values = [float(v) for v in values] * (3 if len(values) == 1 else 1)
    return values[0], values[1], values[2]


# ---------------------------------------------------------------------------------------- tables


def linspace32(start: float, end: float, steps: int) -> np.ndarray:
    """torch.linspace(start, end, steps) in float32, as float64 values: the step rounded to
    float32, the first half counted up from ``start`` and the rest down from ``end``."""
    a, b = _f32(start), _f32(end)
    if steps == 1:
        return np.array([float(a)])
    step = _f32((b - a) / _f32(steps - 1))
    i = np.arange(steps)
    up = (np.float64(a) + np.float64(step) * i).astype(_f32)
    down = (np.float64(b) - np.float64(step) * (steps - 1 - i)).astype(_f32)
    return np.where(i < steps // 2, up, down).astype(np.float64)


def _posterize_table(bins: int, divisor: float) -> np.ndarray:
    """``8 - (arange(bins) / ((bins - 1) / divisor)).round().int()`` in float32, half to even."""
    return 8.0 - np.rint(np.arange(bins, dtype=_f32) / _f32((bins - 1) / divisor)).astype(np.float64)


def inverse_affine_matrix(
    height: int,
    width: int,
    angle: float = 0.0,
    translate: Sequence[float] = (0.0, 0.0),
    scale: float = 1.0,
    shear: Sequence[float] = (0.0, 0.0),
    center: Sequence[float] | None = None,
) -> list[float]:
    """torchvision's inverse affine matrix (``_get_inverse_affine_matrix``, the same double
    operations) of a (height, width) image: ``angle`` and ``shear`` in degrees, ``center`` in
    pixels (None: the image center)."""
    cx, cy = (0.0, 0.0) if center is None else (center[0] - width * 0.5, center[1] - height * 0.5)
    tx, ty = float(translate[0]), float(translate[1])
    rot, sx, sy = math.radians(angle), math.radians(shear[0]), math.radians(shear[1])
    cos_sy, tan_sx = math.cos(sy), math.tan(sx)
    a = math.cos(rot - sy) / cos_sy
    b = -(a * tan_sx + math.sin(rot))
    c = math.sin(rot - sy) / cos_sy
    d = math.cos(rot) - c * tan_sx
    matrix = [d / scale, -b / scale, 0.0, -c / scale, a / scale, 0.0]
    matrix[2] += cx - matrix[0] * (cx + tx) - matrix[1] * (cy + ty)
    matrix[5] += cy - matrix[3] * (cx + tx) - matrix[4] * (cy + ty)
    return matrix


def _affine_row(row: np.ndarray, matrix: list[float], interpolation: str, fill: tuple[float, float, float] | None) -> None:
    row[0] = ps.AFFINE
    row[1:7] = matrix
    row[7] = _INTERPOLATIONS[interpolation]
    if fill is not None:
        row[8], row[9:12] = 1.0, fill


def _rotate_row(row: np.ndarray, angle: float, height: int, width: int, interpolation: str, fill, center=None) -> None:
    """torchvision's ``rotate(angle)`` (counter-clockwise degrees, expand=False) as one step,
    with its fast paths when ``center`` is None: a copy for 0, a half turn for 180, quarter turns
    for 90 and 270 of square images."""
    angle = angle % 360
    if center is None:
        if angle == 0:
            row[0] = ps.NONE
            return
        if angle == 180 or (height == width and angle in (90, 270)):
            row[0], row[1] = ps.ROT90, angle // 90
            return
    _affine_row(row, inverse_affine_matrix(height, width, angle=-angle, center=center), interpolation, fill)


# ---------------------------------------------------------------------------------- the augment policies

_POLICY_OPS = ("Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color", "Contrast", "Sharpness",
               "Posterize", "Solarize", "AutoContrast", "Equalize")  # fmt: skip
_SIGNED = frozenset({"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color", "Contrast", "Sharpness"})
_NO_MAGNITUDE = frozenset({"Identity", "AutoContrast", "Equalize"})
_FACTOR_OPS = {"Brightness": ps.BRIGHTNESS, "Color": ps.SATURATION, "Contrast": ps.CONTRAST, "Sharpness": ps.SHARPNESS}


class _Policy(PixelOp):
    """RandAugment's and TrivialAugmentWide's shared step: one of 14 ops with a signed magnitude."""

    _wide = False

    def __init__(self, num_magnitude_bins: int, interpolation: str, fill: Any):
        name = type(self).__name__
        if not isinstance(num_magnitude_bins, int) or num_magnitude_bins < 2:
            raise ValueError(f"{name}: num_magnitude_bins must be an int >= 2, got {num_magnitude_bins!r}")
        self.num_magnitude_bins = num_magnitude_bins
        self.interpolation = _interpolation(interpolation, name)
        _fill(fill, name)
        self.fill = fill

    def _table(self, op: str, height: int, width: int) -> np.ndarray:
        return _policy_table(op, self._wide, self.num_magnitude_bins, height, width)

    def _step(self, row: np.ndarray, op: str, magnitude: float, height: int, width: int) -> None:
        _policy_step(row, op, magnitude, height, width, self.interpolation, _fill(self.fill, type(self).__name__))


@functools.lru_cache(maxsize=1024)
def _policy_table(op: str, wide: bool, n: int, height: int, width: int) -> np.ndarray:
    """torchvision's magnitude bins of ``op`` (RandAugment's, or TrivialAugmentWide's when
    ``wide``), read-only (cached)."""
    table = _bins(op, wide, n, height, width)
    table.flags.writeable = False
    return table


def _bins(op: str, wide: bool, n: int, height: int, width: int) -> np.ndarray:
    if op in ("ShearX", "ShearY"):
        return linspace32(0.0, 0.99 if wide else 0.3, n)
    if op == "TranslateX":
        return linspace32(0.0, 32.0 if wide else 150.0 / 331.0 * width, n)
    if op == "TranslateY":
        return linspace32(0.0, 32.0 if wide else 150.0 / 331.0 * height, n)
    if op == "Rotate":
        return linspace32(0.0, 135.0 if wide else 30.0, n)
    if op in _FACTOR_OPS:
        return linspace32(0.0, 0.99 if wide else 0.9, n)
    if op == "Posterize":
        return _posterize_table(n, 6.0 if wide else 4.0)
    return linspace32(1.0, 0.0, n)  # Solarize


def _policy_step(row: np.ndarray, op: str, magnitude: float, height: int, width: int, interpolation: str, fill: Any) -> None:
    """torchvision's ``_apply_image_or_video_transform`` for ``op`` at signed ``magnitude``."""
    if op == "Identity":
        return
    if op in ("ShearX", "ShearY"):
        degrees = math.degrees(math.atan(magnitude))
        shear = (degrees, 0.0) if op == "ShearX" else (0.0, degrees)
        _affine_row(row, inverse_affine_matrix(height, width, shear=shear, center=(0.0, 0.0)), interpolation, fill)
    elif op in ("TranslateX", "TranslateY"):
        shift = (int(magnitude), 0) if op == "TranslateX" else (0, int(magnitude))
        _affine_row(row, inverse_affine_matrix(height, width, translate=shift), interpolation, fill)
    elif op == "Rotate":
        _rotate_row(row, magnitude, height, width, interpolation, fill)
    elif op in _FACTOR_OPS:
        row[0], row[1] = _FACTOR_OPS[op], 1.0 + magnitude
    elif op == "Posterize":
        row[0], row[1] = ps.POSTERIZE, int(magnitude)
    elif op == "Solarize":
        row[0], row[1] = ps.SOLARIZE, 255 * magnitude
    elif op == "AutoContrast":
        row[0] = ps.AUTOCONTRAST
    elif op == "Invert":
        row[0] = ps.INVERT
    else:
        row[0] = ps.EQUALIZE


# AutoAugment's ImageNet policy (Cubuk et al. 2019, as torchvision has it): 25 pairs of (op, probability, magnitude bin)
_IMAGENET_POLICY = (
    (("Posterize", 0.4, 8), ("Rotate", 0.6, 9)), (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
    (("Equalize", 0.8, None), ("Equalize", 0.6, None)), (("Posterize", 0.6, 7), ("Posterize", 0.6, 6)),
    (("Equalize", 0.4, None), ("Solarize", 0.2, 4)), (("Equalize", 0.4, None), ("Rotate", 0.8, 8)),
    (("Solarize", 0.6, 3), ("Equalize", 0.6, None)), (("Posterize", 0.8, 5), ("Equalize", 1.0, None)),
    (("Rotate", 0.2, 3), ("Solarize", 0.6, 8)), (("Equalize", 0.6, None), ("Posterize", 0.4, 6)),
    (("Rotate", 0.8, 8), ("Color", 0.4, 0)), (("Rotate", 0.4, 9), ("Equalize", 0.6, None)),
    (("Equalize", 0.0, None), ("Equalize", 0.8, None)), (("Invert", 0.6, None), ("Equalize", 1.0, None)),
    (("Color", 0.6, 4), ("Contrast", 1.0, 8)), (("Rotate", 0.8, 8), ("Color", 1.0, 2)),
    (("Color", 0.8, 8), ("Solarize", 0.8, 7)), (("Sharpness", 0.4, 7), ("Invert", 0.6, None)),
    (("ShearX", 0.6, 5), ("Equalize", 1.0, None)), (("Color", 0.4, 0), ("Equalize", 0.6, None)),
    (("Equalize", 0.4, None), ("Solarize", 0.2, 4)), (("Solarize", 0.6, 5), ("AutoContrast", 0.6, None)),
    (("Invert", 0.6, None), ("Equalize", 1.0, None)), (("Color", 0.6, 4), ("Contrast", 1.0, 8)),
    (("Equalize", 0.8, None), ("Equalize", 0.6, None)),
)  # fmt: skip


class AutoAugment(_Policy):
    """torchvision's ``AutoAugment(policy=IMAGENET, interpolation=NEAREST, fill=None)``: one of the
    ImageNet policy's 25 sub-policies, each two ops applied with their own probabilities at fixed
    magnitude bins of 10 (RandAugment's ranges), the sign of a signed op drawn. ``policy`` must be
    "imagenet" (the CIFAR-10 and SVHN policies are not provided)."""

    draws = 5  # the sub-policy, then per op: applied?, the sign
    steps = 2
    num_magnitude_bins = 10  # (AutoAugment's own, not an argument)

    def __init__(self, policy: str = "imagenet", interpolation: str = "nearest", fill: Any = None):
        name = getattr(policy, "value", policy)
        if str(name).lower() != "imagenet":
            raise ValueError(
                f"AutoAugment: policy must be 'imagenet' (the CIFAR-10 and SVHN policies are not provided), got {policy!r}"
            )
        super().__init__(10, interpolation, fill)
        del self.num_magnitude_bins  # (the class's: not an argument here)
        self.policy = "imagenet"

    def program(self, u: np.ndarray, heights: np.ndarray, widths: np.ndarray) -> np.ndarray:
        rows = _rows(len(u), 2)
        count = len(_IMAGENET_POLICY)
        for i, (draw, height, width) in enumerate(zip(u.tolist(), heights.tolist(), widths.tolist())):
            for k, (op, probability, bin_) in enumerate(_IMAGENET_POLICY[min(int(draw[0] * count), count - 1)]):
                if not draw[1 + 2 * k] <= probability:
                    continue
                magnitude = 0.0 if bin_ is None else float(self._table(op, height, width)[bin_])
                if op in _SIGNED and draw[2 + 2 * k] <= 0.5:
                    magnitude = -magnitude
                self._step(rows[i, k], op, magnitude, height, width)
        return rows


class RandAugment(_Policy):
    """torchvision's ``RandAugment(num_ops=2, magnitude=9, num_magnitude_bins=31,
    interpolation=NEAREST, fill=None)``: ``num_ops`` times, one of its 14 ops (repeats and
    Identity included) at the fixed magnitude bin ``magnitude``, the sign of a signed op drawn
    (negative with probability 1/2). ``interpolation`` "nearest" (torchvision's default) or
    "bilinear" (its reference recipes'); ``fill`` for pixels from outside the image (None: 0)."""

    def __init__(
        self, num_ops: int = 2, magnitude: int = 9, num_magnitude_bins: int = 31, interpolation: str = "nearest", fill: Any = None
    ):
        super().__init__(num_magnitude_bins, interpolation, fill)
        if not isinstance(num_ops, int) or num_ops < 0:
            raise ValueError(f"RandAugment: num_ops must be an int >= 0, got {num_ops!r}")
        if not isinstance(magnitude, int) or not 0 <= magnitude < num_magnitude_bins:
            raise ValueError(
                f"RandAugment: magnitude must be an int in [0, {num_magnitude_bins}) (num_magnitude_bins), got {magnitude!r}"
            )
        self.num_ops, self.magnitude = num_ops, magnitude

    @property
    def draws(self) -> int:  # per op: the choice, the sign
        return 2 * self.num_ops

    @property
    def steps(self) -> int:
        return self.num_ops

    def program(self, u: np.ndarray, heights: np.ndarray, widths: np.ndarray) -> np.ndarray:
        rows = _rows(len(u), self.num_ops)
        for i, (draw, height, width) in enumerate(zip(u.tolist(), heights.tolist(), widths.tolist())):
            for k in range(self.num_ops):
                op = _POLICY_OPS[min(int(draw[2 * k] * len(_POLICY_OPS)), len(_POLICY_OPS) - 1)]
                magnitude = 0.0 if op in _NO_MAGNITUDE else float(self._table(op, height, width)[self.magnitude])
                if op in _SIGNED and draw[2 * k + 1] <= 0.5:
                    magnitude = -magnitude
                self._step(rows[i, k], op, magnitude, height, width)
        return rows


class TrivialAugmentWide(_Policy):
    """torchvision's ``TrivialAugmentWide(num_magnitude_bins=31, interpolation=NEAREST,
    fill=None)``: one of its 14 ops at a uniformly drawn magnitude bin, the sign of a signed op
    drawn (negative with probability 1/2), the wide ranges (shear 0.99, translate 32 px, rotate
    135 degrees, colour factors 1 +- 0.99)."""

    _wide = True
    draws = 3  # the choice, the bin, the sign

    def __init__(self, num_magnitude_bins: int = 31, interpolation: str = "nearest", fill: Any = None):
        super().__init__(num_magnitude_bins, interpolation, fill)

    def program(self, u: np.ndarray, heights: np.ndarray, widths: np.ndarray) -> np.ndarray:
        rows = _rows(len(u), 1)
        n = self.num_magnitude_bins
        for i, (draw, height, width) in enumerate(zip(u.tolist(), heights.tolist(), widths.tolist())):
            op = _POLICY_OPS[min(int(draw[0] * len(_POLICY_OPS)), len(_POLICY_OPS) - 1)]
            magnitude = 0.0 if op in _NO_MAGNITUDE else float(self._table(op, height, width)[min(int(draw[1] * n), n - 1)])
            if op in _SIGNED and draw[2] <= 0.5:
                magnitude = -magnitude
            self._step(rows[i, 0], op, magnitude, height, width)
        return rows


# ------------------------------------------------------------------------------------------ colour


def _jitter_range(value: Any, name: str, center: float, bound: tuple[float, float]) -> tuple[float, float] | None:
    """torchvision's ``ColorJitter._check_input``: a number v gives [center - v, center + v]
    (clipped at 0 for the factors), a pair is used as given; [center, center] is None (no op)."""
    _finite("ColorJitter", **{name: value if isinstance(value, (Real, Sequence)) else ()})
    if isinstance(value, Real):
        if value < 0:
            raise ValueError(f"ColorJitter: {name} must be a non-negative number or a (min, max) pair, got {value!r}")
        low, high = center - float(value), center + float(value)
        if name != "hue":
            low = max(low, 0.0)
    elif isinstance(value, Sequence) and len(value) == 2 and all(isinstance(v, Real) for v in value):
        low, high = float(value[0]), float(value[1])
    else:
        raise ValueError(f"ColorJitter: {name} must be a number or a (min, max) pair, got {value!r}")
    if not bound[0] <= low <= high <= bound[1]:
        raise ValueError(f"ColorJitter: {name} range must lie in [{bound[0]}, {bound[1]}] with min <= max, got [{low}, {high}]")
    return None if low == high == center else (low, high)


class ColorJitter(PixelOp):
    """torchvision's ``ColorJitter(brightness=0, contrast=0, saturation=0, hue=0)``: factors drawn
    uniformly from their ranges (a number v: [max(0, 1 - v), 1 + v], hue [-v, v] with v <= 0.5; a
    pair as given; 0 leaves the adjustment out), applied in a uniformly random order, each to uint8."""

    draws = 8  # four for the order, then a factor each for brightness, contrast, saturation, hue
    steps = 4
    _CODES = (ps.BRIGHTNESS, ps.CONTRAST, ps.SATURATION, ps.HUE)

    def __init__(self, brightness: Any = 0, contrast: Any = 0, saturation: Any = 0, hue: Any = 0):
        inf = float("inf")
        self.brightness = _jitter_range(brightness, "brightness", 1.0, (0.0, inf))
        self.contrast = _jitter_range(contrast, "contrast", 1.0, (0.0, inf))
        self.saturation = _jitter_range(saturation, "saturation", 1.0, (0.0, inf))
        self.hue = _jitter_range(hue, "hue", 0.0, (-0.5, 0.5))

    def program(self, u: np.ndarray, heights: np.ndarray, widths: np.ndarray) -> np.ndarray:
        n = len(u)
        rows = _rows(n, 4)
        order = np.argsort(u[:, :4], axis=1, kind="stable")
        for j, span in enumerate((self.brightness, self.contrast, self.saturation, self.hue)):
            if span is None:
                continue
            position = np.argmax(order == j, axis=1)
            rows[np.arange(n), position, 0] = self._CODES[j]
            rows[np.arange(n), position, 1] = span[0] + (span[1] - span[0]) * u[:, 4 + j]
        return rows


class _RandomStep(PixelOp):
    """One fixed step, applied with probability ``p`` (torchvision's ``_RandomApplyTransform``)."""

    draws = 1

    def __init__(self, p: float):
        self.p = _probability(p, type(self).__name__)

    def _row(self) -> list[float]:
        raise NotImplementedError

    def program(self, u: np.ndarray, heights: np.ndarray, widths: np.ndarray) -> np.ndarray:
        rows = _rows(len(u), 1)
        row = self._row()
        rows[u[:, 0] < self.p, 0, : len(row)] = row
        return rows


class RandomSolarize(_RandomStep):
    """torchvision's ``RandomSolarize(threshold, p=0.5)``: values >= ``threshold`` (0..255) inverted."""

    def __init__(self, threshold: float, p: float = 0.5):
        super().__init__(p)
        if not isinstance(threshold, Real) or not 0 <= threshold <= 255:
            raise ValueError(f"RandomSolarize: threshold must be in [0, 255] for uint8 images, got {threshold!r}")
        self.threshold = float(threshold)

    def _row(self) -> list[float]:
        return [ps.SOLARIZE, self.threshold]


class RandomPosterize(_RandomStep):
    """torchvision's ``RandomPosterize(bits, p=0.5)``: keep the ``bits`` (0..8) high bits."""

    def __init__(self, bits: int, p: float = 0.5):
        super().__init__(p)
        if not isinstance(bits, int) or not 0 <= bits <= 8:
            raise ValueError(f"RandomPosterize: bits must be an int in [0, 8], got {bits!r}")
        self.bits = bits

    def _row(self) -> list[float]:
        return [ps.POSTERIZE, self.bits]


class RandomEqualize(_RandomStep):
    """torchvision's ``RandomEqualize(p=0.5)``: PIL's histogram equalization per channel."""

    def __init__(self, p: float = 0.5):
        super().__init__(p)

    def _row(self) -> list[float]:
        return [ps.EQUALIZE]


class RandomAutocontrast(_RandomStep):
    """torchvision's ``RandomAutocontrast(p=0.5)``: each channel stretched from its min..max."""

    def __init__(self, p: float = 0.5):
        super().__init__(p)

    def _row(self) -> list[float]:
        return [ps.AUTOCONTRAST]


class RandomInvert(_RandomStep):
    """torchvision's ``RandomInvert(p=0.5)``: 255 - x."""

    def __init__(self, p: float = 0.5):
        super().__init__(p)

    def _row(self) -> list[float]:
        return [ps.INVERT]


class RandomAdjustSharpness(_RandomStep):
    """torchvision's ``RandomAdjustSharpness(sharpness_factor, p=0.5)``: 0 blurs, 1 keeps, 2 sharpens."""

    def __init__(self, sharpness_factor: float, p: float = 0.5):
        super().__init__(p)
        if not isinstance(sharpness_factor, Real) or not 0 <= sharpness_factor < float("inf"):
            raise ValueError(f"RandomAdjustSharpness: sharpness_factor must be >= 0, got {sharpness_factor!r}")
        self.sharpness_factor = float(sharpness_factor)

    def _row(self) -> list[float]:
        return [ps.SHARPNESS, self.sharpness_factor]


class RandomGrayscale(_RandomStep):
    """torchvision's ``RandomGrayscale(p=0.1)``: with probability ``p`` every channel becomes the
    truncated luma (0.2989 R + 0.587 G + 0.114 B; white becomes 254, as there); the channel count stays."""

    def __init__(self, p: float = 0.1):
        super().__init__(p)

    def _row(self) -> list[float]:
        return [ps.GRAYSCALE]


class Grayscale(PixelOp):
    """torchvision's ``Grayscale(num_output_channels=1)``: the truncated luma, as 1 channel or 3
    equal ones (a 1-channel image is kept, or repeated for 3). A 1-channel output runs on the
    per-sample path (the compiled task decodes to the batch's channel count, and libjpeg's gray is
    not this luma)."""

    def __init__(self, num_output_channels: int = 1):
        if num_output_channels not in (1, 3):
            raise ValueError(f"Grayscale: num_output_channels must be 1 or 3, got {num_output_channels!r}")
        self.num_output_channels = num_output_channels

    @property
    def channels(self) -> int | None:  # type: ignore[override]
        return self.num_output_channels

    def program(self, u: np.ndarray, heights: np.ndarray, widths: np.ndarray) -> np.ndarray:
        rows = _rows(len(u), 1)
        rows[:, 0, 0] = ps.GRAYSCALE
        return rows


class GaussianBlur(PixelOp):
    """torchvision's ``GaussianBlur(kernel_size, sigma=(0.1, 2.0))``: ``kernel_size`` an odd int or
    (width, height) of odd ints, sigma drawn uniformly from ``sigma`` (a number: fixed), the same
    for both directions; reflect padding (the kernel's half must be smaller than the image)."""

    draws = 1

    def __init__(self, kernel_size: int | Sequence[int], sigma: float | Sequence[float] = (0.1, 2.0)):
        sizes = (kernel_size, kernel_size) if isinstance(kernel_size, int) else tuple(kernel_size)
        if len(sizes) != 2 or not all(isinstance(k, int) and k > 0 and k % 2 == 1 for k in sizes):
            raise ValueError(f"GaussianBlur: kernel_size must be an odd positive int or two of them, got {kernel_size!r}")
        spans = (sigma, sigma) if isinstance(sigma, Real) else tuple(sigma)
        if len(spans) != 2 or not all(isinstance(s, Real) and math.isfinite(s) for s in spans) or not 0 < spans[0] <= spans[1]:
            raise ValueError(f"GaussianBlur: sigma must be a positive number or an increasing positive (min, max), got {sigma!r}")
        self.kernel_size = (int(sizes[0]), int(sizes[1]))
        self.sigma = (float(spans[0]), float(spans[1]))

    def program(self, u: np.ndarray, heights: np.ndarray, widths: np.ndarray) -> np.ndarray:
        rows = _rows(len(u), 1)
        sigma = self.sigma[0] + (self.sigma[1] - self.sigma[0]) * u[:, 0]
        rows[:, 0, 0:3] = [ps.BLUR, *self.kernel_size]
        rows[:, 0, 3] = rows[:, 0, 4] = sigma
        return rows


class RandomRotation(PixelOp):
    """torchvision's ``RandomRotation(degrees, interpolation=NEAREST, expand=False, center=None,
    fill=0)``: an angle drawn uniformly from [-degrees, degrees] (or the (min, max) given),
    counter-clockwise, about ``center`` (pixels; None: the image center), the size kept."""

    draws = 1

    def __init__(
        self,
        degrees: float | Sequence[float],
        interpolation: str = "nearest",
        expand: bool = False,
        center: Sequence[float] | None = None,
        fill: Any = 0,
    ):
        if isinstance(degrees, Real):
            if degrees < 0:
                raise ValueError(f"RandomRotation: degrees must be >= 0 as a single number, got {degrees!r}")
            span = (-float(degrees), float(degrees))
        elif isinstance(degrees, Sequence) and len(degrees) == 2 and degrees[0] <= degrees[1]:
            span = (float(degrees[0]), float(degrees[1]))
        else:
            raise ValueError(f"RandomRotation: degrees must be a number or an increasing (min, max), got {degrees!r}")
        _finite("RandomRotation", degrees=span, center=center if center is not None else ())
        if expand:
            raise ValueError(
                "RandomRotation: expand=True changes the image size, which a batch cannot hold; crop or resize after it in an ops.Apply instead"
            )
        if center is not None and (len(center) != 2 or not all(isinstance(c, Real) for c in center)):
            raise ValueError(f"RandomRotation: center must be None or (x, y) in pixels, got {center!r}")
        self.degrees = span
        self.interpolation = _interpolation(interpolation, "RandomRotation")
        self.expand = False
        self.center = None if center is None else (float(center[0]), float(center[1]))
        _fill(fill, "RandomRotation")
        self.fill = fill

    def program(self, u: np.ndarray, heights: np.ndarray, widths: np.ndarray) -> np.ndarray:
        rows = _rows(len(u), 1)
        fill = _fill(self.fill, "RandomRotation")
        angles = self.degrees[0] + (self.degrees[1] - self.degrees[0]) * u[:, 0]
        for i, (angle, height, width) in enumerate(zip(angles.tolist(), heights.tolist(), widths.tolist())):
            _rotate_row(rows[i, 0], angle, height, width, self.interpolation, fill, self.center)
        return rows


def _span(value: Any, name: str, op: str, symmetric: bool = True) -> tuple[float, float]:
    """A number v as (-v, v) (v >= 0), or an increasing (min, max)."""
    if isinstance(value, Real):
        if value < 0 or not symmetric:
            raise ValueError(
                f"{op}: {name} must be {'a number >= 0 or ' if symmetric else ''}an increasing (min, max), got {value!r}"
            )
        return -float(value), float(value)
    if isinstance(value, Sequence) and len(value) == 2 and all(isinstance(v, Real) for v in value) and value[0] <= value[1]:
        return float(value[0]), float(value[1])
    raise ValueError(f"{op}: {name} must be {'a number >= 0 or ' if symmetric else ''}an increasing (min, max), got {value!r}")


class RandomAffine(PixelOp):
    """torchvision's ``RandomAffine(degrees, translate=None, scale=None, shear=None,
    interpolation=NEAREST, fill=0, center=None)``: an angle from ``degrees`` (a number v: [-v, v]),
    a shift of up to ``translate`` = (fx, fy) of the width and height (whole pixels, rounded), a
    zoom from ``scale`` = (min, max), shears in degrees (a number v: x in [-v, v]; two: the x range;
    four: the x and y ranges), each drawn uniformly in that order, about ``center`` (pixels; None:
    the image center), the size kept."""

    draws = 6  # angle, tx, ty, scale, shear x, shear y

    def __init__(
        self,
        degrees: float | Sequence[float],
        translate: Sequence[float] | None = None,
        scale: Sequence[float] | None = None,
        shear: float | Sequence[float] | None = None,
        interpolation: str = "nearest",
        fill: Any = 0,
        center: Sequence[float] | None = None,
    ):
        _finite(
            "RandomAffine",
            degrees=degrees,
            translate=translate or (),
            scale=scale or (),
            shear=shear if shear is not None else (),
            center=center or (),
        )
        self.degrees = _span(degrees, "degrees", "RandomAffine")
        if translate is not None and (len(translate) != 2 or not all(isinstance(t, Real) and 0 <= t <= 1 for t in translate)):
            raise ValueError(f"RandomAffine: translate must be None or (fx, fy) fractions in [0, 1], got {translate!r}")
        self.translate = None if translate is None else (float(translate[0]), float(translate[1]))
        if scale is not None and (len(scale) != 2 or not 0 < scale[0] <= scale[1]):
            raise ValueError(f"RandomAffine: scale must be None or an increasing positive (min, max), got {scale!r}")
        self.scale = None if scale is None else (float(scale[0]), float(scale[1]))
        if shear is None:
            self.shear = None
        elif isinstance(shear, Real) or len(shear) == 2:
            self.shear = (*_span(shear, "shear", "RandomAffine"), 0.0, 0.0)
        elif len(shear) == 4:
            self.shear = (*_span(shear[:2], "shear", "RandomAffine"), *_span(shear[2:], "shear", "RandomAffine"))
        else:
            raise ValueError(f"RandomAffine: shear must be None, a number, or 2 or 4 numbers, got {shear!r}")
        if center is not None and (len(center) != 2 or not all(isinstance(c, Real) for c in center)):
            raise ValueError(f"RandomAffine: center must be None or (x, y) in pixels, got {center!r}")
        self.center = None if center is None else (float(center[0]), float(center[1]))
        self.interpolation = _interpolation(interpolation, "RandomAffine")
        _fill(fill, "RandomAffine")
        self.fill = fill

    def program(self, u: np.ndarray, heights: np.ndarray, widths: np.ndarray) -> np.ndarray:
        rows = _rows(len(u), 1)
        fill = _fill(self.fill, "RandomAffine")
        lo, hi = self.degrees
        for i, (draw, height, width) in enumerate(zip(u.tolist(), heights.tolist(), widths.tolist())):
            angle = lo + (hi - lo) * draw[0]
            tx = ty = 0
            if self.translate is not None:
                dx, dy = self.translate[0] * width, self.translate[1] * height
                tx, ty = int(round(-dx + 2 * dx * draw[1])), int(round(-dy + 2 * dy * draw[2]))
            zoom = 1.0 if self.scale is None else self.scale[0] + (self.scale[1] - self.scale[0]) * draw[3]
            sx = sy = 0.0
            if self.shear is not None:
                sx = self.shear[0] + (self.shear[1] - self.shear[0]) * draw[4]
                sy = self.shear[2] + (self.shear[3] - self.shear[2]) * draw[5]
            center = None if self.center is None else self.center
            matrix = inverse_affine_matrix(
                height, width, angle=angle, translate=(tx, ty), scale=zoom, shear=(sx, sy), center=center
            )
            _affine_row(rows[i, 0], matrix, self.interpolation, fill)
        return rows


# ------------------------------------------------------------------------------------------ containers


def _inner(transforms: Any, op: str) -> list[PixelOp]:
    if not isinstance(transforms, (list, tuple)) or not transforms or not all(isinstance(t, PixelOp) for t in transforms):
        raise ValueError(
            f"{op}: transforms must be a non-empty list of pixel ops (ColorJitter, GaussianBlur, ...), got {transforms!r}"
        )
    for t in transforms:
        if t.channels is not None:
            raise ValueError(
                f"{op}: {t!r} changes the channel count, which cannot depend on a draw; use ops.RandomGrayscale(p) instead"
            )
    return list(transforms)


class RandomApply(PixelOp):
    """torchvision's ``RandomApply(transforms, p=0.5)``: with probability ``p`` the pixel ops
    ``transforms`` in order, else none of them (SimCLR's ``RandomApply([ColorJitter(...)], p=0.8)``).
    Each inner op draws from its own columns, whether it is applied or not."""

    def __init__(self, transforms: Sequence[PixelOp], p: float = 0.5):
        self.transforms = _inner(transforms, "RandomApply")
        self.p = _probability(p, "RandomApply")

    @property
    def draws(self) -> int:  # the choice, then each op's
        return 1 + sum(t.draws for t in self.transforms)

    @property
    def steps(self) -> int:
        return sum(t.steps for t in self.transforms)

    def program(self, u: np.ndarray, heights: np.ndarray, widths: np.ndarray) -> np.ndarray:
        parts, column = [], 1
        for t in self.transforms:
            parts.append(t.program(u[:, column : column + t.draws], heights, widths))
            column += t.draws
        rows = np.concatenate(parts, axis=1)
        rows[u[:, 0] >= self.p] = 0.0  # not applied: every step NONE
        return rows


class RandomChoice(PixelOp):
    """torchvision's ``RandomChoice(transforms, p=None)``: one of the pixel ops ``transforms``,
    chosen with probabilities ``p`` (default: equal; they are normalized to sum to 1)."""

    def __init__(self, transforms: Sequence[PixelOp], p: Sequence[float] | None = None):
        self.transforms = _inner(transforms, "RandomChoice")
        if p is not None and (
            len(p) != len(self.transforms) or not all(isinstance(v, Real) and 0 <= v < float("inf") for v in p) or sum(p) <= 0
        ):
            raise ValueError(f"RandomChoice: p must be None or one non-negative weight per transform, not all 0, got {p!r}")
        self.p = None if p is None else [float(v) for v in p]

    @property
    def draws(self) -> int:  # the choice, then each op's
        return 1 + sum(t.draws for t in self.transforms)

    @property
    def steps(self) -> int:
        return max(t.steps for t in self.transforms)

    def program(self, u: np.ndarray, heights: np.ndarray, widths: np.ndarray) -> np.ndarray:
        weights = np.ones(len(self.transforms)) if self.p is None else np.asarray(self.p)
        edges = np.cumsum(weights) / weights.sum()
        chosen = np.minimum(np.searchsorted(edges, u[:, 0], side="right"), len(self.transforms) - 1)
        rows = _rows(len(u), self.steps)
        column = 1
        for k, t in enumerate(self.transforms):
            picked = chosen == k
            if picked.any():
                rows[picked, : t.steps] = t.program(u[picked, column : column + t.draws], heights[picked], widths[picked])
            column += t.draws
        return rows


# ------------------------------------------------------------------------------------------ erasing

_ERASE_ATTEMPTS = 10  # torchvision's


class RandomErasing(PixelOp):
    """torchvision's ``RandomErasing(p=0.5, scale=(0.02, 0.33), ratio=(0.3, 3.3), value=0)``: with
    probability ``p``, a rectangle of random area (a fraction of the image in ``scale``) and
    log-uniform aspect ratio in ``ratio``, placed uniformly, set to ``value`` (a number or one per
    channel); nothing when 10 tries do not fit. Before ``Normalize`` it erases uint8 pixels
    (``value`` in 0..255); after it, the normalized output (``value`` in output units: 0 is the
    mean colour, as in torchvision's reference recipes, which erase after normalizing)."""

    draws = 1 + 2 * _ERASE_ATTEMPTS + 2  # apply?, (area, log-ratio) per try, then top and left

    def __init__(
        self, p: float = 0.5, scale: Sequence[float] = (0.02, 0.33), ratio: Sequence[float] = (0.3, 3.3), value: Any = 0
    ):
        self.p = _probability(p, "RandomErasing")
        if len(scale) != 2 or not 0 <= scale[0] <= scale[1] <= 1:
            raise ValueError(f"RandomErasing: scale must be an increasing (min, max) in [0, 1], got {scale!r}")
        if len(ratio) != 2 or not 0 < ratio[0] <= ratio[1]:
            raise ValueError(f"RandomErasing: ratio must be an increasing positive (min, max), got {ratio!r}")
        if isinstance(value, str):
            raise ValueError(
                f"RandomErasing: value={value!r} is not supported (torchvision's 'random' is noise in normalized units); give a number or one per channel"
            )
        values = [value] if isinstance(value, Real) else list(value)
        if len(values) not in (1, 3) or not all(isinstance(v, Real) and math.isfinite(v) for v in values):
            raise ValueError(f"RandomErasing: value must be a number or 1 or 3 numbers, got {value!r}")
        _finite("RandomErasing", scale=scale, ratio=ratio)
        self.scale = (float(scale[0]), float(scale[1]))
        self.ratio = (float(ratio[0]), float(ratio[1]))
        self.value = value

    def _values(self) -> tuple[float, float, float]:
        """``value`` as three per-channel numbers (checked)."""
        values = [self.value] if isinstance(self.value, Real) else list(self.value)
        if (
            isinstance(self.value, str)
            or len(values) not in (1, 3)
            or not all(isinstance(v, Real) and math.isfinite(v) for v in values)
        ):
            raise ValueError(f"RandomErasing: value must be a number or 1 or 3 finite numbers, got {self.value!r}")
        values = [float(v) for v in values] * (3 if len(values) == 1 else 1)
        return values[0], values[1], values[2]

    def check_uint8(self) -> None:
        """``ValueError`` unless ``value`` fits uint8 pixels (what it erases before ``Normalize``)."""
        if not all(0 <= v <= 255 for v in self._values()):
            raise ValueError(
                f"{self!r} erases uint8 pixels here: value must be in 0..255, got {self.value!r} (after ops.Normalize it is in output units)"
            )

    def boxes(self, u: np.ndarray, heights: np.ndarray, widths: np.ndarray) -> np.ndarray:
        """(n, 4) int64 (top, left, height, width) of each sample's rectangle; height -1 where
        nothing is erased (not drawn, or no try fitted)."""
        n = len(u)
        heights, widths = np.asarray(heights, np.int64), np.asarray(widths, np.int64)
        area = (heights * widths).astype(np.float64)[:, None]
        target = area * (self.scale[0] + (self.scale[1] - self.scale[0]) * u[:, 1 : 1 + _ERASE_ATTEMPTS])
        log_lo, log_hi = math.log(self.ratio[0]), math.log(self.ratio[1])
        reach = max(abs(log_lo), abs(log_hi))
        halvings = max(0, math.ceil(math.log2(reach * 16))) if reach > 0 else 0
        aspect = _exp(log_lo + (log_hi - log_lo) * u[:, 1 + _ERASE_ATTEMPTS : 1 + 2 * _ERASE_ATTEMPTS], halvings)
        h = np.rint(np.sqrt(target * aspect))
        w = np.rint(np.sqrt(target / aspect))
        fits = (h < heights[:, None]) & (w < widths[:, None])
        first = np.argmax(fits, axis=1)
        rows = np.arange(n)
        h, w = h[rows, first].astype(np.int64), w[rows, first].astype(np.int64)
        top = np.floor(u[:, -2] * (heights - h + 1)).astype(np.int64)
        left = np.floor(u[:, -1] * (widths - w + 1)).astype(np.int64)
        erased = (u[:, 0] < self.p) & fits.any(axis=1)
        return np.where(erased[:, None], np.stack([top, left, h, w], axis=1), np.array([0, 0, -1, 0]))

    def program(self, u: np.ndarray, heights: np.ndarray, widths: np.ndarray) -> np.ndarray:
        self.check_uint8()
        rows = _rows(len(u), 1)
        boxes = self.boxes(u, heights, widths)
        erased = boxes[:, 2] >= 0
        rows[erased, 0, 0] = ps.ERASE
        rows[erased, 0, 1:5] = boxes[erased]
        rows[erased, 0, 5:8] = np.trunc(self._values())
        return rows

    @property
    def values(self) -> tuple[float, float, float]:
        """``value`` as three per-channel numbers."""
        return self._values()

    def erase(self, outputs: Any, boxes: np.ndarray, chw: bool) -> None:
        """Erase each output (an (n, H, W, C) or (n, C, H, W) array, or a list of such samples, NumPy
        arrays or torch tensors) in its box, in place, with ``value`` cast to the outputs' dtype
        (uint8 outputs: ``value`` must be in 0..255)."""
        values = self._values()
        for i in np.flatnonzero(boxes[:, 2] >= 0).tolist():
            top, left, height, width = boxes[i].tolist()
            out = outputs[i]
            channels = out.shape[0] if chw else out.shape[-1]
            fill = values if channels == 3 else values[:1]
            if str(out.dtype).endswith("uint8"):
                self.check_uint8()
            if isinstance(out, np.ndarray):
                fill = np.asarray(fill, np.float64).astype(out.dtype)
            else:  # a torch tensor (bfloat16 included: torch's cast)
                import torch

                fill = torch.tensor(fill, dtype=torch.float64).to(device=out.device, dtype=out.dtype)
            if chw:
                out[:, top : top + height, left : left + width] = fill[:, None, None]
            else:
                out[top : top + height, left : left + width] = fill
