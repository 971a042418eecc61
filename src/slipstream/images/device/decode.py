"""Decode a batch of encoded images to full-size CHW uint8 tensors on a device.

``decode_batch(data, device, codecs, shapes, channels, indices, fast)`` returns one contiguous
(C, H, W) uint8 tensor per image, on ``device``, at full size (never a reduced DCT scale):

- on a CUDA device with torchvision (``torchvision.io.decode_jpeg`` taking a list, 0.19+), the
  JPEGs are decoded by nvJPEG in one batched call per channel count;
- everything else (PNG, QOI, raw pixels, JPEGs without CUDA or torchvision, and any JPEG nvJPEG
  refuses or decodes to another size than its header's) by slipstream's CPU decoders, as the CPU
  pipeline decodes them (libjpeg-turbo, strict: any libjpeg warning refuses the file), then
  uploaded. A batched nvJPEG call that fails is retried image by image, so one bad JPEG costs only
  itself: it goes to the CPU decoder, which names it.

Bytes that do not decode raise ``SampleDecodeError`` (an ``ImageDecodeError``, so a
``ValueError``): ``"sample {index}: cannot decode jpeg image: ..."``, the CPU path's wording, with
``index`` the sample's entry of ``indices`` (default its position) and ``reason`` the part after it.

Channels: ``channels`` (1 or 3, one for all or one per image; default each image's own: its
stored shape's, else the header's) is what each tensor holds; JPEG decoders convert as they decode
(gray to RGB, or a colour image's luma), the other codecs convert after. nvJPEG is less strict than
libjpeg: a JPEG with damaged entropy data that libjpeg refuses may decode there without an error.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from ..encoded import codecs as _imaging
from ..pipeline import ImageDecodeError

__all__ = ["SampleDecodeError", "decode_batch", "nvjpeg_available"]


class SampleDecodeError(ImageDecodeError):
    """An image of a batch does not decode: ``index`` names it, ``reason`` says why."""

    def __init__(self, index: Any, reason: str):
        super().__init__(f"sample {index}: {reason}")
        self.index, self.reason = index, reason


def _torchvision_decode() -> Any:
    """``torchvision.io.decode_jpeg`` and ``ImageReadMode`` when importable and new enough to take
    a list (0.19), else None."""
    try:
        import torchvision
        from torchvision.io import ImageReadMode, decode_jpeg
    except Exception:  # not installed, or built against another torch
        return None
    try:
        major, minor = (int(part) for part in torchvision.__version__.split(".")[:2])
    except ValueError:
        return None
    return (decode_jpeg, ImageReadMode) if (major, minor) >= (0, 19) else None


def nvjpeg_available(device: Any) -> bool:
    """Whether ``decode_batch`` decodes JPEGs on ``device`` with nvJPEG (a CUDA device, CUDA
    available, torchvision importable)."""
    return torch.device(device).type == "cuda" and torch.cuda.is_available() and _torchvision_decode() is not None


def _as_bytes(value: Any) -> np.ndarray:
    if isinstance(value, np.ndarray):
        return value.reshape(-1).view(np.uint8)
    return np.frombuffer(value, np.uint8)


def _own_channels(codec: str, data: np.ndarray, shape: Any) -> int | None:
    if shape is not None:
        return int(shape[2])
    if codec == "jpeg":
        try:
            header = _imaging.jpeg_header(data)
        except (ValueError, RuntimeError):
            return None  # the decoder names the damage
        return 1 if header is not None and header[2] == 1 else 3
    return None


def _cpu(codec: str, data: np.ndarray, shape: Any, channels: int | None, fast: bool) -> np.ndarray:
    """One image, full size, (H, W, C) uint8, by slipstream's CPU decoders; ``ValueError`` for damage."""
    if codec == "jpeg" and fast:
        want = channels or 3
        try:
            height, width = _imaging.jpeg_info(data)[:2]
        except (ValueError, RuntimeError) as exc:
            raise ValueError(f"cannot decode jpeg image: {exc}") from exc
        if shape is not None and (height, width) != tuple(shape[:2]):  # before a damaged header sizes a buffer
            raise ValueError(f"the jpeg image decodes to shape {(height, width, want)} but its stored shape is {tuple(shape)}")
        _imaging.check_encoded_size("jpeg", data)  # ... or one that declares more than the bytes can fill
        try:
            buffer = np.empty((height, width, want), np.uint8)
            image = _imaging.decode_jpeg_scaled(data, "GRAY" if want == 1 else "RGB", buffer, True, 1, height, width)
        except (ValueError, RuntimeError) as exc:
            raise ValueError(f"cannot decode jpeg image: {exc}") from exc
        return image[:, :, None] if image.ndim == 2 else image
    stored = None if shape is None else tuple(int(s) for s in shape)
    return _imaging.decode(codec, data, stored, channels=channels)


