"""The batched pixel stage: crop + antialiased resize + flip + normalize + layout of a ragged list
of decoded images into one batch tensor, in a number of torch ops that does not grow with the batch
(it grows with the number of region-size groups, one for a batch of similar sizes).

Contract of ``resize_crops``: see its docstring. It is ``finalize(resample(...), ...)``:

- ``resample``: crop, resize and flip into float32 (n, C, out_h, out_w) holding the resized uint8
  values, the CPU path's result up to rounding;
- ``finalize``: normalize, cast and lay out any float32 NCHW batch of uint8 values (``resample``'s,
  or one joined from its rows and images resized on the CPU, uploaded and converted to float32).

How ``resample`` stays batched:

1. the images are flattened (views) and joined into one uint8 buffer (one ``cat``);
2. the batch is split into groups only where padding would waste memory (``_groups``: sorted by
   region area, cut when a group's padded size would pass both twice its true size and ``PAD_FLOOR``);
   per group, each sample's *region* (the source rows and columns its filter reads, see
   ``geometry``) is gathered, padded to the group's largest region, by one ``index_select`` over a
   sliding-window view of that buffer (``unfold``: a row of the view is any run of bytes, so one
   row index per region row and channel picks every region of the group);
3. the per-sample filter weights are built on the device from one uploaded (g, 4, out_h + out_w)
   table: a few elementwise ops over (g, out_h + out_w, max region side);
4. two batched matrix products (vertical and horizontal resampling; the order by the output's shape),
   rounded and clipped to uint8 values as the CPU path's result; with several groups, each is
   written into the output at its samples' positions (``index_copy_``).

Padding rows and columns of a region hold whatever bytes follow it in the buffer: their weights are
zero, so they never reach the output (they are finite uint8 values, so 0 * x stays 0).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
import torch

from .batchformats import DTYPE_NAMES, LAYOUT_NAMES
from .geometry import Plan, plan

__all__ = ["DTYPES", "LAYOUTS", "finalize", "resample", "resize_crops"]

PAD_FLOOR = 1 << 22  # region pixels per channel a group may pad to whatever its true size (``_groups``)
DTYPES = {name: getattr(torch, name) for name in DTYPE_NAMES}  # the names: batchformats (NumPy only)
LAYOUTS = LAYOUT_NAMES


def _dtype(dtype: Any) -> torch.dtype:
    if isinstance(dtype, str) and dtype in DTYPES:
        return DTYPES[dtype]
    if isinstance(dtype, torch.dtype) and dtype in DTYPES.values():
        return dtype
    raise ValueError(f"dtype must be one of {sorted(DTYPES)} (or the torch dtype), got {dtype!r}")


def _shapes(images: Sequence[torch.Tensor], input_layout: str) -> tuple[np.ndarray, int, torch.device]:
    """(n, 2) heights and widths, the channel count and the device, checked per image."""
    if input_layout not in ("CHW", "HWC"):
        raise ValueError(f"input_layout must be 'CHW' or 'HWC', got {input_layout!r}")
    if not isinstance(images, Sequence) or isinstance(images, torch.Tensor) or len(images) == 0:
        raise ValueError("images must be a non-empty list of uint8 image tensors")
    shapes, channels, device = np.empty((len(images), 2), np.int64), None, None
    for k, image in enumerate(images):
        if not isinstance(image, torch.Tensor):
            raise TypeError(f"image {k} of the batch: images must be torch tensors, got {type(image).__name__}")
        if image.dtype != torch.uint8 or image.dim() != 3:
            raise ValueError(f"image {k} of the batch: need a uint8 {input_layout} image, got {image.dtype} of shape {tuple(image.shape)}")
        c, h, w = image.shape if input_layout == "CHW" else (image.shape[2], image.shape[0], image.shape[1])
        if c not in (1, 3) or h < 1 or w < 1:
            raise ValueError(f"image {k} of the batch: need 1 or 3 channels and pixels, got shape {tuple(image.shape)} ({input_layout})")
        if channels is None:
            channels, device = c, image.device
        elif c != channels or image.device != device:
            raise ValueError(f"image {k} of the batch: {c} channels on {image.device}, but image 0 has {channels} on {device} (one batch: one of each; ops.ToRGB() makes every image RGB)")
        shapes[k] = h, w
    return shapes, int(channels), device  # type: ignore[arg-type]


def _row_starts(shapes: np.ndarray, offsets: np.ndarray, geometry: Plan, group: np.ndarray, channels: int, chw: bool, tall: int) -> np.ndarray:
    """Buffer offsets of every region row (and channel, for CHW) of the samples ``group``, clamped
    into each region, for regions padded to ``tall`` rows; ``offsets``: each image's first byte."""
    shapes, offsets, first, count, left = shapes[group], offsets[group], geometry.rows[group, :1], geometry.rows[group, 1:], geometry.cols[group, :1]
    rows = first + np.minimum(np.arange(tall)[None, :], count - 1)  # (g, tall)
    width = shapes[:, 1:]
    if chw:
        plane = (shapes[:, 0] * shapes[:, 1])[:, None, None]
        starts = offsets[:, None, None] + np.arange(channels)[None, :, None] * plane + (rows * width + left)[:, None, :]
    else:
        starts = offsets[:, None] + (rows * width + left) * channels
    return starts.reshape(-1)


