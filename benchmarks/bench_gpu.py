"""Benchmark: slipstream's device stage (``slipstream.gpu.DeviceStage``, issue 14) alone and feeding training.

On the GPU machine (16 cores, one H200, torch with CUDA, torchvision), from the repository root, one line:

    python benchmarks/bench_gpu.py --json $OUT/gpu.json

About 4-6 minutes there (data made once under ``--cache``: 5,000 JPEGs and their packed file), never more than
``--budget-s`` (default 400 s, counted from the start, data included) plus the run in progress (each run is
capped: 30 s for a loader, 60 s for training), so under 8 minutes.
Without CUDA it runs tiny on the CPU (as ``--cpu-smoke``: 16 images, batch 4, 3 steps): its figures mean nothing.

Data: the first ``--images`` photo-like JPEGs of ``bench_images.py`` (made once, shared with it and with
``bench_gpu_feed.py``), packed with ``F.Image(codec="jpeg", max_side=512)``. Ops: RandomResizedCrop(224) +
RandomHorizontalFlip + Normalize(ImageNet mean/std), out as bfloat16 channels_last, batch 256 (``--batch``).

(1) Device stage alone: the host part (``DeviceStage.host``: bytes, header sizes, windows) in N worker threads
    (``--host-workers``, default 1,2,4), a bounded number of batches ahead; the device part (``device_batch``:
    nvJPEG batched decode, then batched crop/resize/flip/normalize) in one thread on a side CUDA stream,
    ``--prefetch`` (default 1) finished batches ahead of the consumer (device memory: prefetch + 2 batches);
    the consumer's stream waits on each batch's event. img/s over whole batches spanning ``--seconds`` after a
    warm-up, and the CPU cores used (CPU time of this process and its children / wall time). Then the device
    part alone, cycling 8 host batches made beforehand (what the GPU side can do with free host work), on CUDA
    a second time with TF32 matmuls allowed (the resampling's matmuls are float32; TF32 is not the default).
(2) The CPU pipelines for comparison, as ``bench_gpu_feed.py`` measures them: ``ss.DataLoader`` over
    RandomResizedCrop(224) + flip + ToCHW (uint8, no normalize), each backend of ``BACKENDS`` with
    ``--cpu-workers`` (default min(16, usable cores)) workers; img/s and cores.
(3) torchvision's per-image GPU transforms (when torchvision imports): the stored bytes of a batch decoded by
    ``torchvision.io.decode_jpeg(list, device="cuda")`` (decode only, then decode + per image v2
    RandomResizedCrop(224, antialias) + RandomHorizontalFlip + ToDtype(float32, scale) + Normalize, stacked
    into bf16 channels_last); one thread, img/s and cores. Without torchvision: skipped, with a note.
(4) Training (``_gpu.py``'s models: torchvision ResNet-18 and ResNet-50, ``--models``; SGD, bf16 autocast,
    channels_last): the ceiling fed by ONE batch of the device stage's output already on the GPU, repeated,
    and the same loop fed by the device stage (``--train-host-workers``, default 4); for reference, the
    uint8 ceiling of ``bench_gpu_feed.py`` (uint8 batch normalized in the step) and that loop fed by the CPU
    process backend (``--cpu-workers``), pinned and copied one batch ahead.

Goals (issue 14, 16-core H200 host), as PASS/MISS lines: the device stage >= 20,000 img/s using at most 4 CPU
cores (the best run of (1) within 4 cores); fed by it, ResNet-18 >= 95% and ResNet-50 >= 99% of the ceiling.
Prints tables; ``--json PATH`` writes everything measured (rewritten after each run).
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import os
import queue
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import _gpu as G
import bench_images as bi
import numpy as np
import torch
from _common import SEED, Verdicts, permutation, set_footing, summary, verdict, versions

import slipstream as ss
from slipstream import ops
from slipstream.core.cpus import usable_cores
from slipstream.gpu import DeviceStage, nvjpeg_available
from slipstream.loading.backends import BACKENDS

TIMEOUT = 60.0  # seconds any batch may take before the run raises
LOADER_CAP, TRAIN_CAP = 30.0, 60.0  # seconds one run may take at most
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
STAGE_GOAL, STAGE_CORES = 20000.0, 4.0
GOALS = {"resnet18": 0.95, "resnet50": 0.99}
TITLES = {"resnet50": "ResNet-50", "resnet18": "ResNet-18"}
CLK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def parse(argv: list[str] | None) -> argparse.Namespace:
    ints = lambda s: [int(x) for x in s.split(",") if x]
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cpu-smoke", action="store_true", help="tiny, on the CPU (the default without CUDA): figures meaningless")
    p.add_argument("--images", type=int, default=None, help="images (default 5,000)")
    p.add_argument("--batch", type=int, default=None, help="batch size (default 256)")
    p.add_argument("--host-workers", type=ints, default=None, help="host threads of the device stage runs (default 1,2,4)")
    p.add_argument("--train-host-workers", type=int, default=None, help="host threads of the device stage feeding training (default 4)")
    p.add_argument("--cpu-workers", type=int, default=None, help="workers of the CPU pipelines (default min(16, cores))")
    p.add_argument("--prefetch", type=int, default=1, help="device batches finished ahead of the consumer (default 1)")
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
    a.prefetch = max(1, a.prefetch)
    return a


# -- measuring ------------------------------------------------------------------------------------
def cpu_seconds() -> float:
    """CPU time (user + system) of this process, its live descendants (Linux /proc; elsewhere this process only)
    and its ended children."""
    try:
        stats = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    text = (entry / "stat").read_text()
                except OSError:  # ended meanwhile
                    continue
                fields = text[text.rindex(")") + 2 :].split()  # state, ppid, ..., utime (12th), stime (13th)
                stats[int(entry.name)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
        ours, total, grew = {os.getpid()}, 0, True
        while grew:
            grew = False
            for pid, (ppid, _) in stats.items():
                if ppid in ours and pid not in ours:
                    ours.add(pid)
                    grew = True
        total = sum(stats[pid][1] for pid in ours if pid in stats)
        if os.getpid() not in stats:
            raise ValueError("no /proc entry for this process")
    except (OSError, ValueError, IndexError):
        return time.process_time() + _reaped()
    return total / CLK + _reaped()


def _reaped() -> float:
    """CPU time of the children that have ended and been waited for (their time leaves /proc with them)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not Linux
        return 0.0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(batches: Any, device: torch.device, warm_s: float, seconds: float, budget: float) -> dict[str, Any]:
    """img/s over whole batches spanning at least ``seconds`` (after two batches and ``warm_s``), the device
    synchronized at both edges, and the CPU cores used over that span; ``cut`` when the budget ended it."""
    start = time.perf_counter()
    deadline, n, k, t0, c0, c1, now = start + budget, 0, 0, None, 0.0, 0.0, start
    try:
        for images in batches:
            if t0 is None:
                k += 1
                if k >= 2 and time.perf_counter() - start >= warm_s:
                    G.synchronize(device)
                    t0, c0, k = time.perf_counter(), cpu_seconds(), 0
                continue
            n, k = n + len(images), k + 1
            now = time.perf_counter()
            if (now - t0 >= seconds and k >= 2) or now > deadline:
                break
        G.synchronize(device)
        now, c1 = time.perf_counter(), cpu_seconds()  # before the workers are closed
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()
    if t0 is None or not n:
        return {"img_s": None, "cores": None, "batches": 0, "seconds": 0.0, "cut": True}
    wall = now - t0
    return {"img_s": n / wall, "cores": (c1 - c0) / wall, "batches": k, "seconds": wall, "cut": wall < seconds}


