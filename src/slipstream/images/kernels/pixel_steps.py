"""Pixel steps: the NumPy executor (the reference) of the pixel ops' step programs.

A pixel op (``images.pixelops``) compiles each sample's random parameters into *steps*: rows of
``WORDS`` float64, column 0 an opcode below, columns 1.. its parameters. ``run(image, steps)``
applies a sample's steps in order to its uint8 (H, W, C) image (C 1 or 3), in place, each step
reading the previous one's uint8 output. ``csrc/pixel.c`` executes the same steps with the same
IEEE float32 arithmetic (no fused multiply-add, no fast math), so both give the same bits; this
module is the reference it is tested against. The arithmetic follows torchvision v2 on uint8
tensors (``tools/torchvision_v2/semantics.md``): colour blends in float32 with the fused add
torch uses emulated exactly (the exact float32 product plus the other term, rounded once to
double and once to float32), truncation back to uint8 for colour ops, round half to even for
blurs and resampling.

Opcodes and their parameters (columns 1..):

====  ============  ==========================================================================
 0    NONE          nothing
 1    BRIGHTNESS    factor
 2    CONTRAST      factor (blend with the mean of the floored grayscale; 1 channel: the mean)
 3    SATURATION    factor (blend with the floored grayscale; 1 channel: unchanged)
 4    HUE           hue shift in [-0.5, 0.5] (HSV in float32; 1 channel: unchanged)
 5    SHARPNESS     factor (blend with a 3x3 smoothing of the interior; border unchanged)
 6    POSTERIZE     bits (0..8)
 7    SOLARIZE      threshold (values >= it are inverted)
 8    AUTOCONTRAST  (per channel, stretch min..max)
 9    EQUALIZE      (per channel, PIL's histogram equalization)
10    INVERT
11    GRAYSCALE     (every channel the truncated luma)
12    BLUR          kx, ky (odd sizes), sigma_x, sigma_y (reflect padding, separable float32)
13    AFFINE        m0..m5 (torchvision's inverse matrix), interpolation (0 nearest, 1 bilinear),
                    fill flag (0: zeros outside), fill per channel (3 values)
14    ROT90         k (counter-clockwise quarter turns, torch.rot90's; k odd needs H == W)
15    ERASE         top, left, height, width (top and left >= 0: smaller ones count from the end),
                    value per channel (3 values in 0..255; the executors may differ outside it)
====  ============  ==========================================================================

A step whose parameters cannot apply (a word that is not finite, a hue shift past float32's
range, a blur kernel wider than the image allows, an odd ROT90 of a non-square image, negative
POSTERIZE bits, an unknown opcode) raises ``StepError`` (a ``ValueError``) naming the step; the
image may then be partly modified. Integer parameters (opcode, kernel sizes, bits, quarter turns,
the erased box) are truncated toward zero.
"""

from __future__ import annotations

import numpy as np

__all__ = ["NAMES", "WORDS", "StepError", "blur_weights", "run"]

WORDS = 12
(NONE, BRIGHTNESS, CONTRAST, SATURATION, HUE, SHARPNESS, POSTERIZE, SOLARIZE, AUTOCONTRAST, EQUALIZE, INVERT, GRAYSCALE, BLUR, AFFINE, ROT90,
 ERASE) = range(16)  # fmt: skip
NAMES = ("NONE", "BRIGHTNESS", "CONTRAST", "SATURATION", "HUE", "SHARPNESS", "POSTERIZE", "SOLARIZE", "AUTOCONTRAST", "EQUALIZE", "INVERT",
         "GRAYSCALE", "BLUR", "AFFINE", "ROT90", "ERASE")  # fmt: skip

f32 = np.float32


class StepError(ValueError):
    """A pixel step whose parameters cannot apply to the image (raised by both executors)."""


_GRAY = (f32(0.2989), 0.587, 0.114)  # torchvision's luma weights (the first a float32 product, the others fused adds)


def _fused(a: np.ndarray, alpha: float, b: np.ndarray) -> np.ndarray:
    """torch's float32 ``a.add_(b, alpha=alpha)`` on this CPU: ``a + f32(alpha) * b`` rounded once
    (the product of two float32 is exact in double; the sum is rounded to double, then to float32)."""
    return (a.astype(np.float64) + np.float64(f32(alpha)) * b.astype(np.float64)).astype(f32)


def _trunc(x: np.ndarray) -> np.ndarray:
    """float32 to uint8 as torch's ``clamp_(0, 255).to(uint8)``: truncation toward zero."""
    return np.clip(x, f32(0), f32(255)).astype(np.uint8)


