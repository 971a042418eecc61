"""Benchmark: how well the loaders feed GPU training, and how they scale with workers (issue 11, item 5).

Needs CUDA and torchvision; elsewhere it prints one line saying why it skipped and exits 0.
Data: the first ``--images`` (default 5,000) ImageNet-like JPEGs of ``bench_images.py`` (made once under
``--cache``, shared with it), packed with ``F.Image(codec="jpeg", max_side=512)``; torch reads the same files.

(1) Ceiling: torchvision ResNet-50 and ResNet-18 (``--models``) trained with SGD (lr 0.1, momentum 0.9),
    bf16 autocast, channels_last, batch 256 (``--batch``), fed by ONE uint8 batch already on the GPU,
    normalized there (uint8 -> float, ImageNet mean/std) every step as the real feeds are: img/s over
    ``--steps`` steps after ``--warmup`` steps, with ``torch.cuda.synchronize()`` at both edges.
(2) The same loop fed by loaders, as img/s and as a fraction of the ceiling: slipstream with its defaults
    (``workers="auto"``, the default backend), then with ``--feed-workers`` (default: the usable cores,
    at most 16) on each backend in ``slipstream.loading.backends.BACKENDS`` (``ss.DataLoader(ss.open(p).map(
    image=[ops.RandomResizedCrop(224), ops.RandomHorizontalFlip(), ops.ToCHW()]), batch_size=256,
    shuffle=True, drop_last=True)``), each batch pinned and copied with ``non_blocking`` on a side stream
    one batch ahead; and torch's DataLoader over torchvision's ImageFolder + RandomResizedCrop(224) +
    RandomHorizontalFlip + PILToTensor (PIL), as many workers, ``pin_memory=True``, ``persistent_workers=True``.
(3) Workers sweep: each loader alone (no model), img/s for ``--workers`` (1, 2, 4, 8, 16, capped at the
    usable cores), over whole batches spanning ``--sweep-seconds`` after a warm-up; then, per backend,
    the most workers' rate over the 1-worker rate.

Goals (issue 11, on a 16-core GPU host), as PASS/MISS lines: slipstream's defaults feed ResNet-50 at >= 97% and
ResNet-18 at >= 85% of the ceiling; threads at 16 workers >= 12x their 1-worker rate (0.75x the workers when
fewer cores are usable) and >= the process backend. Every run is bounded: a per-batch ``timeout``, a time budget
per run, loaders closed between runs; ``--json OUT`` writes everything measured (rewritten after each run).

Run:  python benchmarks/bench_gpu_feed.py [--json OUT] [--quick] [--models resnet50,resnet18] [--steps N]
                                          [--workers 1,2,4,8,16] [--images N] [--cache DIR]
About 4-5 minutes on a 16-core H200 host (8 at most: later runs are skipped past ``--budget`` seconds);
``--quick`` about 2. ``--cpu-smoke`` runs every code path on the CPU in under a minute (16 images, batch 4,
ResNet-18, or a tiny CNN where torchvision cannot be imported, 3 steps): its figures mean nothing.
"""

from __future__ import annotations

import argparse
import inspect
import itertools
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import _gpu as G
import bench_images as bi
import torch
from _common import SEED, Verdicts, set_footing, summary, verdict, versions

import slipstream as ss
from slipstream.core.cpus import usable_cores
from slipstream.images.kernels import resampler_status
from slipstream.images.pipeline import region_decoder_status
from slipstream.loading.backends import BACKENDS

DEFAULT_BACKEND = inspect.signature(ss.DataLoader).parameters["backend"].default
TIMEOUT = 60.0  # seconds a loader may take for one batch before it raises
GOALS = {"resnet50": 0.97, "resnet18": 0.85}  # the fraction of the ceiling slipstream's defaults should reach
TITLES = {"resnet50": "ResNet-50", "resnet18": "ResNet-18"}


