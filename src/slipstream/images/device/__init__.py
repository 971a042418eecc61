"""slipstream.gpu: image pixel work on a torch device (issue 14).

The user's spelling is ``ss.open(p).map(image=[ops...], device="cuda")`` (``mapped``), read by any
loader. The work is split where a loader splits it:

- NumPy only, in the loader's workers: ``mapped.DeviceMapped`` (the view), ``staged`` (each sample of
  a chunk as a ``StagedImage``: stored bytes, header size and the CPU pipeline's window and flip, or
  pixels the CPU pipeline resampled: non-JPEGs, CMYK JPEGs and ``cpu_share``), ``host.HostReader``
  (bytes, header sizes, windows), ``geometry`` (windows to filter taps);
- torch, in the training process: ``finish.DeviceFinisher`` (``loading.finishing`` runs it ahead of
  the consumer on a side stream), ``decode.decode_batch`` (nvJPEG batched on CUDA with torchvision,
  CPU decoders elsewhere), ``stage.resample`` (crop, antialiased resize with Pillow's filters, flip;
  batched, bucketed by region size) and ``stage.finalize`` (normalize, cast, layout);
  ``device.DeviceStage`` (indices to one batch by hand, without a loader).

Measured on CPU tensors (tests/images/device/test_gpu_device.py, tests/images/device/test_gpu_mapped.py): against the CPU pipeline
with ``ops.Decode(exact=True)``, at most 0.23 uint8 levels mean per image (no pixel over 1 level);
against its default (reduced DCT scale when the window allows), up to 6 levels per image.

Attributes load lazily (PEP 562): importing the NumPy-only modules never imports torch.

Not measured here (no GPU was lent to this work): everything CUDA. To check on a GPU first (the
CUDA-only tests do some): ``decode_batch`` cuda vs cpu output (nvJPEG's IDCT/upsampling vs
libjpeg's; nvJPEG may accept damaged JPEGs that libjpeg refuses), that a failed nvJPEG batch raises
``RuntimeError`` (what the retry catches), whether torchvision's batched decode runs on the current
stream, kernels per batch, and ``benchmarks/bench_gpu.py``'s figures against the issue's goals.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> submodule. Loaded on first use (PEP 562): the host side (``geometry``, ``host``,
# ``staged``, ``mapped``) needs NumPy only, so loader workers never import torch for it.
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
