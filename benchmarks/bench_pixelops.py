"""Pixel ops per 224x224x3 uint8 image: the compiled executor (``_roijpeg.pixel_steps``) against the
NumPy one (``kernels.pixel_steps.run``), and against torchvision v2's functional ops.

    python benchmarks/bench_pixelops.py                 # ours; adds torchvision's column when
                                                        # --tv-python (default /opt/tv-venv/bin/python) runs
    python benchmarks/bench_pixelops.py --torchvision   # torchvision v2's functionals only (no slipstream needed)
    python benchmarks/bench_pixelops.py --loader        # a whole recipe through ss.DataLoader: compiled task vs per sample

Each figure is the median over ``--rounds`` rounds of the mean time of ``--reps`` calls on one
thread (torch.set_num_threads(1)), on a photo-like image with smooth regions and edges; an
image is copied before each call (the copy's time is measured alone and subtracted). Ratios:
NumPy / C and torchvision / C (above 1: the C executor is faster).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

HEIGHT = WIDTH = 224

# name, opcode and parameters (kernels/pixel_steps.py's), the torchvision v2 functional call
OPS: list[tuple[str, list[float], str]] = [
    ("brightness 1.3", [1, 1.3], "adjust_brightness(x, 1.3)"),
    ("contrast 1.3", [2, 1.3], "adjust_contrast(x, 1.3)"),
    ("saturation 1.3", [3, 1.3], "adjust_saturation(x, 1.3)"),
    ("hue 0.1", [4, 0.1], "adjust_hue(x, 0.1)"),
    ("sharpness 1.8", [5, 1.8], "adjust_sharpness(x, 1.8)"),
    ("posterize 4", [6, 4], "posterize(x, 4)"),
    ("solarize 128", [7, 128], "solarize(x, 128)"),
    ("autocontrast", [8], "autocontrast(x)"),
    ("equalize", [9], "equalize(x)"),
    ("invert", [10], "invert(x)"),
    ("grayscale (3 channels)", [11], "rgb_to_grayscale(x, num_output_channels=3)"),
    ("blur 5x5 sigma 1", [12, 5, 5, 1.0, 1.0], "gaussian_blur(x, [5, 5], [1.0, 1.0])"),
    ("blur 23x23 sigma 2", [12, 23, 23, 2.0, 2.0], "gaussian_blur(x, [23, 23], [2.0, 2.0])"),
    ("rotate 15 nearest", ["rotate", 15.0, 0], "rotate(x, 15.0, interpolation=InterpolationMode.NEAREST)"),
    ("rotate 15 bilinear", ["rotate", 15.0, 1], "rotate(x, 15.0, interpolation=InterpolationMode.BILINEAR)"),
    ("shear-x 0.3 nearest", ["shear", 0.3, 0], "affine(x, 0.0, [0, 0], 1.0, [math.degrees(math.atan(0.3)), 0.0], center=[0, 0])"),
    ("rotate 90 (quarter turn)", [14, 1], "rotate(x, 90.0)"),
    ("erase 80x60", [15, 40, 50, 80, 60, 0, 0, 0], "erase(x, 40, 50, 80, 60, torch.zeros(3, 1, 1, dtype=torch.uint8))"),
]


def photo(height: int = HEIGHT, width: int = WIDTH, seed: int = 0) -> np.ndarray:
    """A photo-like uint8 (H, W, 3) image: smooth gradients, a few disks and noise."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float64)
    image = np.stack([120 + 80 * np.sin(x / 37 + c) * np.cos(y / 29 - c) for c in range(3)], axis=2)
    for _ in range(6):
        cy, cx, r = rng.uniform(0, height), rng.uniform(0, width), rng.uniform(10, 50)
        image[(y - cy) ** 2 + (x - cx) ** 2 < r * r] = rng.uniform(0, 255, 3)
    image += rng.normal(0, 6, image.shape)
    return np.clip(image, 0, 255).astype(np.uint8)


