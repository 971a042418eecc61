"""The pixel ops' steps on a batch of torch tensors: ``run_steps(images, steps)``.

Contract: ``images`` is a uint8 (N, C, H, W) tensor (C 1 or 3), the layout the device stage has
after its geometry (``batchpixels.resample`` gives NCHW), on any device; ``steps`` is float64
(N, S, ``pixel_steps.WORDS``) on the host (a NumPy array or a CPU tensor): sample ``i``'s ``S``
steps, the rows ``Pipeline.pixel_program`` compiles (``kernels.pixel_steps`` lists the opcodes).
Sample ``i`` of the result is ``pixel_steps.run`` of sample ``i`` (as an (H, W, C) image) with
``steps[i]``; ``images`` is written in place and returned, as the NumPy executor does.

How it stays batched: the steps are read on the host. For each step position, the samples are
grouped by opcode, and each opcode runs once on its group (``index_select``, the op on the
(g, C, H, W) group with per-sample parameters as broadcast (g, 1, 1, 1) tensors, ``index_copy_``
back; a group of the whole batch is neither gathered nor scattered). The steps are uploaded once,
the group indices once; a few opcodes upload a small table per group (BLUR its taps and reflected
indices, ERASE its rectangles and values, AFFINE its pixel-centre coordinates and flags, HUE and
POSTERIZE a lookup table). No step reads a device value back to the host (no synchronization).
Nothing loops over samples or pixels in Python: the loops are over the 9 taps of SHARPNESS's
smoothing, a blur's kernel taps, AFFINE's 4 bilinear taps, and the values of ROT90's quarter turns
(groups of their own), as the NumPy executor loops.

Bits: every opcode computes the NumPy executor's float32 operations in its order, one torch op
per NumPy op: no ``add(..., alpha=)`` with another alpha than 1, no ``addcmul``/``lerp`` (torch
fuses their multiply-adds on CPU and CUDA), and the fused adds the reference emulates in double
(``pixel_steps._fused``) computed in float64 (the float32 product is exact there, so fusing is
harmless). Division is IEEE division by tensors only: CUDA divides by a Python number (any CPU
scalar) as a product by its rounded reciprocal, so divisors are device tensors (``_scalar``), but
for halving. ``torch.round`` rounds half to even as ``np.rint``; float-to-uint8 conversions of
clamped values truncate as NumPy's. EQUALIZE counts per-(sample, channel) histograms with one
``scatter_add_`` over offset values (integer sums: the same counts in any order; not ``bincount``,
whose CUDA kernel reads its input's maximum back to the host); AFFINE computes the same float32
source coordinates and gathers the taps explicitly (no ``grid_sample``); BLUR's taps are the
host's ``pixel_steps.blur_weights``. On CPU tensors every opcode equals the NumPy executor bit for
bit (``tests/images/device/test_device_pixelops.py``: random programs, every opcode alone, the
ops' compiled programs and torchvision's fixture cases). On CUDA the same operations run and the
reasons for equality hold there too (IEEE float32/float64, no contraction across separate
kernels), but no CUDA machine has checked it yet (the test file's CUDA-only test does).

Errors: every step is checked on the host before any pixel is touched (the NumPy executor may
have applied earlier steps when it refuses one), with the NumPy executor's rules: a word that is
not finite, an unknown opcode, a blur kernel wider than the image's reflect padding allows, an odd
quarter turn of a non-square image, negative posterize bits raise ``pixel_steps.StepError`` (a
``ValueError``) naming the step position, the image's position in the batch and the opcode (its
``sample`` attribute is that position); integer parameters are truncated toward zero, as there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..kernels import pixel_steps as ps

__all__ = ["LAYOUT", "run_steps", "upload"]

LAYOUT = "NCHW"  # the layout of ``run_steps``' images

_f32 = np.float32
_GRAY = (float(_f32(0.2989)), float(_f32(0.587)), float(_f32(0.114)))  # float32 values, as Python floats (exact)
_INV255 = float(_f32(1 / 255))
_INV6 = float(_f32(1 / 6))
_SIDE, _MIDDLE = float(_f32(1 / 13)), float(_f32(5 / 13))
_HUE_OUT = float(_f32(255.999))
_POSTERIZE = (0, 128, 192, 224, 240, 248, 252, 254, 255)  # the mask of 0..8 bits
_HUE_PICK = ((0, 2, 1, 1, 3, 0), (3, 0, 0, 2, 1, 1), (1, 1, 3, 0, 0, 2))  # (r, g, b) from (v, p, q, t) per sector


class _Group:
    """The parameters of one opcode's samples at one step position: ``params`` on the device
    (float64 (g, 11), columns 1.. of their steps) and ``host``, the same rows in NumPy."""

    __slots__ = ("host", "params")

    def __init__(self, params: torch.Tensor, host: np.ndarray):
        self.params, self.host = params, host

    def column(self, k: int) -> torch.Tensor:
        """Parameter ``k`` (column ``k + 1`` of the steps) as float64 (g, 1, 1, 1)."""
        return self.params[:, k].view(-1, 1, 1, 1)

    def float32(self, k: int) -> torch.Tensor:
        """Parameter ``k`` rounded to float32, (g, 1, 1, 1): NumPy's ``np.float32(p)``."""
        return self.params[:, k].to(torch.float32).view(-1, 1, 1, 1)


