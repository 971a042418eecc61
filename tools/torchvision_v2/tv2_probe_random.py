"""Replay check of torchvision v2's random draws: for many seeds, run the v2 transform after torch.manual_seed(s),
then re-seed and redo the draws in the order tv2_semantics.md documents, applying the functionals by hand.
Equal outputs for every seed prove the documented draw order, ranges and op mapping. Also prints the first
seeds' parameters as a readable reference.
Usage: /opt/tv-venv/bin/python tools/torchvision_v2/tv2_probe_random.py [--seeds N]
"""

import math
import sys

import torch
from torchvision.transforms import v2
from torchvision.transforms.v2 import InterpolationMode
from torchvision.transforms.v2 import functional as F

from tv2_common import test_image

N = int(sys.argv[sys.argv.index("--seeds") + 1]) if "--seeds" in sys.argv else 100


def u(lo: float, hi: float) -> float:
    return float(torch.empty(1).uniform_(lo, hi).item())


# ---------------------------------------------------------------- ColorJitter
def replay_color_jitter(t, b, c, s, h):
    fn_idx = torch.randperm(4)
    bf = None if b is None else u(max(0.0, 1 - b), 1 + b)
    cf = None if c is None else u(max(0.0, 1 - c), 1 + c)
    sf = None if s is None else u(max(0.0, 1 - s), 1 + s)
    hf = None if h is None else u(-h, h)
    out = t
    for i in fn_idx.tolist():
        if i == 0 and bf is not None:
            out = F.adjust_brightness(out, bf)
        elif i == 1 and cf is not None:
            out = F.adjust_contrast(out, cf)
        elif i == 2 and sf is not None:
            out = F.adjust_saturation(out, sf)
        elif i == 3 and hf is not None:
            out = F.adjust_hue(out, hf)
    return out, dict(order=fn_idx.tolist(), b=bf, c=cf, s=sf, h=hf)


# ---------------------------------------------------------------- RandAugment / TrivialAugmentWide
OPS = ["Identity", "ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color", "Contrast",
       "Sharpness", "Posterize", "Solarize", "AutoContrast", "Equalize"]
SIGNED = {"ShearX", "ShearY", "TranslateX", "TranslateY", "Rotate", "Brightness", "Color", "Contrast", "Sharpness"}


def ra_table(name, bins, h, w):
    lin = lambda a, b: torch.linspace(a, b, bins)  # noqa: E731
    return {"ShearX": lin(0.0, 0.3), "ShearY": lin(0.0, 0.3), "TranslateX": lin(0.0, 150.0 / 331.0 * w),
            "TranslateY": lin(0.0, 150.0 / 331.0 * h), "Rotate": lin(0.0, 30.0), "Brightness": lin(0.0, 0.9),
            "Color": lin(0.0, 0.9), "Contrast": lin(0.0, 0.9), "Sharpness": lin(0.0, 0.9),
            "Posterize": (8 - (torch.arange(bins) / ((bins - 1) / 4))).round().int(), "Solarize": lin(1.0, 0.0)}.get(name)


def ta_table(name, bins, h, w):
    lin = lambda a, b: torch.linspace(a, b, bins)  # noqa: E731
    return {"ShearX": lin(0.0, 0.99), "ShearY": lin(0.0, 0.99), "TranslateX": lin(0.0, 32.0),
            "TranslateY": lin(0.0, 32.0), "Rotate": lin(0.0, 135.0), "Brightness": lin(0.0, 0.99),
            "Color": lin(0.0, 0.99), "Contrast": lin(0.0, 0.99), "Sharpness": lin(0.0, 0.99),
            "Posterize": (8 - (torch.arange(bins) / ((bins - 1) / 6))).round().int(), "Solarize": lin(1.0, 0.0)}.get(name)


def apply_op(img, name, m, interp, fill):
    if name == "Identity":
        return img
    if name == "ShearX":
        return F.affine(img, 0.0, [0, 0], 1.0, [math.degrees(math.atan(m)), 0.0], interpolation=interp, fill=fill, center=[0, 0])
    if name == "ShearY":
        return F.affine(img, 0.0, [0, 0], 1.0, [0.0, math.degrees(math.atan(m))], interpolation=interp, fill=fill, center=[0, 0])
    if name == "TranslateX":
        return F.affine(img, 0.0, [int(m), 0], 1.0, [0.0, 0.0], interpolation=interp, fill=fill)
    if name == "TranslateY":
        return F.affine(img, 0.0, [0, int(m)], 1.0, [0.0, 0.0], interpolation=interp, fill=fill)
    if name == "Rotate":
        return F.rotate(img, m, interpolation=interp, fill=fill)
    if name == "Brightness":
        return F.adjust_brightness(img, 1.0 + m)
    if name == "Color":
        return F.adjust_saturation(img, 1.0 + m)
    if name == "Contrast":
        return F.adjust_contrast(img, 1.0 + m)
    if name == "Sharpness":
        return F.adjust_sharpness(img, 1.0 + m)
    if name == "Posterize":
        return F.posterize(img, int(m))
    if name == "Solarize":
        return F.solarize(img, 255.0 * m)
    if name == "AutoContrast":
        return F.autocontrast(img)
    if name == "Equalize":
        return F.equalize(img)
    raise ValueError(name)


