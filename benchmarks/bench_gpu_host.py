"""Benchmark: the CPU side of the device stage (issue 14), which needs no GPU: what one loader worker
spends per sample when the pixels are left to the device, against the CPU pipeline doing all of it.

    python benchmarks/bench_gpu_host.py            # about 1 minute (data made once under --cache)

Data: the first ``--images`` (default 2,000) photo-like JPEGs of ``bench_images.py``, packed with
``F.Image(codec="jpeg", max_side=512)`` (the file ``bench_gpu.py`` uses). Ops: RandomResizedCrop(224) +
RandomHorizontalFlip + Normalize (bf16 on the device, float16 on the CPU). One thread reads chunks of
``--chunk`` samples (default 64, a worker's share of a batch of 256 among 4) in a shuffled order,
inside the loader's sample context, as a worker does:

- ``device view, share 0``: ``ss.open(p).map(..., device=...)``'s host part (``getobs_batch_into``: the
  stored bytes zero-copy, the header size checked, the CPU pipeline's window and flip);
- ``device view, share 0.25``: the same, a quarter of the JPEGs resampled here by the CPU pipeline;
- ``CPU pipeline``: ``ss.open(p).map(...)`` (decode at the window's DCT scale, resample, normalize).

Prints the median microseconds per sample over ``--repeats`` passes, the ratio to the CPU pipeline, and
the CPU cores each would need to feed 20,000 img/s (issue 14's goal: at most 4). No torch is needed for
that. With torch, it then compares the pixels (uint8, no Normalize) of the first ``--closeness`` samples
(default 512; 0 skips) as the device stage computes them on CPU tensors (``device="cpu"``) with the CPU
pipeline's, with its default decode and with ``ops.Decode(exact=True)``: the worst image's mean
absolute difference and the worst pixel, in uint8 levels (issue 14's bound: 2).
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import bench_images as bi
import numpy as np
from _common import SEED, versions

import slipstream as ss
from slipstream import ops
from slipstream.core.rng import sample_context

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
GOAL = 20_000  # img/s


def _ops(dtype: str) -> list[ops.Op]:
    return [ops.RandomResizedCrop(224), ops.RandomHorizontalFlip(), ops.Normalize(MEAN, STD, dtype=dtype), ops.ToCHW()]


def _pass(view: object, order: np.ndarray, chunk: int, epoch: int) -> float:
    """Seconds per sample to read ``order`` in chunks, as a loader worker does."""
    began = time.perf_counter()
    with sample_context(SEED, epoch) as context:
        for a in range(0, len(order), chunk):
            idx = order[a : a + chunk]
            context.batch(idx)
            view.getobs_batch_into(None, idx)  # type: ignore[attr-defined]
    return (time.perf_counter() - began) / len(order)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--images", type=int, default=2000)
    p.add_argument("--chunk", type=int, default=64)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--closeness", type=int, default=512)
    p.add_argument("--cache", type=Path, default=bi.DEFAULT_CACHE)
    args = p.parse_args()
    args.cache.mkdir(parents=True, exist_ok=True)
    root, _ = bi.ensure_images(args.cache, args.images, False)
    folder = ss.imagefolder(root)
    path, _ = bi.ensure_packed(args.cache, folder, bi.subset(folder, args.images), "jpeg", False)
    path.read_bytes()  # into the page cache
    print(versions(), flush=True)
    data = ss.open(path)
    runs = {
        "device view, share 0": data.map(image=_ops("bfloat16"), device="cuda", layout="channels_last"),
        "device view, share 0.25": data.map(image=_ops("bfloat16"), device="cuda", layout="channels_last", cpu_share=0.25),
        "CPU pipeline": data.map(image=_ops("float16")),
    }
    n, rng = len(data), np.random.default_rng(SEED)
    times: dict[str, list[float]] = {name: [] for name in runs}
    for name, view in runs.items():  # warm-up: compiled kernels, page cache
        _pass(view, np.arange(min(n, 2 * args.chunk)), args.chunk, 0)
    for repeat in range(args.repeats):
        order = rng.permutation(n)
        for name, view in runs.items():  # interleaved: the machine's noise hits every run alike
            times[name].append(_pass(view, order, args.chunk, repeat + 1))
    cpu = statistics.median(times["CPU pipeline"])
    print(f"\n{n} samples, chunks of {args.chunk}, {args.repeats} passes (medians), one thread:")
    print(f"  {'run':<26} {'us/sample':>10} {'x CPU pipeline':>15} {'cores for 20k img/s':>20}")
    for name, values in times.items():
        t = statistics.median(values)
        print(f"  {name:<26} {t * 1e6:>10.1f} {t / cpu:>15.3f} {t * GOAL:>20.2f}")
    if args.closeness:
        closeness(path, args.closeness)


def closeness(path: Path, n: int) -> None:
    """Worst per-image mean absolute difference, device stage (CPU tensors) against the CPU pipeline."""
    try:
        import torch  # noqa: F401  - the device stage's finisher needs it
    except ImportError:
        print("\ncloseness: skipped (torch is not installed)")
        return
    data = ss.obsview(ss.open(path), np.arange(min(n, len(ss.open(path)))))
    print(f"\ncloseness over {len(data)} samples, RandomResizedCrop(224) + flip, uint8 levels:")
    for label, decode in (("default decode", []), ("Decode(exact=True)", [ops.Decode(exact=True)])):
        pipe = [*decode, ops.RandomResizedCrop(224), ops.RandomHorizontalFlip()]
        device = ss.DataLoader(ss.obsview(data.data.map(image=pipe, device="cpu"), data.indices), batch_size=64, seed=SEED, shuffle=True)
        cpu = ss.DataLoader(ss.obsview(data.data.map(image=pipe), data.indices), batch_size=64, seed=SEED, shuffle=True)
        worst, top = 0.0, 0
        for a, b in zip(device, cpu):
            diff = np.abs(a["image"].numpy().astype(np.int16) - b["image"].astype(np.int16))
            worst, top = max(worst, float(diff.reshape(len(diff), -1).mean(axis=1).max())), max(top, int(diff.max()))
        print(f"  against the CPU pipeline, {label:<20} worst image {worst:.3f} levels, worst pixel {top}")


if __name__ == "__main__":
    main()
