"""Reference outputs of torchvision v2's photometric functionals on a fixed uint8 (3, 37, 53) image.

For each op and fixed parameter, prints the torchvision output's hash and how many pixels a NumPy float32
re-implementation of the semantics in tv2_semantics.md gets wrong (0 means the description is exact).
Usage: /opt/tv-venv/bin/python tools/torchvision_v2/tv2_probe_color.py [--out color_ref.npz]
"""

import numpy as np
import torch
from torchvision.transforms.v2 import functional as F

from tv2_common import Report, test_image

f32 = np.float32


def emu_trunc(x: np.ndarray) -> np.ndarray:
    """float32 -> uint8 the way torch's .to(torch.uint8) does after a clamp to [0, 255]: truncation toward zero."""
    return np.clip(x, 0, 255).astype(np.uint8)




def fma32(a: np.ndarray, alpha: float, b: np.ndarray) -> np.ndarray:
    """float32 a + alpha * b with one rounding, as torch's CPU `a.add_(b, alpha=alpha)` computes it (vectorized FMA)."""
    return (a.astype(np.float64) + np.float64(f32(alpha)) * b.astype(np.float64)).astype(f32)


def emu_gray_float(img: np.ndarray) -> np.ndarray:
    """r.mul(0.2989).add_(g, alpha=0.587).add_(b, alpha=0.114) in float32; each add_ is fused (one rounding)."""
    r, g, b = img.astype(f32)
    return fma32(fma32(r * f32(0.2989), 0.587, g), 0.114, b)


def emu_blend(img1: np.ndarray, img2: np.ndarray, ratio: float) -> np.ndarray:
    """_blend: float32 img1 * ratio, then add_(img2, alpha=1 - ratio) (fused), clamp, truncate to uint8."""
    return emu_trunc(fma32(img1.astype(f32) * f32(ratio), 1.0 - ratio, np.broadcast_to(img2.astype(f32), img1.shape)))


def emu_brightness(img, f):
    return emu_trunc(img.astype(f32) * f32(f))


def emu_saturation(img, f):
    return emu_blend(img, np.floor(emu_gray_float(img))[None], f)


def emu_contrast(img, f):
    mean = np.floor(emu_gray_float(img)).astype(np.float64).mean()  # torch: float32 mean; ties are rare
    return emu_blend(img, np.full((1, 1, 1), f32(mean)), f)


def emu_rgb_to_hsv(x):  # x float32 in [0, 1], (3, H, W)
    r, g, b = x
    maxc, minc = x.max(0), x.min(0)
    eqc = maxc == minc
    cr = maxc - minc
    s = cr / np.where(eqc, f32(1), maxc)
    crd = np.where(eqc, f32(1), cr)
    rc, gc, bc = (maxc[None] - x) / crd[None]
    hr = np.where(maxc == r, bc - gc, f32(0))
    hg = np.where((maxc == g) & (maxc != r), f32(2) + rc - bc, f32(0))
    hb = np.where((maxc != g) & (maxc != r), f32(4) + gc - rc, f32(0))
    h = (hr + hg + hb) * f32(1 / 6) + f32(1)
    h = np.fmod(h, f32(1))
    return h.astype(f32), s.astype(f32), maxc


def emu_hsv_to_rgb(h, s, v):
    h6 = h * f32(6)
    i = np.floor(h6)
    f = h6 - i
    i = i.astype(np.int32) % 6
    q = np.clip((f32(1) - s * f) * v, 0, 1)
    t = np.clip((s * f + (f32(1) - s)) * v, 0, 1)
    p = np.clip((f32(1) - s) * v, 0, 1)
    vpqt = np.stack([v, p, q, t])
    sel = np.array([[0, 2, 1, 1, 3, 0], [3, 0, 0, 2, 1, 1], [1, 1, 3, 0, 0, 2]])[:, i]
    return np.take_along_axis(vpqt, sel, 0)


def emu_hue(img, hf):
    x = img.astype(f32) * f32(1 / 255)
    h, s, v = emu_rgb_to_hsv(x)
    h = np.mod(h + f32(hf), f32(1))
    rgb = emu_hsv_to_rgb(h.astype(f32), s, v)
    return (rgb * f32(255 + 1 - 1e-3)).astype(np.uint8)


