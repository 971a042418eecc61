"""Benchmark: slipstream's device stage (issue 14: images decoded and augmented on the GPU), alone and feeding training.

On the GPU machine (16 cores, one H200, torch with CUDA, torchvision), from the repository root, one line:

    python benchmarks/bench_gpu.py --json $OUT/gpu.json

About 5-6 minutes there, data included (made once under ``--cache``: 5,000 JPEGs and their packed file, well
under a minute on 16 cores; the runs take about 4 minutes, 12 of them the loader's): never more than ``--budget-s``
(default 400 s, counted from the start, data included) plus the teardown of the run in progress and the report
(each run is also capped: 30 s for a loader, 60 s for training; one that reaches the budget is cut there and
marked ``*``; a batch stuck in a loader raises after 60 s), so about 7 minutes at most. Past the budget the
remaining runs are skipped with a note, so they run most important first: the loader (1b) with the thread
backend, the most ``--host-workers`` and the first ``--cpu-shares``; then each model's ceiling and its training
fed by that loader (4); then the other loader runs (1b), the device stage by hand (1), the other training
runs (4), the CPU pipelines (2) and torchvision (3). The report puts them back in order.
Without CUDA it runs tiny on the CPU (as ``--cpu-smoke``: 16 images, batch 4, 3 steps, device "cpu" for the
device stage and the mapped view): its figures mean nothing, every path runs.

Data: the first ``--images`` photo-like JPEGs of ``bench_images.py`` (made once, shared with it and with
``bench_gpu_feed.py``), packed with ``F.Image(codec="jpeg", max_side=512)``. Ops: RandomResizedCrop(224) +
RandomHorizontalFlip + Normalize(ImageNet mean/std, dtype="bfloat16"), out as bf16 channels_last, batch 256
(``--batch``). Every loader run reads whole batches in slipstream's shuffled order under one seed.

(1b) The loader, as users write it (the main figure):
        mapped = ss.open(path).map(image=[ops.RandomResizedCrop(224), ops.RandomHorizontalFlip(),
                     ops.Normalize(MEAN, STD, dtype="bfloat16")], device="cuda", layout="channels_last", cpu_share=s)
        for batch in ss.DataLoader(mapped, batch_size=256, shuffle=True, drop_last=True, seed=0, workers=k,
                                   backend=b, prefetch=p): ...  # batch["image"]: bf16 channels_last on the GPU
    for backend b "thread" and "process", k in ``--host-workers`` (default 1,2,4), s in ``--cpu-shares``
    (default 0,0.25: that share of the JPEGs is cropped and resized by the CPU workers, the device only
    normalizes them), p ``--loader-prefetch`` (default 2: batches loaded ahead by the workers, and finished
    ahead on the device by the loader's finish thread). img/s over whole batches spanning ``--seconds`` after
    a warm-up, and the CPU cores used (CPU time of this process and its children / wall time). Epochs are
    chained as a training loop chains them (``iter(loader)`` again at each end); with 5,000 images (19
    batches an epoch) the timed span crosses many epoch ends, where the loader's pipeline starts empty: the JSON
    keeps the epochs begun, the mean wait for an epoch's first batch (``epoch_first_batch_s``, after the first
    epoch) and the last epoch's ``loader.stats()``; ``--images`` more makes epochs longer.
(1) The device stage by hand (``slipstream.gpu.DeviceStage``): the host part (``host``: bytes, header sizes,
    windows) in N worker threads (``--host-workers``), a bounded number of batches ahead, epochs chained
    without a drain; the device part (``device_batch``) in one thread on a side CUDA stream, ``--prefetch``
    (default 1) finished batches ahead of the consumer; the consumer's stream waits on each batch's event.
    img/s and cores as (1b). Then the device part alone, cycling 8 host batches made beforehand (what the GPU
    side can do with free host work), on CUDA a second time with TF32 matmuls allowed (not the default).
(2) The CPU pipelines for comparison, as ``bench_gpu_feed.py`` measures them: ``ss.DataLoader`` over
    RandomResizedCrop(224) + flip + ToCHW (uint8, no normalize), each backend of ``BACKENDS`` with
    ``--cpu-workers`` (default min(16, usable cores)) workers; img/s and cores.
(3) torchvision's per-image GPU transforms (when torchvision imports): the stored bytes of a batch decoded by
    ``torchvision.io.decode_jpeg(list, device="cuda")`` (decode only, then decode + per image v2
    RandomResizedCrop(224, antialias) + RandomHorizontalFlip + ToDtype(float32, scale) + Normalize, stacked
    into bf16 channels_last); one thread, img/s and cores. Without torchvision: skipped, with a note.
(4) Training (``_gpu.py``'s models: torchvision ResNet-18 and ResNet-50, ``--models``; SGD, bf16 autocast,
    channels_last): the ceiling fed by ONE batch of the device stage's output already on the GPU, repeated;
    the same loop fed by ``ss.DataLoader`` over the device-mapped view (as (1b): thread backend,
    ``--train-host-workers`` workers, default 4, cpu_share 0) and fed by the device stage by hand (as (1),
    as many host threads); for reference, the uint8 ceiling of ``bench_gpu_feed.py`` (uint8 batch normalized
    in the step) and that loop fed by the CPU process backend (``--cpu-workers``), pinned and copied one
    batch ahead. The model is made again (same seed) for the runs after the first two.

Goals (issue 14, 16-core H200 host), as PASS/MISS lines naming the run that decided them: the device stage
>= 20,000 img/s using at most 4 CPU cores (the best run of (1b) and (1) within 4 cores); fed by it (the better
of the loader and the stage by hand), ResNet-18 >= 95% and ResNet-50 >= 99% of the ceiling.
Prints tables; ``--json PATH`` writes everything measured (rewritten after each run): ``loader`` (1b, keyed
"backend/workers/cpu_share"), ``stage`` (1, keyed by threads), ``device_only``, ``cpu``, ``torchvision``,
``training`` (per model: ``ceiling``, ``loader``, ``device_stage``, ``ceiling_uint8``, ``cpu_process``),
``best`` (the runs the goals used) and ``verdicts``.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import _gpu as G
import bench_images as bi
import numpy as np
import torch
from _common import SEED, Verdicts, permutation, set_footing, summary, verdict, versions
from _gpu_loader import IMAGENET_MEAN, IMAGENET_STD, TIMEOUT, LoaderFeed, StageFeed, cpu_seconds, timed, with_labels

import slipstream as ss
from slipstream import ops
from slipstream.core.cpus import usable_cores
from slipstream.gpu import DeviceStage, nvjpeg_available
from slipstream.loading.backends import BACKENDS

LOADER_CAP, TRAIN_CAP = 30.0, 60.0  # seconds one run may take at most
STAGE_GOAL, STAGE_CORES = 20000.0, 4.0
GOALS = {"resnet18": 0.95, "resnet50": 0.99}
TITLES = {"resnet50": "ResNet-50", "resnet18": "ResNet-18"}
LOADER_BACKENDS = ("thread", "process")
FIRST_TRAINING = ("ceiling", "loader")  # each model's runs right after the first loader run; the rest later
FEEDS = {"loader": "the loader", "device_stage": "the stage by hand"}  # training fed by the device stage, two ways


def parse(argv: list[str] | None) -> argparse.Namespace:
    ints = lambda s: [int(x) for x in s.split(",") if x]
    floats = lambda s: [float(x) for x in s.split(",") if x]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu-smoke", action="store_true", help="tiny, on the CPU (the default without CUDA): figures meaningless")
    p.add_argument("--images", type=int, default=None, help="images (default 5,000)")
    p.add_argument("--batch", type=int, default=None, help="batch size (default 256)")
    p.add_argument("--host-workers", type=ints, default=None, help="loader workers (1b) and host threads (1) (default 1,2,4)")
    p.add_argument("--cpu-shares", type=floats, default=[0.0, 0.25], help="cpu_share of the loader runs (1b) (default 0,0.25)")
    p.add_argument("--train-host-workers", type=int, default=None, help="loader workers / host threads feeding training (default 4)")
    p.add_argument("--cpu-workers", type=int, default=None, help="workers of the CPU pipelines (default min(16, cores))")
    p.add_argument("--prefetch", type=int, default=1, help="device batches finished ahead of the consumer by hand (1) (default 1)")
    p.add_argument("--loader-prefetch", type=int, default=2, help="the loader's prefetch (1b) (default 2, the loader's)")
    p.add_argument("--seconds", type=float, default=None, help="timed seconds per loader run (default 5)")
    p.add_argument("--models", default=None, help="torchvision models (default resnet18,resnet50)")
    p.add_argument("--steps", type=int, default=None, help="timed training steps per run (default 50)")
    p.add_argument("--warmup", type=int, default=None, help="untimed training steps first (default 10)")
    p.add_argument("--cache", type=Path, default=bi.DEFAULT_CACHE, help=f"where the data is kept (default {bi.DEFAULT_CACHE})")
    p.add_argument("--budget-s", type=float, default=None, help="seconds after which the remaining runs are skipped (default 400)")
    p.add_argument("--json", type=Path, default=None, help="write the results there as JSON")
    a = p.parse_args(argv)
    a.cpu_smoke = a.cpu_smoke or not torch.cuda.is_available()
    pick = lambda value, full, tiny: value if value is not None else (tiny if a.cpu_smoke else full)
    a.images, a.batch = pick(a.images, 5000, 16), pick(a.batch, 256, 4)
    a.host_workers, a.train_host_workers = pick(a.host_workers, [1, 2, 4], [1, 2]), pick(a.train_host_workers, 4, 2)
    a.seconds, a.models = pick(a.seconds, 5.0, 0.3), pick(a.models, "resnet18,resnet50", "resnet18").split(",")
    a.steps, a.warmup = pick(a.steps, 50, 3), pick(a.warmup, 10, 2)
    a.budget_s = pick(a.budget_s, 400.0, 240.0)
    a.prefetch, a.loader_prefetch = max(1, a.prefetch), max(1, a.loader_prefetch)
    if not a.host_workers or not a.cpu_shares or any(not 0.0 <= s <= 1.0 for s in a.cpu_shares):
        p.error("--host-workers needs a worker count and --cpu-shares shares between 0 and 1")
    return a


def loader_key(backend: str, workers: int, share: float) -> str:
    return f"{backend}/{workers}/{share:g}"


def loader_label(r: dict[str, Any]) -> str:
    return f"{r['backend']}, {r['workers']} worker(s), cpu_share {r['cpu_share']:g}"


# -- the benchmark ----------------------------------------------------------------------------------
class Bench:
    def __init__(self, args: argparse.Namespace, device: torch.device, tv: Any, why_tv: str):
        self.args, self.device, self.tv, self.why_tv = args, device, tv, why_tv
        self.cores = usable_cores()
        self.cpu_workers = args.cpu_workers or min(16, self.cores)
        self.start = time.perf_counter()
        self.deadline = self.start + args.budget_s
        self.results: dict[str, Any] = {
            "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "loader": {},
            "stage": {},
            "device_only": {},
            "cpu": {},
            "torchvision": {},
            "training": {},
            "best": {},
            "verdicts": [],
        }
        self.headed: set[str] = set()
        args.cache.mkdir(parents=True, exist_ok=True)
        root, made = bi.ensure_images(args.cache, args.images, False)
        folder = ss.imagefolder(root)
        self.path, _ = bi.ensure_packed(args.cache, folder, bi.subset(folder, args.images), "jpeg", False)
        self.path.read_bytes()  # into the page cache
        self.n = len(ss.open(self.path))
        next(iter(ss.DataLoader(ss.open(self.path).map(image=bi.pipeline()), batch_size=2)))  # kernels compiled before forks
        self.stage()(np.arange(min(2, self.n)), SEED, 0)  # the device stage's first call (CUDA, nvJPEG) before any timing
        gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "no GPU (CPU smoke run)"
        self.results["env"] = {
            "versions": versions(f"torchvision {tv.__version__}" if tv is not None else why_tv, gpu),
            "usable_cores": self.cores,
            "nvjpeg": nvjpeg_available(device),
            "backends": list(BACKENDS),
            "mean_hw": made["mean_hw"],
        }
        print(self.results["env"]["versions"])
        hs, ws = made["mean_hw"]
        print(
            f"data: {self.n} JPEGs (mean {ws:.0f}x{hs:.0f}) packed in {self.path}; usable cores {self.cores}; "
            f"nvJPEG {'yes' if nvjpeg_available(device) else 'no (CPU decoders)'}; device {device}; batch {args.batch}; "
            f"budget {args.budget_s:.0f} s",
            flush=True,
        )

    def stage(self) -> DeviceStage:
        pipeline = [ops.RandomResizedCrop(bi.CROP), ops.RandomHorizontalFlip(), ops.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
        return DeviceStage(ss.open(self.path), "image", pipeline, self.device, dtype="bfloat16", layout="channels_last")

    def feed(self, workers: int) -> StageFeed:
        return StageFeed(self.stage(), self.n, self.args.batch, workers, self.args.prefetch)

    def loader_feed(self, backend: str, workers: int, share: float) -> LoaderFeed:
        return LoaderFeed(self.path, self.device, self.args.batch, workers, backend, self.args.loader_prefetch, share)

    def head(self, section: str, line: str) -> None:
        """A section's heading: in full the first time, then as "(section, cont.)" (runs are ordered by importance)."""
        print(f"\n{line}" if section not in self.headed else f"\n{section} cont.", flush=True)
        self.headed.add(section)

    def left(self, what: str, need: float = 0.0) -> float:
        """Seconds left in the budget, or 0 (and a note) when ``what`` must be skipped."""
        left = self.deadline - time.perf_counter()
        if left > need:
            return left
        print(f"  {what}: skipped, past the --budget-s of {self.args.budget_s:.0f} s", flush=True)
        return 0.0

    def save(self) -> None:
        if self.args.json is not None:
            self.results["seconds"] = time.perf_counter() - self.start
            self.args.json.parent.mkdir(parents=True, exist_ok=True)
            self.args.json.write_text(json.dumps(self.results, indent=1, default=str))

    def run(self, section: dict[str, Any], key: Any, label: str, make: Any, about: dict[str, Any] | None = None) -> None:
        """One loader run: ``make()`` -> batches, timed (then their ``info()``, if any, added); errors are
        recorded, the others go on. ``about``: what the run was, kept with its result."""
        left = self.left(label)
        if not left:
            return
        a = self.args
        try:
            batches = make()
            got = timed(batches, self.device, min(1.0, a.seconds), a.seconds, min(LOADER_CAP, left))
            got.update(getattr(batches, "info", dict)())
        except Exception as exc:  # noqa: BLE001 - reported
            got = {"error": f"{type(exc).__name__}: {exc}"}
        section[key] = {**(about or {}), **got}
        print(f"  {label:<44} {show(got)}", flush=True)
        self.save()

    # (1b) -------------------------------------------------------------------------------------------
    def loader_runs(self) -> list[tuple[str, int, float]]:
        """(backend, workers, cpu_share) of every loader run, the most important first (module doc)."""
        a = self.args
        first = ("thread", max(a.host_workers), a.cpu_shares[0])
        every = [(b, w, s) for s in a.cpu_shares for b in LOADER_BACKENDS if b in BACKENDS for w in a.host_workers]
        return [first] + [run for run in every if run != first]

    def loader(self, runs: list[tuple[str, int, float]]) -> None:
        a = self.args
        self.head(
            "(1b)",
            f"(1b) the loader: ss.DataLoader over ss.open(p).map(image=[RandomResizedCrop {bi.CROP}, flip, Normalize "
            f"bf16], device={self.device.type!r}, layout='channels_last', cpu_share=s), prefetch {a.loader_prefetch}",
        )
        for backend, w, share in runs:
            about = {"backend": backend, "workers": w, "cpu_share": share}
            make = lambda b=backend, w=w, s=share: self.loader_feed(b, w, s)
            self.run(self.results["loader"], loader_key(backend, w, share), loader_label(about), make, about)

    # (1) --------------------------------------------------------------------------------------------
    def device_stage(self) -> None:
        self.head("(1)", f"(1) device stage by hand: RandomResizedCrop {bi.CROP} + flip + normalize, bf16 channels_last, prefetch {self.args.prefetch}")
        for w in self.args.host_workers:
            self.run(self.results["stage"], w, f"host part in {w} thread(s)", lambda w=w: iter(self.feed(w)))
        stage = self.stage()
        hosts = [stage.host(permutation(self.n, 0)[k * self.args.batch : (k + 1) * self.args.batch], SEED, 0) for k in range(min(8, self.n // self.args.batch))]

        def device_only() -> Any:
            for host in itertools.cycle(hosts):
                yield stage.device_batch(host)

        self.run(self.results, "device_only", f"device part only ({len(hosts)} host batches cycled)", device_only)
        if self.device.type == "cuda":  # resize_crops' matmuls are float32: what TF32 would give (not the default)
            before = torch.backends.cuda.matmul.allow_tf32
            torch.backends.cuda.matmul.allow_tf32 = True
            try:
                self.run(self.results, "device_only_tf32", "device part only, TF32 matmuls allowed", device_only)
            finally:
                torch.backends.cuda.matmul.allow_tf32 = before

    # (2) --------------------------------------------------------------------------------------------
    def cpu(self) -> None:
        w = self.cpu_workers
        self.head("(2)", f"(2) CPU pipelines: RandomResizedCrop {bi.CROP} + flip + ToCHW (uint8), {w} workers")
        for backend in BACKENDS:
            self.run(self.results["cpu"], backend, f"slipstream {backend}", lambda b=backend: self.cpu_batches(b, w))

    def cpu_loader(self, backend: str, workers: int) -> Any:
        return G.packed_loader(self.path, self.args.batch, workers, backend, TIMEOUT)

    def cpu_batches(self, backend: str, workers: int) -> Any:
        loader = self.cpu_loader(backend, workers)
        try:
            for images, _ in G.endless(loader):
                yield images
        finally:
            G.close_loader(loader)

    # (3) --------------------------------------------------------------------------------------------
    def torchvision(self) -> None:
        tvr = self.results["torchvision"]
        if self.tv is None:
            tvr["skipped"] = self.why_tv
            print(f"\n(3) torchvision per-image transforms: skipped: {self.why_tv}", flush=True)
            self.save()
            return
        from torchvision.io import ImageReadMode, decode_jpeg
        from torchvision.transforms import v2

        device, batch = self.device, self.args.batch
        packed = ss.open(self.path)
        per_image = v2.Compose(
            [
                v2.RandomResizedCrop(bi.CROP, antialias=True),
                v2.RandomHorizontalFlip(),
                v2.ToDtype(torch.float32, scale=True),
                v2.Normalize(IMAGENET_MEAN, IMAGENET_STD),
            ]
        )
        print(f"\n(3) torchvision {self.tv.__version__}: decode_jpeg(list, device={device.type!r}), one thread", flush=True)

        def decoded() -> Any:
            for epoch in itertools.count():
                order = permutation(self.n, epoch)
                for s in range(0, self.n - batch + 1, batch):
                    data = [torch.from_numpy(np.array(packed.encoded(int(i), "image")[1])) for i in order[s : s + batch]]
                    yield decode_jpeg(data, mode=ImageReadMode.RGB, device=device)

        def transformed() -> Any:
            for images in decoded():
                out = torch.stack([per_image(image) for image in images])
                yield out.to(torch.bfloat16).contiguous(memory_format=torch.channels_last)

        self.run(tvr, "decode", "decode only (batched)", decoded)
        self.run(tvr, "per_image", "decode + per-image RRC/flip/normalize", transformed)

    # (4) --------------------------------------------------------------------------------------------
    def train(self, name: str, keys: tuple[str, ...]) -> None:
        """Model ``name`` trained as each run of ``keys`` says (``FIRST_TRAINING``, then the others)."""
        a, device = self.args, self.device
        title = TITLES.get(name, name) if self.tv is not None else "tiny CNN (no torchvision)"
        rows = self.results["training"].setdefault(name, {"title": title})
        if not self.left(title, need=10.0):
            return
        self.head(f"(4) {title}", f"(4) {title}: SGD, bf16 autocast, channels_last, batch {a.batch}, {a.steps} timed steps after {a.warmup}")
        torch.manual_seed(SEED)
        model = G.make_model(name, self.tv, device)
        labels = torch.randint(0, 1000, (a.batch,), device=device)
        fstep = G.make_step(model, device, normalized=True)
        w = a.train_host_workers
        if "ceiling" in keys:
            stage = self.stage()  # one real batch of the device stage's output, kept on the device
            first = stage(permutation(self.n, 0)[: a.batch], SEED, 0)
            self.measure(rows, "ceiling", "ceiling: one bf16 batch on the device", fstep, lambda: itertools.repeat((first, labels)))
            del first
        if "loader" in keys:
            feed = lambda: with_labels(self.loader_feed("thread", w, 0.0), labels)
            self.measure(rows, "loader", f"fed by ss.DataLoader (device-mapped, {w} thread workers)", fstep, feed, "ceiling")
        if "device_stage" in keys:
            feed = lambda: with_labels(iter(self.feed(w)), labels)
            self.measure(rows, "device_stage", f"fed by the device stage by hand ({w} host threads)", fstep, feed, "ceiling")
        ustep = G.make_step(model, device)
        if "ceiling_uint8" in keys:
            images = torch.randint(0, 256, (a.batch, 3, bi.CROP, bi.CROP), dtype=torch.uint8, device=device)
            self.measure(rows, "ceiling_uint8", "ceiling: one uint8 batch (bench_gpu_feed's)", ustep, lambda: itertools.repeat((images, labels)))
            del images

        def cpu_feed() -> Any:
            loader = self.cpu_loader("process", self.cpu_workers)
            try:
                yield from G.on_device(G.endless(loader), device)
            finally:
                G.close_loader(loader)

        if "cpu_process" in keys and "process" in BACKENDS:
            self.measure(rows, "cpu_process", f"fed by slipstream process ({self.cpu_workers} workers)", ustep, cpu_feed, "ceiling_uint8")
        del model, fstep, ustep
        if device.type == "cuda":
            torch.cuda.empty_cache()

    def measure(self, rows: dict[str, Any], key: str, label: str, step: Any, make: Any, ceiling: str | None = None) -> None:
        """One training run (``G.train_rate``) into ``rows[key]``; with ``ceiling``, its fraction of that run."""
        left = self.left(f"{rows['title']} {label}", need=5.0)
        if not left:
            return
        a = self.args
        wall, c0 = time.perf_counter(), cpu_seconds()
        try:
            got = G.train_rate(step, make(), a.warmup, a.steps, min(TRAIN_CAP, left), self.device)
            got["cores"] = (cpu_seconds() - c0) / (time.perf_counter() - wall)  # the whole run, warm-up included
            base = (rows.get(ceiling) or {}).get("img_s") if ceiling else None
            got["fraction"] = got["img_s"] / base if base and got["img_s"] else None
        except Exception as exc:  # noqa: BLE001 - reported
            got = {"error": f"{type(exc).__name__}: {exc}"}
        rows[key] = got
        share = f" = {got['fraction']:.1%} of {ceiling}" if got.get("fraction") is not None else ""
        print(f"  {label:<54} {show(got)}{share}", flush=True)
        self.save()

    # the report ---------------------------------------------------------------------------------------
    def report(self) -> None:
        r = self.results
        shares = self.args.cpu_shares
        if r["loader"]:
            print("\n(1b) ss.DataLoader over the device-mapped view, img/s (CPU cores used):")
            combos = [(b, w) for b in LOADER_BACKENDS for w in self.args.host_workers]
            grid = [[f"{b}, {w} worker(s)"] + [cell(r["loader"].get(loader_key(b, w, s))) for s in shares] for b, w in combos]
            G.grid(["backend, workers"] + [f"cpu_share {s:g}" for s in shares], grid)
        print("\nother runs, img/s (CPU cores used):")
        rows = [[f"device stage by hand, {w} host thread(s)", cell(v)] for w, v in r["stage"].items()]
        rows.append(["device part only", cell(r.get("device_only"))])
        if "device_only_tf32" in r:
            rows.append(["device part only, TF32", cell(r["device_only_tf32"])])
        rows += [[f"CPU pipeline, slipstream {b} ({self.cpu_workers} workers)", cell(v)] for b, v in r["cpu"].items()]
        if "skipped" in r["torchvision"]:
            rows.append(["torchvision per-image", "skipped"])
        else:
            rows += [[f"torchvision {k}", cell(v)] for k, v in r["torchvision"].items()]
        G.grid(["run", "img/s (cores)"], rows)
        keys = ("ceiling", "loader", "device_stage", "ceiling_uint8", "cpu_process")
        training = [[t["title"]] + [cell(t.get(k), fraction=True) for k in keys] for t in r["training"].values()]
        if training:
            print("\ntraining, img/s (cores) and fraction of the ceiling:")
            G.grid(["model", "ceiling (bf16)", "ss.DataLoader", "stage by hand", "ceiling (uint8)", "CPU process"], training)
        print("  (* cut short by the budget or a run's cap)")
        self.goals()

    def goals(self) -> None:
        r = self.results
        verdicts = Verdicts(label_width=70, value_width=9, detail=True)
        print()
        plural = lambda n, what: f"{n} {what}" + ("s" if int(n) != 1 else "")
        runs = [(f"loader: {v['backend']}, {plural(v['workers'], 'worker')}, share {v['cpu_share']:g}", k, v) for k, v in r["loader"].items()]
        runs += [(f"by hand: {plural(w, 'host thread')}", f"stage/{w}", v) for w, v in r["stage"].items()]
        within = [run for run in runs if run[2].get("img_s") and run[2].get("cores") is not None and run[2]["cores"] <= STAGE_CORES]
        best = max(within, key=lambda run: run[2]["img_s"], default=None)
        if best is not None:
            r["best"]["stage"] = {"run": best[0], "key": best[1], "img_s": best[2]["img_s"], "cores": best[2]["cores"]}
            label = f"device stage img/s, <= {STAGE_CORES:g} cores ({best[0]})"
            verdict(label, best[2]["img_s"], STAGE_GOAL, verdicts, unit=" img/s")
        else:
            verdicts.append(f"MISS  device stage img/s within {STAGE_CORES:g} CPU cores: no run within {STAGE_CORES:g} cores")
            print(f"  {verdicts[-1]}")
        for name, goal in GOALS.items():
            if name not in r["training"]:
                continue
            rows = r["training"][name]
            fed = [(key, rows[key]) for key in FEEDS if (rows.get(key) or {}).get("fraction") is not None]
            if fed:
                key, got = max(fed, key=lambda kv: kv[1]["fraction"])
                r["best"][name] = {"run": key, "fraction": got["fraction"], "img_s": got["img_s"]}
                verdict(f"{rows['title']} fed by {FEEDS[key]} / ceiling (the better feed)", 100 * got["fraction"], 100 * goal, verdicts, unit="%")
            else:
                why = "; ".join(f"{key}: {(rows.get(key) or {}).get('error', 'skipped')}" for key in FEEDS)
                verdicts.append(f"MISS  {rows['title']} fed by the device stage / ceiling: not measured ({why})")
                print(f"  {verdicts[-1]}")
        r["verdicts"] = list(verdicts)
        summary(verdicts, self.start)
        self.save()


def show(r: dict[str, Any] | None) -> str:
    if not r:
        return "-"
    if "error" in r:
        return r["error"]
    if not r.get("img_s"):
        return "not measured (budget)"
    cores = f" using {r['cores']:.1f} cores" if r.get("cores") is not None else ""
    return f"{r['img_s']:,.0f} img/s{cores}" + (" (cut)" if r.get("cut") else "")


def cell(r: dict[str, Any] | None, fraction: bool = False) -> str:
    if not r:
        return "-"
    if "error" in r:
        return "error"
    if not r.get("img_s"):
        return "-"
    text = f"{r['img_s']:,.0f}" + ("*" if r.get("cut") else "") + (f" ({r['cores']:.1f})" if r.get("cores") is not None else "")
    return text + (f" {r['fraction']:.0%}" if fraction and r.get("fraction") is not None else "")


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    tv, why_tv = G.load_torchvision()
    set_footing()
    if args.cpu_smoke:
        torch.set_num_threads(os.cpu_count() or 1)
        print("no CUDA (or --cpu-smoke): a tiny run on the CPU, its figures mean nothing", flush=True)
    else:
        torch.backends.cudnn.benchmark = True
    device = torch.device("cpu" if args.cpu_smoke else "cuda")
    bench = Bench(args, device, tv, why_tv)
    first, *rest = bench.loader_runs()  # the most important runs first (module doc)
    bench.loader([first])
    for name in args.models:
        bench.train(name, FIRST_TRAINING)
    bench.loader(rest)
    bench.device_stage()
    for name in args.models:
        bench.train(name, ("device_stage", "ceiling_uint8", "cpu_process"))
    bench.cpu()
    bench.torchvision()
    bench.report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
