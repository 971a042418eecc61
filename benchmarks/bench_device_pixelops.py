"""Benchmark: the device stage's pixel-op executor (``images.device.pixelsteps.run_steps``) per batch.

One batch of ``--batch`` (64) RGB images of ``--size`` (224) x ``--size``, uint8 NCHW. Cases: each
opcode alone on the whole batch (one step per sample, the parameters a RandAugment or ColorJitter
step would have, NEAREST and BILINEAR rotations for AFFINE), and two compiled programs,
RandAugment(2, 9) + ColorJitter(0.4, 0.4, 0.4) (6 steps, samples grouped by opcode at each
position) and the same with BILINEAR RandAugment. Each case times ``run_steps`` on a fresh copy of
the batch (the copy included: the "copy only" line is its cost) on torch CPU tensors (``--torch-threads``, default 1), and on CUDA
when available (synchronized); for reference, the same steps on the host executor the CPU path
runs per sample (the compiled one when built, else NumPy), one sample after another on one
thread. Reported: median milliseconds per batch over ``--repeats`` repeats.

Usage: ``python benchmarks/bench_device_pixelops.py [--batch 64] [--size 224] [--repeats 5]
[--torch-threads 1] [--no-host]``.
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
    import slipstream  # noqa: F401
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import torch

from slipstream import ops
from slipstream.core.draws import Draws
from slipstream.images.device.pixelsteps import run_steps
from slipstream.images.kernels import pixel_steps as ps
from slipstream.images.pipeline import Pipeline
from slipstream.images.pipeline import run_steps as host_run_steps
from slipstream.images.pixelops import inverse_affine_matrix


def _cases(n: int, size: int) -> dict[str, np.ndarray]:
    """name -> steps (n, S, WORDS)."""

    def one(*row: float) -> np.ndarray:
        steps = np.zeros((n, 1, ps.WORDS))
        steps[:, 0, : len(row)] = row
        return steps

    rotate = inverse_affine_matrix(size, size, angle=-20.0)
    cases = {
        "copy only": np.zeros((n, 0, ps.WORDS)),
        "BRIGHTNESS": one(ps.BRIGHTNESS, 1.3),
        "CONTRAST": one(ps.CONTRAST, 1.3),
        "SATURATION": one(ps.SATURATION, 1.3),
        "HUE": one(ps.HUE, 0.1),
        "SHARPNESS": one(ps.SHARPNESS, 1.3),
        "POSTERIZE": one(ps.POSTERIZE, 5),
        "SOLARIZE": one(ps.SOLARIZE, 128),
        "AUTOCONTRAST": one(ps.AUTOCONTRAST),
        "EQUALIZE": one(ps.EQUALIZE),
        "INVERT": one(ps.INVERT),
        "GRAYSCALE": one(ps.GRAYSCALE),
        "BLUR 5x5": one(ps.BLUR, 5, 5, 1.0, 1.0),
        "AFFINE nearest": one(ps.AFFINE, *rotate, 0),
        "AFFINE bilinear": one(ps.AFFINE, *rotate, 1),
        "ROT90": one(ps.ROT90, 1),
        "ERASE": one(ps.ERASE, 20, 30, 100, 80, 0, 0, 0),
    }
    draws = Draws(0, 0, np.arange(n))
    for name, interpolation in (
        ("RandAugment(2,9)+ColorJitter", "nearest"),
        ("RandAugment(2,9,bilinear)+ColorJitter", "bilinear"),
    ):
        pipeline = Pipeline([ops.RandAugment(2, 9, interpolation=interpolation), ops.ColorJitter(0.4, 0.4, 0.4)])
        cases[name] = pipeline.pixel_program(draws, [size] * n, [size] * n)
    return cases


def _median_ms(fn: Callable[[], None], repeats: int, sync: Callable[[], None] = lambda: None) -> float:
    times = []
    for _ in range(repeats):
        sync()
        began = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - began)
    return statistics.median(times) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--size", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--no-host", action="store_true", help="skip the per-sample host executor")
    args = parser.parse_args()
    torch.set_num_threads(args.torch_threads)
    rng = np.random.default_rng(0)
    n, size = args.batch, args.size
    smooth = rng.integers(0, 256, (n, 3, size // 8 + 1, size // 8 + 1), dtype=np.uint8)
    images = np.ascontiguousarray(np.repeat(np.repeat(smooth, 8, axis=2), 8, axis=3)[:, :, :size, :size])  # photo-like blocks
    images = np.clip(images.astype(np.int16) + rng.integers(-12, 13, images.shape), 0, 255).astype(np.uint8)
    cpu = torch.from_numpy(images)
    cuda = cpu.cuda() if torch.cuda.is_available() else None
    hwc = np.ascontiguousarray(images.transpose(0, 2, 3, 1))
    columns = ["torch CPU"] + (["CUDA"] if cuda is not None else []) + ([] if args.no_host else ["host per sample"])
    print(
        f"run_steps on {n} x 3 x {size} x {size} uint8, torch {torch.__version__}, {args.torch_threads} CPU thread(s), ms per batch (median of {args.repeats})"
    )
    print(f"{'case':42s}" + "".join(f"{c:>18s}" for c in columns))
    for name, steps in _cases(n, size).items():
        row = []
        batch = cpu.clone()
        row.append(_median_ms(lambda: run_steps(batch.copy_(cpu), steps), args.repeats))
        if cuda is not None:
            on_gpu = cuda.clone()
            run_steps(on_gpu.copy_(cuda), steps)  # warm-up
            row.append(_median_ms(lambda: run_steps(on_gpu.copy_(cuda), steps), args.repeats, torch.cuda.synchronize))
        if not args.no_host:
            scratch = hwc.copy()

            def host() -> None:
                for i in range(n):
                    host_run_steps(scratch[i], steps[i])

            row.append(_median_ms(host, max(1, args.repeats // 2)))
        print(f"{name:42s}" + "".join(f"{v:18.2f}" for v in row))


if __name__ == "__main__":
    main()