def emu_sharpness(img, f):
    x = img.astype(f32)
    k = np.full((3, 3), f32(1 / 13)); k[1, 1] = f32(5 / 13)
    c, hh, ww = x.shape
    blur = np.zeros((c, hh - 2, ww - 2), f32)
    for dy in range(3):
        for dx in range(3):
            blur += x[:, dy:dy + hh - 2, dx:dx + ww - 2] * k[dy, dx]
    blur = np.round(blur)  # half to even, like torch.round
    out = x.copy()
    view = out[:, 1:-1, 1:-1]
    out[:, 1:-1, 1:-1] = fma32(view, 1 - f, blur - view)
    return emu_trunc(out)


def emu_posterize(img, bits):
    if bits >= 8:
        return img.copy()
    return img & np.uint8(((1 << bits) - 1) << (8 - bits))


def emu_solarize(img, thr):
    return np.where(img >= thr, 255 - img, img).astype(np.uint8)


def emu_autocontrast(img):
    x = img.astype(f32)
    lo = x.min(axis=(1, 2), keepdims=True)
    hi = x.max(axis=(1, 2), keepdims=True)
    eq = hi == lo
    inv = (hi - lo) * f32(1 / 255)
    lo = np.where(eq, f32(0), lo)
    inv = np.where(eq, f32(1), inv)
    return emu_trunc((x - lo) / inv)


def emu_equalize(img):
    out = img.copy()
    for ch in range(img.shape[0]):
        flat = img[ch].reshape(-1).astype(np.int64)
        hist = np.bincount(flat, minlength=256)
        cum = np.cumsum(hist)
        last_nonzero = int(np.flatnonzero(hist)[-1])
        step = (flat.size - hist[last_nonzero]) // 255
        if step == 0:
            continue
        lut = np.concatenate([[0], np.clip((cum[:-1] + step // 2) // step, 0, 255)]).astype(np.uint8)
        out[ch] = lut[img[ch]]
    return out


def main() -> None:
    img = test_image()
    t = torch.from_numpy(img)
    rep = Report()
    for f in (0.0, 0.6, 1.0, 1.37, 1.9):
        rep.case(f"adjust_brightness f={f}", F.adjust_brightness(t, f).numpy(), emu_brightness(img, f))
    for f in (0.0, 0.6, 1.0, 1.37, 1.9):
        rep.case(f"adjust_saturation f={f}", F.adjust_saturation(t, f).numpy(), emu_saturation(img, f))
    for f in (0.0, 0.6, 1.0, 1.37, 1.9):
        rep.case(f"adjust_contrast f={f}", F.adjust_contrast(t, f).numpy(), emu_contrast(img, f))
    for hf in (-0.5, -0.23, 0.0, 0.1, 0.37, 0.5):
        rep.case(f"adjust_hue h={hf}", F.adjust_hue(t, hf).numpy(), emu_hue(img, hf), tol=0)
    for f in (0.0, 0.1, 1.0, 1.27, 1.9):
        rep.case(f"adjust_sharpness f={f}", F.adjust_sharpness(t, f).numpy(), emu_sharpness(img, f))
    for bits in range(0, 9):
        rep.case(f"posterize bits={bits}", F.posterize(t, bits).numpy(), emu_posterize(img, bits))
    for thr in (0.0, 1.0, 128.0, 178.50001, 255.0):
        rep.case(f"solarize thr={thr}", F.solarize(t, thr).numpy(), emu_solarize(img, thr))
    rep.case("autocontrast", F.autocontrast(t).numpy(), emu_autocontrast(img))
    low = (img // 3 + 40).astype(np.uint8)
    low[1] = 90  # a constant (degenerate) channel: returned unchanged
    rep.case("autocontrast low-contrast+const channel", F.autocontrast(torch.from_numpy(low)).numpy(), emu_autocontrast(low))
    rep.case("equalize", F.equalize(t).numpy(), emu_equalize(img))
    rep.case("equalize low-contrast+const channel", F.equalize(torch.from_numpy(low)).numpy(), emu_equalize(low))
    rep.case("invert", F.invert(t).numpy(), 255 - img)
    g1 = F.rgb_to_grayscale(t, 1).numpy()
    rep.case("rgb_to_grayscale(1)", g1, emu_trunc(emu_gray_float(img))[None])
    rep.case("rgb_to_grayscale(3)", F.rgb_to_grayscale(t, 3).numpy(), np.repeat(emu_trunc(emu_gray_float(img))[None], 3, 0))
    white = torch.full((3, 1, 1), 255, dtype=torch.uint8)
    print("grayscale of pure white (255,255,255) ->", int(F.rgb_to_grayscale(white).item()), "(weights sum to 0.9999, truncated)")
    rep.finish(input=img)


if __name__ == "__main__":
    main()
