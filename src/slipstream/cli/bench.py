"""``slipstream bench FILE``: how fast a packed file loads here, where the time goes, and what to try.

Each image field of FILE goes through a training pipeline (``--pipeline``: ``rrc``,
RandomResizedCrop(224) + flip + CHW, the default; ``center``, Resize(256) + CenterCrop(224) +
CHW; ``decode``, the decoded image as stored). The loader runs one warm-up epoch, then
``--epochs`` timed epochs consumed by an empty loop, and prints samples/s with the loader's own
``stats()``: the share of time the consumer waited, how busy the workers were, and their time per
sample by stage (read, decode, augment, collate). With
``--sweep`` it measures 1, 2, 4, ... workers up to the usable cores on every backend and names the
fastest. The suggestions come from what it measured and from ``slipstream info``'s fast paths.
"""

from __future__ import annotations

import time
from typing import Any

from .. import ops
from ..core.cpus import usable_cores
from ..core.views import obsview
from ..images.kernels import numba_status
from ..images.pipeline import region_decoder_status
from ..loading.backends import BACKENDS
from ..loading.loader import DataLoader
from ..remote.open import open as open_any

__all__ = ["PIPELINES", "measure", "run"]

PIPELINES = {
    "rrc": lambda: [ops.RandomResizedCrop(224), ops.RandomHorizontalFlip(), ops.ToCHW()],
    "center": lambda: [ops.Resize(256), ops.CenterCrop(224), ops.ToCHW()],
    "decode": lambda: [],
}


def _dataset(path: str, pipeline: str, samples: int | None) -> Any:
    packed = open_any(path)
    images = [name for name, field in packed.fields.items() if field.kind == "image"]
    data = packed.map(**{name: PIPELINES[pipeline]() for name in images}) if images and pipeline != "decode" else packed
    if samples is not None and samples < len(packed):
        data = obsview(data, range(samples))  # the first samples: the same reads, fewer of them
    return data, images


def measure(data: Any, workers: int, backend: str, batch_size: int, epochs: int) -> dict[str, Any]:
    """Samples/s over ``epochs`` timed epochs after a warm-up one, with the last epoch's ``stats()``."""
    with DataLoader(data, batch_size, shuffle=True, seed=0, workers=workers, backend=backend) as loader:
        for _ in loader:
            pass
        t0, n = time.perf_counter(), 0
        for _ in range(epochs):
            for _ in loader:
                pass
            n += loader.stats()["samples"]
        seconds = time.perf_counter() - t0
        return {"workers": workers, "backend": backend, "samples_per_s": n / seconds, "stats": loader.stats()}


def _line(result: dict[str, Any]) -> str:
    stats = result["stats"]
    busy = stats["worker_busy"]
    busy_text = "-" if busy is None else f"{busy:.0%}"
    line = (
        f"  {result['backend']:<8} workers={result['workers']:<3} {result['samples_per_s']:>10,.0f} samples/s   "
        f"consumer waited {stats['wait_fraction']:.0%}   worker threads busy {busy_text}"
    )
    stages = stats.get("us_per_sample")
    if stages:
        line += "\n      worker time per sample: " + ", ".join(f"{stage} {us:,.0f} us" for stage, us in stages.items())
    return line


def _counts(cores: int) -> list[int]:
    counts, k = [], 1
    while k < cores:
        counts.append(k)
        k *= 2
    return [*counts, cores]


def suggestions(results: list[dict[str, Any]], cores: int) -> list[str]:
    """What to try, from the measurements and the active fast paths."""
    tips = []
    if region_decoder_status() != "active":
        tips.append(
            f"the compiled image code (slipstream.images._roijpeg) is {region_decoder_status()}: whole JPEGs are decoded "
            "and resampled sample by sample, holding the GIL for each (reinstall with a C compiler and libjpeg headers)"
        )
    if numba_status() != "active":
        tips.append(f"numba is {numba_status()}: per-sample image paths resample on NumPy, about 4x slower (pip install numba)")
    best = max(results, key=lambda r: r["samples_per_s"])
    threads = [r for r in results if r["backend"] == "thread"]
    if len(results) > 1:
        tips.append(f"fastest here: backend={best['backend']!r}, workers={best['workers']} ({best['samples_per_s']:,.0f} samples/s)")
    elif threads and threads[0]["workers"] > 1 and (threads[0]["stats"]["worker_busy"] or 0) < 0.6:
        tips.append(
            "the worker threads are idle a good part of the time while the consumer waits: the GIL limits them; "
            "try backend='process' (or --sweep to compare)"
        )
    if best["workers"] < cores:
        tips.append(f"{cores} cores are usable here; more workers may pay off (--sweep measures them)")
    return tips


def run(path: str, *, pipeline: str, workers: int | str, backend: str, batch_size: int, epochs: int, samples: int | None, sweep: bool) -> int:
    data, images = _dataset(path, pipeline, samples)
    cores = usable_cores()
    print(f"slipstream bench {path}: {len(data)} samples, image fields {images or 'none'}, pipeline {pipeline!r}, "
          f"batch {batch_size}, {epochs} timed epochs after one warm-up; {cores} usable cores")
    if sweep:
        plan = [(k, b) for b in BACKENDS for k in _counts(cores)]
    else:
        plan = [(cores if workers == "auto" else int(workers), backend)]
    results = []
    for k, b in plan:
        results.append(measure(data, k, b, batch_size, epochs))
        print(_line(results[-1]), flush=True)
    for tip in suggestions(results, cores):
        print(f"  - {tip}")
    return 0