def parse(argv: list[str] | None) -> argparse.Namespace:
    ints = lambda s: [int(x) for x in s.split(",") if x]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="1,000 images, fewer steps, a shorter sweep: about 2 minutes")
    p.add_argument("--cpu-smoke", action="store_true", help="every code path on the CPU, tiny sizes (figures meaningless)")
    p.add_argument("--models", default=None, help="torchvision models (default resnet50,resnet18)")
    p.add_argument("--batch", type=int, default=None, help="batch size (default 256)")
    p.add_argument("--steps", type=int, default=None, help="timed training steps per run (default 60)")
    p.add_argument("--warmup", type=int, default=None, help="untimed training steps first (default 10)")
    p.add_argument("--workers", type=ints, default=None, help="the sweep's worker counts (default 1,2,4,8,16)")
    p.add_argument("--feed-workers", type=int, default=None, help="workers of the training feeds (default min(16, cores))")
    p.add_argument("--sweep-seconds", type=float, default=None, help="timed seconds per sweep run (default 4)")
    p.add_argument("--images", type=int, default=None, help="images (default 5,000)")
    p.add_argument("--cache", type=Path, default=bi.DEFAULT_CACHE, help=f"where the files are kept (default {bi.DEFAULT_CACHE})")
    p.add_argument("--budget", type=float, default=None, help="seconds after which the remaining runs are skipped (default 420)")
    p.add_argument("--json", type=Path, default=None, help="write the results there as JSON")
    a = p.parse_args(argv)
    smoke, quick = a.cpu_smoke, a.quick
    pick = lambda value, full, fast, tiny: value if value is not None else (tiny if smoke else fast if quick else full)
    a.models = pick(a.models, "resnet50,resnet18", "resnet50,resnet18", "resnet18").split(",")
    a.batch, a.images = pick(a.batch, 256, 256, 4), pick(a.images, 5000, 1000, 16)
    a.steps, a.warmup = pick(a.steps, 60, 20, 3), pick(a.warmup, 10, 5, 2)  # smoke: 5 batches of 4 span 2 epochs
    a.workers, a.sweep_seconds = pick(a.workers, [1, 2, 4, 8, 16], [1, 2, 4, 8, 16], [1, 2]), pick(a.sweep_seconds, 4.0, 1.5, 0.3)
    a.budget = pick(a.budget, 420.0, 240.0, 240.0)
    return a