def replay_rand_augment(t, num_ops, magnitude, interp, fill, bins=31):
    h, w = t.shape[-2:]
    log = []
    for _ in range(num_ops):
        name = OPS[int(torch.randint(len(OPS), ()))]
        tab = ra_table(name, bins, h, w)
        m = 0.0
        if tab is not None:
            m = float(tab[magnitude])
            if name in SIGNED and torch.rand(()) <= 0.5:
                m = -m
        log.append((name, m))
        t = apply_op(t, name, m, interp, fill)
    return t, log


def replay_trivial_augment(t, interp, fill, bins=31):
    h, w = t.shape[-2:]
    name = OPS[int(torch.randint(len(OPS), ()))]
    tab = ta_table(name, bins, h, w)
    m, k = 0.0, None
    if tab is not None:
        k = int(torch.randint(bins, ()))
        m = float(tab[k])
        if name in SIGNED and torch.rand(()) <= 0.5:
            m = -m
    return apply_op(t, name, m, interp, fill), (name, k, m)


# ---------------------------------------------------------------- RandomErasing
def replay_random_erasing(t, p, scale, ratio, value):
    c, ih, iw = t.shape[-3:]
    if torch.rand(1) >= p:
        return t, None
    log_ratio = torch.log(torch.tensor(ratio))
    for attempt in range(10):
        area = ih * iw * torch.empty(1).uniform_(scale[0], scale[1]).item()
        ar = torch.exp(torch.empty(1).uniform_(log_ratio[0], log_ratio[1])).item()
        eh = int(round(math.sqrt(area * ar)))
        ew = int(round(math.sqrt(area / ar)))
        if not (eh < ih and ew < iw):
            continue
        v = torch.empty([c, eh, ew], dtype=torch.float32).normal_() if value == "random" else torch.tensor([float(value)])[:, None, None]
        i = torch.randint(0, ih - eh + 1, size=(1,)).item()
        j = torch.randint(0, iw - ew + 1, size=(1,)).item()
        out = t.clone()
        out[..., i:i + eh, j:j + ew] = v
        return out, (attempt, i, j, eh, ew)
    return t, "10 attempts failed: unchanged"


# ---------------------------------------------------------------- GaussianBlur, RandomGrayscale
def replay_gaussian_blur(t, k, sigma):
    s = torch.empty(1).uniform_(sigma[0], sigma[1]).item()
    return F.gaussian_blur(t, [k, k], [s, s]), s


def replay_random_grayscale(t, p):
    if torch.rand(1) >= p:
        return t
    return F.rgb_to_grayscale(t, num_output_channels=t.shape[-3])


# ---------------------------------------------------------------- MixUp / CutMix / RandomChoice
def beta_sample(alpha):
    # torch.distributions.Beta(a, a).sample(()) == Dirichlet([a, a]) first component, via torch._sample_dirichlet
    return float(torch._sample_dirichlet(torch.tensor([[alpha, alpha]]))[0, 0])


def soft(labels, nc, lam):
    oh = torch.nn.functional.one_hot(labels, nc).float()
    return oh.roll(1, 0) * (1.0 - lam) + oh * lam


def replay_mixup(x, y, alpha, nc):
    lam = beta_sample(alpha)
    return x.roll(1, 0) * (1.0 - lam) + x * lam, soft(y, nc, lam), lam


def replay_cutmix(x, y, alpha, nc):
    lam = beta_sample(alpha)
    H, W = x.shape[-2:]
    r_x = int(torch.randint(W, size=(1,)))
    r_y = int(torch.randint(H, size=(1,)))
    r = 0.5 * math.sqrt(1.0 - lam)
    rw, rh = int(r * W), int(r * H)
    x1, y1, x2, y2 = max(r_x - rw, 0), max(r_y - rh, 0), min(r_x + rw, W), min(r_y + rh, H)
    lam_adj = 1.0 - (x2 - x1) * (y2 - y1) / (W * H)
    out = x.clone()
    out[..., y1:y2, x1:x2] = x.roll(1, 0)[..., y1:y2, x1:x2]
    return out, soft(y, nc, lam_adj), (lam, (x1, y1, x2, y2), lam_adj)


def check(name, fn_ref, fn_replay, show=3):
    bad = 0
    for s in range(N):
        torch.manual_seed(s)
        ref = fn_ref()
        torch.manual_seed(s)
        rep, info = fn_replay()
        refs = ref if isinstance(ref, (tuple, list)) else (ref,)
        reps = rep if isinstance(rep, (tuple, list)) else (rep,)
        same = all(torch.equal(a, b) if a.dtype == b.dtype else False for a, b in zip(refs, reps))
        bad += not same
        if s < show:
            print(f"   seed {s}: {info}")
    print(f"{name:<58} replay == torchvision for {N - bad}/{N} seeds")
    return bad