def _groups(geometry: Plan, floor: int = PAD_FLOOR) -> list[np.ndarray]:
    """The batch's samples split into groups whose regions are padded together: sorted index arrays,
    every sample in one. Rule: a group's padded cost (its size x its tallest region's rows x its
    widest region's columns: region pixels per channel) stays within max(2 x its true cost (the sum
    of its regions' rows x columns), ``floor``). The whole batch is one group when it meets the rule
    (the common case: similar sizes, or small ones); otherwise the samples are sorted by region
    area and cut greedily: each joins the current group unless that breaks the rule, else starts
    the next one."""
    tall, wide = geometry.rows[:, 1], geometry.cols[:, 1]
    area = tall * wide
    n = len(area)
    if n * int(tall.max()) * int(wide.max()) <= max(2 * int(area.sum()), floor):
        return [np.arange(n)]
    order = np.argsort(area, kind="stable")
    groups, start, t, w, s = [], 0, 0, 0, 0
    for i, k in enumerate(order.tolist()):
        t, w, s = max(t, int(tall[k])), max(w, int(wide[k])), s + int(area[k])
        if i > start and (i - start + 1) * t * w > max(2 * s, floor):
            groups.append(np.sort(order[start:i]))
            start, t, w, s = i, int(tall[k]), int(wide[k]), int(area[k])
    groups.append(np.sort(order[start:]))
    return groups


def _weights(params: torch.Tensor, side: int, box_filter: bool) -> torch.Tensor:
    """(n, out, side) float32 resampling weights from the uploaded table (``geometry``). The box
    filter's taps are the host's integer ranges [lo, hi) (weight 1 each): no float32 comparison
    decides a tap. Every row has a tap of weight >= 0.5 by construction (``geometry._axis``
    checks it), so the sums are never 0."""
    j = torch.arange(side, device=params.device, dtype=torch.float32)
    rel, lo, hi, ss = (params[:, r, :, None] for r in range(4))
    inside = (j >= lo) & (j < hi)  # lo, hi: integers, exact in float32 (a region side < 2**24)
    if box_filter:
        w = inside.to(torch.float32)
    else:
        w = (1.0 - ((j - rel) * ss).abs()).clamp_(min=0.0) * inside
    return w / w.sum(dim=2, keepdim=True)


@contextlib.contextmanager
def _precise(device: torch.device) -> Iterator[None]:
    """float32 math for the resize: autocast off on ``device`` (a training loop's ``torch.autocast``
    would run the matmuls in bfloat16/float16: several levels off). Autocast state is the calling
    thread's. TF32 is left as the process set it (``torch.backends.cuda.matmul.allow_tf32``: off
    unless the program turned it on): switching a process-wide flag from a loader's thread would
    race with the training loop's own matmuls and with other loaders."""
    with contextlib.ExitStack() as stack:
        available = getattr(torch.amp, "is_autocast_available", lambda kind: kind in ("cpu", "cuda"))
        if available(device.type):
            stack.enter_context(torch.autocast(device.type, enabled=False))
        yield