def _upload(image: np.ndarray, device: torch.device) -> torch.Tensor:
    """(H, W, C) array -> contiguous (C, H, W) tensor on ``device`` (one host copy, transposing)."""
    chw = torch.empty((image.shape[2], image.shape[0], image.shape[1]), dtype=torch.uint8, pin_memory=device.type == "cuda")
    chw.numpy()[...] = image.transpose(2, 0, 1)
    return chw.to(device, non_blocking=True) if device.type != "cpu" else chw


def _nvjpeg(data: list[np.ndarray], channels: list[int | None], positions: list[int], device: torch.device) -> dict[int, torch.Tensor]:
    """The JPEGs at ``positions`` decoded by nvJPEG, batched per channel count; those it refuses
    (one by one after a failed batch) are left out, for the CPU decoder."""
    decode_jpeg, mode = _torchvision_decode()
    modes = {1: mode.GRAY, 3: mode.RGB, None: mode.UNCHANGED}
    # torchvision's CUDA decode allocates its outputs on the current stream but writes them from its
    # own stream without waiting for the current one (pytorch/vision PR 9606): a block freed while
    # kernels queued on the current stream still read it could be overwritten first. So that queued
    # work ends before the decode (in a loader this is the finish thread's side stream).
    if device.type == "cuda":
        torch.cuda.current_stream(device).synchronize()
    done: dict[int, torch.Tensor] = {}
    for want in sorted({channels[k] for k in positions}, key=str):
        group = [k for k in positions if channels[k] == want]
        with warnings.catch_warnings():  # read-only views of the file's pages: the decoder only reads them
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            inputs = [torch.from_numpy(data[k]) for k in group]
        try:
            outputs = decode_jpeg(inputs, mode=modes[want], device=device)
        except RuntimeError:  # one bad image fails the batch: find it
            outputs = []
            for tensor in inputs:
                try:
                    outputs.append(decode_jpeg(tensor, mode=modes[want], device=device))
                except RuntimeError:
                    outputs.append(None)
        for k, image in zip(group, outputs):
            if image is not None and image.dim() == 3 and image.shape[0] in (1, 3):
                done[k] = image.contiguous()
    return done


def decode_batch(
    data: Sequence[Any],
    device: Any = "cpu",
    codecs: Sequence[str] | None = None,
    shapes: Any = None,
    channels: int | Sequence[int | None] | None = None,
    indices: Sequence[Any] | None = None,
    fast: bool = False,
) -> list[torch.Tensor]:
    """Decode encoded images ``data`` (bytes-like or uint8 arrays) to full-size contiguous CHW
    uint8 tensors on ``device`` (module doc). ``codecs``: each image's ("jpeg", "png", "qoi",
    "raw"; default sniffed from the bytes, raw needs it); ``shapes``: each image's stored (H, W, C),
    checked against what it decodes to (needed for raw); ``fast``: libjpeg's fast DCT and
    upsampling on the CPU path (``ops.Decode(fast=True)``); ``indices``: how errors name the images."""
    n = len(data)
    device = torch.device(device)
    arrays = [_as_bytes(value) for value in data]
    names = list(range(n)) if indices is None else list(indices)
    stored = [None] * n if shapes is None else [None if s is None else tuple(int(v) for v in s) for s in shapes]
    kinds = [_imaging.sniff(a) for a in arrays] if codecs is None else list(codecs)
    if not len(names) == len(stored) == len(kinds) == n:
        raise ValueError(f"data, codecs, shapes and indices need one entry per image ({n})")
    wanted: list[int | None] = [channels] * n if channels is None or isinstance(channels, int) else list(channels)
    if len(wanted) != n or any(c not in (None, 1, 3) for c in wanted):
        raise ValueError(f"channels must be 1, 3 or None, for all or per image, got {channels!r}")
    wanted = [c if c is not None else _own_channels(kinds[k] or "", arrays[k], stored[k]) for k, c in enumerate(wanted)]
    done: dict[int, torch.Tensor] = {}
    jpegs = [k for k in range(n) if kinds[k] == "jpeg"]
    if jpegs and nvjpeg_available(device):
        done = _nvjpeg(arrays, wanted, jpegs, device)
        done = {k: image for k, image in done.items() if stored[k] is None or tuple(image.shape[1:]) == stored[k][:2]}
    images: list[torch.Tensor] = []
    for k in range(n):
        if k in done:
            images.append(done[k])
            continue
        if kinds[k] is None:
            raise SampleDecodeError(names[k], "unknown image codec (not JPEG, PNG or QOI bytes; raw pixels need codecs and shapes)")
        try:
            images.append(_upload(_cpu(kinds[k], arrays[k], stored[k], wanted[k], fast), device))
        except ValueError as exc:
            raise SampleDecodeError(names[k], str(exc)) from exc
    return images
