"""Benchmark: the image pipeline reading from object storage (a local S3 with added latency) against local files.

Data: the first ``--images`` (default 5,000, as ``bench_gpu_feed.py``: an epoch of seconds, in which the
first batch weighs little) ImageNet-like JPEGs of ``bench_images.py`` (made once under ``--cache``, shared
with it), three ways (``--sources packed,parquet,tar``, default all):

- packed, as ``bench_images`` packs them (``F.Image(codec="jpeg", quality=90, max_side=512)`` and an
  ``F.Int()`` label) into a sharded folder: ``ss.write(folder, ..., page_size=--page-size,
  shard_size=--shard-size)`` (default 8 MiB pages, the writer's default, in 32 MB shards: about 190 MB, 23
  pages in 6 shards; kept under ``--cache`` and rewritten when the writer changes);
- read in place, the files of ``bench_inplace.image_files`` (made once under ``--cache``, shared with
  ``bench_inplace.py``), holding the original JPEG bytes of the same images: a hub-style folder of
  Parquet files of 250 rows (a binary ``image`` and an int ``label`` column, one row group each: files
  of about the tar shards' size, as moto reads a whole object for each ranged read of it, so one
  large object would charge this machine's CPU for a test server's copying) and WebDataset tar shards of 250 samples
  (members ``<key>.jpg`` and ``<key>.cls``, read as the fields ``jpg`` and ``cls``).

Storage: moto's S3 server and, in front of it, a proxy that waits ``--latency`` seconds (default 0.05)
before forwarding each request (``tools/s3local.py``); both are child processes of this one, on this
machine's CPUs. The folder is uploaded to ``s3://bench-remote/jpeg/``, the Parquet files under
``s3://bench-remote/parquet/`` and the shards under ``s3://bench-remote/tar/`` (straight to the server),
and the S3 client goes through the proxy (``AWS_ENDPOINT_URL``). Their CPU time is measured (psutil) and
reported apart: a real network and store would not charge it to the client machine, and on a
two-core machine it comes out of the loader's share.

Pipeline everywhere: ``ss.DataLoader(ds.map(image=[ops.RandomResizedCrop(224),
ops.RandomHorizontalFlip(), ops.ToCHW()]), batch_size=64, order="quasi_random", seed=0, workers=2)``
(the thread backend; for the tar shards the image field is ``jpg`` and the label ``cls``), each batch
turned into tensors with ``torch.from_numpy``, over

(a) local: ``ss.open(folder)``;
(b) remote, cold cache: ``ss.open("s3://...", cache_dir=<a fresh empty folder>, readahead=R)`` (the
    loader hints the pages of the batches ahead, and up to R downloads run at once);
(c) remote, warm cache: the same with a cache folder filled by the warm-up epoch; a fresh ``ss.open``
    each epoch, so only the disk cache is reused, not the pages a previous dataset kept in memory;
(d) local Parquet: ``ss.open("parquet/", fields=["image", "label"])``;
(e) remote Parquet, cold cache: ``ss.open("s3://bench-remote/parquet/", ...)`` with a fresh empty cache
    folder each epoch (the footers are read at open; each row group's columns are one ranged read);
(f) local tar: ``ss.open([shard, ...], fields=["jpg", "cls"])``;
(g) remote tar, cold cache: ``ss.open("s3://bench-remote/tar/", ...)`` with a fresh empty cache folder
    each epoch: the open makes each shard's index by one pass over its headers (a shard of small
    members is downloaded whole by it), then the epoch downloads the parts;
(h) remote tar, cold cache, index cached: a fresh cache folder each epoch into which the ``tarindex/``
    folder made by one open before the runs is copied: the open reads no shard, the epoch downloads
    only the parts.

Each epoch opens the data and makes its loader ("open ms": ``ss.open`` + ``DataLoader``; for S3 a new
client, the listing or the index's GET, the footers or the tar index pass, and the first page, which
the loader reads to learn the batch layout), then takes one whole epoch from ``iter()``: img/s and "1st
batch ms" count from there; "img/s after 1st" leaves the first batch out (the steady rate); "img/s with
open" counts the open too (where the tar index pass shows). Traffic, from the proxy's counters over the
epoch (every request the client sent, the shards' size checks included): requests/s and MB/s ("open
MB": what the open downloaded); "GETs" are the ranged page reads the fetcher sent (the index pass's
reads too), "hit rate" the fetcher's (``ds.remote_stats()``): the page reads served at once from memory
or the disk cache (read ahead, in a cold epoch) over all page reads; the rest either waited for a
read-ahead download under way or downloaded the page themselves. "client CPU" is this process's CPU
time (all its threads) per image over the epoch (from ``iter()``); "S3 CPU" that of the server and
proxy children.

Measuring: one warm-up epoch per run (the warm run's fills its cache), then ``--repeats`` rounds in
rotating order (local, cold, warm, ...) to spread the machine's noise; figures are medians over
repeats, ratios the medians of per-round ratios, each remote run against the local run of its own
format. ``--readahead 8,4,16``: the first value is used for every remote run; the others add cold
runs of the folder (info). Goals (2 workers, img/s from ``iter()``): every cold run ((b), (e), (g),
(h)) >= 85% of its local run's, and (c) >= 95% of (a)'s. Info: the ratios after the first batch and
with the open counted, the cold ratio with the server's and proxy's CPU given back (an estimate: epoch
seconds minus their CPU-seconds over the CPU count, fair when the epoch keeps every core busy), and
the ratio of client CPU per image.

Run:  python benchmarks/bench_remote.py [--quick] [--repeats N] [--images N] [--latency S]
                                        [--readahead 8[,4,16]] [--page-size 8MiB] [--shard-size 32MB]
                                        [--sources packed,parquet,tar] [--cache DIR] [--rebuild] [--json OUT]
About 11 minutes on two cores shared with other load once the images and files exist (``--sources packed``
about 2.5 on quiet ones; making 5,000 images takes about a minute and a half, once); ``--quick`` (320
images, 1 MiB pages in 4 MB shards, 1 repeat) takes several seconds after the imports and the server's
start. Needs torch, pillow, pyarrow, scikit-image, s3fs, moto[server], boto3 and psutil
(``pip install -e '.[bench]'``).
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
import bench_inplace
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
PARQUET_PREFIX, TAR_PREFIX = "parquet", "tar"
PARQUET_URL, TAR_URL = f"s3://{BUCKET}/{PARQUET_PREFIX}/", f"s3://{BUCKET}/{TAR_PREFIX}/"
SOURCES = ("packed", "parquet", "tar")
FIELDS = {"packed": ("image", "label"), "parquet": ("image", "label"), "tar": ("jpg", "cls")}  # (image, label) fields
# cold: remote with an empty cache, 50 ms per request, at least 0.85x the same data read locally (packed and in place);
# warm: a filled cache is read at nearly local speed
GOALS = {"cold": 0.85, "warm": 0.95}
LAYOUT = 1  # bump when the folder's recipe changes: an old folder is rewritten


# -- the data --------------------------------------------------------------------------------------
def ensure_folder(cache: Path, n: int, page_size: int, shard_size: int, rebuild: bool) -> tuple[Path, float | None]:
    """The sharded folder of the first ``n`` images (made once per writer version and layout)."""
    root, _ = bi.ensure_images(cache, n, False)  # (made again by main with --rebuild)
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


def ensure_inplace(cache: Path, n: int, rebuild: bool) -> dict[str, Any]:
    """``bench_inplace.image_files`` of the first ``n`` images (the same ones as the folder's): the Parquet file
    and the tar shards (made once; again when the images are newer than them, or with ``rebuild``)."""
    root, _ = bi.ensure_images(cache, n, False)
    folder = ss.imagefolder(root)
    samples = [folder.samples[k] for k in bi.subset(folder, n)]
    files = bench_inplace.image_files(cache, samples)
    made = (cache / "images.json").stat().st_mtime_ns
    paths = [files["packed"], files["parquet"], *files["parquet_parts"], *files["shards"]]
    if rebuild or any(p.stat().st_mtime_ns < made for p in paths):
        for p in paths:
            p.unlink()
        files = bench_inplace.image_files(cache, samples)
    return files


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
def epoch_run(
    open_data: Callable[[], Any], storage: Storage, after: Callable[[], None] | None = None,
    before: Callable[[], None] | None = None, image: str = "image", label: str = "label",
):  # fmt: skip
    """One epoch of a freshly opened dataset, its fields ``image`` (through the pipeline) and ``label``; ``before``
    runs ahead of the open, untimed; returns (images, seconds from iter(), the other figures)."""

    def run():
        if before is not None:
            before()
        traffic0 = storage.traffic()
        t0 = time.perf_counter()
        ds = open_data()
        try:
            with ss.DataLoader(
                ds.map(**{image: bi.pipeline()}), batch_size=BATCH, order="quasi_random", seed=SEED, workers=WORKERS
            ) as loader:
                traffic1, cpu1, s3cpu1 = storage.traffic(), time.process_time(), storage.cpu()
                t1 = time.perf_counter()
                it = iter(loader)
                batch = next(it)
                images, _labels = torch.from_numpy(batch[image]), torch.from_numpy(batch[label])
                t2 = time.perf_counter()
                first_n = n = len(images)
                for batch in it:
                    images, _labels = torch.from_numpy(batch[image]), torch.from_numpy(batch[label])
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
            "open_bytes": traffic1[1] - traffic0[1],
            "requests": traffic3[0] - traffic1[0],
            "bytes": traffic3[1] - traffic1[1],
            "fetcher": stats,
        }
        return n, seconds, figures

    return run


def cold_run(storage: Storage, scratch: Path, readahead: int, source: str = "packed", tarindex: Path | None = None):
    """Remote ``source`` (see ``SOURCES``), each epoch with a fresh cache folder (removed afterwards): empty, or
    holding a copy of ``tarindex`` (a ``tarindex/`` folder an open of the shards made) as its ``tarindex/``."""
    url = {"packed": URL, "parquet": PARQUET_URL, "tar": TAR_URL}[source]
    image, label = FIELDS[source]
    fields = None if source == "packed" else [image, label]
    state: dict[str, Path] = {}

    def make():
        state["dir"] = Path(tempfile.mkdtemp(prefix="cold-", dir=scratch))
        if tarindex is not None:
            shutil.copytree(tarindex, state["dir"] / "tarindex")

    def open_data():
        return ss.open(url, fields=fields, cache_dir=state["dir"], readahead=readahead)

    return epoch_run(
        open_data,
        storage,
        after=lambda: shutil.rmtree(state.pop("dir"), ignore_errors=True),
        before=make,
        image=image,
        label=label,
    )


def tar_index(scratch: Path, readahead: int) -> Path:
    """The ``tarindex/`` folder an open of the remote shards makes in an empty cache folder (kept for the runs)."""
    folder = scratch / "tarindex-made"
    ss.open(TAR_URL, fields=list(FIELDS["tar"]), cache_dir=folder, readahead=readahead)
    made = folder / "tarindex"
    if not made.is_dir() or not any(made.iterdir()):
        raise RuntimeError(f"{made}: opening {TAR_URL} with cache_dir={folder} left no tar index there")
    return made


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
        "img/s with open": [r[0] / (r[1] + r[2]["open_s"]) for r in results],
        "1st batch ms": per_repeat(results, "first_s", 1e3),
        "open ms": per_repeat(results, "open_s", 1e3),
        "client CPU ms/img": [1e3 * r[2]["client_cpu_s"] / r[0] for r in results],
        "S3 CPU ms/img": [1e3 * r[2]["s3_cpu_s"] / r[0] for r in results],
    }
    if remote:
        out["requests/s"] = [r[2]["requests"] / r[1] for r in results]
        out["MB/s"] = [r[2]["bytes"] / 1e6 / r[1] for r in results]
        out["open MB"] = [r[2]["open_bytes"] / 1e6 for r in results]
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
    parser.add_argument("--sources", default=",".join(SOURCES), help=f"which data to run, of {', '.join(SOURCES)} (default all)")
    parser.add_argument(
        "--cache",
        type=Path,
        default=bi.DEFAULT_CACHE,
        help=f"where the images, the folder and the in-place files are kept (default {bi.DEFAULT_CACHE})",
    )
    parser.add_argument("--rebuild", action="store_true", help="make the images, the folder and the in-place files again")
    parser.add_argument("--json", type=Path, default=None, help="write the figures there as JSON")
    args = parser.parse_args(argv)
    repeats = args.repeats or (1 if args.quick else 7)
    n = args.images or (N_QUICK if args.quick else N_IMAGES)
    page_size = parse_size(args.page_size or ("1MiB" if args.quick else "8MiB"), "--page-size")
    shard_size = parse_size(args.shard_size or ("4MB" if args.quick else "32MB"), "--shard-size")
    readaheads = [int(x) for x in str(args.readahead).split(",") if x.strip()]
    if not readaheads or min(readaheads) < 1 or len(set(readaheads)) != len(readaheads):
        parser.error("--readahead takes distinct positive numbers, such as 8 or 8,4,16")
    sources = [x.strip() for x in str(args.sources).split(",") if x.strip()]
    if not sources or any(x not in SOURCES for x in sources) or len(set(sources)) != len(sources):
        parser.error(f"--sources takes distinct names of {', '.join(SOURCES)}, such as packed,tar; got {args.sources!r}")
    set_footing()

    start = time.perf_counter()
    args.cache.mkdir(parents=True, exist_ok=True)
    bi.ensure_images(args.cache, n, args.rebuild)
    folder = written = files = None
    local_files: list[Path] = []
    if "packed" in sources:
        folder, written = ensure_folder(args.cache, n, page_size, shard_size, args.rebuild)
        nbytes, nshards, npages = describe_folder(folder)
        local_files += [p for p in folder.iterdir() if p.is_file()]
    if "parquet" in sources or "tar" in sources:
        files = ensure_inplace(args.cache, n, args.rebuild)
        local_files += (files["parquet_parts"] if "parquet" in sources else []) + (files["shards"] if "tar" in sources else [])
    for path in local_files:
        path.read_bytes()  # into the page cache, as local data read before would be
    scratch = Path(tempfile.mkdtemp(prefix="slipstream-bench-remote-"))
    storage = Storage(args.latency)
    try:
        t0 = time.perf_counter()
        if folder is not None:
            s3local.upload(storage.server, folder, BUCKET, PREFIX)
        if "parquet" in sources:
            for part in files["parquet_parts"]:
                s3local.upload(storage.server, part, BUCKET, PARQUET_PREFIX)
        if "tar" in sources:
            for shard in files["shards"]:
                s3local.upload(storage.server, shard, BUCKET, TAR_PREFIX)
        uploaded = time.perf_counter() - t0
        storage.use()
        ra = readaheads[0]
        tarindex = tar_index(scratch, ra) if "tar" in sources else None
        setup = time.perf_counter() - start

        from importlib.metadata import version

        print(versions(f"moto {version('moto')}", f"s3fs {version('s3fs')}", f"pyarrow {version('pyarrow')}"))
        if folder is not None:
            made = f", written now in {written:.1f} s" if written is not None else ""
            print(
                f"data: {n} JPEGs of bench_images (q{bi.QUALITY}, max side {bi.MAX_SIDE}) in {folder}: {nbytes / 1e6:.0f} MB, "
                f"{nshards} shards of {shard_size / 1e6:g} MB, {npages} pages of {page_size / 2**20:g} MiB{made}"
            )
        if files is not None:
            pq_mb = sum(p.stat().st_size for p in files["parquet_parts"]) / 1e6
            tar_mb = sum(s.stat().st_size for s in files["shards"]) / 1e6
            print(
                f"in place: the same {n} images' original JPEGs ({files['bytes'] / 1e6:.0f} MB), {len(files['parquet_parts'])} Parquet "
                f"files of {bench_inplace.SHARD} rows ({pq_mb:.0f} MB) and {len(files['shards'])} tar shards of {bench_inplace.SHARD} "
                f"samples ({tar_mb:.0f} MB), in {files['parquet'].parent}"
            )
        uploads = [u for s, u in (("packed", URL), ("parquet", PARQUET_URL), ("tar", TAR_URL)) if s in sources]
        print(
            f"S3: moto server + proxy adding {1e3 * args.latency:g} ms per request, child processes on this machine's "
            f'{os.cpu_count()} CPUs (their CPU is a cost a real network would not put on the client: "S3 CPU"); '
            f"uploaded to {', '.join(uploads)} in {uploaded:.1f} s"
        )
        print(
            f"pipeline: RandomResizedCrop({bi.CROP}) + flip, uint8 CHW, batch {BATCH}, order quasi_random, {WORKERS} workers "
            f"(threads); readahead {ra}; 1 warm-up epoch per run, then {repeats} rounds in rotating order "
            f"(setup {setup:.0f} s)",
            flush=True,
        )

        runs: dict[str, Callable[[], tuple]] = {}
        if folder is not None:
            runs["local"] = epoch_run(lambda: ss.open(folder), storage)
            runs["cold"] = cold_run(storage, scratch, ra)
            runs["warm"] = warm_run(storage, scratch, ra)
            for k in readaheads[1:]:
                runs[f"cold r{k}"] = cold_run(storage, scratch, k)
        if "parquet" in sources:
            parquet_folder = files["parquet_parts"][0].parent
            runs["parquet local"] = epoch_run(lambda: ss.open(parquet_folder, fields=list(FIELDS["parquet"])), storage)
            runs["parquet cold"] = cold_run(storage, scratch, ra, "parquet")
        if "tar" in sources:
            image, label = FIELDS["tar"]
            runs["tar local"] = epoch_run(
                lambda: ss.open(files["shards"], fields=[image, label]), storage, image=image, label=label
            )
            runs["tar cold"] = cold_run(storage, scratch, ra, "tar")
            runs["tar cold indexed"] = cold_run(storage, scratch, ra, "tar", tarindex=tarindex)
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
        "parquet local": "(d) local Parquet file",
        "parquet cold": "(e) S3 Parquet, cold cache",
        "tar local": "(f) local tar shards",
        "tar cold": "(g) S3 tar, cold cache (index pass)",
        "tar cold indexed": "(h) S3 tar, cold cache, index cached",
    }
    labels.update({f"cold r{k}": f"(b') S3, cold cache, readahead {k}" for k in readaheads[1:]})
    local_of = {"cold": "local", "warm": "local", "parquet cold": "parquet local", "tar cold": "tar local",
                "tar cold indexed": "tar local", **{f"cold r{k}": "local" for k in readaheads[1:]}}  # fmt: skip
    figs = {key: figures_of(results[key], remote=key in local_of) for key in runs}
    print()
    table([(labels[key], figs[key]) for key in runs],
          [("img/s", ".0f"), ("img/s after 1st", ".0f"), ("img/s with open", ".0f"), ("1st batch ms", ".0f"), ("open ms", ".0f")],
          corner="run (one epoch)")  # fmt: skip
    print()
    table([(labels[key], figs[key]) for key in runs],
          [("client CPU ms/img", ".2f"), ("S3 CPU ms/img", ".2f"), ("requests/s", ".1f"), ("MB/s", ".1f"), ("open MB", ".1f"),
           ("GETs", ".0f"), ("hit rate", ".2f")],
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
    with_open = {key: figs[key]["img/s with open"] for key in runs}
    cores = os.cpu_count() or 1

    def discounted(key: str) -> list[float]:
        """img/s of a remote run's epochs with the children's CPU-seconds given back to the loader: seconds - their CPU / CPUs."""
        return [r[0] / max(r[1] - r[2]["s3_cpu_s"] / cores, 1e-9) for r in results[key]]

    ratios: dict[str, float] = {}
    name = {"cold": "cold", "warm": "warm", "parquet cold": "parquet_cold", "tar cold": "tar_cold",
            "tar cold indexed": "tar_cold_indexed", **{f"cold r{k}": f"cold_r{k}" for k in readaheads[1:]}}  # fmt: skip
    for key, local in local_of.items():
        if key not in runs:
            continue
        base = name[key] + "_local"
        ratios[base] = paired(thr[key], thr[local])
        if key.startswith("cold r"):
            continue
        ratios[base + "_after_first"] = paired(after[key], after[local])
        ratios[base + "_with_open"] = paired(with_open[key], with_open[local])
        if key != "warm":
            ratios[base + "_s3_cpu_discounted"] = paired(discounted(key), thr[local]) if psutil is not None else float("nan")
            ratios[f"client_cpu_local_over_{name[key]}"] = paired(
                figs[local]["client CPU ms/img"], figs[key]["client CPU ms/img"]
            )
    verdicts = Verdicts(label_width=56, value_width=6, detail=True)
    print()
    goals = {"cold": "(b) S3 cold / (a) local", "warm": "(c) S3 warm / (a) local", "parquet cold": "(e) S3 Parquet cold / (d) local",
             "tar cold": "(g) S3 tar cold / (f) local", "tar cold indexed": "(h) S3 tar cold, index cached / (f) local"}  # fmt: skip
    for key, label in goals.items():
        if key in runs:
            verdict(f"{label}, img/s", ratios[name[key] + "_local"], GOALS["warm" if key == "warm" else "cold"], verdicts)
    for key in goals:
        if key in runs:
            base, pair = name[key] + "_local", f"{labels[key][:3]} / {labels[local_of[key]][:3]}"
            verdict(f"{pair}, after the 1st batch", ratios[base + "_after_first"], None, verdicts)
            verdict(f"{pair}, with the open", ratios[base + "_with_open"], None, verdicts)
            if key != "warm" and psutil is not None:
                verdict(f"{pair}, S3 CPU given back (estimate)", ratios[base + "_s3_cpu_discounted"], None, verdicts)
            if key != "warm":
                verdict(f"client CPU per image, {labels[local_of[key]][:3]} / {labels[key][:3]}",
                        ratios[f"client_cpu_local_over_{name[key]}"], None, verdicts)  # fmt: skip
    for k in readaheads[1:]:
        if f"cold r{k}" in runs:
            verdict(f"(b') cold, readahead {k} / (a) local", ratios[f"cold_r{k}_local"], None, verdicts)
    med = {key: {name_: statistics.median(values) for name_, values in figs[key].items()} for key in runs}
    for key in ("cold", "parquet cold", "tar cold", "tar cold indexed"):
        if key in runs:
            m, local = med[key], med[local_of[key]]
            print(
                f"  {labels[key][:3]} epoch: {m['requests/s']:.1f} requests/s, {m['MB/s']:.1f} MB/s, hit rate {m['hit rate']:.2f}, "
                f"{m['GETs']:.0f} GETs, 1st batch {m['1st batch ms']:.0f} ms after iter() (+ {m['open ms']:.0f} ms to open, "
                f"{m['open MB']:.1f} MB; local {local['1st batch ms']:.0f} + {local['open ms']:.0f} ms) (medians)"
            )
    if "warm" in runs:
        print(f"  (c) epoch: hit rate {med['warm']['hit rate']:.2f}, {med['warm']['requests/s']:.1f} requests/s (medians)")
    summary(verdicts, start)

    if args.json is not None:
        config: dict[str, Any] = {
            "images": n,
            "repeats": repeats,
            "latency_s": args.latency,
            "readahead": readaheads,
            "sources": sources,
            "batch": BATCH,
            "workers": WORKERS,
            "cpus": os.cpu_count(),
            "upload_s": uploaded,
        }
        if folder is not None:
            config.update(page_size=page_size, shard_size=shard_size, bytes=nbytes, shards=nshards, pages=npages)
        if files is not None:
            config.update(
                jpeg_bytes=files["bytes"], parquet_bytes=sum(p.stat().st_size for p in files["parquet_parts"]), row_group=bench_inplace.ROW_GROUP,
                tar_shards=len(files["shards"]), tar_samples=bench_inplace.SHARD,
                tar_bytes=sum(s.stat().st_size for s in files["shards"]),
            )  # fmt: skip
        out: dict[str, Any] = {"config": config, "runs": {key: {"median": med[key], "repeats": figs[key]} for key in runs}}
        if folder is not None:
            cold = med["cold"]
            out["cold"] = {
                "img_s": cold["img/s"],
                "requests_s": cold["requests/s"],
                "mb_s": cold["MB/s"],
                "hit_rate": cold["hit rate"],
                "first_batch_ms": cold["1st batch ms"],
                "open_ms": cold["open ms"],
            }
            out["warm"] = {
                "img_s": med["warm"]["img/s"],
                "hit_rate": med["warm"]["hit rate"],
                "first_batch_ms": med["warm"]["1st batch ms"],
            }
            out["local"] = {"img_s": med["local"]["img/s"], "first_batch_ms": med["local"]["1st batch ms"]}
        out.update(ratios=ratios, others_cpus=others, verdicts=list(verdicts))
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
