"""Write tests/images/data/torchvision_v2.npz: torchvision v2 reference outputs for slipstream's augmentation tests.

Run with the torchvision venv (torch 2.14.1 + torchvision 0.29.1, CPU), from the repository root:

    /opt/tv-venv/bin/python tools/torchvision_v2/make_references.py [--out FILE.npz] [--n 2500] [--b-size 32]

(--out defaults to tests/images/data/torchvision_v2.npz.) The defaults keep the file under 1.5 MB: uint8 outputs barely
compress, so a 64x64 img_b (--b-size 64) with --n 3000 gives 2.5 MB.

It does not import slipstream. The test suite has no torchvision, so it compares against the saved file. Layout:

- Inputs, uint8 HWC: ``img_a`` (37, 53, 3), ``img_b`` (b_size, b_size, 3), square so rotate's rot90 fast paths
  run, ``img_gray`` (37, 53, 1).
- ``cases``: a 0-d str array holding a JSON list of ``{"name", "image", "fn", "params"}``. For each entry,
  ``case/<name>/<image>`` is the torchvision output, uint8 HWC. ``fn`` names a
  ``torchvision.transforms.v2.functional`` function, except ``shear`` and ``translate``, which are ``F.affine`` called
  the way RandAugment calls it. Geometric cases also carry ``"matrix"``: the 6 floats of the inverse affine matrix that
  ``_get_inverse_affine_matrix`` gives (for rotate with a ``fast_path`` that matrix is not used).
- ``dist_meta``: a 0-d str array holding a JSON list of ``{"name", "constructor", "image", "n", "seeding"}``. For each,
  ``dist/<name>/means`` (float64 (n,)): mean over all pixels and channels of each output;
  ``dist/<name>/channel_means`` (float64 (n, 3)); ``dist/<name>/unchanged`` (bool (n,)): output equal to the input.
  RandomErasing entries also have ``dist/<name>/erased`` (float64 (n,)): fraction of pixels with any channel changed,
  and ``dist/<name>/box`` (int32 (n, 4)): the (i, j, h, w) torchvision erased, (-1, -1, 0, 0) when it erased nothing.
  Draw k runs right after ``torch.manual_seed(k)``.
"""

import argparse
import json
import math
import os
import time
import warnings

import numpy as np
import torch
import torchvision
from torchvision.transforms import v2
from torchvision.transforms.v2 import InterpolationMode
from torchvision.transforms.v2 import functional as F
from torchvision.transforms.v2.functional._geometry import _affine_parse_args, _get_inverse_affine_matrix

warnings.filterwarnings("ignore")

INTERP = {"nearest": InterpolationMode.NEAREST, "bilinear": InterpolationMode.BILINEAR}
FILL3 = [10, 200, 30]


def photo_like(
    h: int, w: int, c: int, seed: int, lo: int, hi: int, patches: list[tuple[int, int, int, int, tuple]]
) -> np.ndarray:
    """A deterministic "photo-like" uint8 (h, w, c) image.

    Smooth gradients (a sum of low-frequency sinusoids per channel, with random frequencies and phases from `seed`),
    clipped to [lo, hi], plus texture (a fine sinusoid and low-amplitude rounded noise), plus flat patches
    (y, x, ph, pw, colour) written last, unclipped, so they can hold exact saturated, gray, 0 or 255 colours.
    """
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.empty((h, w, c))
    for ch in range(c):
        acc = np.zeros((h, w))
        for _ in range(4):
            fx, fy = rng.uniform(-0.25, 0.25, size=2)
            acc += rng.uniform(20, 50) * np.sin(fx * xx + fy * yy + rng.uniform(0, 2 * np.pi))
        acc += 6.0 * np.sin(1.9 * xx + 2.3 * yy + ch)  # fine texture
        acc += rng.normal(0.0, 4.0, size=(h, w))
        img[..., ch] = 128.0 + acc
    img = np.clip(np.rint(img), lo, hi)
    # a gray band (all channels equal): exercises the saturation-free paths of hue and saturation
    if c == 3:
        band = slice(h - 6, h - 2)
        img[band, :, :] = np.clip(np.rint(40 + 170 * xx[band, :, None] / (w - 1)), lo, hi)
    for y, x, ph, pw, colour in patches:
        img[y : y + ph, x : x + pw, :] = np.asarray(colour, dtype=np.float64)[:c]
    return img.astype(np.uint8)


