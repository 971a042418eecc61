"""Benchmark: the image pipeline reading from object storage (a local S3 with added latency) against local files.

Data: the first ``--images`` (default 5,000, as ``bench_gpu_feed.py``: an epoch of seconds, in which the
first batch weighs little) ImageNet-like JPEGs of ``bench_images.py`` (made once under ``--cache``, shared
with it), packed as ``bench_images`` packs them (``F.Image(codec="jpeg", quality=90, max_side=512)`` and an
``F.Int()`` label) into a sharded folder: ``ss.write(folder, ..., page_size=--page-size,
shard_size=--shard-size)`` (default 8 MiB pages, the writer's default, in 32 MB shards: about 190 MB, 23
pages in 6 shards; kept under ``--cache`` and rewritten when the writer changes).

Storage: moto's S3 server and, in front of it, a proxy that waits ``--latency`` seconds (default 0.05)
before forwarding each request (``tools/s3local.py``); both are child processes of this one, on this
machine's CPUs. The folder is uploaded to ``s3://bench-remote/jpeg/`` (straight to the server), and the
S3 client goes through the proxy (``AWS_ENDPOINT_URL``). Their CPU time is measured (psutil) and
reported apart: a real network and store would not charge it to the client machine, and on a
two-core machine it comes out of the loader's share.

Pipeline everywhere: ``ss.DataLoader(ds.map(image=[ops.RandomResizedCrop(224),
ops.RandomHorizontalFlip(), ops.ToCHW()]), batch_size=64, order="quasi_random", seed=0, workers=2)``
(the thread backend), each batch turned into tensors with ``torch.from_numpy``, over

(a) local: ``ss.open(folder)``;
(b) remote, cold cache: ``ss.open("s3://...", cache_dir=<a fresh empty folder>, readahead=R)`` (the
    loader hints the pages of the batches ahead, and up to R downloads run at once);
(c) remote, warm cache: the same with a cache folder filled by the warm-up epoch; a fresh ``ss.open``
    each epoch, so only the disk cache is reused, not the pages a previous dataset kept in memory.

Each epoch opens the data and makes its loader ("open ms": ``ss.open`` + ``DataLoader``; for S3 a new
client, the index's GET, and the first page, which the loader reads to learn the batch layout), then
takes one whole epoch from ``iter()``: img/s and "1st batch ms" count from there; "img/s after 1st"
leaves the first batch out (the steady rate). Traffic, from the proxy's counters over the epoch (every
request the client sent, the shards' size checks included): requests/s and MB/s; "GETs" are the
ranged page reads the fetcher sent, "hit rate" the fetcher's (``ds.remote_stats()``): the page reads
served at once from memory or the disk cache (read ahead, in a cold epoch) over all page reads; the
rest either waited for a read-ahead download under way or downloaded the page themselves. "client
CPU" is this process's CPU time (all its threads) per image over the epoch; "S3 CPU" that of the
server and proxy children.

Measuring: one warm-up epoch per run (the warm run's fills its cache), then ``--repeats`` rounds in
rotating order (local, cold, warm, ...) to spread the machine's noise; figures are medians over
repeats, ratios the medians of per-round ratios. ``--readahead 8,4,16``: the first value is used for
(b) and (c); the others add cold runs (info). Goals (2 workers): (b) >= 80% and (c) >= 95% of (a)'s
img/s. Info: the cold ratio with the server's and proxy's CPU given back (an estimate: epoch seconds
minus their CPU-seconds over the CPU count, fair when the epoch keeps every core busy), and the ratio
of client CPU per image.

Run:  python benchmarks/bench_remote.py [--quick] [--repeats N] [--images N] [--latency S]
                                        [--readahead 8[,4,16]] [--page-size 8MiB] [--shard-size 32MB]
                                        [--cache DIR] [--rebuild] [--json OUT]
About 2.5 minutes on two cores once the images exist (making 5,000 takes about a minute, once);
``--quick`` (320 images, 1 MiB pages in 4 MB shards, 1 repeat) takes a few seconds after the imports and
the server's start. Needs torch, pillow, simplejpeg, pyarrow, scikit-image, s3fs, moto[server], boto3
and psutil (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import bench_images as bi  # first: it imports _common, which makes slipstream importable and exits without torch
import torch
from _common import SEED, Verdicts, paired, rates, set_footing, summary, table, verdict, versions

import slipstream as ss
from slipstream import fields as F
from slipstream.core.sizes import parse_size

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
import s3local

try:
    import psutil
except ImportError:  # the S3 children's CPU is then not measured
    psutil = None

N_IMAGES = 5000
N_QUICK = 320
BATCH = bi.BATCH
WORKERS = bi.WORKERS
BUCKET, PREFIX = "bench-remote", "jpeg"
URL = f"s3://{BUCKET}/{PREFIX}/"
GOALS = {"cold": 0.80, "warm": 0.95}
LAYOUT = 1  # bump when the folder's recipe changes: an old folder is rewritten


# -- the data --------------------------------------------------------------------------------------
def ensure_folder(cache: Path, n: int, page_size: int, shard_size: int, rebuild: bool) -> tuple[Path, float | None]:
    """The sharded folder of the first ``n`` images (made once per writer version and layout)."""
    root, _ = bi.ensure_images(cache, n, rebuild)
    folder = cache / f"remote-jpeg{bi.MAX_SIDE}-n{n}-p{page_size}-s{shard_size}"
    stamp = folder.with_suffix(".json")
    key = {"layout": LAYOUT, "fingerprint": bi.source_fingerprint(), "images": (cache / "images.json").stat().st_mtime_ns}
    if not rebuild and (folder / "index.json").exists() and stamp.exists() and json.loads(stamp.read_text()) == key:
        try:
            if len(ss.open(folder)) == n:
                return folder, None
        except Exception:  # noqa: BLE001, S110 - an unreadable old folder is made again
            pass
    shutil.rmtree(folder, ignore_errors=True)
    images = ss.imagefolder(root)
    idx = bi.subset(images, n)
    data = images if n == len(images) else ss.obsview(images, idx)
    field = F.Image(codec="jpeg", quality=bi.QUALITY, max_side=bi.MAX_SIDE)
    t0 = time.perf_counter()
    ss.write(folder, data, fields={"image": field, "label": F.Int()}, workers=WORKERS, progress=False,
             page_size=page_size, shard_size=shard_size)  # fmt: skip
    stamp.write_text(json.dumps(key))
    return folder, time.perf_counter() - t0


def describe_folder(folder: Path) -> tuple[int, int, int]:
    """(bytes, shards, pages) of a sharded folder, from its index."""
    index = json.loads((folder / "index.json").read_text())
    shards = index["shards"]
    return sum(int(s["bytes"]) for s in shards), len(shards), sum(len(s["pages"]) for s in shards)


# -- the S3 side -------------------------------------------------------------------------------------
class Storage:
    """The server and the latency proxy (children of this process): their CPU time and the proxy's counters."""

    def __init__(self, latency: float):
        self.server = s3local.start_server()
        try:
            self.proxy = s3local.start_proxy(self.server.endpoint, latency=latency)
        except BaseException:
            self.server.stop()
            raise
        self.latency = latency
        pids = [self.server._proc.pid, self.proxy._proc.pid]  # s3local keeps the Popen private
        self._procs = [psutil.Process(pid) for pid in pids] if psutil is not None else []

    def use(self) -> None:
        """Point S3 clients made from now on at the proxy (test credentials, region)."""
        os.environ.update(self.server.env())
        os.environ["AWS_ENDPOINT_URL"] = self.proxy.endpoint

    def cpu(self) -> float:
        """CPU-seconds (user + system) the server and the proxy used so far; NaN without psutil."""
        if not self._procs:
            return float("nan")
        return sum(t.user + t.system for t in (p.cpu_times() for p in self._procs))

    def traffic(self) -> tuple[int, int]:
        """(requests, response body bytes) the proxy has forwarded so far."""
        counts = self.proxy.counts()
        return int(counts["requests"]), int(counts["bytes"])

    def close(self) -> None:
        self.proxy.stop()
        self.server.stop()