def _coefficients(mean: Sequence[float], std: Sequence[float], channels: int) -> np.ndarray:
    """float32 (2, channels): ``ops.Normalize``'s scale 1 / (255 std) and offset -mean / std."""
    m = np.resize(np.asarray(mean, np.float64).reshape(-1), channels)
    s = np.resize(np.asarray(std, np.float64).reshape(-1), channels)
    if not (np.all(np.isfinite(m)) and np.all(s > 0)):
        raise ValueError(f"mean must be finite and std > 0, got {mean} and {std}")
    return np.stack([1.0 / (255.0 * s), -m / s]).astype(np.float32)


def _checked(dtype: Any, layout: str, mean: Any, std: Any) -> torch.dtype:
    """The target dtype, after ``finalize``'s checks of its arguments (all but the values)."""
    target = _dtype(dtype)
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if (mean is None) != (std is None):
        raise ValueError("mean and std go together")
    if mean is not None and target == torch.uint8:
        raise ValueError("mean/std need a float dtype (float16, bfloat16 or float32)")
    return target


def _resample_group(buffer: torch.Tensor, shapes: np.ndarray, offsets: np.ndarray, geometry: Plan, group: np.ndarray, channels: int, chw: bool) -> torch.Tensor:
    """Steps 2-4 of the module doc for the samples ``group``: float32 (g, channels, out_h, out_w)
    of rounded, clipped uint8 values. A function of its own so that a group's temporaries are
    freed before the next group's are made."""
    (out_h, out_w), g = geometry.size, len(group)
    tall, wide = int(geometry.rows[group, 1].max()), int(geometry.cols[group, 1].max())
    starts = _row_starts(shapes, offsets, geometry, group, channels, chw, tall)
    span = wide if chw else wide * channels  # bytes of one region row (per channel for CHW)
    gathered = buffer.unfold(0, span, 1).index_select(0, torch.from_numpy(starts).to(buffer.device))
    crops = gathered.view(g, channels, tall, wide) if chw else gathered.view(g, tall, wide, channels).permute(0, 3, 1, 2)
    crops = crops.to(torch.float32)
    weights = _weights(torch.from_numpy(geometry.params[group]).to(buffer.device), max(tall, wide), geometry.box_filter)
    vertical, horizontal = weights[:, None, :out_h, :tall], weights[:, None, out_h:, :wide].transpose(2, 3)
    if out_w <= out_h:  # the order by the output alone: a sample's rounding never depends on its batch mates' regions
        result = torch.matmul(vertical, torch.matmul(crops, horizontal))
    else:
        result = torch.matmul(torch.matmul(vertical, crops), horizontal)
    return result.add_(0.5).floor_().clamp_(0.0, 255.0)  # round half up to the uint8 value, as Pillow


def _resample(images: Sequence[torch.Tensor], shapes: np.ndarray, channels: int, device: torch.device, geometry: Plan, chw: bool) -> torch.Tensor:
    """``resample`` once its arguments are checked and planned: one group after another (``_groups``)."""
    groups = _groups(geometry)
    numel = shapes[:, 0] * shapes[:, 1] * channels
    offsets = np.concatenate([[0], np.cumsum(numel)[:-1]])
    span = int(geometry.cols[:, 1].max()) * (1 if chw else channels)  # tail padding: any group's region row fits
    with _precise(device):
        buffer = torch.cat([image.reshape(-1) for image in images] + [torch.zeros(span, dtype=torch.uint8, device=device)])
        if len(groups) == 1:
            return _resample_group(buffer, shapes, offsets, geometry, groups[0], channels, chw).contiguous()
        out = torch.empty((len(images), channels, *geometry.size), dtype=torch.float32, device=device)
        for group in groups:
            out.index_copy_(0, torch.from_numpy(group).to(device), _resample_group(buffer, shapes, offsets, geometry, group, channels, chw))
        return out