def _gray(x: np.ndarray) -> np.ndarray:
    """The float32 luma (H, W) of float32 (H, W, 3) pixels, in torch's operation order."""
    return _fused(_fused(x[:, :, 0] * _GRAY[0], _GRAY[1], x[:, :, 1]), _GRAY[2], x[:, :, 2])


def _blend(image: np.ndarray, other: np.ndarray, ratio: float) -> np.ndarray:
    x = image.astype(f32)
    return _trunc(_fused(x * f32(ratio), 1.0 - ratio, np.broadcast_to(other, x.shape)))


def _contrast(image: np.ndarray, factor: float) -> np.ndarray:
    x = image.astype(f32)
    plane = np.floor(_gray(x)) if image.shape[2] == 3 else x[:, :, 0]
    mean = f32(plane.sum(dtype=np.float64) / plane.size)  # whole numbers: the sum is exact
    return _blend(image, np.full(1, mean, f32), factor)


def _saturation(image: np.ndarray, factor: float) -> np.ndarray:
    if image.shape[2] == 1:
        return image
    return _blend(image, np.floor(_gray(image.astype(f32)))[:, :, None], factor)


def _hue(image: np.ndarray, shift: float) -> np.ndarray:
    if image.shape[2] == 1:
        return image
    x = image.astype(f32) * f32(1 / 255)
    r, g, b = x[:, :, 0], x[:, :, 1], x[:, :, 2]
    maxc, minc = x.max(axis=2), x.min(axis=2)
    equal = maxc == minc
    spread = maxc - minc
    s = spread / np.where(equal, f32(1), maxc)
    divisor = np.where(equal, f32(1), spread)
    rc, gc, bc = (maxc - r) / divisor, (maxc - g) / divisor, (maxc - b) / divisor
    hr = np.where(maxc == r, bc - gc, f32(0))
    hg = np.where((maxc == g) & (maxc != r), f32(2) + rc - bc, f32(0))
    hb = np.where((maxc != g) & (maxc != r), f32(4) + gc - rc, f32(0))
    h = np.fmod((hr + hg + hb) * f32(1 / 6) + f32(1), f32(1))
    h = np.mod(h + f32(shift), f32(1))
    h6 = h * f32(6)
    sector = np.floor(h6)
    frac = h6 - sector
    sector = sector.astype(np.int64) % 6
    v = maxc
    p = np.clip((f32(1) - s) * v, f32(0), f32(1))
    q = np.clip((f32(1) - s * frac) * v, f32(0), f32(1))
    t = np.clip((s * frac + (f32(1) - s)) * v, f32(0), f32(1))
    vpqt = np.stack([v, p, q, t])
    pick = np.array([[0, 2, 1, 1, 3, 0], [3, 0, 0, 2, 1, 1], [1, 1, 3, 0, 0, 2]])[:, sector]  # (3, H, W)
    rgb = np.take_along_axis(vpqt, pick, 0)
    return (rgb * f32(255.999)).astype(np.uint8).transpose(1, 2, 0)


def _sharpness(image: np.ndarray, factor: float) -> np.ndarray:
    height, width, _ = image.shape
    if height <= 2 or width <= 2:
        return image
    x = image.astype(f32)
    side, middle = f32(1 / 13), f32(5 / 13)
    smooth = np.zeros((height - 2, width - 2, image.shape[2]), f32)
    for dy in range(3):
        for dx in range(3):
            smooth += x[dy : dy + height - 2, dx : dx + width - 2] * (middle if dy == dx == 1 else side)
    smooth = np.rint(smooth)
    out = x.copy()
    inner = x[1:-1, 1:-1]
    out[1:-1, 1:-1] = _fused(inner, 1.0 - factor, smooth - inner)
    return _trunc(out)


def _posterize(image: np.ndarray, bits: float, where: str) -> np.ndarray:
    bits = int(bits)
    if bits < 0:
        raise StepError(f"{where}: posterize keeps 0..8 bits, got {bits}")
    if bits >= 8:
        return image
    return image & np.uint8((((1 << bits) - 1) << (8 - bits)) & 0xFF)


def _solarize(image: np.ndarray, threshold: float) -> np.ndarray:
    return np.where(image.astype(f32) >= f32(threshold), 255 - image, image)


def _autocontrast(image: np.ndarray) -> np.ndarray:
    x = image.astype(f32)
    lo, hi = x.min(axis=(0, 1)), x.max(axis=(0, 1))
    flat = hi == lo
    scale = np.where(flat, f32(1), (hi - lo) * f32(1 / 255))
    lo = np.where(flat, f32(0), lo)
    return _trunc((x - lo) / scale)