def timed(call: Callable[[], Any], reps: int, rounds: int) -> float:
    """Median over rounds of the mean seconds per call."""
    call()
    results = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(reps):
            call()
        results.append((time.perf_counter() - start) / reps)
    return statistics.median(results)


def torchvision_rows(reps: int, rounds: int) -> dict[str, float]:
    """ms per call of each op's torchvision v2 functional, on a uint8 (3, H, W) tensor."""
    import torch
    from torchvision.transforms.v2 import InterpolationMode  # noqa: F401  (used by the calls)
    from torchvision.transforms.v2 import functional as F

    torch.set_num_threads(1)
    x = torch.from_numpy(np.ascontiguousarray(photo().transpose(2, 0, 1)))
    scope = {"F": F, "x": x, "math": math, "torch": torch, "InterpolationMode": InterpolationMode}
    rows = {}
    for name, _, call in OPS:
        fn = eval(f"lambda: F.{call}", scope)  # noqa: S307  (the table above)
        rows[name] = 1e3 * timed(fn, reps, rounds)
    return rows


def our_steps(params: list[Any]) -> np.ndarray:
    from slipstream.images.pixelops import inverse_affine_matrix

    row = np.zeros(12)
    if params[0] == "rotate":
        row[0], row[1:7], row[7] = 13, inverse_affine_matrix(HEIGHT, WIDTH, angle=-params[1]), params[2]
    elif params[0] == "shear":
        matrix = inverse_affine_matrix(HEIGHT, WIDTH, shear=(math.degrees(math.atan(params[1])), 0.0), center=(0.0, 0.0))
        row[0], row[1:7], row[7] = 13, matrix, params[2]
    else:
        row[: len(params)] = params
    return row[None]