def _finalize(values: torch.Tensor, target: torch.dtype, coefficients: np.ndarray | None, layout: str, inplace: bool) -> torch.Tensor:
    """``finalize`` once its arguments are checked; ``inplace``: ``values`` may be overwritten."""
    if target == torch.uint8:
        values = values.to(torch.uint8)
    elif coefficients is not None:
        scale, offset = torch.from_numpy(coefficients).to(values.device).view(2, 1, values.shape[1], 1, 1)
        values = values.mul_(scale) if inplace else values.mul(scale)
        values = values.add_(offset)
    values = values.to(target)
    if layout == "NHWC":
        return values.permute(0, 2, 3, 1).contiguous()
    if layout == "channels_last":
        return values.contiguous(memory_format=torch.channels_last)
    return values.contiguous()


def resample(
    images: Sequence[torch.Tensor],
    windows: Any,
    size: int | Sequence[int],
    flips: Any = None,
    input_layout: str = "CHW",
    filter: str = "bilinear",
) -> torch.Tensor:
    """The crop, antialiased resize and flip of ``resize_crops`` (same arguments, checks and
    errors), without its normalize, cast and layout step (``finalize``): float32, contiguous NCHW
    (n, C, out_h, out_w), holding the resized uint8 values (rounded half up and clipped to
    [0, 255]), on the images' device. ``resize_crops(...)`` is ``finalize(resample(...), ...)``.
    The batch is resampled in groups of similar region sizes (``resize_crops``, Memory)."""
    shapes, channels, device = _shapes(images, input_layout)
    geometry = plan(shapes, windows, size, flips, filter)
    return _resample(images, shapes, channels, device, geometry, input_layout == "CHW")


def finalize(
    values: torch.Tensor,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    dtype: Any = "uint8",
    layout: str = "NCHW",
) -> torch.Tensor:
    """The normalize, cast and layout step of ``resize_crops`` (same ``mean``, ``std``, ``dtype``
    and ``layout``, same checks and errors) on ``values``: a float32 (n, C, H, W) tensor of uint8
    values (integers in [0, 255], not checked: that would synchronize the device), any strides, on
    any device: ``resample``'s output, or a batch joined from it and uint8 images converted to
    float32. ``values`` is left unchanged; the result is ``values`` itself when nothing changes
    (float32, no mean/std, NCHW, already contiguous)."""
    target = _checked(dtype, layout, mean, std)
    if not isinstance(values, torch.Tensor) or values.dtype != torch.float32 or values.dim() != 4:
        got = f"{values.dtype} of shape {tuple(values.shape)}" if isinstance(values, torch.Tensor) else type(values).__name__
        raise ValueError(f"values must be a float32 (n, C, H, W) tensor of uint8 values, got {got}")
    coefficients = None if mean is None else _coefficients(mean, std, values.shape[1])  # type: ignore[arg-type]
    return _finalize(values, target, coefficients, layout, inplace=False)


