"""slipstream.gpu: image pixel work on a torch device (issue 14), second slice.

``DeviceStage(ss.open(p).map(image=ops), "image", device)`` turns a batch of sample indices into one
batch tensor on the device, split where a loader splits it:

- ``host(indices, seed, epoch)`` (CPU workers, ``HostReader``): each sample's stored bytes
  (zero-copy), its size from its header (JPEG SOF, PNG IHDR, QOI; raw: stored shape) checked
  against the stored shape, and the window ``Pipeline.windows`` draws for it with
  ``Draws(seed, epoch, indices)``, the CPU pipeline's, in source pixels (full-size decode);
- ``device_batch(batch)``: ``decode_batch`` (nvJPEG batched on CUDA with torchvision, a failed batch
  retried one by one; slipstream's CPU decoders for the rest and everywhere else, uploaded), then
  ``resize_crops`` (crop, antialiased resize with Pillow's filters, flip, normalize, cast, layout
  in a number of torch ops that does not grow with the batch). ``boxes_of(windows)`` converts
  ``ops.Windows`` into its arguments.

Measured on CPU tensors (tests/test_gpu_device.py): against the CPU pipeline with
``ops.Decode(exact=True)``, at most 0.23 uint8 levels mean per image (no pixel over 1 level);
against its default (reduced DCT scale when the window allows), up to 6 levels per image.
The box filter's taps are decided in float64 on the host (as Pillow's), the bilinear weights in
float32 on the device (``geometry``).

Nothing in slipstream imports this package; it needs torch.

Still to build (in this order): run the GPU checks below; bucketing a batch by region size
(``resize_crops`` pads every image's region to the batch's largest: memory ~ n x the largest
region, so one huge image in a batch of small ones costs n times its size); decode + resize on a side stream,
bounded by the prefetch depth (as ``slipstream.torch._device``), with ``host`` in the loader's
workers and pinned uploads; ``cpu_share=`` (some JPEGs decoded by CPU workers when the GPU is the
bottleneck); the loaders' spelling (``.map(image=[...], device="cuda")``); sharded datasets (their
``encoded``/``source_of`` should already serve, untested); ``benchmarks/bench_gpu.py``. To check on a
GPU first: ``decode_batch`` cuda vs cpu output (nvJPEG's IDCT/upsampling vs libjpeg's; nvJPEG may
accept damaged JPEGs that libjpeg refuses: decide whether CPU workers verify them), that a failed
nvJPEG batch raises ``RuntimeError`` (what the retry catches), kernels per batch (4 vs 256), img/s
at 256 x 224 with fp32/TF32/fp16 matmuls (dense banded weights: ~50-100 GFLOP a batch), and the
CPU-side upload transpose (HWC -> CHW on the host) for non-JPEGs.
"""

from __future__ import annotations

import importlib
from typing import Any

# name -> submodule. Loaded on first use (PEP 562): the host side (``geometry``, ``host``,
# ``staged``, ``mapped``) needs NumPy only, so loader workers never import torch for it.
_WHERE = {
    "DTYPES": "stage",
    "DeviceFinisher": "finish",
    "DeviceMapped": "mapped",
    "DeviceStage": "device",
    "HostBatch": "host",
    "HostReader": "host",
    "LAYOUTS": "stage",
    "SampleDecodeError": "decode",
    "StagedImage": "staged",
    "boxes_of": "geometry",
    "decode_batch": "decode",
    "finalize": "stage",
    "header_size": "host",
    "nvjpeg_available": "decode",
    "resample": "stage",
    "resize_crops": "stage",
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