# -- the runs ----------------------------------------------------------------------------------------
def epoch_run(open_data: Callable[[], Any], storage: Storage, after: Callable[[], None] | None = None):
    """One epoch of a freshly opened dataset; returns (images, seconds from iter(), the other figures)."""

    def run():
        traffic0 = storage.traffic()
        t0 = time.perf_counter()
        ds = open_data()
        try:
            with ss.DataLoader(
                ds.map(image=bi.pipeline()), batch_size=BATCH, order="quasi_random", seed=SEED, workers=WORKERS
            ) as loader:
                traffic1, cpu1, s3cpu1 = storage.traffic(), time.process_time(), storage.cpu()
                t1 = time.perf_counter()
                it = iter(loader)
                batch = next(it)
                images, _labels = torch.from_numpy(batch["image"]), torch.from_numpy(batch["label"])
                t2 = time.perf_counter()
                first_n = n = len(images)
                for batch in it:
                    images, _labels = torch.from_numpy(batch["image"]), torch.from_numpy(batch["label"])
                    n += len(images)
                t3 = time.perf_counter()
            cpu, s3cpu, traffic3 = time.process_time() - cpu1, storage.cpu() - s3cpu1, storage.traffic()
            stats = ds.remote_stats() if getattr(ds, "remote", False) else None
        finally:
            if after is not None:
                after()
        seconds = t3 - t1
        figures = {
            "open_s": t1 - t0,
            "first_s": t2 - t1,
            "after_first_img_s": (n - first_n) / (t3 - t2) if t3 > t2 else float("nan"),
            "client_cpu_s": cpu,
            "s3_cpu_s": s3cpu,
            "open_requests": traffic1[0] - traffic0[0],
            "requests": traffic3[0] - traffic1[0],
            "bytes": traffic3[1] - traffic1[1],
            "fetcher": stats,
        }
        return n, seconds, figures

    return run


