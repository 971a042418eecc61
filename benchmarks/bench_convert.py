"""Convert one image folder to shards three ways: one process, ``engine="processes"``, ``engine="ray"``.

Generates (once, cached) a folder of small photo-like JPEGs in a few classes, then times
``ss.write(out, ss.imagefolder(root), fields, shard_size=...)`` with each engine, the images
resized (``max_side``) and re-encoded as JPEG: the CPU-bound work of a real conversion. Every
engine runs once untimed (a warm-up: imports, Ray's workers), then ``--repeats`` timed runs take
turns. Ray is started once, before the runs (its start-up is reported on its own line, not in
the rates); the processes engine starts its pool inside every write, as a user's call does.
Prints the median samples/s of each, the ratio of each median to one process's, and checks that
every engine wrote the same bytes.

    python benchmarks/bench_convert.py [--images 3000] [--repeats 3] [--workers N]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

try:
    import slipstream as ss
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import slipstream as ss
from slipstream import fields as F
from slipstream.core.cpus import usable_cores

DEFAULT_CACHE = Path(tempfile.gettempdir()) / "slipstream-bench-convert"


def make_folder(root: Path, n: int) -> Path:
    """``n`` photo-like JPEGs (smooth gradients and noise, 160..255 px a side) in 8 classes, once."""
    from slipstream.images.encoded.codecs import encode

    done = root / f".complete-{n}"
    if done.exists():
        return root
    shutil.rmtree(root, ignore_errors=True)
    rng = np.random.default_rng(0)
    for i in range(n):
        h, w = 160 + int(rng.integers(0, 96)), 160 + int(rng.integers(0, 96))
        y, x = np.mgrid[0:h, 0:w].astype(np.float32)
        base = np.stack([np.sin(x / (9 + i % 7)) , np.cos(y / (11 + i % 5)), np.sin((x + y) / 17)], axis=-1)
        pixels = np.clip(128 + 90 * base + rng.normal(0, 12, (h, w, 3)), 0, 255).astype(np.uint8)
        folder = root / f"class{i % 8}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{i:06d}.jpg").write_bytes(encode("jpeg", pixels, 90))
    done.touch()
    return root


def digest(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(folder.iterdir()):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--images", type=int, default=3000, help="images in the folder (default 3000)")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per engine (default 3)")
    parser.add_argument("--workers", type=int, default=None, help="processes / Ray CPUs (default: the usable cores)")
    parser.add_argument("--shard-size", default="1MB", help="shard size (default 1MB: about 15 shards of 3000 images)")
    parser.add_argument("--max-side", type=int, default=128, help="resize so the longer side is at most this (default 128)")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"where the images are kept (default {DEFAULT_CACHE})")
    parser.add_argument("--no-ray", action="store_true", help="skip engine='ray'")
    args = parser.parse_args(argv)

    cores = args.workers or usable_cores()
    root = make_folder(args.cache / "images", args.images)
    data = ss.imagefolder(root)
    fields = {"image": F.Image(codec="jpeg", quality=85, max_side=args.max_side), "label": F.Int()}
    engines: dict[str, dict] = {
        "one process": {"workers": min(8, os.cpu_count() or 1)},
        "processes": {"engine": "processes", "workers": cores},
    }
    started = None
    if not args.no_ray:
        try:
            import ray
        except ImportError:
            print("ray is not installed: skipping engine='ray' (pip install 'slipstream[ray]')")
        else:
            t = time.perf_counter()
            from slipstream.write.engine_ray import start_local

            start_local(num_cpus=cores, log_to_driver=False)  # every server on loopback, no dashboard
            started = time.perf_counter() - t
            engines["ray"] = {"engine": "ray"}

    out = Path(tempfile.mkdtemp(prefix="bench-convert-"))
    seconds: dict[str, list[float]] = {name: [] for name in engines}
    digests: dict[str, set[str]] = {name: set() for name in engines}
    try:
        names = list(engines)
        for repeat in range(args.repeats + 1):  # repeat 0: the warm-up
            order = names[repeat % len(names) :] + names[: repeat % len(names)]
            for name in order:
                target = out / f"{name.replace(' ', '-')}-{repeat}"
                t = time.perf_counter()
                ss.write(target, data, fields, shard_size=args.shard_size, progress=False, **engines[name])
                elapsed = time.perf_counter() - t
                digests[name].add(digest(target))
                shutil.rmtree(target)
                if repeat:
                    seconds[name].append(elapsed)
    finally:
        shutil.rmtree(out, ignore_errors=True)
        if started is not None:
            ray.shutdown()

    n = len(data)
    print(f"{n} JPEGs 160-255 px -> JPEG max_side {args.max_side}, shards of {args.shard_size}; {usable_cores()} usable cores, "
          f"{cores} processes / Ray CPUs; median of {args.repeats} runs after a warm-up")  # fmt: skip
    if started is not None:
        print(f"ray.init (local, not in the rates): {started:.1f} s")
    base = n / statistics.median(seconds["one process"])
    for name in engines:
        rate = n / statistics.median(seconds[name])
        spread = f"[{n / max(seconds[name]):.0f} - {n / min(seconds[name]):.0f}]"
        print(f"  {name:12s} {rate:8.0f} samples/s {spread:>14s}   {rate / base:.2f}x one process")
    identical = len(set().union(*digests.values())) == 1
    print(f"same bytes from every engine and run: {'yes' if identical else 'NO: ' + str(digests)}")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
