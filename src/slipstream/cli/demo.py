"""The main job, end to end on an embedded default: make photo-like JPEGs, pack them, train-load them.

1. Makes ``n`` deterministic photo-like RGB images (smooth shapes, gradients and grain; sides 200 to
   500 px) and encodes them as JPEG (quality 90).
2. Packs them with ``ss.write`` (a progress bar on a terminal) into a temporary folder.
3. Loads them with RandomResizedCrop(224) + horizontal flip, uint8 CHW, batch 64, 2 worker threads:
   ``ss.open(path).map(image=[...])`` through ``ss.DataLoader``.
4. Loads the same JPEG bytes with ``torch.utils.data.DataLoader`` (2 worker processes, persistent)
   and the torchvision-equivalent PIL pipeline (decode, RandomResizedCrop with torchvision's
   sampling, bilinear resize, flip, CHW tensor), when torch is installed.
Prints images/s for both (median of a few epochs after a warm-up) and the ratio.

``main`` is the command: it first checks that the ``files`` extra is installed (pyarrow,
Pillow: ``REQUIRED``) and, when one is missing, says what to install and returns 2
before making anything.
"""

from __future__ import annotations

import importlib
import io
import math
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..core.optional import optional
from ..files import field_kinds as F
from ..images import imageops as ops
from ..images.encoded.codecs import encode
from ..loading.loader import DataLoader
from ..remote.open import open as open_packed
from ..write.writer import write

# what the demo cannot run without: the files extra's packed files, JPEG encoder and image library
REQUIRED = {"pyarrow": "pyarrow (packed files)", "PIL": "Pillow (the photo-like images; JPEG without the compiled extension)"}


def missing_requirements() -> list[str]:
    """The descriptions of ``REQUIRED``'s modules that cannot be imported here."""
    missing = []
    for module, what in REQUIRED.items():
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(what)
    return missing


def main(n: int = 1000, batch_size: int = 64, workers: int = 2) -> int:
    """``slipstream demo``: 0 after the run, 2 (what to install, on stderr) when the files extra is missing."""
    missing = missing_requirements()
    if missing:
        print(
            f"slipstream demo: {', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed here; the demo packs "
            "and decodes JPEGs, which needs the files extra: pip install 'slipstream[files]' (add torch to compare with "
            "torch.utils.data; `make demo` installs both in a virtual environment)",
            file=sys.stderr,
        )
        return 2
    run(n=n, batch_size=batch_size, workers=workers)
    return 0


def photo_like(height: int, width: int, seed: int) -> np.ndarray:
    """A deterministic uint8 RGB image with the statistics of a photo: smooth shading and objects
    (drawn at a quarter of the size and scaled up, as light falls off smoothly), edges, and grain."""
    from PIL import Image

    rng = np.random.default_rng(seed)
    h, w = max(2, height // 4), max(2, width // 4)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    image = np.zeros((h, w, 3), np.float32)
    image += rng.uniform(40, 200, 3).astype(np.float32)
    image += 40 * np.sin(x / rng.uniform(5, 22) + rng.uniform(0, 6))[:, :, None] * rng.uniform(-1, 1, 3).astype(np.float32)
    for _ in range(6):  # soft blobs and hard-edged discs: objects
        cy, cx, r = rng.uniform(0, h), rng.uniform(0, w), rng.uniform(3, max(h, w) / 3)
        d = np.sqrt((y - cy) ** 2 + (x - cx) ** 2)
        mask = (d < r).astype(np.float32) if rng.random() < 0.5 else np.exp(-((d / r) ** 2))
        image += mask[:, :, None] * rng.uniform(-90, 90, 3).astype(np.float32)
    small = Image.fromarray(np.clip(image, 0, 255).astype(np.uint8))
    full = np.asarray(small.resize((width, height), Image.Resampling.BILINEAR), dtype=np.float32)
    full = full + 6 * rng.standard_normal((height, width, 3), dtype=np.float32)
    return np.clip(full, 0, 255).astype(np.uint8)


def make_jpegs(n: int, seed: int = 0) -> list[bytes]:
    rng = np.random.default_rng(seed)
    sizes = rng.integers(200, 501, size=(n, 2))
    return [encode("jpeg", photo_like(int(h), int(w), seed + k), 90) for k, (h, w) in enumerate(sizes)]


class TorchJpegs:
    """A torch-style dataset: JPEG bytes -> torchvision-equivalent RandomResizedCrop(224) + flip -> CHW uint8 tensor."""

    def __init__(self, jpegs: list[bytes], size: int = 224):
        self.jpegs, self.size = jpegs, size

    def __len__(self) -> int:
        return len(self.jpegs)

    def __getitem__(self, i: int) -> tuple[Any, int]:
        import torch
        from PIL import Image

        image = Image.open(io.BytesIO(self.jpegs[i])).convert("RGB")
        width, height = image.size
        top, left, h, w = torch_rrc_params(height, width)
        image = image.crop((left, top, left + w, top + h)).resize((self.size, self.size), Image.Resampling.BILINEAR)  # as torchvision
        if torch.rand(1) < 0.5:
            image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return torch.from_numpy(np.array(image)).permute(2, 0, 1).contiguous(), i % 10


def torch_rrc_params(height: int, width: int, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)) -> tuple[int, int, int, int]:
    """torchvision's RandomResizedCrop.get_params, with torch's random generator."""
    import torch

    area = height * width
    log_ratio = torch.log(torch.tensor(ratio))
    for _ in range(10):
        target = area * torch.empty(1).uniform_(scale[0], scale[1]).item()
        aspect = torch.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1])).item()
        w, h = int(round(math.sqrt(target * aspect))), int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return int(torch.randint(0, height - h + 1, (1,)).item()), int(torch.randint(0, width - w + 1, (1,)).item()), h, w
    in_ratio = width / height
    if in_ratio < ratio[0]:
        w, h = width, int(round(width / ratio[0]))
    elif in_ratio > ratio[1]:
        h, w = height, int(round(height * ratio[1]))
    else:
        w, h = width, height
    return (height - h) // 2, (width - w) // 2, h, w


