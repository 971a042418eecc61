"""The demo: load a generated in-memory image dataset with slipstream and with torch's DataLoader.

It stands in for the main job until packed image pipelines exist: 20,000 samples of a 3x32x32
uint8 image and an int64 label behind a plain Python container, batch 256, shuffled, read with
slipstream and with ``torch.utils.data.DataLoader`` (when torch is installed), both in this
process on the same cores. It prints the median samples/s of a few epochs each, and the ratio.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from ._loader import DataLoader


class ImageSet:
    """A plain container: ``ds[i]`` is ``(image uint8[3, 32, 32], label int)``."""

    def __init__(self, n: int = 20_000, seed: int = 0):
        rng = np.random.default_rng(seed)
        self.images = rng.integers(0, 256, size=(n, 3, 32, 32), dtype=np.uint8)
        self.labels = rng.integers(0, 10, size=n)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        return self.images[i], int(self.labels[i])


def _epoch_rate(make_iter: Any, n: int, repeats: int) -> float:
    rates = []
    for _ in range(repeats + 1):  # the first pass warms caches and is not counted
        start = time.perf_counter()
        count = sum(len(batch[1]) for batch in make_iter())
        elapsed = time.perf_counter() - start
        if count != n:
            raise RuntimeError(f"an epoch yielded {count} samples, expected {n}")
        rates.append(n / elapsed)
    return statistics.median(rates[1:])


def run(n: int = 20_000, batch_size: int = 256, repeats: int = 3) -> dict[str, float]:
    data = ImageSet(n)
    print(f"slipstream demo: {n} samples of 3x32x32 uint8 + label behind a Python container, batch {batch_size}, shuffled")
    loader = DataLoader(data, batch_size=batch_size, shuffle=True, seed=0)
    results = {"slipstream": _epoch_rate(lambda: iter(loader), n, repeats)}
    print(f"  slipstream.DataLoader (workers=0)         {results['slipstream']:>12,.0f} samples/s")
    try:
        import torch
        import torch.utils.data
    except ImportError:
        print("  torch is not installed: `pip install torch` (or `make demo`) to compare with torch.utils.data.DataLoader")
        return results
    torch.set_num_threads(1)
    torch_loader = torch.utils.data.DataLoader(data, batch_size=batch_size, shuffle=True, num_workers=0)
    results["torch"] = _epoch_rate(lambda: iter(torch_loader), n, repeats)
    print(f"  torch.utils.data.DataLoader (workers=0)   {results['torch']:>12,.0f} samples/s")
    print(f"  slipstream / torch: {results['slipstream'] / results['torch']:.2f}x (median of {repeats} epochs each)")
    return results
