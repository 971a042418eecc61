"""Shared helpers for the tv2_probe_*.py scripts: a fixed uint8 test image, hashing and comparison printing.

Run every probe with /opt/tv-venv/bin/python (torch 2.14.1 + torchvision 0.29.1). Each probe prints, per case,
the torchvision v2 output's sha256 (of the C-contiguous uint8 bytes), its sum, and how many pixels a NumPy
re-implementation of the documented semantics (tv2_semantics.md) gets wrong. `--out FILE.npz` also saves the
inputs and reference outputs so a test without torchvision can compare against them.
"""

import hashlib
import sys
import warnings

import numpy as np

warnings.filterwarnings("ignore")


def test_image(c: int = 3, h: int = 37, w: int = 53, seed: int = 0) -> np.ndarray:
    """A fixed pseudo-random uint8 (C, H, W) image with a smooth part and a noisy part (odd, non-square size).

    `--size HxW` and `--seed N` on the command line override h, w and seed (for stress runs).
    """
    if "--size" in sys.argv:
        h, w = (int(v) for v in sys.argv[sys.argv.index("--size") + 1].split("x"))
    if "--seed" in sys.argv:
        seed = int(sys.argv[sys.argv.index("--seed") + 1])
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    smooth = (128 + 100 * np.sin(xx / 7.0 + np.arange(c)[:, None, None]) * np.cos(yy / 5.0)).astype(np.float64)
    noise = rng.integers(0, 256, size=(c, h, w))
    img = np.where(xx[None] < w // 2, smooth, noise)
    return np.clip(img, 0, 255).astype(np.uint8)


def digest(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:16]


class Report:
    """Collects (name -> reference output) and prints one line per case."""

    def __init__(self) -> None:
        self.arrays: dict[str, np.ndarray] = {}
        self.total_mismatch = 0

    def case(self, name: str, ref: np.ndarray, emu: np.ndarray | None = None, tol: int = 0) -> None:
        ref = np.ascontiguousarray(ref)
        self.arrays[name] = ref
        line = f"{name:<44} sha={digest(ref)} sum={int(ref.astype(np.int64).sum()):>9}"
        if emu is not None:
            diff = np.abs(ref.astype(np.int64) - emu.astype(np.int64))
            n_any = int((diff > 0).sum())
            n = int((diff > tol).sum())
            self.total_mismatch += n
            line += f"  numpy-emulation: {n_any}/{ref.size} px differ (max |d|={int(diff.max())})"
            if tol:
                line += f", {n} beyond tolerance {tol}"
        print(line)

    def finish(self, **extra: np.ndarray) -> None:
        if "--out" in sys.argv:
            path = sys.argv[sys.argv.index("--out") + 1]
            np.savez_compressed(path, **extra, **self.arrays)
            print(f"saved {len(self.arrays)} reference arrays to {path}")
        print(f"TOTAL emulation mismatches beyond the stated tolerance: {self.total_mismatch}")