def _rate(loader: Any, n: int, repeats: int) -> tuple[float, float]:
    """(median images/s over ``repeats`` epochs after a warm-up, seconds to the first batch of the last)."""
    rates, first = [], 0.0
    for _ in range(repeats + 1):
        start = time.perf_counter()
        count = 0
        for k, (batch) in enumerate(loader):
            images = batch["image"] if isinstance(batch, dict) else batch[0]
            count += len(images)
            if k == 0:
                first = time.perf_counter() - start
        rates.append(count / (time.perf_counter() - start))
    return statistics.median(rates[1:]), first


def run(n: int = 1000, batch_size: int = 64, workers: int = 2, repeats: int = 3) -> dict[str, float]:
    print(f"slipstream demo: {n} photo-like JPEGs (q90, 200-500 px a side), RandomResizedCrop(224) + flip, uint8 CHW, "
          f"batch {batch_size}, {workers} workers")
    start = time.perf_counter()
    jpegs = make_jpegs(n)
    print(f"  made the images in {time.perf_counter() - start:.1f} s")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "demo.arrow"
        samples = [{"image": jpeg, "label": k % 10} for k, jpeg in enumerate(jpegs)]
        write(path, samples, {"image": F.Image(codec="jpeg", max_side=512), "label": F.Int()}, workers=workers)
        print(f"  packed {path.stat().st_size / 1e6:.1f} MB")
        train = open_packed(path).map(image=[ops.RandomResizedCrop(224), ops.RandomHorizontalFlip(), ops.ToCHW()])
        loader = DataLoader(train, batch_size, shuffle=True, seed=0, workers=workers)
        results = {}
        results["slipstream"], first = _rate(loader, n, repeats)
        print(f"  slipstream DataLoader ({workers} threads)                {results['slipstream']:>8,.0f} img/s   first batch {first * 1e3:.0f} ms")
        torch_data = optional("torch.utils.data")
        if torch_data is None:
            print("  torch is not installed: `make demo` installs it to compare with torch.utils.data.DataLoader")
            return results
        import torch  # imported with torch.utils.data

        torch.set_num_threads(1)
        torch_loader = torch_data.DataLoader(
            TorchJpegs(jpegs), batch_size, shuffle=True, num_workers=workers, persistent_workers=workers > 0
        )
        results["torch"], first = _rate(torch_loader, n, repeats)
        print(f"  torch DataLoader ({workers} processes) + PIL pipeline     {results['torch']:>8,.0f} img/s   first batch {first * 1e3:.0f} ms")
        print(f"  slipstream / torch: {results['slipstream'] / results['torch']:.2f}x (median of {repeats} epochs each, after a warm-up)")
        return results