# ------------------------------------------------------------------------------- arithmetic


def upload(array: np.ndarray, device: torch.device) -> torch.Tensor:
    """A host array as a tensor on ``device``; on CUDA through pinned memory, without waiting (a
    copy from pageable memory synchronizes the stream: the host would stop queueing ahead of it)."""
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    if device.type == "cuda":
        return tensor.pin_memory().to(device, non_blocking=True)
    return tensor.to(device)


def _fused(a: torch.Tensor, alpha: torch.Tensor | float, b: torch.Tensor) -> torch.Tensor:
    """``pixel_steps._fused``: ``a + f32(alpha) * b`` in double, rounded to float32; ``alpha``
    already a float32 value (as a float64 tensor, or a Python float); ``a`` has the result's shape."""
    out = a.to(torch.float64)
    out += b.to(torch.float64) * alpha
    return out.to(torch.float32)


def _scalar(value: float, like: torch.Tensor) -> torch.Tensor:
    """``value`` as a 0-d tensor of ``like``'s dtype on its device: a divisor. (CUDA divides by a
    Python number, or any CPU scalar, as a product by its rounded reciprocal: not IEEE division.)"""
    return torch.full((), value, dtype=like.dtype, device=like.device)


def _trunc_(x: torch.Tensor) -> torch.Tensor:
    """float32 to uint8, clamped to [0, 255] (in place: ``x`` is a temporary) and truncated (torch's
    ``clamp_(0, 255).to(uint8)``)."""
    return x.clamp_(0.0, 255.0).to(torch.uint8)


def _round_(x: torch.Tensor) -> torch.Tensor:
    """float32 to uint8 rounded half to even and clamped (in place: ``x`` is a temporary):
    ``np.clip(np.rint(x), 0, 255).astype(uint8)``."""
    return x.round_().clamp_(0.0, 255.0).to(torch.uint8)


def _gray(x: torch.Tensor) -> torch.Tensor:
    """The float32 luma (g, H, W) of (g, 3, H, W) pixels (uint8 or float32), in torch's operation order."""
    r, g, b = (x[:, k].to(torch.float32) for k in range(3))
    return _fused(_fused(r * _GRAY[0], _GRAY[1], g), _GRAY[2], b)


def _blend(image: torch.Tensor, other: torch.Tensor, group: _Group) -> torch.Tensor:
    """``pixel_steps._blend`` with the group's ratios (parameter 0)."""
    ratio = group.column(0)
    rest = (1.0 - ratio).to(torch.float32).to(torch.float64)  # f32(1.0 - ratio), the double subtraction first
    x = image.to(torch.float32).mul_(ratio.to(torch.float32))
    total = x.to(torch.float64)
    total += other.to(torch.float64) * rest
    return _trunc_(x.copy_(total))  # copy_ rounds the double to float32 as .to() does


