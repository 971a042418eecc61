"""Check of slipstream's batch ops (``slipstream.images.batchops``) against torchvision v2's MixUp and CutMix.

For many seeds: run v2.CutMix / v2.MixUp after torch.manual_seed(s), replay their draws (lambda from the Beta,
then randint(W), randint(H)) and give the same lambda and center to slipstream's box and apply code, on NumPy
(HWC and CHW) and torch tensors. Every output must equal torchvision's bit for bit: boxes, images, labels.
Also: MixUp on uint8 (torchvision raises; slipstream's NumPy and torch paths must agree), and a two-sample
Kolmogorov-Smirnov statistic between slipstream's Beta sampler and NumPy's (float64) Beta for a few alphas,
with torch's float32 Beta's beside it (for alpha 0.1 torch's is itself 0.09 away from NumPy's).
Usage: /opt/tv-venv/bin/python tools/torchvision_v2/tv2_probe_batchops.py [--seeds N]
"""

import math
import sys
from pathlib import Path

import numpy as np
import torch
from torchvision.transforms import v2

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))
from slipstream.core.draws import Draws  # noqa: E402
from slipstream.images.batchops import CutMix, MixUp, _box  # noqa: E402
from slipstream.images.beta import BETA_DRAWS, beta_from_uniforms  # noqa: E402

N = int(sys.argv[sys.argv.index("--seeds") + 1]) if "--seeds" in sys.argv else 200
B, C, H, W, K = 6, 3, 29, 41, 10


def batch(seed: int, dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(10_000 + seed)
    images = torch.randint(0, 256, (B, C, H, W), generator=g, dtype=torch.uint8)
    if dtype != torch.uint8:
        images = images.to(dtype) / 255
    labels = torch.randint(0, K, (B,), generator=g)
    return images, labels


def same(a: np.ndarray | torch.Tensor, b: torch.Tensor) -> bool:
    a = a.numpy() if isinstance(a, torch.Tensor) else a
    return a.dtype == b.numpy().dtype and a.shape == tuple(b.shape) and np.array_equal(a, b.numpy())


def check_cutmix(alpha: float) -> int:
    bad = 0
    for s in range(N):
        for dtype in (torch.float32, torch.uint8):
            images, labels = batch(s, dtype)
            tv = v2.CutMix(alpha=alpha, num_classes=K)
            torch.manual_seed(s)
            want_images, want_labels = tv(images, labels)
            torch.manual_seed(s)
            lam = float(tv._dist.sample(()))
            r_x, r_y = int(torch.randint(W, size=(1,))), int(torch.randint(H, size=(1,)))
            box, lam_adj = _box(lam, (r_x + 0.5) / W, (r_y + 0.5) / H, H, W)
            op = CutMix(alpha=alpha, num_classes=K, layout="CHW")
            params = {"kind": "cutmix", "lam": lam_adj, "box": box, "layout": "CHW"}
            chw = op.apply({"image": images.numpy(), "label": labels.numpy()}, params)
            hwc = CutMix(alpha=alpha, num_classes=K, layout="HWC").apply(
                {"image": images.permute(0, 2, 3, 1).numpy(), "label": labels.numpy()}, {**params, "layout": "HWC"}
            )
            on_torch = op.apply((images, labels), params)
            ok = (
                same(chw["image"], want_images)
                and same(np.ascontiguousarray(hwc["image"].transpose(0, 3, 1, 2)), want_images)
                and same(chw["label"], want_labels)
                and same(on_torch[0], want_images)
                and same(on_torch[1], want_labels)
            )
            if not ok:
                bad += 1
                if bad <= 3:
                    print(f"  CutMix alpha={alpha} seed={s} {dtype}: box {box} lam' {lam_adj} differs")
    return bad


def check_mixup(alpha: float) -> int:
    bad = 0
    for s in range(N):
        images, labels = batch(s, torch.float32)
        tv = v2.MixUp(alpha=alpha, num_classes=K)
        torch.manual_seed(s)
        want_images, want_labels = tv(images, labels)
        torch.manual_seed(s)
        lam = float(tv._dist.sample(()))
        op = MixUp(alpha=alpha, num_classes=K)
        params = {"kind": "mixup", "lam": lam}
        ours = op.apply({"image": images.numpy(), "label": labels.numpy()}, params)
        on_torch = op.apply((images, labels), params)
        ok = same(ours["image"], want_images) and same(ours["label"], want_labels)
        ok = ok and same(on_torch[0], want_images) and same(on_torch[1], want_labels)
        # uint8: torchvision raises; slipstream's two paths agree with each other
        u8, _ = batch(s, torch.uint8)
        try:
            tv(u8, labels)
            print("  torchvision's MixUp took a uint8 batch (it raised in 0.29.1)")
        except RuntimeError:
            pass
        a = op.apply({"image": u8.numpy(), "label": labels.numpy()}, params)["image"]
        b = op.apply((u8, labels), params)[0]
        ref = np.clip(
            np.rint(
                np.roll(u8.numpy(), 1, 0).astype(np.float32) * np.float32(1 - lam)
                + u8.numpy().astype(np.float32) * np.float32(lam)
            ),
            0,
            255,
        )
        ok = ok and np.array_equal(a, b.numpy()) and np.array_equal(a, ref.astype(np.uint8))
        if not ok:
            bad += 1
            if bad <= 3:
                print(f"  MixUp alpha={alpha} seed={s}: lam {lam} differs")
    return bad


def ks_two_sample(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.sort(a), np.sort(b)
    grid = np.concatenate([a, b])
    return float(np.max(np.abs(np.searchsorted(a, grid, "right") / len(a) - np.searchsorted(b, grid, "right") / len(b))))


def main() -> None:
    failures = 0
    for alpha in (1.0, 0.2, 0.8, 2.5):
        bad = check_cutmix(alpha)
        print(f"CutMix alpha={alpha}: {N - bad}/{N} seeds equal to v2.CutMix (float32 and uint8, CHW, HWC, torch)")
        failures += bad
        bad = check_mixup(alpha)
        print(f"MixUp  alpha={alpha}: {N - bad}/{N} seeds equal to v2.MixUp (float32; uint8 NumPy == torch path)")
        failures += bad
    n = 20_000
    u = Draws(1, 0, np.arange(n)).uniforms(99, BETA_DRAWS)
    for alpha in (0.1, 0.2, 0.8, 1.0, 4.0):
        ours = beta_from_uniforms(u, alpha, alpha)
        reference = np.random.default_rng(0).beta(alpha, alpha, n)
        torch.manual_seed(0)
        theirs = torch.distributions.Beta(torch.tensor(alpha), torch.tensor(alpha)).sample((n,)).double().numpy()
        d = ks_two_sample(ours, reference)
        limit = 1.95 * math.sqrt(2 / n)  # the 0.1% critical value of the two-sample statistic
        print(
            f"Beta({alpha}, {alpha}): two-sample KS vs NumPy's beta {d:.4f} (0.1% critical value {limit:.4f}); "
            f"torch's float32 Beta vs NumPy's {ks_two_sample(theirs, reference):.4f}"
        )
        failures += d > limit
    print("all equal" if not failures else f"{failures} FAILURES")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
