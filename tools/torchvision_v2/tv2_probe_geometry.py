"""Reference outputs of torchvision v2's rotate / affine (shear, translate) on a fixed uint8 (3, 37, 53) image,
with the parameters RandAugment / TrivialAugmentWide pass (center=[0, 0] for shears, int translate).

For each case prints the output hash and how many pixels a NumPy re-implementation of the documented sampling
(tv2_semantics.md, section "Affine ops") gets wrong, once computed in float32 the way torch orders the arithmetic
and once in float64 (an exact-math implementation): the float64 count is the tolerance a re-implementation should
expect for NEAREST (source coordinates landing within float32 error of a .5 tie).
Usage: /opt/tv-venv/bin/python tools/torchvision_v2/tv2_probe_geometry.py [--out geometry_ref.npz] [--size HxW]
"""

import math

import numpy as np
import torch
from torchvision.transforms.v2 import InterpolationMode
from torchvision.transforms.v2 import functional as F
from torchvision.transforms.v2.functional._geometry import _get_inverse_affine_matrix

from tv2_common import Report, test_image


def source_coords(matrix: list[float], h: int, w: int, dt) -> tuple[np.ndarray, np.ndarray]:
    """Source pixel coordinates (index space, pixel centers at integers) for every output pixel.

    Mirrors _affine_grid + grid_sample(align_corners=False): centered output coords (u - (W-1)/2, v - (H-1)/2),
    times the inverse matrix, normalized by (W/2, H/2), then unnormalized ((g + 1) * W - 1) / 2.
    """
    m = np.asarray(matrix, dtype=dt)
    xs = np.linspace((1.0 - w) * 0.5, (w - 1.0) * 0.5, w).astype(dt)
    ys = np.linspace((1.0 - h) * 0.5, (h - 1.0) * 0.5, h).astype(dt)
    X, Y = np.meshgrid(xs, ys)
    hw, hh = dt(0.5 * w), dt(0.5 * h)
    gx = X * (m[0] / hw) + Y * (m[1] / hw) + (m[2] / hw)
    gy = X * (m[3] / hh) + Y * (m[4] / hh) + (m[5] / hh)
    ix = ((gx + dt(1)) * dt(w) - dt(1)) / dt(2)
    iy = ((gy + dt(1)) * dt(h) - dt(1)) / dt(2)
    return ix, iy


def emu_warp(img: np.ndarray, matrix: list[float], mode: str, fill, dt) -> np.ndarray:
    c, h, w = img.shape
    ix, iy = source_coords(matrix, h, w, dt)
    x = img.astype(np.float64)
    fillv = None if fill is None else np.broadcast_to(np.asarray(fill, np.float64).reshape(-1, 1, 1), (c, 1, 1))
    if mode == "nearest":
        u, v = np.rint(ix).astype(np.int64), np.rint(iy).astype(np.int64)  # round half to even
        inside = (u >= 0) & (u < w) & (v >= 0) & (v < h)
        out = np.where(inside[None], x[:, v.clip(0, h - 1), u.clip(0, w - 1)], 0.0 if fill is None else fillv)
    else:
        x0, y0 = np.floor(ix).astype(np.int64), np.floor(iy).astype(np.int64)
        fx, fy = ix - x0, iy - y0
        out = np.zeros((c, h, w))
        mask = np.zeros((h, w))
        for dy, wy in ((0, 1 - fy), (1, fy)):
            for dx, wx in ((0, 1 - fx), (1, fx)):
                xx, yy = x0 + dx, y0 + dy
                ok = (xx >= 0) & (xx < w) & (yy >= 0) & (yy < h)
                wgt = np.where(ok, wx * wy, 0.0)
                out += wgt[None] * x[:, yy.clip(0, h - 1), xx.clip(0, w - 1)]
                mask += wgt
        if fill is not None:
            out = (out - fillv) * mask[None] + fillv
    return np.clip(np.rint(out), 0, 255).astype(np.uint8)


def rotate_matrix(angle: float) -> list[float]:
    return _get_inverse_affine_matrix([0.0, 0.0], -(angle % 360), [0.0, 0.0], 1.0, [0.0, 0.0])


def affine_matrix(h: int, w: int, translate, shear, center) -> list[float]:
    center_f = [0.0, 0.0] if center is None else [c - s * 0.5 for c, s in zip(center, [w, h])]
    return _get_inverse_affine_matrix(center_f, 0.0, [float(t) for t in translate], 1.0, list(shear))


def main() -> None:
    img = test_image()
    c, h, w = img.shape
    t = torch.from_numpy(img)
    rep = Report()
    n32 = n64 = 0
    for mode in ("nearest", "bilinear"):
        im = InterpolationMode.NEAREST if mode == "nearest" else InterpolationMode.BILINEAR
        for fill in (None, [128.0], [10.0, 200.0, 30.0]):
            fs = "none" if fill is None else "-".join(str(int(v)) for v in fill)
            cases = []
            for ang in (9.0, -9.0, 30.0, -30.0, 135.0, 90.0, 180.0):
                ref = F.rotate(t, ang, interpolation=im, fill=fill).numpy()
                cases.append((f"rotate {ang:+g} {mode} fill={fs}", ref, rotate_matrix(ang)))
            for m in (0.09, -0.09, 0.3, -0.99):
                sh = math.degrees(math.atan(m))
                ref = F.affine(t, 0.0, [0, 0], 1.0, [sh, 0.0], interpolation=im, fill=fill, center=[0, 0]).numpy()
                cases.append((f"shearX {m:+g} {mode} fill={fs}", ref, affine_matrix(h, w, [0, 0], [sh, 0.0], [0, 0])))
                ref = F.affine(t, 0.0, [0, 0], 1.0, [0.0, sh], interpolation=im, fill=fill, center=[0, 0]).numpy()
                cases.append((f"shearY {m:+g} {mode} fill={fs}", ref, affine_matrix(h, w, [0, 0], [0.0, sh], [0, 0])))
            for tx, ty in ((7, 0), (-7, 0), (0, 5), (0, -16)):
                ref = F.affine(t, 0.0, [tx, ty], 1.0, [0.0, 0.0], interpolation=im, fill=fill).numpy()
                cases.append((f"translate ({tx},{ty}) {mode} fill={fs}", ref, affine_matrix(h, w, [tx, ty], [0.0, 0.0], None)))
            for name, ref, mat in cases:
                if name.startswith("rotate +180") or (name.startswith("rotate +90") and h == w):
                    rep.case(name + " (rot90 fast path)", ref)
                    continue
                e32 = emu_warp(img, mat, mode, fill, np.float32)
                e64 = emu_warp(img, mat, mode, fill, np.float64)
                rep.case(name, ref, e32, tol=0 if mode == "nearest" else 1)
                n32 += int((e32 != ref).sum())
                n64 += int((e64 != ref).sum())
    print(f"pixels differing from torch (any amount): float32-ordered emulation {n32}, float64 emulation {n64}")
    rep.finish(input=img)


if __name__ == "__main__":
    main()