def make_images(b_size: int) -> dict[str, np.ndarray]:
    """img_a (37, 53, 3), img_b (b_size, b_size, 3) and img_gray (37, 53, 1), all uint8 HWC."""
    img_a = photo_like(
        37, 53, 3, seed=1, lo=8, hi=247,
        patches=[(2, 3, 6, 7, (244, 10, 16)), (3, 40, 5, 9, (20, 230, 40)), (14, 20, 6, 6, (128, 128, 128)),
                 (22, 44, 5, 6, (200, 200, 200))],
    )  # fmt: skip
    s = b_size
    img_b = photo_like(
        s, s, 3, seed=2, lo=5, hi=250,
        patches=[(2, 2, s // 6, s // 6, (255, 255, 255)), (2, s - s // 4 - 2, s // 6, s // 4, (0, 0, 255)),
                 (s // 2 - 2, s // 2 - 2, 4, 4, (128, 128, 128)), (s - 10, 3, 3, s // 4, (250, 240, 3))],
    )  # fmt: skip
    img_gray = photo_like(37, 53, 1, seed=3, lo=12, hi=240, patches=[(5, 30, 6, 8, (77,)), (20, 5, 4, 5, (236,))])
    return {"img_a": img_a, "img_b": img_b, "img_gray": img_gray}


def to_t(hwc: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(hwc)).permute(2, 0, 1).contiguous()


def to_np(chw: torch.Tensor) -> np.ndarray:
    return np.ascontiguousarray(chw.permute(1, 2, 0).contiguous().numpy())


# ----------------------------------------------------------------------------------------------- functional cases
class Cases:
    def __init__(self, images: dict[str, np.ndarray]) -> None:
        self.images = images
        self.meta: list[dict] = []
        self.arrays: dict[str, np.ndarray] = {}

    def add(self, name: str, image: str, fn: str, params: dict, call) -> None:
        key = f"case/{name}/{image}"
        assert key not in self.arrays, key
        out = to_np(call(to_t(self.images[image])))
        assert out.dtype == np.uint8, (key, out.dtype)
        self.arrays[key] = out
        self.meta.append({"name": name, "image": image, "fn": fn, "params": params})


def fmt(v: float) -> str:
    return f"{v:.10g}"


def rotate_matrix(angle: float) -> list[float]:
    """The matrix rotate_image computes (center=None): angle %= 360, then the inverse matrix of -angle."""
    return [float(v) for v in _get_inverse_affine_matrix([0.0, 0.0], -(angle % 360), [0.0, 0.0], 1.0, [0.0, 0.0])]


def rotate_fast_path(angle: float, h: int, w: int) -> str | None:
    a = angle % 360
    if a == 0:
        return "clone"
    if a == 180:
        return "rot90_k2"
    if h == w and a in (90, 270):
        return "rot90_k1" if a == 90 else "rot90_k3"
    return None


def affine_matrix(h: int, w: int, translate: list, shear: list, center: list | None) -> list[float]:
    """The matrix affine_image computes, with angle 0 and scale 1."""
    angle, translate, shear, center = _affine_parse_args(0.0, translate, 1.0, shear, InterpolationMode.NEAREST, center)
    center_f = [0.0, 0.0] if center is None else [c - s * 0.5 for c, s in zip(center, [w, h])]
    return [float(v) for v in _get_inverse_affine_matrix(center_f, angle, [float(t) for t in translate], 1.0, shear)]


def geometry_cases(cs: Cases, image: str, fills: list, angles: tuple) -> None:
    h, w = cs.images[image].shape[:2]
    for mode, im in INTERP.items():
        for fill in fills:
            fs = "none" if fill is None else "-".join(str(v) for v in fill)
            fl = None if fill is None else [float(v) for v in fill]
            for ang in angles:
                p = {"angle": ang, "interpolation": mode, "fill": fill, "expand": False, "center": None,
                     "matrix": rotate_matrix(ang), "fast_path": rotate_fast_path(ang, h, w)}  # fmt: skip
                cs.add(f"rotate_{ang:+g}_{mode}_fill{fs}", image, "rotate", p,
                       lambda t, a=ang, i=im, f=fl: F.rotate(t, a, interpolation=i, fill=f))  # fmt: skip
            if image == "img_gray":
                continue
            for m in (0.09, -0.09, 0.3, -0.99):
                deg = math.degrees(math.atan(m))
                for axis, shear in (("x", [deg, 0.0]), ("y", [0.0, deg])):
                    p = {"axis": axis, "magnitude": m, "shear": shear, "angle": 0.0, "translate": [0, 0], "scale": 1.0,
                         "center": [0, 0], "interpolation": mode, "fill": fill,
                         "matrix": affine_matrix(h, w, [0, 0], shear, [0, 0])}  # fmt: skip
                    cs.add(f"shear{axis}_{m:+g}_{mode}_fill{fs}", image, "shear", p,
                           lambda t, s=shear, i=im, f=fl: F.affine(t, 0.0, [0, 0], 1.0, s, interpolation=i, fill=f,
                                                                   center=[0, 0]))  # fmt: skip
            for tx, ty in ((7, 0), (-7, 0), (0, 5), (0, -16)):
                p = {"tx": tx, "ty": ty, "angle": 0.0, "scale": 1.0, "shear": [0.0, 0.0], "center": None,
                     "interpolation": mode, "fill": fill, "matrix": affine_matrix(h, w, [tx, ty], [0.0, 0.0], None)}  # fmt: skip
                cs.add(f"translate_{tx:+d}_{ty:+d}_{mode}_fill{fs}", image, "translate", p,
                       lambda t, tr=[tx, ty], i=im, f=fl: F.affine(t, 0.0, tr, 1.0, [0.0, 0.0], interpolation=i,
                                                                   fill=f))  # fmt: skip


def functional_cases(cs: Cases) -> None:
    factors = (0.0, 0.6, 1.0, 1.37, 1.9)
    blurs = (((3, 3), (0.1, 0.1)), ((5, 5), (1.0, 1.0)), ((9, 9), (2.0, 2.0)), ((7, 3), (1.5, 0.7)), ((23, 23), (3.3, 3.3)))
    for image in ("img_a", "img_b"):
        for fn in ("adjust_brightness", "adjust_contrast", "adjust_saturation"):
            for f in factors:
                cs.add(f"{fn}_{fmt(f)}", image, fn, {"factor": f}, lambda t, g=getattr(F, fn), f=f: g(t, f))
        for hf in (-0.5, -0.23, 0.0, 0.1, 0.37, 0.5):
            cs.add(f"adjust_hue_{fmt(hf)}", image, "adjust_hue", {"hue_factor": hf}, lambda t, hf=hf: F.adjust_hue(t, hf))
        for f in (0.0, 0.1, 0.73, 1.27, 1.9):
            cs.add(
                f"adjust_sharpness_{fmt(f)}", image, "adjust_sharpness", {"factor": f}, lambda t, f=f: F.adjust_sharpness(t, f)
            )
        for bits in range(9):
            cs.add(f"posterize_{bits}", image, "posterize", {"bits": bits}, lambda t, b=bits: F.posterize(t, b))
        for thr in (0.0, 1.0, 128.0, 178.49999696, 255.0):
            cs.add(f"solarize_{fmt(thr)}", image, "solarize", {"threshold": thr}, lambda t, th=thr: F.solarize(t, th))
        cs.add("autocontrast", image, "autocontrast", {}, F.autocontrast)
        cs.add("equalize", image, "equalize", {}, F.equalize)
        cs.add("invert", image, "invert", {}, F.invert)
        cs.add("rgb_to_grayscale_3", image, "rgb_to_grayscale", {"num_output_channels": 3},
               lambda t: F.rgb_to_grayscale(t, num_output_channels=3))  # fmt: skip
        for (kx, ky), (sx, sy) in blurs:
            cs.add(f"gaussian_blur_{kx}x{ky}_{fmt(sx)}x{fmt(sy)}", image, "gaussian_blur",
                   {"kernel_size": [kx, ky], "sigma": [sx, sy]},
                   lambda t, k=[kx, ky], s=[sx, sy]: F.gaussian_blur(t, k, s))  # fmt: skip
        geometry_cases(cs, image, [None, FILL3], (9, -9, 30, -30, 135, 90, 180, 270))
        h, w = cs.images[image].shape[:2]
        for angle, (tx, ty), scale, shear, mode, fill in (
            (15.0, (3, -2), 1.1, [8.0, 0.0], "nearest", None),
            (-30.0, (0, 5), 0.8, [-5.0, 12.0], "bilinear", FILL3),
            (7.5, (-4, 0), 1.25, [0.0, 0.0], "bilinear", None),
        ):
            fl = None if fill is None else [float(v) for v in fill]
            angle_, translate_, shear_, _ = _affine_parse_args(angle, [tx, ty], scale, shear, INTERP[mode], None)
            scale_ = scale
            matrix = [float(v) for v in _get_inverse_affine_matrix([0.0, 0.0], angle_, [float(t) for t in translate_], scale_, shear_)]
            p = {"angle": angle, "translate": [tx, ty], "scale": scale, "shear": shear, "center": None, "interpolation": mode,
                 "fill": fill, "matrix": matrix}  # fmt: skip
            cs.add(f"affine_{angle:+g}_{tx:+d}_{ty:+d}_{scale:g}_{shear[0]:+g}_{shear[1]:+g}_{mode}", image, "affine", p,
                   lambda t, a=angle, tr=[tx, ty], sc=scale, sh=shear, i=INTERP[mode], f=fl: F.affine(t, a, tr, sc, sh, interpolation=i, fill=f))  # fmt: skip
        for i, j, eh, ew, v in (
            (5, 7, 10, 20, [10.0, 20.0, 30.0]),
            (h - 17, w - 23, 17, 23, 0.0),
            (0, 0, 9, w, [127.9, 0.5, 254.99]),
        ):
            vt = torch.tensor(v if isinstance(v, list) else [v], dtype=torch.float32)[:, None, None]
            vs = "-".join(fmt(x) for x in v) if isinstance(v, list) else fmt(v)
            cs.add(f"erase_{i}_{j}_{eh}_{ew}_v{vs}", image, "erase", {"i": i, "j": j, "h": eh, "w": ew, "v": v},
                   lambda t, a=(i, j, eh, ew), vt=vt: F.erase(t, *a, vt))  # fmt: skip
    cs.add("rgb_to_grayscale_1", "img_a", "rgb_to_grayscale", {"num_output_channels": 1},
           lambda t: F.rgb_to_grayscale(t, num_output_channels=1))  # fmt: skip

    g = "img_gray"
    for f in (0.0, 0.6, 1.37):
        cs.add(f"adjust_brightness_{fmt(f)}", g, "adjust_brightness", {"factor": f}, lambda t, f=f: F.adjust_brightness(t, f))
    for f in (0.0, 0.6, 1.9):
        cs.add(f"adjust_contrast_{fmt(f)}", g, "adjust_contrast", {"factor": f}, lambda t, f=f: F.adjust_contrast(t, f))
    for f in (0.1, 1.9):
        cs.add(f"adjust_sharpness_{fmt(f)}", g, "adjust_sharpness", {"factor": f}, lambda t, f=f: F.adjust_sharpness(t, f))
    cs.add("adjust_saturation_1.37", g, "adjust_saturation", {"factor": 1.37}, lambda t: F.adjust_saturation(t, 1.37))
    cs.add("adjust_hue_0.37", g, "adjust_hue", {"hue_factor": 0.37}, lambda t: F.adjust_hue(t, 0.37))
    for bits in (0, 3, 7):
        cs.add(f"posterize_{bits}", g, "posterize", {"bits": bits}, lambda t, b=bits: F.posterize(t, b))
    for thr in (0.0, 128.0, 178.49999696):
        cs.add(f"solarize_{fmt(thr)}", g, "solarize", {"threshold": thr}, lambda t, th=thr: F.solarize(t, th))
    cs.add("autocontrast", g, "autocontrast", {}, F.autocontrast)
    cs.add("equalize", g, "equalize", {}, F.equalize)
    cs.add("invert", g, "invert", {}, F.invert)
    for (kx, ky), (sx, sy) in (blurs[1], blurs[3]):
        cs.add(f"gaussian_blur_{kx}x{ky}_{fmt(sx)}x{fmt(sy)}", g, "gaussian_blur", {"kernel_size": [kx, ky], "sigma": [sx, sy]},
               lambda t, k=[kx, ky], s=[sx, sy]: F.gaussian_blur(t, k, s))  # fmt: skip
    geometry_cases(cs, g, [None, [77]], (30, -9, 90))


# ----------------------------------------------------------------------------------------------- distributions
NEAREST, BILINEAR = InterpolationMode.NEAREST, InterpolationMode.BILINEAR
DISTS = [
    ("colorjitter_0.4_0.4_0.4_0.1", "v2.ColorJitter(0.4, 0.4, 0.4, 0.1)", ("img_a",), lambda: v2.ColorJitter(0.4, 0.4, 0.4, 0.1)),
    ("colorjitter_b0.4", "v2.ColorJitter(brightness=0.4)", ("img_a",), lambda: v2.ColorJitter(brightness=0.4)),
    ("colorjitter_h0.5", "v2.ColorJitter(hue=0.5)", ("img_a",), lambda: v2.ColorJitter(hue=0.5)),
    ("randaugment_2_9_nearest", "v2.RandAugment(2, 9)", ("img_a", "img_b"), lambda: v2.RandAugment(2, 9)),
    ("randaugment_2_9_bilinear", "v2.RandAugment(2, 9, interpolation=InterpolationMode.BILINEAR)", ("img_a", "img_b"),
     lambda: v2.RandAugment(2, 9, interpolation=BILINEAR)),
    ("randaugment_1_15_nearest", "v2.RandAugment(1, 15)", ("img_a", "img_b"), lambda: v2.RandAugment(1, 15)),
    ("trivialaugmentwide_nearest", "v2.TrivialAugmentWide()", ("img_a", "img_b"), lambda: v2.TrivialAugmentWide()),
    ("trivialaugmentwide_bilinear", "v2.TrivialAugmentWide(interpolation=InterpolationMode.BILINEAR)", ("img_a", "img_b"),
     lambda: v2.TrivialAugmentWide(interpolation=BILINEAR)),
    ("randomerasing_p0.25", "v2.RandomErasing(p=0.25)", ("img_a",), lambda: v2.RandomErasing(p=0.25)),
    ("randomerasing_p1_v10-20-30", "v2.RandomErasing(p=1.0, value=[10, 20, 30])", ("img_a",),
     lambda: v2.RandomErasing(p=1.0, value=[10, 20, 30])),
    ("randomgrayscale_p0.1", "v2.RandomGrayscale(p=0.1)", ("img_a",), lambda: v2.RandomGrayscale(p=0.1)),
    ("gaussianblur_5_0.1-2.0", "v2.GaussianBlur(5, sigma=(0.1, 2.0))", ("img_a",), lambda: v2.GaussianBlur(5, sigma=(0.1, 2.0))),
    ("randomrotation_30_nearest", "v2.RandomRotation(30)", ("img_a", "img_b"), lambda: v2.RandomRotation(30)),
    ("autoaugment_imagenet_nearest", "v2.AutoAugment()", ("img_a", "img_b"), lambda: v2.AutoAugment()),
    ("randomaffine_15_0.1_0.8-1.2_10_nearest", "v2.RandomAffine(15, (0.1, 0.1), (0.8, 1.2), 10)", ("img_b",),
     lambda: v2.RandomAffine(15, (0.1, 0.1), (0.8, 1.2), 10)),
]  # fmt: skip


def erase_box(tr: v2.RandomErasing, t: torch.Tensor, seed: int) -> tuple[int, int, int, int] | None:
    """Redo RandomErasing's draws for `seed` (the p check, then make_params): the box it erased, or None."""
    torch.manual_seed(seed)
    if torch.rand(1) >= tr.p:
        return None
    p = tr.make_params([t])
    return None if p["v"] is None else (p["i"], p["j"], p["h"], p["w"])


def distributions(images: dict[str, np.ndarray], n: int) -> tuple[list[dict], dict[str, np.ndarray]]:
    meta, arrays = [], {}
    for base, ctor, image_keys, make in DISTS:
        for image in image_keys:
            name = f"{base}_{image}"
            tr = make()
            src = images[image]
            t = to_t(src)
            means = np.empty(n)
            cmeans = np.empty((n, src.shape[2]))
            unchanged = np.empty(n, dtype=bool)
            erasing = isinstance(tr, v2.RandomErasing)
            erased, boxes = np.empty(n), np.empty((n, 4), dtype=np.int32)
            t0 = time.perf_counter()
            for k in range(n):
                torch.manual_seed(k)
                out = to_np(tr(t))
                assert out.dtype == np.uint8 and out.shape == src.shape, (name, out.shape)
                cmeans[k] = out.reshape(-1, out.shape[2]).mean(axis=0, dtype=np.float64)
                means[k] = out.mean(dtype=np.float64)
                unchanged[k] = np.array_equal(out, src)
                if erasing:
                    erased[k] = np.any(out != src, axis=2).mean()
                    box = erase_box(tr, t, k)
                    if box is None:
                        assert unchanged[k], name
                        boxes[k] = (-1, -1, 0, 0)
                    else:
                        i, j, h, w = box
                        boxes[k] = box
                        assert np.any(out != src, axis=2).sum() <= h * w
                        assert np.array_equal(out[:i], src[:i]) and np.array_equal(out[i + h :], src[i + h :])
            print(f"dist {name:<44} n={n} {time.perf_counter() - t0:6.1f} s  mean of means {means.mean():8.3f}  "
                  f"unchanged {unchanged.mean():.3f}")  # fmt: skip
            arrays[f"dist/{name}/means"] = means
            arrays[f"dist/{name}/channel_means"] = cmeans
            arrays[f"dist/{name}/unchanged"] = unchanged
            if erasing:
                arrays[f"dist/{name}/erased"] = erased
                arrays[f"dist/{name}/box"] = boxes
            meta.append({"name": name, "constructor": ctor, "image": image, "n": n,
                         "seeding": "torch.manual_seed(k) before draw k, k = 0 .. n-1"})  # fmt: skip
    return meta, arrays


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tests/images/data/torchvision_v2.npz")
    ap.add_argument("--n", type=int, default=2500, help="draws per random transform")
    ap.add_argument("--b-size", type=int, default=32, help="side of the square img_b")
    args = ap.parse_args()
    torch.set_num_threads(1)
    t0 = time.perf_counter()
    images = make_images(args.b_size)
    cs = Cases(images)
    functional_cases(cs)
    print(f"{len(cs.meta)} functional cases in {time.perf_counter() - t0:.1f} s")
    dmeta, darrays = distributions(images, args.n)
    info = {"torch": torch.__version__, "torchvision": torchvision.__version__, "numpy": np.__version__}
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    np.savez_compressed(
        args.out,
        **images,
        cases=np.array(json.dumps(cs.meta)),
        dist_meta=np.array(json.dumps(dmeta)),
        versions=np.array(json.dumps(info)),
        **cs.arrays,
        **darrays,
    )
    print(f"wrote {args.out}: {os.path.getsize(args.out)} bytes, {len(cs.meta)} cases, {len(dmeta)} distributions, "
          f"{time.perf_counter() - t0:.1f} s in all, {info}")  # fmt: skip


if __name__ == "__main__":
    main()
