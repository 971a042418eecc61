"""``slipstream bench FILE``: how fast a packed file loads here, where the time goes, and what to try.

What is loaded (``plan``): each image field goes through a training pipeline (``--pipeline``:
``rrc``, RandomResizedCrop(224) + flip + CHW, the default; ``center``, Resize(256) +
CenterCrop(224) + CHW; ``decode``, the decoded image as stored). bench picks a pipeline that batches
whatever the file holds, and says what it chose: an image field that keeps each image's channel
count (``F.Image(channels=None)``, as Hugging Face conversions do) gets ``ops.ToRGB()`` first, so a
grayscale row batches with RGB ones; fields whose values vary in shape from sample to sample
(images with ``--pipeline decode``, ragged arrays such as token ids, JSON) are batched as lists
(``RowsCollate``: a read-and-decode rate, nothing resized, padded or stacked), the other fields as
the default collate stacks them. A file with no image field gets a plain read-rate benchmark.

How it is timed (``measure``): each loader runs a warm-up pass of at
least ``warmup`` seconds and 3 batches (worker start, lazy imports, the page cache; in the next
epochs too when one epoch is shorter), then ``--epochs`` whole timed epochs consumed by an empty
loop. It prints samples/s with the loader's own ``stats()`` of the last timed epoch: the share of
time the consumer waited, how busy the workers were, and their time per sample by stage (read,
decode, augment, collate). With ``--sweep`` it measures 1, 2, 4, ... workers up to the usable cores
on every backend and names the fastest. The suggestions (``suggestions``, a pure function of the
measurements) follow from what was measured and from ``slipstream info``'s fast paths.

A data problem never ends in a traceback: loading errors (a damaged page, a sample that cannot be
decoded or batched) are reported in one paragraph on stderr (what bench loaded, what failed, what
to do) with exit status 2.
"""

from __future__ import annotations

import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..core.collate import default_collate
from ..core.cpus import usable_cores
from ..core.errors import PackedFileError, WorkerError
from ..core.views import obsview
from ..images import imageops as ops
from ..images.pipeline import region_decoder_status
from ..loading.backends import BACKENDS
from ..loading.loader import DataLoader
from ..remote.open import open as open_any

__all__ = ["PIPELINES", "Plan", "RowsCollate", "measure", "plan", "run", "suggestions"]

PIPELINES = {
    "rrc": lambda: [ops.RandomResizedCrop(224), ops.RandomHorizontalFlip(), ops.ToCHW()],
    "center": lambda: [ops.Resize(256), ops.CenterCrop(224), ops.ToCHW()],
    "decode": lambda: [],
}

WARMUP_BATCHES = 3  # at least: every worker has started and loaded a part of a batch (each batch is split between them)
_WARMUP_EPOCHS = 50  # at most (a tiny file's epochs are short; the warm-up is about time, not epochs)
# what a data problem raises while loading (a damaged page, an undecodable image, a batch that cannot be
# collated, a worker process killed by the data): reported in a paragraph; anything else is a bug and keeps its traceback
_DATA_ERRORS = (PackedFileError, ValueError, TypeError, KeyError, IndexError, OSError, MemoryError, WorkerError, RuntimeError)


class RowsCollate:
    """bench's collate for samples whose fields vary in shape: the fields named in ``lists`` as
    lists of their values, the rest stacked by ``default_collate`` (a plain read-and-decode rate:
    nothing is resized, padded or stacked that could not be). Picklable, for process workers."""

    def __init__(self, lists: list[str]):
        self.lists = list(lists)

    def __call__(self, samples: list[Any]) -> Any:
        if not samples or not isinstance(samples[0], dict):
            return list(samples)
        kept = set(self.lists)
        batch = default_collate([{k: v for k, v in s.items() if k not in kept} for s in samples])
        for name in self.lists:
            batch[name] = [s[name] for s in samples]
        return batch


@dataclass
class Plan:
    """What bench loads: ``data`` (the file, mapped, possibly cut to its first samples), its image
    fields, the ``collate`` (None: the loader's default), whether image pipelines resample (the
    compiled image code matters then) and ``notes``: what bench chose on its own."""

    data: Any
    images: list[str]
    pipeline: str
    collate: Callable[[list[Any]], Any] | None = None
    resamples: bool = False
    rgb: list[str] = field(default_factory=list)  # image fields given ops.ToRGB() by bench
    notes: list[str] = field(default_factory=list)


