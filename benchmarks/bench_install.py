"""Benchmark: what a fresh install costs, and what its first image batch costs.

For each install spec (``--before`` and ``--after``, each a wheel file, a source folder or
``git:REV``, a commit of this checkout exported with ``git archive``), in a new virtual environment
of the running Python:

1. **Install.** ``pip install --no-cache-dir '<spec>[files]'``, timed (wall seconds; pip resolves
   and downloads like a new user's first install, so a source spec compiles here), then the
   environment's ``site-packages`` size less an empty environment's, and its five largest packages.
2. **First batch.** A packed file of ``--images`` photo-like JPEGs (q90, 200-500 px sides) is
   written once by that environment (in a child process that caches nothing), then a *new* child
   process times ``import slipstream``, and from creating the loader's iterator to its first batch
   of RandomResizedCrop(224) + flip, uint8 CHW, batch 64, 2 worker threads; then every later batch
   of three epochs. "first / warm" is the first batch's time over the median of the later batches:
   what a new user waits for before training starts, against the steady state (a pipeline that
   compiles on first use, or runs a slow fallback meanwhile, shows here).

Nothing here needs torch. Run:

    python benchmarks/bench_install.py --after dist/slipstream-0.1.0-cp311-...whl --before git:326ba60

(``make wheel`` builds the wheel.) The machine is shared and installs download: quote the sizes as
measured and the times as ranges over runs.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PREPARE = r"""
import sys
import numpy as np, io
from PIL import Image
import slipstream as ss
from slipstream import fields as F
from slipstream.cli.demo import photo_like
rng = np.random.default_rng(0)
samples = []
for k, (h, w) in enumerate(rng.integers(200, 501, size=(int(sys.argv[2]), 2))):
    buf = io.BytesIO()
    Image.fromarray(photo_like(int(h), int(w), k)).save(buf, format="JPEG", quality=90)
    samples.append({"image": buf.getvalue(), "label": k % 10})
ss.write(sys.argv[1], samples, {"image": F.Image(codec="jpeg"), "label": F.Int()}, progress=False)
"""

MEASURE = r"""
import json, statistics, sys, time
start = time.perf_counter()
import slipstream as ss
from slipstream import ops
imported = time.perf_counter() - start
train = ss.open(sys.argv[1]).map(image=[ops.RandomResizedCrop(224), ops.RandomHorizontalFlip(), ops.ToCHW()])
loader = ss.DataLoader(train, batch_size=64, shuffle=True, seed=0, workers=2)
times = []
for epoch in range(3):
    last = time.perf_counter()
    for batch in loader:
        now = time.perf_counter()
        times.append(now - last)
        last = now
print(json.dumps({"import_s": imported, "first_s": times[0], "warm_s": statistics.median(times[1:]), "batches": len(times)}))
"""


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run(cmd, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        raise SystemExit(
            f"{' '.join(map(str, cmd))} failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
        )
    return result


def size(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def requirement(spec: str, scratch: Path) -> str:
    """A pip requirement for ``spec`` with the files extra (``git:REV`` is exported into ``scratch`` first)."""
    if spec.startswith("git:"):
        folder = scratch / f"src-{spec[4:]}"
        folder.mkdir()
        tar = subprocess.run(["git", "-C", str(REPO), "archive", spec[4:]], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(folder)], input=tar, check=True)
        return f"{folder}[files]"
    path = Path(spec).resolve()
    if not path.exists():
        raise SystemExit(f"bench_install: {spec} is neither a wheel, a folder nor git:REV")
    return f"{path}[files]"


def measure(name: str, spec: str, scratch: Path, images: int, base: int) -> dict:
    venv = scratch / f"venv-{name}"
    run([sys.executable, "-m", "venv", str(venv)])
    python = str(venv / "bin" / "python")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    start = time.perf_counter()
    run([python, "-m", "pip", "install", "-q", "--no-cache-dir", requirement(spec, scratch)], env=env, cwd=scratch)
    install_s = time.perf_counter() - start
    sp = site_packages(venv)
    packages = sorted(
        ((size(p), p.name) for p in sp.iterdir() if p.is_dir() and not p.name.endswith((".dist-info", "__pycache__"))),
        reverse=True,
    )
    packed = scratch / f"{name}.arrow"
    quiet = dict(env, NUMBA_CACHE_DIR=str(scratch / f"throwaway-{name}"), SLIPSTREAM_NO_NUMBA="1")
    run([python, "-c", PREPARE, str(packed), str(images)], env=quiet, cwd=scratch)
    result = json.loads(run([python, "-c", MEASURE, str(packed)], env=env, cwd=scratch).stdout.strip().splitlines()[-1])
    result.update(install_s=install_s, size_mb=(size(sp) - base) / 1e6, largest=[(n, s / 1e6) for s, n in packages[:5]])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--after", default=str(REPO), help="wheel, source folder or git:REV (default: this checkout)")
    parser.add_argument("--before", default=None, help="the same, to compare with (default: none)")
    parser.add_argument("--images", type=int, default=640)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="bench-install-") as tmp:
        scratch = Path(tmp)
        empty = scratch / "venv-empty"
        run([sys.executable, "-m", "venv", str(empty)])
        base = size(site_packages(empty))
        shutil.rmtree(empty)
        specs = [("before", args.before)] if args.before else []
        specs.append(("after", args.after))
        results = {name: measure(name, spec, scratch, args.images, base) for name, spec in specs}
    print(f"Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.2f}")
    for (name, spec), r in zip(specs, results.values()):
        print(f"{name}: {spec}")
        print(
            f"  install {r['install_s']:.1f} s, site-packages {r['size_mb']:.0f} MB; largest: "
            + ", ".join(f"{n} {s:.0f} MB" for n, s in r["largest"])
        )
        print(
            f"  import slipstream {r['import_s'] * 1e3:.0f} ms; first batch {r['first_s'] * 1e3:.0f} ms, warm batch "
            f"{r['warm_s'] * 1e3:.0f} ms (median of {r['batches'] - 1}): first / warm {r['first_s'] / r['warm_s']:.1f}x"
        )
    if args.before:
        b, a = results["before"], results["after"]
        print(
            f"after / before: install time {a['install_s'] / b['install_s']:.2f}x, size {a['size_mb'] / b['size_mb']:.2f}x, "
            f"first batch {a['first_s'] / b['first_s']:.2f}x"
        )


if __name__ == "__main__":
    main()