# ------------------------------------------------------------------------------- the opcodes


def _brightness(x: torch.Tensor, group: _Group) -> torch.Tensor:
    return _trunc_(x.to(torch.float32).mul_(group.float32(0)))


def _contrast(x: torch.Tensor, group: _Group) -> torch.Tensor:
    plane = _gray(x).floor_() if x.shape[1] == 3 else x[:, 0]
    total = plane.to(torch.float64).sum(dim=(1, 2))  # whole numbers: exact sums
    mean = total / _scalar(plane.shape[1] * plane.shape[2], total)
    return _blend(x, mean.to(torch.float32).view(-1, 1, 1, 1), group)


def _saturation(x: torch.Tensor, group: _Group) -> torch.Tensor:
    if x.shape[1] == 1:
        return x
    return _blend(x, _gray(x).floor_()[:, None], group)


def _hue(x: torch.Tensor, group: _Group) -> torch.Tensor:
    if x.shape[1] == 1:
        return x
    xf = x.to(torch.float32) * _INV255
    r, g, b = xf[:, 0], xf[:, 1], xf[:, 2]
    maxc, minc = xf.amax(dim=1), xf.amin(dim=1)
    equal = maxc == minc
    one = torch.ones((), dtype=torch.float32, device=x.device)
    zero = torch.zeros((), dtype=torch.float32, device=x.device)
    spread = maxc - minc
    s = spread / torch.where(equal, one, maxc)
    divisor = torch.where(equal, one, spread)
    rc, gc, bc = (maxc - r) / divisor, (maxc - g) / divisor, (maxc - b) / divisor
    hr = torch.where(maxc == r, bc - gc, zero)
    hg = torch.where((maxc == g) & (maxc != r), (2.0 + rc) - bc, zero)
    hb = torch.where((maxc != g) & (maxc != r), (4.0 + gc) - rc, zero)
    h = torch.fmod(((hr + hg) + hb) * _INV6 + 1.0, 1.0)
    h = h + group.float32(0)[:, 0]
    h = torch.fmod(h, 1.0)
    h = torch.where(h < 0, h + 1.0, h)  # np.mod's floor modulo: a negative remainder moves up by the divisor
    h6 = h * 6.0
    sector = h6.floor()
    frac = h6 - sector
    sector = torch.remainder(sector.to(torch.int64), 6)
    v = maxc
    p = ((1.0 - s) * v).clamp(0.0, 1.0)
    q = ((1.0 - s * frac) * v).clamp(0.0, 1.0)
    t = ((s * frac + (1.0 - s)) * v).clamp(0.0, 1.0)
    vpqt = torch.stack([v, p, q, t], dim=1)  # (g, 4, H, W)
    table = upload(np.array(_HUE_PICK, np.int64), x.device)  # (3, 6)
    pick = table[:, sector].transpose(0, 1)  # (g, 3, H, W)
    return (vpqt.gather(1, pick) * _HUE_OUT).to(torch.uint8)


def _sharpness(x: torch.Tensor, group: _Group) -> torch.Tensor:
    height, width = x.shape[2], x.shape[3]
    if height <= 2 or width <= 2:
        return x
    xf = x.to(torch.float32)
    smooth = torch.zeros((x.shape[0], x.shape[1], height - 2, width - 2), dtype=torch.float32, device=x.device)
    product = torch.empty_like(smooth)
    for dy in range(3):
        for dx in range(3):
            torch.mul(xf[:, :, dy : dy + height - 2, dx : dx + width - 2], _MIDDLE if dy == dx == 1 else _SIDE, out=product)
            smooth += product
    smooth.round_()
    out = xf.clone()
    inner = xf[:, :, 1:-1, 1:-1]
    rest = (1.0 - group.column(0)).to(torch.float32).to(torch.float64)
    out[:, :, 1:-1, 1:-1] = _fused(inner, rest, smooth - inner)
    return _trunc_(out)