def resize_crops(
    images: Sequence[torch.Tensor],
    windows: Any,
    size: int | Sequence[int],
    flips: Any = None,
    mean: Sequence[float] | None = None,
    std: Sequence[float] | None = None,
    dtype: Any = "uint8",
    layout: str = "NCHW",
    input_layout: str = "CHW",
    filter: str = "bilinear",
) -> torch.Tensor:
    """Crop ``windows[k]`` of ``images[k]``, resize it to ``size`` with antialiasing, mirror it when
    ``flips[k]``, normalize and lay out: one batch tensor, on the images' device. The same as
    ``finalize(resample(images, windows, size, flips, input_layout, filter), mean, std,
    dtype, layout)``, with every argument checked before any work.

    - ``images``: uint8 tensors of any sizes, all on one device with the same channel count (1 or
      3), laid out ``input_layout`` ("CHW", torchvision's ``decode_jpeg``; or "HWC", slipstream's
      CPU decoders). Non-contiguous ones cost one copy each.
    - ``windows``: (n, 4) (top, left, height, width) in source pixels, fractions allowed (an
      ``ops.Windows``' boxes: ``geometry.boxes_of``). Empty, non-finite or out-of-image windows
      raise ``ValueError`` naming the image ("image k of the batch": its position in ``images``).
    - ``size``: (out_h, out_w) or an int; ``filter``: "bilinear" or "box" (Pillow's antialiased
      filters, as the CPU path ``images.kernels.resample_into``).
    - ``mean``/``std`` (on the [0, 1] scale, per channel or one value): the output is
      ``float32(v) * (1 / (255 std)) + (-mean / std)`` of the resized uint8 value ``v``, then cast,
      as ``ops.Normalize`` computes it; without them a float output holds ``v`` itself.
    - ``dtype``: "uint8" (no mean/std), "float16", "bfloat16" or "float32" (or the torch dtype).
    - ``layout``: "NCHW" (contiguous), "channels_last" (NCHW shape, channels-last strides) or
      "NHWC" (shape (n, H, W, C), the CPU path's default).

    - Precision: the resize runs in float32 whatever autocast says (it is disabled for the call,
      on CPU and CUDA). TF32 follows the process's setting (``torch.backends.cuda.matmul.allow_tf32``,
      off in PyTorch by default); a program that turns it on gets faster resizes, about a level off
      on bright pixels. Nothing process-wide is switched here: the call may run in a loader's thread.

    Memory: the regions (the source pixels a window's filter reads) of a group of samples are
    padded to the group's tallest and widest, as one float32 tensor (plus its uint8 gather, the
    weights and the intermediate pass). Groups (``_groups``): the batch is one group when its
    padded cost, n x the tallest region's rows x the widest region's columns, stays within
    max(2 x its true cost (the sum of the regions' rows x columns), ``PAD_FLOOR`` = 2**22) region
    pixels per channel (16 MiB in float32); otherwise the samples are sorted by region area and
    cut greedily under the same rule. Groups run one after another, each written into the output,
    so a group's padded tensor is at most twice its regions' true size, or 2**22 pixels per
    channel: one 2000x1500 whole-image window among 64 100x100 ones makes two groups, tens of MB
    at the peak instead of ~2.9 GB. What remains: the regions' true size itself (n huge windows
    cost n times one; downscale huge images when packing), and the op count, which grows with the
    number of groups (~25 torch ops each, plus three small uploads on a GPU): one group for
    similar sizes, but region areas spread geometrically above the floor, or regions of very
    different shapes (tall and thin among short and wide), can make up to one group per sample.
    A sample's values depend only on its own region and weights: which pass runs first is decided
    by the output size alone, so a sample's rounding does not follow its batch mates; what may still
    differ is a matmul library's blocking for another padded shape (on CPU tensors every sample
    equals itself resampled alone: ``tests/images/device/test_gpu_stage.py``).

    The resized values are the CPU path's up to rounding: the CPU path has 22-bit fixed-point
    weights and a uint8 intermediate; this stage float32 weights (bilinear ones computed from
    float32 filter centres, whose rounding grows with the region's size; box taps decided in
    float64 on the host, ``geometry``) and a float32 intermediate. Against
    ``images.kernels.resample_into`` on CPU tensors: no pixel over 1 level apart on the tests'
    images and the fuzzed windows; ``tests/images/device/test_gpu_stage.py`` asserts at most 3 per pixel and a
    mean of at most 2 per image, and scans box up- and downscales pixel by pixel (at most 1).
    """
    target = _checked(dtype, layout, mean, std)
    shapes, channels, device = _shapes(images, input_layout)
    coefficients = None if mean is None else _coefficients(mean, std, channels)  # type: ignore[arg-type]
    geometry = plan(shapes, windows, size, flips, filter)
    values = _resample(images, shapes, channels, device, geometry, input_layout == "CHW")
    return _finalize(values, target, coefficients, layout, inplace=True)