class StageFeed:
    """The device stage's batches, epoch after epoch (slipstream's per-epoch order under SEED, whole batches):
    host parts in ``workers`` threads, at most ``2 * workers`` batches ahead; device parts in one thread on a
    side CUDA stream, ``prefetch`` finished batches ahead (bounded device memory). Iterating yields device
    tensors whose work the consumer's current stream waits for (events, not host syncs); ``close()`` stops all."""

    def __init__(self, stage: DeviceStage, n: int, batch: int, workers: int, prefetch: int):
        self.stage, self.n, self.batch, self.workers = stage, n, batch, workers
        self.device = stage.device
        self.cuda = self.device.type == "cuda"
        self.done = queue.Queue(maxsize=prefetch)
        self.stop = threading.Event()
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="host")
        self.thread = threading.Thread(target=self._device_loop, name="device", daemon=True)
        self.thread.start()

    def _orders(self) -> Any:
        for epoch in itertools.count():
            order = permutation(self.n, epoch)
            for s in range(0, self.n - self.batch + 1, self.batch):
                yield order[s : s + self.batch], epoch

    def _put(self, item: Any) -> bool:
        while not self.stop.is_set():
            try:
                self.done.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _device_loop(self) -> None:
        try:
            stream = torch.cuda.Stream(device=self.device) if self.cuda else None
            orders, pending = self._orders(), collections.deque()
            while not self.stop.is_set():
                while len(pending) < 2 * self.workers:
                    indices, epoch = next(orders)
                    pending.append(self.pool.submit(self.stage.host, indices, SEED, epoch))
                host = pending.popleft().result(timeout=TIMEOUT)
                if stream is None:
                    item = (self.stage.device_batch(host), None)
                else:
                    with torch.cuda.stream(stream):
                        out = self.stage.device_batch(host)
                        event = torch.cuda.Event()
                        event.record(stream)
                    item = (out, event)
                if not self._put(item):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            self._put(exc)

    def __iter__(self) -> Any:
        try:
            while True:
                item = self.done.get(timeout=TIMEOUT)
                if isinstance(item, BaseException):
                    raise item
                out, event = item
                if event is not None:
                    current = torch.cuda.current_stream(self.device)
                    current.wait_event(event)
                    out.record_stream(current)
                yield out
        finally:
            self.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=TIMEOUT)
        self.pool.shutdown(wait=True, cancel_futures=True)