def _equalize(image: np.ndarray) -> np.ndarray:
    out = image.copy()
    for c in range(image.shape[2]):
        channel = image[:, :, c]
        hist = np.bincount(channel.reshape(-1), minlength=256)
        last = int(np.flatnonzero(hist)[-1])
        step = (channel.size - int(hist[last])) // 255
        if step == 0:
            continue
        cum = np.cumsum(hist)
        lut = np.empty(256, np.int64)
        lut[0] = 0
        lut[1:] = np.minimum((cum[:-1] + step // 2) // step, 255)
        out[:, :, c] = lut.astype(np.uint8)[channel]
    return out


def _grayscale(image: np.ndarray) -> np.ndarray:
    if image.shape[2] == 1:
        return image
    return np.repeat(_trunc(_gray(image.astype(f32)))[:, :, None], 3, axis=2)


_EXP_TERMS = tuple(1.0 / k for k in range(9, 0, -1))


def _exp_negative(y: np.ndarray) -> np.ndarray:
    """e**y for y <= 0 from IEEE additions and multiplications alone (the same bits in C and on
    every machine): y halved into [-1/16, 0] (``frexp``: exact), a degree-9 Taylor polynomial
    (Horner), squared back as often."""
    _, exponent = np.frexp(y)
    halvings = np.maximum(exponent + 4, 0)
    z = np.ldexp(y, -halvings)
    total = z * _EXP_TERMS[0] + 1.0
    for inverse in _EXP_TERMS[1:]:
        total = total * z
        total = total * inverse
        total = total + 1.0
    for j in range(int(halvings.max(initial=0))):
        total = np.where(halvings > j, total * total, total)
    return total


def blur_weights(size: int, sigma: float) -> np.ndarray:
    """The float32 Gaussian taps of a ``size`` kernel (odd): ``exp(-(i - c)**2 / (2 sigma**2))``
    in double, normalized by their sum (added in order), rounded to float32. torchvision computes
    the same function as a float32 softmax; the taps differ from its in the last bits."""
    center = (size - 1) // 2
    d = np.arange(size, dtype=np.float64) - center
    e = _exp_negative(-(d * d) / (2.0 * sigma * sigma))
    total = 0.0
    for value in e.tolist():
        total += value
    return (e / total).astype(f32)


def _reflect(index: np.ndarray, n: int) -> np.ndarray:
    index = np.where(index < 0, -index, index)
    return np.where(index >= n, 2 * (n - 1) - index, index)


def _blur(image: np.ndarray, kx: int, ky: int, sx: float, sy: float, where: str) -> np.ndarray:
    height, width, _ = image.shape
    if kx // 2 >= width or ky // 2 >= height:
        raise StepError(
            f"{where}: a {kx}x{ky} blur kernel needs an image wider than {kx // 2} and taller than {ky // 2} pixels (reflect padding), got {height}x{width}"
        )
    wx, wy = blur_weights(kx, sx), blur_weights(ky, sy)
    x = image.astype(f32)
    columns = _reflect(np.arange(width)[:, None] + np.arange(kx)[None, :] - kx // 2, width)  # (W, kx)
    across = np.zeros(x.shape, f32)
    for k in range(kx):
        across += x[:, columns[:, k]] * wx[k]
    rows = _reflect(np.arange(height)[:, None] + np.arange(ky)[None, :] - ky // 2, height)
    out = np.zeros(x.shape, f32)
    for k in range(ky):
        out += across[rows[:, k]] * wy[k]
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def source_coordinates(matrix: np.ndarray, height: int, width: int) -> tuple[np.ndarray, np.ndarray]:
    """float32 source coordinates (x, y), pixel centers at whole numbers, of every output pixel
    under torchvision's inverse affine ``matrix`` (``_affine_grid`` + ``grid_sample`` with
    ``align_corners=False``, in its operation order)."""
    m = np.asarray(matrix, np.float64).astype(f32)
    half_w, half_h = f32(0.5 * width), f32(0.5 * height)
    xs = (np.arange(width) - (width - 1) * 0.5).astype(f32)[None, :]
    ys = (np.arange(height) - (height - 1) * 0.5).astype(f32)[:, None]
    gx = xs * (m[0] / half_w) + ys * (m[1] / half_w) + (m[2] / half_w)
    gy = xs * (m[3] / half_h) + ys * (m[4] / half_h) + (m[5] / half_h)
    ix = ((gx + f32(1)) * f32(width) - f32(1)) / f32(2)
    iy = ((gy + f32(1)) * f32(height) - f32(1)) / f32(2)
    return ix, iy


def _affine(image: np.ndarray, params: np.ndarray) -> np.ndarray:
    height, width, channels = image.shape
    ix, iy = source_coordinates(params[0:6], height, width)
    bilinear, filled = params[6] != 0, params[7] != 0
    fill = params[8 : 8 + channels].astype(f32) if channels == 3 else params[8:9].astype(f32)
    x = image.astype(f32)
    if not bilinear:
        u, v = np.rint(ix), np.rint(iy)
        inside = (u >= 0) & (u < width) & (v >= 0) & (v < height)
        ui, vi = np.where(inside, u, 0).astype(np.int64), np.where(inside, v, 0).astype(np.int64)
        out = np.where(inside[:, :, None], x[vi, ui], fill if filled else f32(0))
    else:
        x0, y0 = np.floor(ix), np.floor(iy)
        wx = ix - x0
        ex = f32(1) - wx
        ny = iy - y0
        sy = f32(1) - ny
        out = np.zeros(x.shape, f32)
        mask = np.zeros(ix.shape, f32)
        for dy, dx, weight in ((0, 0, sy * ex), (0, 1, sy * wx), (1, 0, ny * ex), (1, 1, ny * wx)):
            xx, yy = x0 + f32(dx), y0 + f32(dy)
            ok = (xx >= 0) & (xx < width) & (yy >= 0) & (yy < height)
            xi, yi = np.where(ok, xx, 0).astype(np.int64), np.where(ok, yy, 0).astype(np.int64)
            out += np.where(ok[:, :, None], x[yi, xi], f32(0)) * weight[:, :, None]
            mask += np.where(ok, weight, f32(0))
        if filled:
            out = (out - fill) * mask[:, :, None] + fill
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def _rot90(image: np.ndarray, k: int, where: str) -> np.ndarray:
    k %= 4
    if k % 2 and image.shape[0] != image.shape[1]:
        raise StepError(f"{where}: a quarter turn keeps the size of square images only, got {image.shape[0]}x{image.shape[1]}")
    return np.rot90(image, k, axes=(0, 1))


def _erase(image: np.ndarray, params: np.ndarray) -> np.ndarray:
    top, left, height, width = (int(v) for v in params[0:4])
    values = params[4 : 4 + image.shape[2]].astype(np.uint8) if image.shape[2] == 3 else params[4:5].astype(np.uint8)
    out = image.copy()
    out[top : top + height, left : left + width] = values
    return out


def run(image: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Apply ``steps`` ((k, WORDS) float64) in order to ``image`` (uint8 (H, W, C), C 1 or 3,
    written in place); returns ``image``."""
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] not in (1, 3):
        raise ValueError(f"pixel steps need a uint8 (H, W, 1 or 3) image, got {image.dtype} {image.shape}")
    steps = np.asarray(steps, np.float64).reshape(-1, WORDS)
    current = image
    for number, row in enumerate(steps):
        if not np.isfinite(row).all():
            column = int(np.flatnonzero(~np.isfinite(row))[0])
            raise StepError(f"pixel step {number}: step words must be finite numbers, got {row[column]} in column {column}")
        code, p = int(row[0]), row[1:]
        where = f"pixel step {number} ({NAMES[code] if 0 <= code < len(NAMES) else code})"
        if code == NONE:
            continue
        elif code == BRIGHTNESS:
            current = _trunc(current.astype(f32) * f32(p[0]))
        elif code == CONTRAST:
            current = _contrast(current, float(p[0]))
        elif code == SATURATION:
            current = _saturation(current, float(p[0]))
        elif code == HUE:
            with np.errstate(over="ignore"):
                shift32 = np.float32(p[0])
            if not np.isfinite(shift32):
                raise StepError(f"{where}: the hue shift must be within float32's range, got {float(p[0]):g}")
            current = _hue(current, float(p[0]))
        elif code == SHARPNESS:
            current = _sharpness(current, float(p[0]))
        elif code == POSTERIZE:
            current = _posterize(current, p[0], where)
        elif code == SOLARIZE:
            current = _solarize(current, float(p[0]))
        elif code == AUTOCONTRAST:
            current = _autocontrast(current)
        elif code == EQUALIZE:
            current = _equalize(current)
        elif code == INVERT:
            current = 255 - current
        elif code == GRAYSCALE:
            current = _grayscale(current)
        elif code == BLUR:
            current = _blur(current, int(p[0]), int(p[1]), float(p[2]), float(p[3]), where)
        elif code == AFFINE:
            current = _affine(current, p)
        elif code == ROT90:
            current = _rot90(current, int(p[0]), where)
        elif code == ERASE:
            current = _erase(current, p)
        else:
            raise StepError(f"{where}: unknown opcode {code} (expected 0..{len(NAMES) - 1})")
    if current is not image:
        image[...] = current
    return image