class Bench:
    """The data, the settings and the results of one run (saved as JSON after each measurement)."""

    def __init__(self, args: argparse.Namespace, device: torch.device, tv: Any, why_tv: str):
        self.args, self.device, self.tv = args, device, tv
        self.cores = usable_cores()
        self.feed_workers = args.feed_workers or min(16, self.cores)
        self.start = time.perf_counter()
        self.deadline = self.start + args.budget
        self.results: dict[str, Any] = {
            "settings": {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()},
            "ceiling": {},
            "feeds": {},
            "sweep": {},
            "verdicts": [],
        }
        args.cache.mkdir(parents=True, exist_ok=True)
        root, made = bi.ensure_images(args.cache, args.images, False)
        folder = ss.imagefolder(root)
        idx = bi.subset(folder, args.images)
        self.root, self.samples = root, [(str(folder.samples[k][0]), int(folder.samples[k][1])) for k in idx]
        self.path, _ = bi.ensure_packed(args.cache, folder, idx, "jpeg", False)
        for path, _ in self.samples:  # into the page cache: every loader reads warm files
            Path(path).read_bytes()
        self.path.read_bytes()
        next(iter(ss.DataLoader(self.data(), batch_size=2)))  # imports done before any worker forks
        gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else "no GPU (--cpu-smoke)"
        extra = [f"torchvision {tv.__version__}" if tv is not None else why_tv, gpu]
        self.results["env"] = {
            "versions": versions(*extra),
            "usable_cores": self.cores,
            "pixel_kernels": resampler_status(),
            "region_decoder": region_decoder_status(),
            "default_backend": DEFAULT_BACKEND,
            "backends": list(BACKENDS),
            "mean_hw": made["mean_hw"],
        }
        print(self.results["env"]["versions"])
        hs, ws = made["mean_hw"]
        print(
            f"data: {len(self.samples)} JPEGs (mean {ws:.0f}x{hs:.0f}) in {root}, packed in {self.path.name}; "
            f"usable cores {self.cores}; pixel kernels {resampler_status()}; region decoder {region_decoder_status()}"
        )

    def data(self) -> Any:
        return ss.open(self.path).map(image=bi.pipeline())

    def ss_loader(self, workers: int | str, backend: str | None) -> Any:
        return G.packed_loader(self.path, self.args.batch, workers, backend, TIMEOUT)

    def torch_loader(self, workers: int, pin: bool) -> Any:
        if self.tv is not None:
            T = self.tv.transforms
            dataset = self.tv.datasets.ImageFolder(
                self.root, transform=T.Compose([T.RandomResizedCrop(bi.CROP), T.RandomHorizontalFlip(), T.PILToTensor()])
            )
            dataset.samples = dataset.imgs = list(self.samples)
            dataset.targets = [label for _, label in self.samples]
        else:  # --cpu-smoke without torchvision: bench_images' PIL rendering of the same transforms
            dataset = bi.TorchvisionStyleFolder(self.samples)
        return torch.utils.data.DataLoader(
            dataset,
            batch_size=self.args.batch,
            shuffle=True,
            drop_last=True,
            num_workers=workers,
            timeout=TIMEOUT,
            pin_memory=pin and self.device.type == "cuda",
            persistent_workers=workers > 0,
            generator=torch.Generator().manual_seed(SEED),
        )

    def late(self, what: str) -> bool:
        if time.perf_counter() < self.deadline:
            return False
        print(f"  {what}: skipped, past the --budget of {self.args.budget:.0f} s", flush=True)
        return True

    def save(self) -> None:
        if self.args.json is not None:
            self.results["seconds"] = time.perf_counter() - self.start
            self.args.json.parent.mkdir(parents=True, exist_ok=True)
            self.args.json.write_text(json.dumps(self.results, indent=1, default=str))

    # -- (1), (2): training ------------------------------------------------------------------
    def feeds(self) -> dict[str, Any]:
        """name -> (label, make the loader); the default settings first, then each backend, then torch."""
        w = self.feed_workers
        out = {"default": ("slipstream defaults", lambda: self.ss_loader("auto", None))}
        out.update({b: (f"slipstream {b}", lambda b=b: self.ss_loader(w, b)) for b in BACKENDS})
        out["torch"] = ("torch DataLoader", lambda: self.torch_loader(w, pin=True))
        return out

    def train(self, name: str) -> None:
        a, device = self.args, self.device
        torch.manual_seed(SEED)
        model = G.make_model(name, self.tv, device)
        step = G.make_step(model, device)
        budget = 60.0  # seconds per run at most
        title = TITLES.get(name, name) if self.tv is not None else "tiny CNN (no torchvision)"
        self.results.setdefault("titles", {})[name] = title
        images = torch.randint(0, 256, (a.batch, 3, bi.CROP, bi.CROP), dtype=torch.uint8, device=device)
        labels = torch.randint(0, 1000, (a.batch,), device=device)
        one = itertools.repeat((images, labels))  # the same batch forever
        ceiling = G.train_rate(step, one, a.warmup, a.steps, budget, device)
        self.results["ceiling"][name] = ceiling
        if not ceiling["img_s"]:
            print(f"\n{title}: the ceiling took more than {budget:.0f} s: its feeds are not measured", flush=True)
            return
        print(
            f"\n{title}: ceiling {ceiling['img_s']:,.0f} img/s (one batch on the {device.type}, "
            f"{ceiling['steps']} steps after {a.warmup})",
            flush=True,
        )
        rows: dict[str, Any] = {}
        for key, (label, make) in self.feeds().items():
            if self.late(f"{name} fed by {label}"):
                continue
            same = next(
                (
                    k
                    for k, r in rows.items()
                    if "error" not in r and key in BACKENDS and (r["backend"], r["workers"]) == (key, self.feed_workers)
                ),
                None,
            )
            if same is not None:  # the defaults were these settings: measured already
                rows[key] = {**rows[same], "same_as": same}
                print(f"  {label:<20} {key:<8} workers={self.feed_workers:<4} the same settings as the defaults", flush=True)
                continue
            loader = None
            try:
                loader = make()
                if isinstance(loader, ss.DataLoader):
                    kind = {"backend": loader.backend, "workers": loader.workers}
                else:
                    kind = {"backend": "torch", "workers": loader.num_workers}
                got = G.train_rate(step, G.on_device(G.endless(loader), device), a.warmup, a.steps, budget, device)
                rows[key] = {**kind, **got, "fraction": got["img_s"] / ceiling["img_s"] if got["img_s"] else None}
            except Exception as exc:  # noqa: BLE001 - reported, the other runs go on
                rows[key] = {"error": f"{type(exc).__name__}: {exc}"}
            finally:
                if loader is not None:
                    G.close_loader(loader)
            r = rows[key]
            shown = r.get("error") or f"{r['img_s'] or 0:,.0f} img/s = {r['fraction'] or 0:.0%}" + (" (cut)" if r["cut"] else "")
            print(f"  {label:<20} {r.get('backend', ''):<8} workers={r.get('workers', '')!s:<4} {shown}", flush=True)
            self.results["feeds"][name] = rows
            self.save()
        del model, step, images, labels, one
        if device.type == "cuda":
            torch.cuda.empty_cache()

    # -- (3): the workers sweep --------------------------------------------------------------
    def sweep(self) -> None:
        a = self.args
        counts = sorted({min(w, self.cores) for w in a.workers})
        print(
            f"\nworkers sweep: each loader alone, batch {a.batch}, img/s over >= {a.sweep_seconds:g} s after a warm-up",
            flush=True,
        )
        makers = {b: (lambda w, b=b: self.ss_loader(w, b)) for b in BACKENDS}
        makers["torch"] = lambda w: self.torch_loader(w, pin=False)
        sweep = self.results["sweep"] = {key: {} for key in makers}
        head = ["workers", *(f"slipstream {k}" for k in BACKENDS), "torch DataLoader"]
        widths = [len(h) for h in head]
        G.line(head, widths)
        for w in counts:  # a row at a time, printed as it is measured
            for key, make in makers.items():
                if self.late(f"sweep {key} workers={w}"):
                    continue
                loader = None
                try:
                    loader = make(w)
                    sweep[key][w] = G.loader_rate(loader, warm_s=min(1.0, a.sweep_seconds), seconds=a.sweep_seconds, budget=30.0)
                except Exception as exc:  # noqa: BLE001
                    sweep[key][w] = {"error": f"{type(exc).__name__}: {exc}"}
                finally:
                    if loader is not None:
                        G.close_loader(loader)
                self.save()
            G.line([str(w)] + [fmt(sweep[k].get(w)) for k in makers], widths)

    # -- the report -----------------------------------------------------------------------------
    def report(self) -> None:
        print("\nfeeding training, img/s and fraction of the ceiling:")
        keys = list(self.feeds())
        head = ["model (ceiling)", *(self.feeds()[k][0] for k in keys)]
        rows = []
        for name, feeds in self.results["feeds"].items():
            ceiling = self.results["ceiling"][name]["img_s"]
            rows.append([f"{self.results['titles'][name]} ({ceiling:,.0f} img/s)"] + [cell(feeds.get(k)) for k in keys])
        G.grid(head, rows)
        defaults = next(iter(self.results["feeds"].values()), {}).get("default", {})
        print(
            f"  (defaults: backend={defaults.get('backend')}, workers={defaults.get('workers')}; "
            f"the others {self.feed_workers} workers; usable cores {self.cores})"
        )
        verdicts = Verdicts(label_width=46, value_width=6, detail=True)
        print()
        for name, goal in GOALS.items():
            if name not in self.results["ceiling"]:
                continue  # not asked for (--models), or past the budget
            label = f"{self.results['titles'][name]} fed by the defaults / ceiling"
            default = self.results["feeds"].get(name, {}).get("default", {})
            if default.get("fraction") is not None:
                verdict(label, 100 * default["fraction"], 100 * goal, verdicts, unit="%")
            else:
                verdicts.append(f"MISS  {label}: not measured ({default.get('error', 'skipped')})")
                print(f"  {verdicts[-1]}")
        sweep = self.results["sweep"]
        rate = lambda key, w: (sweep.get(key, {}).get(w) or {}).get("img_s")
        top = max((w for rates in sweep.values() for w in rates), default=None)
        for key in sweep:
            if top is not None and rate(key, 1) and rate(key, top):
                goal = (12.0 if top >= 16 else 0.75 * top) if key == "thread" else None
                verdict(f"{key}: {top} workers / 1 worker", rate(key, top) / rate(key, 1), goal, verdicts)
        if top is not None and rate("thread", top) and rate("process", top):
            verdict(f"thread / process at {top} workers", rate("thread", top) / rate("process", top), 1.0, verdicts)
        self.results["verdicts"] = list(verdicts)
        summary(verdicts, self.start)
        self.save()