def with_labels(batches: Any, labels: torch.Tensor) -> Any:
    try:
        for images in batches:
            yield images, labels[: len(images)]
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()


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
            "stage": {},
            "device_only": {},
            "cpu": {},
            "torchvision": {},
            "training": {},
            "verdicts": [],
        }
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
            f"nvJPEG {'yes' if nvjpeg_available(device) else 'no (CPU decoders)'}; device {device}; batch {args.batch}",
            flush=True,
        )

    def stage(self) -> DeviceStage:
        pipeline = [ops.RandomResizedCrop(bi.CROP), ops.RandomHorizontalFlip(), ops.Normalize(IMAGENET_MEAN, IMAGENET_STD)]
        return DeviceStage(ss.open(self.path), "image", pipeline, self.device, dtype="bfloat16", layout="channels_last")

    def feed(self, workers: int) -> StageFeed:
        return StageFeed(self.stage(), self.n, self.args.batch, workers, self.args.prefetch)

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

    def run(self, section: dict[str, Any], key: Any, label: str, make: Any) -> None:
        """One loader run: ``make()`` -> batches, timed; errors are recorded, the others go on."""
        left = self.left(label)
        if not left:
            return
        a = self.args
        try:
            section[key] = timed(make(), self.device, min(1.0, a.seconds), a.seconds, min(LOADER_CAP, left))
        except Exception as exc:  # noqa: BLE001 - reported
            section[key] = {"error": f"{type(exc).__name__}: {exc}"}
        print(f"  {label:<44} {show(section[key])}", flush=True)
        self.save()

    # (1) --------------------------------------------------------------------------------------------
    def device_stage(self) -> None:
        print(f"\n(1) device stage alone: RandomResizedCrop {bi.CROP} + flip + normalize, bf16 channels_last, prefetch {self.args.prefetch}")
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
        print(f"\n(2) CPU pipelines: RandomResizedCrop {bi.CROP} + flip + ToCHW (uint8), {w} workers")
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
    def train(self, name: str) -> None:
        a, device = self.args, self.device
        title = TITLES.get(name, name) if self.tv is not None else "tiny CNN (no torchvision)"
        rows = self.results["training"][name] = {"title": title}
        torch.manual_seed(SEED)
        model = G.make_model(name, self.tv, device)
        labels = torch.randint(0, 1000, (a.batch,), device=device)
        print(f"\n(4) {title}: SGD, bf16 autocast, channels_last, batch {a.batch}, {a.steps} timed steps after {a.warmup}", flush=True)

        def measure(key: str, label: str, step: Any, make: Any, ceiling: str | None) -> None:
            left = self.left(f"{title} {label}", need=5.0)
            if not left:
                return
            wall, c0 = time.perf_counter(), cpu_seconds()
            try:
                got = G.train_rate(step, make(), a.warmup, a.steps, min(TRAIN_CAP, left), device)
                got["cores"] = (cpu_seconds() - c0) / (time.perf_counter() - wall)  # the whole run, warm-up included
                base = (rows.get(ceiling) or {}).get("img_s") if ceiling else None
                got["fraction"] = got["img_s"] / base if base and got["img_s"] else None
            except Exception as exc:  # noqa: BLE001 - reported
                got = {"error": f"{type(exc).__name__}: {exc}"}
            rows[key] = got
            share = f" = {got['fraction']:.1%} of {ceiling}" if got.get("fraction") is not None else ""
            print(f"  {label:<44} {show(got)}{share}", flush=True)
            self.save()

        fstep = G.make_step(model, device, normalized=True)
        batches = iter(self.feed(1))
        first = next(batches)  # one real batch of the device stage's output, kept on the device
        batches.close()
        measure("ceiling", "ceiling: one bf16 batch on the device", fstep, lambda x=first: itertools.repeat((x, labels)), None)
        w = a.train_host_workers
        measure("device_stage", f"fed by the device stage ({w} host threads)", fstep, lambda: with_labels(iter(self.feed(w)), labels), "ceiling")
        del first
        ustep = G.make_step(model, device)
        images = torch.randint(0, 256, (a.batch, 3, bi.CROP, bi.CROP), dtype=torch.uint8, device=device)
        measure("ceiling_uint8", "ceiling: one uint8 batch (bench_gpu_feed's)", ustep, lambda x=images: itertools.repeat((x, labels)), None)

        def cpu_feed() -> Any:
            loader = self.cpu_loader("process", self.cpu_workers)
            try:
                yield from G.on_device(G.endless(loader), device)
            finally:
                G.close_loader(loader)

        if "process" in BACKENDS:
            measure("cpu_process", f"fed by slipstream process ({self.cpu_workers} workers)", ustep, cpu_feed, "ceiling_uint8")
        del model, fstep, ustep, images
        if device.type == "cuda":
            torch.cuda.empty_cache()

    # the report ---------------------------------------------------------------------------------------
    def report(self) -> None:
        r = self.results
        print("\nimg/s (CPU cores used):")
        rows = [[f"device stage, {w} host thread(s)", cell(v)] for w, v in r["stage"].items()]
        rows.append(["device part only", cell(r.get("device_only"))])
        if "device_only_tf32" in r:
            rows.append(["device part only, TF32", cell(r["device_only_tf32"])])
        rows += [[f"CPU pipeline, slipstream {b} ({self.cpu_workers} workers)", cell(v)] for b, v in r["cpu"].items()]
        if "skipped" in r["torchvision"]:
            rows.append(["torchvision per-image", "skipped"])
        else:
            rows += [[f"torchvision {k}", cell(v)] for k, v in r["torchvision"].items()]
        G.grid(["run", "img/s (cores)"], rows)
        training = [
            [rows_["title"]] + [cell(rows_.get(k), fraction=True) for k in ("ceiling", "device_stage", "ceiling_uint8", "cpu_process")]
            for rows_ in r["training"].values()
        ]
        if training:
            print("\ntraining, img/s (cores) and fraction of the ceiling:")
            G.grid(["model", "ceiling (bf16)", "device stage", "ceiling (uint8)", "CPU process"], training)

        verdicts = Verdicts(label_width=52, value_width=9, detail=True)
        print()
        within = [v for v in r["stage"].values() if v.get("img_s") and v.get("cores") is not None and v["cores"] <= STAGE_CORES]
        best = max(within, key=lambda v: v["img_s"], default=None)
        label = f"device stage img/s within {STAGE_CORES:g} CPU cores (best run)"
        if best is not None:
            verdict(label, best["img_s"], STAGE_GOAL, verdicts, unit=" img/s")
        else:
            verdicts.append(f"MISS  {label}: no run within {STAGE_CORES:g} cores")
            print(f"  {verdicts[-1]}")
        for name, goal in GOALS.items():
            if name not in r["training"]:
                continue
            fed = r["training"][name].get("device_stage") or {}
            label = f"{r['training'][name]['title']} fed by the device stage / ceiling"
            if fed.get("fraction") is not None:
                verdict(label, 100 * fed["fraction"], 100 * goal, verdicts, unit="%")
            else:
                verdicts.append(f"MISS  {label}: not measured ({fed.get('error', 'skipped')})")
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
    bench.device_stage()
    bench.cpu()
    bench.torchvision()
    for name in args.models:
        if bench.left(name, need=10.0):
            bench.train(name)
    bench.report()
    return 0


if __name__ == "__main__":
    sys.exit(main())