def main() -> None:
    img = torch.from_numpy(test_image())
    bad = 0
    cj = v2.ColorJitter(0.4, 0.4, 0.4, 0.1)
    bad += check("ColorJitter(0.4, 0.4, 0.4, 0.1)", lambda: cj(img), lambda: replay_color_jitter(img, 0.4, 0.4, 0.4, 0.1))
    cj3 = v2.ColorJitter(0.4, 0.4, 0.4)
    bad += check("ColorJitter(0.4, 0.4, 0.4) (hue None: no hue draw)", lambda: cj3(img), lambda: replay_color_jitter(img, 0.4, 0.4, 0.4, None))
    for interp, fill in ((InterpolationMode.NEAREST, None), (InterpolationMode.BILINEAR, [128.0])):
        ra = v2.RandAugment(2, 9, interpolation=interp, fill=fill)
        bad += check(f"RandAugment(2, 9, {interp.value}, fill={fill})", lambda: ra(img), lambda: replay_rand_augment(img, 2, 9, interp, fill))
        ta = v2.TrivialAugmentWide(interpolation=interp, fill=fill)
        bad += check(f"TrivialAugmentWide({interp.value}, fill={fill})", lambda: ta(img), lambda: replay_trivial_augment(img, interp, fill))
    ra5 = v2.RandAugment(3, 17)
    bad += check("RandAugment(3, 17)", lambda: ra5(img), lambda: replay_rand_augment(img, 3, 17, InterpolationMode.NEAREST, None))
    re_ = v2.RandomErasing(p=0.7, value=0)
    bad += check("RandomErasing(p=0.7, value=0)", lambda: re_(img), lambda: replay_random_erasing(img, 0.7, (0.02, 0.33), (0.3, 3.3), 0))
    re_big = v2.RandomErasing(p=1.0, scale=(0.6, 0.99), value=7)
    bad += check("RandomErasing(p=1, scale=(0.6, 0.99), value=7) (often fails 10x)", lambda: re_big(img), lambda: replay_random_erasing(img, 1.0, (0.6, 0.99), (0.3, 3.3), 7))
    fimg = img.float() / 255
    re_r = v2.RandomErasing(p=1.0, value="random")
    bad += check("RandomErasing(p=1, value='random') on float", lambda: re_r(fimg), lambda: replay_random_erasing(fimg, 1.0, (0.02, 0.33), (0.3, 3.3), "random"))
    gb = v2.GaussianBlur(9, (0.1, 2.0))
    bad += check("GaussianBlur(9, (0.1, 2.0))", lambda: gb(img), lambda: replay_gaussian_blur(img, 9, (0.1, 2.0)))
    rg = v2.RandomGrayscale(0.2)
    bad += check("RandomGrayscale(0.2)", lambda: rg(img), lambda: (replay_random_grayscale(img, 0.2), "-"), show=0)
    xb = torch.stack([img.float() / 255 + k for k in range(6)])
    yb = torch.tensor([0, 3, 1, 4, 2, 3])
    mu = v2.MixUp(alpha=0.8, num_classes=5)
    bad += check("MixUp(alpha=0.8, num_classes=5) on float batch", lambda: mu(xb, yb), lambda: (lambda r: ((r[0], r[1]), r[2]))(replay_mixup(xb, yb, 0.8, 5)))
    cm = v2.CutMix(alpha=1.0, num_classes=5)
    bad += check("CutMix(alpha=1.0, num_classes=5) on float batch", lambda: cm(xb, yb), lambda: (lambda r: ((r[0], r[1]), r[2]))(replay_cutmix(xb, yb, 1.0, 5)))
    ub = torch.stack([img] * 6)
    bad += check("CutMix on uint8 batch (works; images stay uint8)", lambda: cm(ub, yb), lambda: (lambda r: ((r[0], r[1]), r[2]))(replay_cutmix(ub, yb, 1.0, 5)), show=0)
    try:
        mu(ub, yb)
        print("MixUp on uint8 batch: works")
    except RuntimeError as e:
        print(f"MixUp on uint8 batch raises RuntimeError: {e}")
    rc = v2.RandomChoice([mu, cm])

    def replay_choice():
        idx = int(torch.multinomial(torch.tensor([0.5, 0.5]), 1))
        r = replay_mixup(xb, yb, 0.8, 5) if idx == 0 else replay_cutmix(xb, yb, 1.0, 5)
        return (r[0], r[1]), ("MixUp" if idx == 0 else "CutMix", r[2])

    bad += check("RandomChoice([MixUp(0.8), CutMix(1.0)])", lambda: rc(xb, yb), replay_choice)
    print(f"TOTAL replay failures: {bad}")


if __name__ == "__main__":
    main()
