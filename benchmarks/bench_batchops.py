"""Benchmark: the batch augmentations (``slipstream.images.batchops``) per batch, against torchvision v2's.

One batch of 256 images of 224x224, in two forms: uint8 (B, H, W, C) (what the loader's CPU
pipelines give without ``Normalize``) and float32 (B, C, H, W) (a normalized batch, torchvision's
layout). Each case is the whole call, draws and parameters included, on a batch that is not
modified (every op returns new arrays):

- slipstream on NumPy arrays: ``MixUp``, ``CutMix``, ``MixUpOrCutMix`` (the loader's finish thread runs these);
- slipstream on torch CPU tensors (the path a device stage runs on its GPU tensors), float32 only;
- torchvision's ``v2.MixUp`` and ``v2.CutMix`` on torch tensors (uint8 as (B, C, H, W): torchvision's
  layout; its MixUp refuses uint8, so that case is reported as such), when torchvision imports;
  otherwise a line says it is not installed (``/opt/tv-venv/bin/python`` has it here).

``MixUpOrCutMix`` (torchvision: ``v2.RandomChoice([MixUp, CutMix])``) costs what the op drawn in
each repeat costs, and the draws differ between implementations (slipstream's are keyed by the
repeat, torchvision's come from torch's generator): its figures and ratio show the mixture, not a
like-for-like pair.

Measuring: each repeat times every implementation once in turn (the order rotates each repeat);
reported are the median milliseconds per batch over ``--repeats`` repeats and, where torchvision
ran, the median of the per-repeat ratios slipstream / torchvision (< 1: slipstream faster). torch
runs on ``--torch-threads`` threads (default 1, as NumPy's element-wise work does), so the figures
compare one core each. Usage: ``python benchmarks/bench_batchops.py [--repeats 7] [--batch 256]
[--size 224] [--torch-threads 1]``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

try:
    from slipstream.images.batchops import CutMix, MixUp, MixUpOrCutMix
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from slipstream.images.batchops import CutMix, MixUp, MixUpOrCutMix

try:
    import torch
except ImportError:
    torch = None
try:
    from torchvision.transforms import v2
except ImportError:
    v2 = None

K = 1000


def cases(batch: int, size: int) -> dict[str, dict[str, Callable[[int], object]]]:
    """{case: {implementation: f(repeat)}}: each call mixes one batch (draws keyed by the repeat)."""
    rng = np.random.default_rng(0)
    hwc = rng.integers(0, 256, (batch, size, size, 3), dtype=np.uint8)
    chw = rng.standard_normal((batch, 3, size, size), dtype=np.float32)
    labels = rng.integers(0, K, batch)
    ops = {
        "MixUp": MixUp(alpha=0.8, num_classes=K),
        "CutMix": CutMix(alpha=1.0, num_classes=K),
        "MixUpOrCutMix": MixUpOrCutMix(num_classes=K),
    }
    out: dict[str, dict[str, Callable[[int], object]]] = {}
    for name, op in ops.items():
        out[f"{name} uint8 HWC"] = {"slipstream numpy": lambda k, op=op: op({"image": hwc, "label": labels}, seed=1, index=k)}
        out[f"{name} float32 CHW"] = {"slipstream numpy": lambda k, op=op: op({"image": chw, "label": labels}, seed=1, index=k)}
        if torch is not None:
            tchw, tlabels = torch.from_numpy(chw), torch.from_numpy(labels)
            out[f"{name} float32 CHW"]["slipstream torch"] = lambda k, op=op: op((tchw, tlabels), seed=1, index=k)
    if v2 is not None:
        tchw, tlabels = torch.from_numpy(chw), torch.from_numpy(labels)
        tu8 = torch.from_numpy(np.ascontiguousarray(hwc.transpose(0, 3, 1, 2)))
        mixup, cutmix = v2.MixUp(alpha=0.8, num_classes=K), v2.CutMix(alpha=1.0, num_classes=K)
        choice = v2.RandomChoice([mixup, cutmix])
        out["MixUp float32 CHW"]["torchvision"] = lambda k: mixup(tchw, tlabels)
        out["CutMix float32 CHW"]["torchvision"] = lambda k: cutmix(tchw, tlabels)
        out["CutMix uint8 HWC"]["torchvision"] = lambda k: cutmix(tu8, tlabels)  # (as CHW: torchvision's layout)
        out["MixUpOrCutMix float32 CHW"]["torchvision"] = lambda k: choice(tchw, tlabels)
    return out


def measure(impls: dict[str, Callable[[int], object]], repeats: int) -> dict[str, list[float]]:
    names = list(impls)
    times: dict[str, list[float]] = {n: [] for n in names}
    for name in names:  # warm-up (first-touch of the output pages, imports)
        impls[name](0)
    for r in range(repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            began = time.perf_counter()
            impls[name](r + 1)
            times[name].append((time.perf_counter() - began) * 1e3)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--torch-threads", type=int, default=1)
    args = parser.parse_args()
    if torch is not None:
        torch.set_num_threads(args.torch_threads)
    print(f"batch {args.batch} x {args.size}x{args.size}x3, {args.repeats} repeats, numpy {np.__version__}", end="")
    print(
        f", torch {torch.__version__} on {args.torch_threads} thread(s)" if torch is not None else ", torch not installed", end=""
    )
    print(
        f", torchvision {__import__('torchvision').__version__}"
        if v2 is not None
        else ", torchvision not installed (no comparison)"
    )
    print(f"{'case':28s} {'implementation':18s} {'median ms':>10s} {'vs torchvision':>15s}")
    for case, impls in cases(args.batch, args.size).items():
        times = measure(impls, args.repeats)
        base = times.get("torchvision")
        for name, t in times.items():
            ratio = ""
            if base is not None and name != "torchvision":
                ratio = f"{statistics.median(a / b for a, b in zip(t, base)):.2f}x"
            print(f"{case:28s} {name:18s} {statistics.median(t):10.1f} {ratio:>15s}")
        if case == "MixUp uint8 HWC" and v2 is not None:
            print(f"{case:28s} {'torchvision':18s} {'refuses uint8 (RuntimeError)':>26s}")


if __name__ == "__main__":
    main()
