"""Reference outputs of torchvision v2's gaussian_blur on a fixed uint8 (3, 37, 53) image, with a NumPy
re-implementation (softmax-normalized float32 kernel, 'reflect' padding, 2-D correlation, round half to even).
Usage: /opt/tv-venv/bin/python tools/torchvision_v2/tv2_probe_blur.py [--out blur_ref.npz] [--size HxW]
"""

import math

import numpy as np
import torch
from torchvision.transforms.v2 import functional as F
from torchvision.transforms.v2.functional._misc import _get_gaussian_kernel1d

from tv2_common import Report, test_image

f32 = np.float32


def emu_kernel1d(k: int, sigma: float) -> np.ndarray:
    lim = (k - 1) / (2.0 * math.sqrt(2.0))
    x = np.linspace(-lim, lim, k).astype(f32)
    e = -((x / f32(sigma)) ** 2)
    e = np.exp(e - e.max())
    return (e / e.sum()).astype(f32)


def emu_blur(img: np.ndarray, ksize: tuple[int, int], sigma: tuple[float, float]) -> np.ndarray:
    kx, ky = emu_kernel1d(ksize[0], sigma[0]), emu_kernel1d(ksize[1], sigma[1])
    k2 = (ky[:, None] * kx[None, :]).astype(f32)
    px, py = ksize[0] // 2, ksize[1] // 2
    x = np.pad(img.astype(f32), ((0, 0), (py, py), (px, px)), mode="reflect")
    c, h, w = img.shape
    out = np.zeros((c, h, w), np.float64)
    for dy in range(ksize[1]):
        for dx in range(ksize[0]):
            out += np.float64(k2[dy, dx]) * x[:, dy:dy + h, dx:dx + w]
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def main() -> None:
    img = test_image()
    t = torch.from_numpy(img)
    rep = Report()
    for k in (3, 5, 9, 23):
        tk = _get_gaussian_kernel1d(k, 1.3, torch.float32, torch.device("cpu")).numpy()
        print(f"kernel1d k={k} sigma=1.3: max |torch - numpy| = {np.abs(tk - emu_kernel1d(k, 1.3)).max():.2e}  torch={np.round(tk, 6).tolist()[:5]}...")
    for ksize, sigma in (((3, 3), (0.1, 0.1)), ((5, 5), (1.0, 1.0)), ((9, 9), (2.0, 2.0)), ((7, 3), (1.5, 0.7)), ((23, 23), (3.3, 3.3))):
        ref = F.gaussian_blur(t, list(ksize), list(sigma)).numpy()
        rep.case(f"gaussian_blur k={ksize} sigma={sigma}", ref, emu_blur(img, ksize, sigma), tol=1)
    ref = F.gaussian_blur(t, [5, 5], None).numpy()
    rep.case("gaussian_blur k=5 sigma=None (0.15k+0.35)", ref, emu_blur(img, (5, 5), (5 * 0.15 + 0.35,) * 2), tol=1)
    rep.finish(input=img)


if __name__ == "__main__":
    main()