def _posterize(x: torch.Tensor, group: _Group) -> torch.Tensor:
    if (group.host[:, 0] >= 8).all():  # 8 bits and more keep every bit
        return x
    masks = upload(np.array(_POSTERIZE, np.uint8), x.device)
    bits = group.params[:, 0].clamp(max=8.0).to(torch.int64)  # int(bits): truncation (checked >= 0)
    return x & masks[bits].view(-1, 1, 1, 1)


def _solarize(x: torch.Tensor, group: _Group) -> torch.Tensor:
    return torch.where(x.to(torch.float32) >= group.float32(0), 255 - x, x)


def _autocontrast(x: torch.Tensor, group: _Group) -> torch.Tensor:
    xf = x.to(torch.float32)
    lo, hi = xf.amin(dim=(2, 3), keepdim=True), xf.amax(dim=(2, 3), keepdim=True)
    flat = hi == lo
    one = torch.ones((), dtype=torch.float32, device=x.device)
    scale = torch.where(flat, one, (hi - lo) * _INV255)
    lo = torch.where(flat, torch.zeros((), dtype=torch.float32, device=x.device), lo)
    return _trunc_(xf.sub_(lo).div_(scale))


def _equalize(x: torch.Tensor, group: _Group) -> torch.Tensor:
    g, channels, height, width = x.shape
    planes = g * channels
    values = x.reshape(planes, height * width).to(torch.int64)
    offsets = torch.arange(planes, device=x.device, dtype=torch.int64)[:, None] * 256
    keys = (values + offsets).reshape(-1)
    hist = (
        torch.zeros(planes * 256, dtype=torch.int64, device=x.device)
        .scatter_add_(0, keys, torch.ones_like(keys))
        .view(planes, 256)
    )
    last = values.amax(dim=1, keepdim=True)  # the highest value present: the last nonzero bin
    step = torch.div(height * width - hist.gather(1, last), 255, rounding_mode="floor")  # (planes, 1)
    flat = step == 0  # these channels are left as they are
    divisor = torch.where(flat, torch.ones_like(step), step)
    cum = hist.cumsum(dim=1)
    lut = torch.empty((planes, 256), dtype=torch.int64, device=x.device)
    lut[:, 0] = 0
    lut[:, 1:] = torch.div(cum[:, :-1] + torch.div(step, 2, rounding_mode="floor"), divisor, rounding_mode="floor").clamp(max=255)
    lut = torch.where(flat, torch.arange(256, device=x.device, dtype=torch.int64)[None, :], lut)
    return lut.gather(1, values).to(torch.uint8).view(g, channels, height, width)


def _invert(x: torch.Tensor, group: _Group) -> torch.Tensor:
    return 255 - x


def _grayscale(x: torch.Tensor, group: _Group) -> torch.Tensor:
    if x.shape[1] == 1:
        return x
    return _trunc_(_gray(x))[:, None].expand(-1, 3, -1, -1)


def _reflect(index: np.ndarray, n: int) -> np.ndarray:
    index = np.where(index < 0, -index, index)
    return np.where(index >= n, 2 * (n - 1) - index, index)


