"""slipstream.gpu: image pixel work on a torch device (issue 14), first slice.

``resize_crops(images, windows, size, flips, mean, std, dtype, layout)`` turns a ragged list of
decoded uint8 images (any device) and each sample's window into one batch: crop, antialiased
resize (Pillow's filters, as the CPU pipeline), flip, normalize, cast and lay out, in a number of
torch ops that does not depend on the batch size. ``boxes_of(windows)`` converts the windows the
CPU pipeline draws (``ops.Windows``) into its arguments.

Nothing in slipstream imports this package; it needs torch.

Still to build (in this order): windows drawn on CPU workers from JPEG headers (the header gives the
size; ``Pipeline.windows`` the same windows as the CPU path, decode factor 1); nvJPEG batch decode
(``torchvision.io.decode_jpeg(list, device="cuda")``, CHW) feeding ``resize_crops``, a failed batch
decoded one by one to name the bad sample; mixed input (PNG/QOI/raw and JPEGs nvJPEG refuses,
decoded by CPU workers) and ``cpu_share=``; decode + resize on a side stream, bounded by the
prefetch depth (as ``slipstream.torch._device``); the loaders' spelling
(``.map(image=[...], device="cuda")``); ``benchmarks/bench_gpu.py``. To check on a GPU first:
cuda vs cpu output, kernels per batch (4 vs 256), img/s at 256 x 224 with fp32/TF32/fp16 matmuls
(dense banded weights: ~50-100 GFLOP a batch). The CPU pipeline decodes JPEGs at a reduced DCT
scale when the window allows; nvJPEG decodes at full size: compare on real JPEGs and state it.
"""

from __future__ import annotations

from .geometry import boxes_of
from .stage import DTYPES, LAYOUTS, resize_crops

__all__ = ["DTYPES", "LAYOUTS", "boxes_of", "resize_crops"]