def cold_run(storage: Storage, scratch: Path, readahead: int):
    """Remote, each epoch with a fresh empty cache folder (removed afterwards)."""
    state: dict[str, Path] = {}

    def open_data():
        state["dir"] = Path(tempfile.mkdtemp(prefix="cold-", dir=scratch))
        return ss.open(URL, cache_dir=state["dir"], readahead=readahead)

    return epoch_run(open_data, storage, after=lambda: shutil.rmtree(state.pop("dir"), ignore_errors=True))


def warm_run(storage: Storage, scratch: Path, readahead: int):
    """Remote, every epoch with the same cache folder (its warm-up epoch fills it)."""
    folder = scratch / "warm"
    return epoch_run(lambda: ss.open(URL, cache_dir=folder, readahead=readahead), storage)


def measure(runs: dict[str, Callable[[], tuple]], repeats: int) -> dict[str, list[tuple]]:
    """``_common.measure``, with a line of progress per round (a round takes seconds here, not milliseconds)."""
    names = list(runs)
    for name in names:
        runs[name]()
    results: dict[str, list[tuple]] = {name: [] for name in names}
    for r in range(repeats):
        t0 = time.perf_counter()
        for name in names[r % len(names) :] + names[: r % len(names)]:
            gc.collect()
            results[name].append(runs[name]())
        print(f"  round {r + 1}/{repeats}: {time.perf_counter() - t0:.1f} s", flush=True)
    counts = {name: {res[0] for res in rs} for name, rs in results.items()}
    if len({c for cs in counts.values() for c in cs}) != 1:
        raise RuntimeError(f"runs disagree on samples per epoch: {counts}")
    return results


# -- reporting ---------------------------------------------------------------------------------------
def per_repeat(results: list[tuple], key: str, scale: float = 1.0) -> list[float]:
    return [r[2][key] * scale for r in results]