def plan(packed: Any, pipeline: str, samples: int | None = None) -> Plan:
    """A pipeline that batches every field of ``packed`` (a packed file or folder of shards)."""
    images, pipelines, lists, rgb, notes = [], {}, [], [], []
    for name, f in packed.fields.items():
        kind = f.kind
        if kind == "image":
            images.append(name)
            if pipeline == "decode":
                lists.append(name)
                continue
            steps = PIPELINES[pipeline]()
            if getattr(f, "channels", None) is None:
                steps = [ops.ToRGB(), *steps]
                rgb.append(name)
                notes.append(
                    f"field {name!r} keeps each image's own channel count (F.Image(channels=None)): bench puts ops.ToRGB() "
                    "first so grayscale images batch with RGB ones (no cost for RGB JPEG, PNG, QOI); do the same in training, "
                    "or pack with F.Image(channels=3)"
                )
            pipelines[name] = steps
        elif kind == "json" or (kind == "array" and f.params().get("shape") is None):
            lists.append(name)
    if lists:
        kinds = {n: packed.fields[n].kind for n in lists}
        reasons = {"image": "images at their stored sizes", "json": "JSON values", "array": "a ragged array: shapes vary"}
        what = {n: reasons[kind] for n, kind in kinds.items()}
        advice = "a training loop would pass collate= (padding, packing)"
        if any(n in images for n in lists):
            advice += " or crop images to one size (--pipeline rrc or center)"
        notes.append(
            "batched as lists, nothing resized, padded or stacked: " + ", ".join(f"{n!r} ({why})" for n, why in what.items()) + f"; {advice}"
        )
    if not images:
        notes.append("no image field: this is a plain read rate of the stored fields")
    data = packed.map(**pipelines) if pipelines else packed
    if samples is not None and samples < len(packed):
        data = obsview(data, range(samples))  # the first samples: the same reads, fewer of them
    return Plan(data, images, pipeline, RowsCollate(lists) if lists else None, bool(pipelines), rgb, notes)


def _warm_up(loader: DataLoader, min_batches: int, min_seconds: float, clock: Callable[[], float]) -> dict[str, Any]:
    """Load batches (across epochs when one is shorter) until ``min_batches`` and ``min_seconds``
    are both reached; what was loaded: ``batches``, ``samples``, ``epochs`` (their numbers), ``seconds``."""
    start, batches, samples, epochs = clock(), 0, 0, []
    done = False
    while not done and len(epochs) < _WARMUP_EPOCHS:
        it = iter(loader)
        epochs.append(it.epoch)
        try:
            for _ in it:
                batches += 1
                if batches >= min_batches and clock() - start >= min_seconds:
                    done = True
                    break
            else:
                done = batches >= min_batches and clock() - start >= min_seconds
        finally:
            it.close()
        samples += loader.stats()["samples"]
    return {"batches": batches, "samples": samples, "epochs": epochs, "seconds": clock() - start}


def measure(
    data: Any,
    workers: int,
    backend: str,
    batch_size: int,
    epochs: int,
    *,
    collate: Callable[[list[Any]], Any] | None = None,
    warmup: float = 1.0,
    warmup_batches: int = WARMUP_BATCHES,
    clock: Callable[[], float] = time.perf_counter,
) -> dict[str, Any]:
    """Samples/s over ``epochs`` whole timed epochs after a warm-up pass (``_warm_up``: at least
    ``warmup`` seconds and ``warmup_batches`` batches, never timed), with the last timed epoch's
    ``stats()``. The result also holds ``warmup`` (what the warm-up loaded) and ``timed``
    (``epochs``: the timed epochs' numbers, ``samples``: what they handed out, ``seconds``)."""
    with DataLoader(data, batch_size, shuffle=True, seed=0, workers=workers, backend=backend, collate=collate) as loader:
        warm = _warm_up(loader, warmup_batches, warmup, clock)
        timed = []
        t0 = clock()
        for _ in range(epochs):
            for _ in loader:
                pass
            timed.append(loader.stats())
        seconds = clock() - t0
        n = sum(stats["samples"] for stats in timed)
        return {
            "workers": workers,
            "backend": backend,
            "samples_per_s": n / seconds if seconds > 0 else float("inf"),
            "stats": timed[-1],
            "warmup": warm,
            "timed": {"epochs": [stats["epoch"] for stats in timed], "samples": n, "seconds": seconds},
        }


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