def fmt(r: dict[str, Any] | None) -> str:
    if r is None:
        return "-"
    if "error" in r:
        return "error"
    return f"{r['img_s']:,.0f}" + ("*" if r.get("cut") else "") if r.get("img_s") else "-"


def cell(r: dict[str, Any] | None) -> str:
    return fmt(r) if not r or not r.get("img_s") else f"{fmt(r)} ({r['fraction']:.0%})"


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if not args.cpu_smoke and not torch.cuda.is_available():
        why = f"no CUDA device (torch {torch.__version__}: torch.cuda.is_available() is False)"
    else:
        tv, why = G.load_torchvision()
        why = "" if tv is not None or args.cpu_smoke else why
    if why:
        print(f"bench_gpu_feed.py: skipped: {why}; --cpu-smoke runs its code paths on the CPU")
        if args.json is not None:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps({"skipped": why}))
        return 0
    set_footing()
    if args.cpu_smoke:
        torch.set_num_threads(os.cpu_count() or 1)
    else:
        torch.backends.cudnn.benchmark = True
    device = torch.device("cpu" if args.cpu_smoke else "cuda")
    bench = Bench(args, device, tv, G.load_torchvision()[1])
    print(
        f"training: {', '.join(args.models)}, SGD, bf16 autocast, channels_last, batch {args.batch}, "
        f"{args.steps} timed steps after {args.warmup}; feeds with {bench.feed_workers} workers",
        flush=True,
    )
    for name in args.models:
        if not bench.late(f"{name}"):
            bench.train(name)
    bench.sweep()
    bench.report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