def _blur(x: torch.Tensor, group: _Group) -> torch.Tensor:
    """One (kx, ky) of the group (``_split`` makes the subgroups): separable float32 taps."""
    height, width = x.shape[2], x.shape[3]
    kx, ky = int(group.host[0, 0]), int(group.host[0, 1])
    device = x.device
    wx = upload(np.stack([ps.blur_weights(kx, float(s)) for s in group.host[:, 2]]), device)  # (g, kx)
    wy = upload(np.stack([ps.blur_weights(ky, float(s)) for s in group.host[:, 3]]), device)
    columns = upload(_reflect(np.arange(width)[None, :] + np.arange(kx)[:, None] - kx // 2, width), device)
    rows = upload(_reflect(np.arange(height)[None, :] + np.arange(ky)[:, None] - ky // 2, height), device)
    xf = x.to(torch.float32)
    tap = torch.empty_like(xf)
    across = torch.zeros_like(xf)
    for k in range(kx):
        torch.index_select(xf, 3, columns[k], out=tap)
        across += tap.mul_(wx[:, k].view(-1, 1, 1, 1))
    out = xf.zero_()  # its pixels are read: a buffer now
    for k in range(ky):
        torch.index_select(across, 2, rows[k], out=tap)
        out += tap.mul_(wy[:, k].view(-1, 1, 1, 1))
    return _round_(out)


def _coordinates(group: _Group, height: int, width: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
    """``pixel_steps.source_coordinates`` of the group's matrices: float32 (g, H, W) x and y."""
    m = group.params[:, 0:6].to(torch.float32)
    half_w, half_h = float(_f32(0.5 * width)), float(_f32(0.5 * height))
    xs = upload((np.arange(width) - (width - 1) * 0.5).astype(_f32), device).view(1, 1, width)
    ys = upload((np.arange(height) - (height - 1) * 0.5).astype(_f32), device).view(1, height, 1)
    half = (_scalar(half_w, m), _scalar(half_h, m))
    a = [(m[:, k] / half[k >= 3]).view(-1, 1, 1) for k in range(6)]
    gx = (xs * a[0] + ys * a[1]) + a[2]
    gy = (xs * a[3] + ys * a[4]) + a[5]
    ix = ((gx + 1.0) * float(width) - 1.0) / 2.0  # by 2: the reciprocal is exact, so CUDA's product by it is the quotient
    iy = ((gy + 1.0) * float(height) - 1.0) / 2.0
    return ix, iy


def _taps(x: torch.Tensor, xi: torch.Tensor, yi: torch.Tensor) -> torch.Tensor:
    """float32 (g, C, H, W): pixel (yi, xi) of each sample (int64 (g, H, W) in range) in every channel."""
    g, channels, height, width = x.shape
    flat = (yi * width + xi).view(g, 1, height * width).expand(g, channels, height * width)
    return x.reshape(g, channels, height * width).gather(2, flat).view(g, channels, height, width).to(torch.float32)


def _affine(x: torch.Tensor, group: _Group) -> torch.Tensor:
    g, channels, height, width = x.shape
    device = x.device
    ix, iy = _coordinates(group, height, width, device)
    bilinear = upload(group.host[:, 6] != 0, device).view(-1, 1, 1, 1)
    filled = upload(group.host[:, 7] != 0, device).view(-1, 1, 1, 1)
    fill = group.params[:, 8 : 8 + channels].to(torch.float32).view(g, channels, 1, 1)
    zero = torch.zeros((), dtype=torch.float32, device=device)
    out = None
    if not group.host[:, 6].all():  # nearest
        u, v = ix.round(), iy.round()
        inside = (u >= 0) & (u < width) & (v >= 0) & (v < height)
        ui, vi = torch.where(inside, u, zero).to(torch.int64), torch.where(inside, v, zero).to(torch.int64)
        out = torch.where(inside[:, None], _taps(x, ui, vi), torch.where(filled, fill, zero))
    if group.host[:, 6].any():  # bilinear
        x0, y0 = ix.floor(), iy.floor()
        wx = ix - x0
        ex = 1.0 - wx
        ny = iy - y0
        sy = 1.0 - ny
        total = torch.zeros((g, channels, height, width), dtype=torch.float32, device=device)
        mask = torch.zeros((g, height, width), dtype=torch.float32, device=device)
        for dy, dx, weight in ((0, 0, sy * ex), (0, 1, sy * wx), (1, 0, ny * ex), (1, 1, ny * wx)):
            xx, yy = x0 + float(dx), y0 + float(dy)
            ok = (xx >= 0) & (xx < width) & (yy >= 0) & (yy < height)
            xi, yi = torch.where(ok, xx, zero).to(torch.int64), torch.where(ok, yy, zero).to(torch.int64)
            total += _taps(x, xi, yi).masked_fill_(~ok[:, None], 0.0).mul_(weight[:, None])
            mask += torch.where(ok, weight, zero)
        with_fill = group.host[:, 7] != 0
        if with_fill.all():
            total.sub_(fill).mul_(mask[:, None]).add_(fill)
        elif with_fill.any():
            total = torch.where(filled, (total - fill).mul_(mask[:, None]).add_(fill), total)
        out = total if out is None else torch.where(bilinear, total, out)
    return _round_(out)  # type: ignore[arg-type]


def _rot90(x: torch.Tensor, group: _Group) -> torch.Tensor:
    """One k of the group (``_split`` makes the subgroups)."""
    k = int(np.trunc(group.host[0, 0])) % 4
    return torch.rot90(x, k, dims=(2, 3)) if k else x


def _erase(x: torch.Tensor, group: _Group) -> torch.Tensor:
    g, channels, height, width = x.shape
    device = x.device
    bounds = np.empty((g, 4), np.int64)
    for k, (top, left, tall, wide) in enumerate(np.trunc(group.host[:, 0:4]).astype(np.int64).tolist()):
        r0, r1, _ = slice(top, top + tall).indices(height)  # NumPy's slice of the reference, negative ends and all
        c0, c1, _ = slice(left, left + wide).indices(width)
        bounds[k] = r0, r1, c0, c1
    host_values = group.host[:, 4 : 4 + channels].astype(np.uint8)  # the reference's cast, on the same NumPy
    b = upload(bounds, device)
    values = upload(host_values, device).view(g, channels, 1, 1)
    rows = torch.arange(height, device=device).view(1, height, 1)
    cols = torch.arange(width, device=device).view(1, 1, width)
    inside = (
        (rows >= b[:, 0, None, None])
        & (rows < b[:, 1, None, None])
        & (cols >= b[:, 2, None, None])
        & (cols < b[:, 3, None, None])
    )
    return torch.where(inside[:, None], values, x)


_OPS: dict[int, Callable[[torch.Tensor, _Group], torch.Tensor]] = {
    ps.BRIGHTNESS: _brightness,
    ps.CONTRAST: _contrast,
    ps.SATURATION: _saturation,
    ps.HUE: _hue,
    ps.SHARPNESS: _sharpness,
    ps.POSTERIZE: _posterize,
    ps.SOLARIZE: _solarize,
    ps.AUTOCONTRAST: _autocontrast,
    ps.EQUALIZE: _equalize,
    ps.INVERT: _invert,
    ps.GRAYSCALE: _grayscale,
    ps.BLUR: _blur,
    ps.AFFINE: _affine,
    ps.ROT90: _rot90,
    ps.ERASE: _erase,
}


# ------------------------------------------------------------------------------- the plan


def _refused(steps: np.ndarray, sample: int, position: int, why: str) -> ps.StepError:
    """``pixel_steps.StepError`` for step ``position`` of image ``sample``, which it names (and
    keeps as ``sample``, the image's position in the batch, for the caller to name the dataset's)."""
    word = steps[sample, position, 0]
    code = int(word) if np.isfinite(word) else -1
    name = ps.NAMES[code] if 0 <= code < len(ps.NAMES) else f"{float(word):g}"
    error = ps.StepError(f"pixel step {position} ({name}) of image {sample} of the batch: {why}")
    error.sample = sample  # type: ignore[attr-defined]
    return error


def _check(steps: np.ndarray, codes: np.ndarray, height: int, width: int) -> None:
    """Every step's words, opcode and parameters, before any work (module doc, Errors)."""
    finite = np.isfinite(steps)
    if not finite.all():
        i, s, column = (int(v) for v in np.argwhere(~finite)[0])
        raise _refused(steps, i, s, f"step words must be finite numbers, got {steps[i, s, column]} in column {column}")
    bad = ~np.isin(codes, np.arange(len(ps.NAMES)))
    if bad.any():
        i, s = (int(v) for v in np.argwhere(bad)[0])
        raise _refused(steps, i, s, f"unknown opcode {int(codes[i, s])} (expected 0..{len(ps.NAMES) - 1})")
    for i, s in np.argwhere(codes == ps.BLUR).tolist():
        kx, ky = int(steps[i, s, 1]), int(steps[i, s, 2])
        if kx // 2 >= width or ky // 2 >= height:
            why = f"a {kx}x{ky} blur kernel needs an image wider than {kx // 2} and taller than {ky // 2} pixels (reflect padding), got {height}x{width}"
            raise _refused(steps, i, s, why)
    if height != width:
        for i, s in np.argwhere(codes == ps.ROT90).tolist():
            if int(steps[i, s, 1]) % 4 % 2:
                raise _refused(steps, i, s, f"a quarter turn keeps the size of square images only, got {height}x{width}")
    for i, s in np.argwhere(codes == ps.POSTERIZE).tolist():
        if int(steps[i, s, 1]) < 0:
            raise _refused(steps, i, s, f"posterize keeps 0..8 bits, got {int(steps[i, s, 1])}")


def _split(code: int, steps: np.ndarray, samples: np.ndarray, position: int) -> list[np.ndarray]:
    """The samples of one opcode at one position, split where the op needs one value per group:
    BLUR by kernel size, ROT90 by quarter turns; the others are one group."""
    if code == ps.BLUR:
        keys = steps[samples, position, 1:3].astype(np.int64)
    elif code == ps.ROT90:
        keys = np.trunc(steps[samples, position, 1:2]).astype(np.int64) % 4
    else:
        return [samples]
    _, inverse = np.unique(keys, axis=0, return_inverse=True)
    inverse = inverse.reshape(-1)
    return [samples[inverse == k] for k in range(int(inverse.max()) + 1)]


def _host_steps(steps: Any, n: int) -> np.ndarray:
    if isinstance(steps, torch.Tensor):
        if steps.device.type != "cpu":
            raise ValueError(f"steps must be on the host (a NumPy array or a CPU tensor), got a tensor on {steps.device}")
        steps = steps.numpy()
    steps = np.asarray(steps, np.float64)
    if steps.ndim != 3 or steps.shape[0] != n or steps.shape[2] != ps.WORDS:
        raise ValueError(f"steps must be float64 ({n}, steps, {ps.WORDS}) for {n} images, got shape {steps.shape}")
    return steps


def run_steps(images: torch.Tensor, steps: Any) -> torch.Tensor:
    """Sample ``i``'s ``steps[i]`` on ``images[i]`` (uint8 (N, C, H, W), C 1 or 3; written in
    place and returned); ``steps`` float64 (N, S, WORDS) on the host (module doc)."""
    if not isinstance(images, torch.Tensor) or images.dtype != torch.uint8 or images.dim() != 4 or images.shape[1] not in (1, 3):
        got = f"{images.dtype} of shape {tuple(images.shape)}" if isinstance(images, torch.Tensor) else type(images).__name__
        raise ValueError(f"pixel steps need a uint8 (N, C, H, W) tensor with C 1 or 3, got {got}")
    n, _, height, width = images.shape
    steps = _host_steps(steps, n)
    if n == 0 or steps.shape[1] == 0:
        return images
    with np.errstate(invalid="ignore"):
        codes = np.where(np.isfinite(steps[:, :, 0]), np.trunc(steps[:, :, 0]), -1).astype(np.int64)  # int(): toward zero
    _check(steps, codes, height, width)
    plan: list[tuple[int, int, np.ndarray]] = []
    for position in range(steps.shape[1]):
        for code in np.unique(codes[:, position]).tolist():
            if code != ps.NONE:
                for samples in _split(code, steps, np.flatnonzero(codes[:, position] == code), position):
                    plan.append((position, code, samples))
    if not plan:
        return images
    device = images.device
    uploaded = upload(steps[:, :, 1:], device)  # (N, S, 11)
    indices = upload(np.concatenate([samples for _, _, samples in plan]), device)
    current, start = images, 0
    for position, code, samples in plan:
        whole = len(samples) == n
        index = None if whole else indices[start : start + len(samples)]
        start += len(samples)
        params = uploaded[:, position] if whole else uploaded[:, position].index_select(0, index)  # type: ignore[arg-type]
        part = current if whole else current.index_select(0, index)  # type: ignore[arg-type]
        result = _OPS[code](part, _Group(params, steps[samples, position, 1:]))
        if whole:  # contiguous: an expanded GRAYSCALE is no buffer to write into
            current = result if result.is_contiguous() else result.contiguous()
        elif result is not part:
            current.index_copy_(0, index, result)  # type: ignore[arg-type]
    if current is not images:
        images.copy_(current)
    return images