def suggestions(
    results: list[dict[str, Any]],
    cores: int,
    *,
    swept: bool = False,
    resamples: bool = True,
    region_decoder: str | None = None,
) -> list[str]:
    """What to try, from the measurements alone (``results``: ``measure``'s, ``samples_per_s``,
    ``workers``, ``backend`` and ``stats``'s ``worker_busy`` used) and the fast paths' statuses
    (``region_decoder``, the compiled image code's, as ``slipstream info`` reports it; looked up when None;
    mentioned only when the pipeline ``resamples`` images). After a sweep (``swept``) the advice on
    workers is the sweep's result, never a guess."""
    tips = []
    if resamples:
        region_decoder = region_decoder_status() if region_decoder is None else region_decoder
        if region_decoder != "active":
            tips.append(
                f"the compiled image code (slipstream.images._roijpeg) is {region_decoder}: whole JPEGs are decoded "
                "and resampled on NumPy sample by sample, about 15x slower, holding the GIL for each "
                "(reinstall with a C compiler and libjpeg headers)"
            )
    best = max(results, key=lambda r: r["samples_per_s"])
    if swept or len(results) > 1:
        tips.append(
            f"fastest here: backend={best['backend']!r}, workers={best['workers']} ({best['samples_per_s']:,.0f} samples/s): "
            f"DataLoader(..., workers={best['workers']}, backend={best['backend']!r})"
        )
        same = [r for r in results if r["backend"] == best["backend"]]
        most = max(same, key=lambda r: r["workers"])
        if best["workers"] < most["workers"]:
            tips.append(
                f"more workers did not pay off: {most['workers']} {best['backend']} workers loaded "
                f"{most['samples_per_s']:,.0f} samples/s against {best['samples_per_s']:,.0f} with {best['workers']}; "
                f"here something other than the cores sets the pace (the storage, memory bandwidth, the GIL), "
                f"so keep workers={best['workers']}"
            )
        elif best["workers"] >= cores:
            tips.append(f"the fastest run used every usable core ({cores}): only more cores would load faster")
        return tips
    threads = [r for r in results if r["backend"] == "thread"]
    busy, waited = (threads[0]["stats"].get("worker_busy") or 0, threads[0]["stats"].get("wait_fraction") or 0) if threads else (0, 0)
    if threads and threads[0]["workers"] > 1 and 0.2 <= busy < 0.6 and waited >= 0.5:  # (busier: not the GIL; idler: no work, a tiny file)
        tips.append(
            "the worker threads are idle a good part of the time while the consumer waits: the GIL limits them; "
            "try backend='process' (or --sweep to compare)"
        )
    if best["workers"] < cores:
        tips.append(f"{cores} cores are usable here; more workers may pay off (--sweep measures them)")
    return tips


def _paragraph(path: str, chosen: Plan, where: str, exc: BaseException) -> str:
    """The one-paragraph report of a loading failure: what was loaded, what failed, what to do."""
    # each note's first words (where it happened); a worker's note carries its traceback: left out
    heads = (str(note).split("Traceback", 1)[0].strip() for note in getattr(exc, "__notes__", ()))
    notes = " ".join(f"({head.rstrip(' (')})" for head in heads if head.rstrip(" ("))
    cause = " ".join(f"{type(exc).__name__}: {exc} {notes}".split())
    chose = f"; bench added ops.ToRGB() to {chosen.rgb}" if chosen.rgb else ""
    if isinstance(exc, PackedFileError):
        todo = (
            f"the file is damaged or incomplete: `slipstream validate {path}` checks every page; write it again from its source"
        )
    elif isinstance(exc, MemoryError):
        todo = "try a smaller --batch-size or fewer --workers"
    elif isinstance(exc, WorkerError):
        todo = "a worker process died (out of memory, or a crash in a decoder): try --backend thread, fewer --workers or a smaller --batch-size"
    else:
        todo = (
            f"this is a problem of the data, not of the benchmark: `slipstream inspect {path}` shows the fields, "
            f"`slipstream validate {path}` checks every page, and reading the sample it names in Python "
            f"(ss.open({path!r})[i]) shows the same error"
        )
        if chosen.images and chosen.pipeline != "decode":
            todo += "; --pipeline decode times the stored images without resizing"
    text = (
        f"slipstream bench: loading {path} failed while timing {where} (pipeline {chosen.pipeline!r}, image fields "
        f"{chosen.images or 'none'}{chose}): {cause}. What to do: {todo}."
    )
    return textwrap.fill(text, width=110, break_long_words=False, break_on_hyphens=False)


def run(
    path: str,
    *,
    pipeline: str,
    workers: int | str,
    backend: str,
    batch_size: int,
    epochs: int,
    samples: int | None,
    sweep: bool,
    warmup: float = 1.0,
    measure: Callable[..., dict[str, Any]] = measure,
) -> int:
    """The ``bench`` command: 0 when measured, 2 (with a paragraph on stderr) when the data cannot be loaded.
    ``measure`` is the measuring function (``measure``'s signature), replaceable for tests."""
    chosen = plan(open_any(path), pipeline, samples)
    data, images = chosen.data, chosen.images
    cores = usable_cores()
    if len(data) == 0:
        print(f"slipstream bench: {path} holds no samples: there is nothing to time", file=sys.stderr)
        return 2
    print(f"slipstream bench {path}: {len(data)} samples, image fields {images or 'none'}, pipeline {pipeline!r}, "
          f"batch {batch_size}, {epochs} timed epoch{'' if epochs == 1 else 's'} after a warm-up (at least {warmup:g} s and {WARMUP_BATCHES} batches, "
          f"not timed); {cores} usable cores")  # fmt: skip
    for note in chosen.notes:
        print(f"  note: {note}")
    if sweep:
        todo = [(k, b) for b in BACKENDS for k in _counts(cores)]
    else:
        todo = [(cores if workers == "auto" else int(workers), backend)]
    results = []
    for k, b in todo:
        try:
            results.append(measure(data, k, b, batch_size, epochs, collate=chosen.collate, warmup=warmup))
        except _DATA_ERRORS as exc:
            sys.stdout.flush()
            print(_paragraph(path, chosen, f"backend={b!r}, workers={k}", exc), file=sys.stderr)
            return 2
        print(_line(results[-1]), flush=True)
    for tip in suggestions(results, cores, swept=sweep, resamples=chosen.resamples):
        print(f"  - {tip}")
    return 0