def our_rows(reps: int, rounds: int) -> dict[str, tuple[float | None, float]]:
    """ms per call of (the C executor or None without it, the NumPy executor)."""
    try:
        import slipstream  # noqa: F401
    except ImportError:  # run from a checkout without installing
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from slipstream.images import compiled
    from slipstream.images.kernels import pixel_steps

    executor = getattr(compiled.EXTENSION, "pixel_steps", None)
    source = photo()
    work = source.copy()

    def copy() -> None:
        np.copyto(work, source)

    base = timed(copy, reps, rounds)
    rows = {}
    for name, params, _ in OPS:
        steps = our_steps(params)
        c_ms = None
        if executor is not None:
            c_ms = 1e3 * max(timed(lambda: (copy(), executor(work, steps)), reps, rounds) - base, 0.0)
        numpy_ms = 1e3 * max(timed(lambda: (copy(), pixel_steps.run(work, steps)), max(1, reps // 10), rounds) - base, 0.0)
        rows[name] = (c_ms, numpy_ms)
    return rows


class _NoPixelTasks:
    """The extension as the pipelines see it, without compiled pixel tasks (pixel pipelines then run per sample)."""

    def __init__(self, module: Any):
        self.module = module

    def __getattr__(self, name: str) -> Any:
        if name == "PIXEL_TASKS":
            raise AttributeError(name)
        return getattr(self.module, name)


def loader_rows(samples: int, batch: int, rounds: int) -> dict[str, float]:
    """Images per second of one epoch (one thread, workers=0) of RandomResizedCrop(224) + flip + RandAugment(2, 9) +
    ColorJitter(0.4, 0.4, 0.4) + Normalize + ToCHW + RandomErasing(0.25) over a packed file of 375x500 JPEGs: the
    compiled task, the per-sample path with the C executor, and with the NumPy one."""
    import tempfile

    try:
        import slipstream as ss
    except ImportError:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
        import slipstream as ss
    from slipstream import fields as F
    from slipstream import ops
    from slipstream.images import pipeline as _pipeline
    from slipstream.images.kernels import pixel_steps

    recipe = [
        ops.RandomResizedCrop(224),
        ops.RandomHorizontalFlip(),
        ops.RandAugment(2, 9),
        ops.ColorJitter(0.4, 0.4, 0.4),
        ops.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225)),
        ops.ToCHW(),
        ops.RandomErasing(0.25),
    ]
    with tempfile.TemporaryDirectory() as tmp:
        images = [{"image": photo(375, 500, seed=k)} for k in range(samples)]
        path = ss.write(Path(tmp) / "photos.arrow", images, {"image": F.Image(codec="jpeg", quality=90)}, progress=False)
        ds = ss.open(path).map(image=recipe)
        roi, run_steps = _pipeline._roi, _pipeline.run_steps

        def epoch() -> None:
            for _ in ss.DataLoader(ds, batch, shuffle=True, seed=1, workers=0):
                pass

        rows = {}
        for name, module, steps in (
            ("compiled task (C steps)", roi, run_steps),
            ("per sample, C steps", _NoPixelTasks(roi) if roi is not None else None, run_steps),
            (
                "per sample, NumPy steps",
                _NoPixelTasks(roi) if roi is not None else None,
                lambda i, s: pixel_steps.run(i, s) if len(s) else i,
            ),
        ):
            if module is None and name.startswith("compiled"):
                continue
            _pipeline._roi, _pipeline.run_steps = module, steps
            try:
                rows[name] = samples / timed(epoch, 1, rounds)
            finally:
                _pipeline._roi, _pipeline.run_steps = roi, run_steps
        return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--torchvision", action="store_true", help="time torchvision v2's functionals only")
    parser.add_argument("--json", action="store_true", help="(with --torchvision) print the rows as JSON")
    parser.add_argument("--tv-python", default="/opt/tv-venv/bin/python", help="an interpreter with torchvision, for its column")
    parser.add_argument("--loader", action="store_true", help="images per second of a whole recipe through ss.DataLoader instead")
    parser.add_argument("--samples", type=int, default=256, help="(with --loader) images in the packed file")
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    if args.loader:
        for name, rate in loader_rows(args.samples, 64, args.rounds).items():
            print(f"{name:<26} {rate:9.0f} images/s (one thread)")
        return
    if args.torchvision:
        rows = torchvision_rows(args.reps, args.rounds)
        if args.json:
            print(json.dumps(rows))
            return
        print(f"{'op (224x224x3 uint8)':<26} {'torchvision ms':>15}")
        for name, ms in rows.items():
            print(f"{name:<26} {ms:>15.4f}")
        return
    tv: dict[str, float] = {}
    if args.tv_python and os.path.exists(args.tv_python):
        done = subprocess.run(
            [args.tv_python, __file__, "--torchvision", "--json", "--reps", str(args.reps), "--rounds", str(args.rounds)],
            capture_output=True,
            text=True,
        )
        if done.returncode == 0:
            tv = json.loads(done.stdout.strip().splitlines()[-1])
        else:
            print(f"(torchvision column skipped: {args.tv_python} failed: {done.stderr.strip().splitlines()[-1:]})")
    rows = our_rows(args.reps, args.rounds)
    print(f"{'op (224x224x3 uint8)':<26} {'C ms':>9} {'NumPy ms':>9} {'NumPy/C':>8} {'tv ms':>9} {'tv/C':>7}")
    for name, (c_ms, numpy_ms) in rows.items():
        t = tv.get(name)
        c_text = f"{c_ms:9.4f}" if c_ms is not None else f"{'-':>9}"
        ratio = f"{numpy_ms / c_ms:8.1f}" if c_ms else f"{'-':>8}"
        t_text = f"{t:9.4f}" if t is not None else f"{'-':>9}"
        t_ratio = f"{t / c_ms:7.1f}" if t is not None and c_ms else f"{'-':>7}"
        print(f"{name:<26} {c_text} {numpy_ms:9.3f} {ratio} {t_text} {t_ratio}")


if __name__ == "__main__":
    main()
