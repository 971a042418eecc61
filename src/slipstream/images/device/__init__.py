"""Image pixel work on a torch device; ``slipstream.gpu`` is its public name.

The user's spelling is ``ss.open(p).map(image=[ops...], device="cuda")`` (``devicemap``), read by
any loader. The work is split where a loader splits it:

- NumPy only, in the loader's workers: ``devicemap.DeviceMapped`` (the view), ``hostfield`` (each
  sample of a chunk as a ``StagedImage``: stored bytes, header size and the CPU pipeline's window
  and flip, or pixels the CPU pipeline resampled: non-JPEGs, CMYK JPEGs and ``cpu_share``),
  ``hostbatch.HostReader`` (bytes, header sizes, windows), ``geometry`` (windows to filter taps),
  ``batchformats`` (the output dtypes and layouts by name);
- torch, in the training process: ``finisher.DeviceFinisher`` (``loading.finishing`` runs it ahead
  of the consumer on a side stream), ``decode.decode_batch`` (nvJPEG batched on CUDA with
  torchvision, CPU decoders elsewhere), ``batchpixels.resample`` (crop, antialiased resize with
  Pillow's filters, flip; batched, bucketed by region size), ``pixelstage.finish`` (the pixel
  ops' steps, compiled by the workers, batched by ``pixelsteps.run_steps``; then the formats and
  a ``RandomErasing`` after them) and ``batchpixels.finalize``
  (normalize, cast, layout); ``devicestage.DeviceStage`` (indices to one batch by hand, without a
  loader).

Output against the CPU pipeline: with ``ops.Decode(exact=True)``, at most 0.23 uint8 levels mean
per image and no pixel over 1 level apart; against its default (a reduced DCT scale when the
window allows), up to 6 levels per image (tests/images/device/test_gpu_device.py and
test_gpu_mapped.py check these bounds on CPU tensors). On CUDA, nvJPEG decodes the JPEGs: its
IDCT and upsampling are not libjpeg's, so these bounds are the CPU decoders'; ``decode`` says what
happens to a JPEG nvJPEG refuses.

Attributes load lazily (PEP 562, ``_WHERE``): importing the package or its NumPy-only modules
never imports torch.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> submodule. Loaded on first use (PEP 562): the host side (``geometry``, ``hostbatch``,
# ``hostfield``, ``devicemap``, ``batchformats``) needs NumPy only, so loader workers never import torch for it.
_WHERE = {
    "DTYPES": "batchpixels",
    "DeviceFinisher": "finisher",
    "DeviceMapped": "devicemap",
    "DeviceStage": "devicestage",
    "HostBatch": "hostbatch",
    "HostReader": "hostbatch",
    "LAYOUTS": "batchpixels",
    "SampleDecodeError": "decode",
    "StagedImage": "hostfield",
    "boxes_of": "geometry",
    "decode_batch": "decode",
    "finalize": "batchpixels",
    "header_size": "hostbatch",
    "nvjpeg_available": "decode",
    "resample": "batchpixels",
    "resize_crops": "batchpixels",
}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'slipstream.gpu' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