def figures_of(results: list[tuple], remote: bool) -> dict[str, list[float]]:
    """Per-repeat figures of one run, by the names the tables and the JSON use."""
    out = {
        "img/s": rates(results),
        "img/s after 1st": per_repeat(results, "after_first_img_s"),
        "1st batch ms": per_repeat(results, "first_s", 1e3),
        "open ms": per_repeat(results, "open_s", 1e3),
        "client CPU ms/img": [1e3 * r[2]["client_cpu_s"] / r[0] for r in results],
        "S3 CPU ms/img": [1e3 * r[2]["s3_cpu_s"] / r[0] for r in results],
    }
    if remote:
        out["requests/s"] = [r[2]["requests"] / r[1] for r in results]
        out["MB/s"] = [r[2]["bytes"] / 1e6 / r[1] for r in results]
        out["GETs"] = [float(r[2]["fetcher"]["requests"]) for r in results]
        out["hit rate"] = [float(r[2]["fetcher"]["hit_rate"] or 0.0) for r in results]
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"{N_QUICK} images, 1 MiB pages in 4 MB shards, 1 repeat: seconds")
    parser.add_argument("--repeats", type=int, default=None, help="timed epochs per run (default 7, quick 1)")
    parser.add_argument("--images", type=int, default=None, help=f"images per epoch (default {N_IMAGES}, quick {N_QUICK})")
    parser.add_argument("--latency", type=float, default=0.05, help="seconds the proxy adds to each request (default 0.05)")
    parser.add_argument(
        "--readahead", default="8", help="downloads in flight (ss.open's readahead); a list adds cold runs (default 8)"
    )
    parser.add_argument("--page-size", default=None, help="the folder's page size (default 8MiB, quick 1MiB)")
    parser.add_argument("--shard-size", default=None, help="the folder's shard size (default 32MB, quick 4MB)")
    parser.add_argument(
        "--cache",
        type=Path,
        default=bi.DEFAULT_CACHE,
        help=f"where the images and the folder are kept (default {bi.DEFAULT_CACHE})",
    )
    parser.add_argument("--rebuild", action="store_true", help="write the folder again (and the images)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures there as JSON")
    args = parser.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 7)
    n = args.images or (N_QUICK if args.quick else N_IMAGES)
    page_size = parse_size(args.page_size or ("1MiB" if args.quick else "8MiB"), "--page-size")
    shard_size = parse_size(args.shard_size or ("4MB" if args.quick else "32MB"), "--shard-size")
    readaheads = [int(x) for x in str(args.readahead).split(",") if x.strip()]
    if not readaheads or min(readaheads) < 1 or len(set(readaheads)) != len(readaheads):
        parser.error("--readahead takes distinct positive numbers, such as 8 or 8,4,16")
    set_footing()

    start = time.perf_counter()
    args.cache.mkdir(parents=True, exist_ok=True)
    folder, written = ensure_folder(args.cache, n, page_size, shard_size, args.rebuild)
    nbytes, nshards, npages = describe_folder(folder)
    for path in folder.iterdir():
        path.read_bytes()  # into the page cache, as a local dataset read before would be
    scratch = Path(tempfile.mkdtemp(prefix="slipstream-bench-remote-"))
    storage = Storage(args.latency)
    try:
        t0 = time.perf_counter()
        s3local.upload(storage.server, folder, BUCKET, PREFIX)
        uploaded = time.perf_counter() - t0
        storage.use()
        setup = time.perf_counter() - start

        from importlib.metadata import version

        print(versions(f"moto {version('moto')}", f"s3fs {version('s3fs')}"))
        made = f", written now in {written:.1f} s" if written is not None else ""
        print(
            f"data: {n} JPEGs of bench_images (q{bi.QUALITY}, max side {bi.MAX_SIDE}) in {folder}: {nbytes / 1e6:.0f} MB, "
            f"{nshards} shards of {shard_size / 1e6:g} MB, {npages} pages of {page_size / 2**20:g} MiB{made}"
        )
        print(
            f"S3: moto server + proxy adding {1e3 * args.latency:g} ms per request, child processes on this machine's "
            f'{os.cpu_count()} CPUs (their CPU is a cost a real network would not put on the client: "S3 CPU"); '
            f"uploaded to {URL} in {uploaded:.1f} s"
        )
        print(
            f"pipeline: RandomResizedCrop({bi.CROP}) + flip, uint8 CHW, batch {BATCH}, order quasi_random, {WORKERS} workers "
            f"(threads); readahead {readaheads[0]}; 1 warm-up epoch per run, then {repeats} rounds in rotating order "
            f"(setup {setup:.0f} s)",
            flush=True,
        )

        ra = readaheads[0]
        runs = {
            "local": epoch_run(lambda: ss.open(folder), storage),
            "cold": cold_run(storage, scratch, ra),
            "warm": warm_run(storage, scratch, ra),
        }
        for k in readaheads[1:]:
            runs[f"cold r{k}"] = cold_run(storage, scratch, k)
        before = bi.cpu_snapshot()
        results = measure(runs, repeats)
        others = bi.others_share(before, bi.cpu_snapshot())
    finally:
        storage.close()
        shutil.rmtree(scratch, ignore_errors=True)

    labels = {
        "local": "(a) local folder",
        "cold": f"(b) S3, cold cache (readahead {ra})",
        "warm": f"(c) S3, warm cache (readahead {ra})",
    }
    labels.update({f"cold r{k}": f"(b') S3, cold cache, readahead {k}" for k in readaheads[1:]})
    figs = {key: figures_of(results[key], remote=key != "local") for key in runs}
    print()
    table([(labels[key], figs[key]) for key in runs],
          [("img/s", ".0f"), ("img/s after 1st", ".0f"), ("1st batch ms", ".0f"), ("open ms", ".0f")], corner="run (one epoch)")  # fmt: skip
    print()
    table([(labels[key], figs[key]) for key in runs],
          [("client CPU ms/img", ".2f"), ("S3 CPU ms/img", ".2f"), ("requests/s", ".1f"), ("MB/s", ".1f"), ("GETs", ".0f"), ("hit rate", ".2f")],
          corner="run (one epoch)")  # fmt: skip
    if psutil is None:
        print("  (S3 CPU: psutil is not installed)")
    if others is not None:
        noisy = "  NOISY: other load shared the CPUs, expect wide ranges" if others > 0.2 else ""
        print(
            f"  other processes used {others:.2f} of {os.cpu_count()} CPUs while this ran (the S3 children count as ours){noisy}"
        )

    thr = {key: rates(res) for key, res in results.items()}
    after = {key: figs[key]["img/s after 1st"] for key in runs}
    # the cold epochs with the children's CPU-seconds given back to the loader: seconds - their CPU / CPUs
    cores = os.cpu_count() or 1
    discounted = [r[0] / max(r[1] - r[2]["s3_cpu_s"] / cores, 1e-9) for r in results["cold"]]
    ratios = {
        "cold_local": paired(thr["cold"], thr["local"]),
        "warm_local": paired(thr["warm"], thr["local"]),
        "cold_local_after_first": paired(after["cold"], after["local"]),
        "warm_local_after_first": paired(after["warm"], after["local"]),
        "cold_local_s3_cpu_discounted": paired(discounted, thr["local"]) if psutil is not None else float("nan"),
        "client_cpu_local_over_cold": paired(figs["local"]["client CPU ms/img"], figs["cold"]["client CPU ms/img"]),
        **{f"cold_r{k}_local": paired(thr[f"cold r{k}"], thr["local"]) for k in readaheads[1:]},
    }
    verdicts = Verdicts(label_width=52, value_width=6, detail=True)
    print()
    verdict("(b) S3 cold / (a) local, img/s", ratios["cold_local"], GOALS["cold"], verdicts)
    verdict("(c) S3 warm / (a) local, img/s", ratios["warm_local"], GOALS["warm"], verdicts)
    verdict("(b) cold / (a) local, after the 1st batch", ratios["cold_local_after_first"], None, verdicts)
    verdict("(c) warm / (a) local, after the 1st batch", ratios["warm_local_after_first"], None, verdicts)
    if psutil is not None:
        verdict("(b) cold / (a), S3 CPU given back (estimate)", ratios["cold_local_s3_cpu_discounted"], None, verdicts)
    verdict("client CPU per image, (a) local / (b) cold", ratios["client_cpu_local_over_cold"], None, verdicts)
    for k in readaheads[1:]:
        verdict(f"(b') cold, readahead {k} / (a) local", ratios[f"cold_r{k}_local"], None, verdicts)
    med = {key: {name: statistics.median(values) for name, values in figs[key].items()} for key in runs}
    cold = med["cold"]
    print(
        f"  cold epoch: {cold['requests/s']:.1f} requests/s, {cold['MB/s']:.1f} MB/s, hit rate {cold['hit rate']:.2f}, "
        f"1st batch {cold['1st batch ms']:.0f} ms after iter() (+ {cold['open ms']:.0f} ms to open; local "
        f"{med['local']['1st batch ms']:.0f} + {med['local']['open ms']:.0f} ms); warm epoch hit rate {med['warm']['hit rate']:.2f}, "
        f"{med['warm']['requests/s']:.1f} requests/s (medians)"
    )
    summary(verdicts, start)

    if args.json is not None:
        out = {
            "config": {
                "images": n,
                "repeats": repeats,
                "latency_s": args.latency,
                "readahead": readaheads,
                "page_size": page_size,
                "shard_size": shard_size,
                "bytes": nbytes,
                "shards": nshards,
                "pages": npages,
                "batch": BATCH,
                "workers": WORKERS,
                "cpus": os.cpu_count(),
                "upload_s": uploaded,
            },
            "runs": {key: {"median": med[key], "repeats": figs[key]} for key in runs},
            "cold": {
                "img_s": cold["img/s"],
                "requests_s": cold["requests/s"],
                "mb_s": cold["MB/s"],
                "hit_rate": cold["hit rate"],
                "first_batch_ms": cold["1st batch ms"],
                "open_ms": cold["open ms"],
            },
            "warm": {
                "img_s": med["warm"]["img/s"],
                "hit_rate": med["warm"]["hit rate"],
                "first_batch_ms": med["warm"]["1st batch ms"],
            },
            "local": {"img_s": med["local"]["img/s"], "first_batch_ms": med["local"]["1st batch ms"]},
            "ratios": ratios,
            "others_cpus": others,
            "verdicts": list(verdicts),
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
