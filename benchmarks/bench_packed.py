"""Benchmark: packed files (``ss.write`` / ``ss.open``) against plain NumPy and torch baselines.

Every data file lives in a temporary directory under /tmp, removed at the end; everything fits in
RAM and the page cache (about 1.3 GB of files in the full run). Cases:

(1) Random access to raw samples: N uint8 samples of 224x224x3 (150,528 bytes each, stored with
    ``F.Array(dtype=uint8, shape=(224, 224, 3))``) plus an ``F.Int`` label, in a packed file that
    is in the page cache (read once before timing). slipstream:
    ``ss.DataLoader(ss.open(path), batch_size=64, shuffle=True, workers=2)``, batches written into
    its reusable preallocated buffers. Against:
    (i)  the copy limit: ``np.take(X, idx, axis=0, out=buf, mode='clip')`` of the same epoch order
         from an in-memory array of the same bytes (labels too) into one preallocated batch
         buffer, with 1 thread and with 2 threads (each takes half of every batch). The reference
         is the faster of the two in each repeat. Goal: slipstream >= 50% of it (GB/s).
    (ii) ``torch.utils.data.DataLoader`` over one ``.npy`` file per sample (``np.load`` in
         ``__getitem__``, the label from memory), batch 64, shuffle, ``num_workers=2`` (processes,
         default ``persistent_workers=False``, default collate). Ratio reported.
    Info: the same loader with ``workers=0``, and with ``ss.open(path, cache="ram")``.
(2) Small scalar fields: a packed file of N samples with one ``F.Int`` and one ``F.Float``.
    Per-sample cost in microseconds through ``ss.DataLoader(ds, batch_size=1024, shuffle=True)``
    (workers=0) and through a plain ``ds[i]`` loop over the same permutation. Goal: loader <= 2 us
    per sample. Floor: ``ss.DataLoader`` over the same values as in-memory NumPy arrays
    (``{"i": ints, "x": floats}``: one vectorized ``np.take`` per field and batch).
(3) Writer throughput, JPEG: photo-like RGB images of 350x400 (random crops, rescaled and
    flipped, of the photos in ``skimage.data``; smooth synthetic images with noise when
    scikit-image is missing) written with ``F.Image(codec="jpeg", quality=90)`` plus an ``F.Int``,
    ``workers=1`` and ``workers=2``, from arrays (encoded by the writer) and from already-encoded
    JPEG bytes (stored as they are: a header read and a 1/8-scale verification decode, no
    re-encode). Each write includes the writer's fsync. Reference: a bare ``codecs.encode("jpeg", ...)``
    loop (the writer's encoder and settings) (1 thread; 2 threads over halves); the writer's share of it is
    reported (no goal is set for the writer). Images/s, input MB/s (raw pixels) and output MB/s
    (file bytes) are reported.

Footing: ``torch.set_num_threads(1)``; slipstream batches are turned into tensors with
``torch.from_numpy`` (zero-copy) inside the timed loop in (1), so every loader hands out tensors
(the NumPy copy limit hands out arrays); one warm-up epoch per run, then runs take turns (the order
rotates every repeat). Figures are medians over repeats; ratios are medians of the per-repeat
ratios of runs measured back to back, which cancels most of the drift of a noisy machine.

Run:  python benchmarks/bench_packed.py [--quick] [--repeats N] [--cases 123] [--tmp DIR]
``--quick`` takes under 10 s (small files, fewer repeats): a smoke run, whose small writes are
dominated by fixed costs (fsync, thread start), so judge goals on the full run, which takes about
1.5-2 minutes on two cores (a third of it writing the files). Needs torch and the 'files' extra
(pyarrow, pillow); scikit-image is optional (real photos for case 3).
"""

from __future__ import annotations

import argparse
import gc
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import torch

# _common first: it makes slipstream importable from a checkout, and exits with a message when torch is missing
from _common import SEED, Verdicts, measure, paired, permutation, rates, set_footing, summary, table, verdict, versions
from torch.utils.data import DataLoader as TorchLoader
from torch.utils.data import Dataset

import slipstream as ss
from slipstream import fields as F
from slipstream.images import compiled
from slipstream.images.encoded import codecs

SHAPE = (224, 224, 3)
SAMPLE_BYTES = int(np.prod(SHAPE))  # 150,528
BATCH_1 = 64
BATCH_2 = 1024
IMAGE_HW = (350, 400)
QUALITY = 90

# One run: (limit) -> (samples, seconds). ``limit`` (batches) makes a short warm-up; None = whole epoch.
Run = Callable[..., "tuple[int, float]"]


# -- module-level datasets (torch workers pickle them under any start method) ----------------------
class NpyFiles(Dataset):
    """One ``.npy`` file per sample, loaded with ``np.load`` in ``__getitem__``; labels from memory."""

    def __init__(self, folder: str, labels: np.ndarray):
        self.folder, self.labels = folder, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        return np.load(os.path.join(self.folder, f"{i:06d}.npy")), int(self.labels[i])


# -- measuring --------------------------------------------------------------------------------
def micros(res: list[tuple[int, float]]) -> list[float]:
    return [1e6 * t / s for s, t in res]


def warm_page_cache(paths: list[Path]) -> None:
    """Read files once so that they are in the page cache before anything is timed."""
    for path in paths:
        with open(path, "rb", buffering=0) as handle:
            while handle.read(8 << 20):
                pass


# -- case (1): random access to raw 150 KB samples ----------------------------------------------
def make_raw(n: int) -> tuple[np.ndarray, np.ndarray]:
    """n distinct uint8 samples of SHAPE (a 64-sample random block, shifted by the sample index), and labels."""
    rng = np.random.default_rng(SEED)
    block = rng.integers(0, 256, (64, *SHAPE), dtype=np.uint8)
    images = np.empty((n, *SHAPE), np.uint8)
    for i in range(n):
        np.add(block[i % 64], np.uint8(i // 64), out=images[i])
    return images, rng.integers(0, 1000, n)


def packed_epoch(loader: ss.DataLoader) -> Run:
    def run(limit: int | None = None) -> tuple[int, float]:
        t0 = time.perf_counter()
        n = 0
        it = iter(loader)
        for k, batch in enumerate(it):
            image, label = torch.from_numpy(batch["image"]), torch.from_numpy(batch["label"])
            n += len(label)
            if limit is not None and k + 1 >= limit:
                it.close()
                break
        return n, time.perf_counter() - t0

    return run


def torch_epoch(loader: TorchLoader) -> Run:
    def run(limit: int | None = None) -> tuple[int, float]:
        t0 = time.perf_counter()
        n = 0
        it = iter(loader)
        for k, (image, label) in enumerate(it):
            n += len(label)
            if limit is not None and k + 1 >= limit:
                break
        del it
        return n, time.perf_counter() - t0

    return run


def take_epoch(images: np.ndarray, labels: np.ndarray, batch: int, pool: ThreadPoolExecutor | None) -> Run:
    """The copy limit: the same epoch order, batch by batch, into one preallocated buffer (2 threads with a pool)."""
    out_i = np.empty((batch, *images.shape[1:]), images.dtype)
    out_l = np.empty(batch, labels.dtype)
    n, epochs = len(images), iter(range(1 << 62))

    def part(idx: np.ndarray, a: int) -> None:
        np.take(images, idx, axis=0, out=out_i[a : a + len(idx)], mode="clip")
        np.take(labels, idx, axis=0, out=out_l[a : a + len(idx)], mode="clip")

    def run(limit: int | None = None) -> tuple[int, float]:
        t0 = time.perf_counter()
        order = permutation(n, next(epochs))
        count = 0
        for k, a in enumerate(range(0, n, batch)):
            idx = order[a : a + batch]
            if pool is None:
                part(idx, 0)
            else:
                h = len(idx) // 2
                first = pool.submit(part, idx[:h], 0)
                part_two = pool.submit(part, idx[h:], h)
                first.result(), part_two.result()
            count += len(idx)
            if limit is not None and k + 1 >= limit:
                break
        return count, time.perf_counter() - t0

    return run


def case_1(tmp: Path, n: int, repeats: int, verdicts: Verdicts) -> None:
    print(f"\n(1) random access, {n} samples of uint8 {'x'.join(map(str, SHAPE))} ({SAMPLE_BYTES:,} B) + int label, "
          f"batch {BATCH_1}, shuffle; files in the page cache")
    t0 = time.perf_counter()
    images, labels = make_raw(n)
    path = tmp / "raw.ss"
    t1 = time.perf_counter()
    ss.write(path, {"image": images, "label": labels}, {"image": F.Array(dtype=np.uint8, shape=SHAPE), "label": F.Int()}, progress=False)
    t_write = time.perf_counter() - t1
    folder = tmp / "npy"
    folder.mkdir()
    for i in range(n):
        np.save(folder / f"{i:06d}.npy", images[i])
    warm_page_cache([path, *sorted(folder.iterdir())])
    os_ds, ram_ds = ss.open(path), ss.open(path, cache="ram")
    gb = n * SAMPLE_BYTES / 1e9
    print(f"    packed file {path.stat().st_size / 1e6:.0f} MB in {os_ds.num_pages} pages, written in {t_write:.1f} s "
          f"({gb / t_write:.2f} GB/s); {n} .npy files; setup {time.perf_counter() - t0:.1f} s")

    # correctness, untimed: a loader's first batch is the epoch order's rows
    for ds in (os_ds, ram_ds):
        first = next(iter(ss.DataLoader(ds, batch_size=BATCH_1, shuffle=True, seed=SEED, workers=2)))
        rows = permutation(n, 0)[:BATCH_1]
        if not (np.array_equal(first["image"], images[rows]) and np.array_equal(first["label"], labels[rows])):
            raise RuntimeError(f"slipstream ({ds.cache}) returned the wrong samples")
    if not np.array_equal(NpyFiles(str(folder), labels)[n - 1][0], images[n - 1]):
        raise RuntimeError("the .npy files do not hold the samples")

    pool = ThreadPoolExecutor(2, thread_name_prefix="bench-take")

    def loader(ds: Any, workers: int) -> ss.DataLoader:
        return ss.DataLoader(ds, batch_size=BATCH_1, shuffle=True, seed=SEED, workers=workers)

    runs = {
        "np1": take_epoch(images, labels, BATCH_1, None),
        "np2": take_epoch(images, labels, BATCH_1, pool),
        "ss": packed_epoch(loader(os_ds, 2)),
        "ss0": packed_epoch(loader(os_ds, 0)),
        "ram": packed_epoch(loader(ram_ds, 2)),
        "torch": torch_epoch(
            TorchLoader(NpyFiles(str(folder), labels), batch_size=BATCH_1, shuffle=True, num_workers=2,
                        generator=torch.Generator().manual_seed(SEED))
        ),
    }
    results = measure(runs, repeats)
    pool.shutdown()
    labels_ = {
        "np1": "NumPy np.take(out=buf), 1 thread  [copy limit]",
        "np2": "NumPy np.take(out=buf), 2 threads [copy limit]",
        "ss": "slipstream ss.open(path), workers=2",
        "ss0": "slipstream ss.open(path), workers=0",
        "ram": "slipstream ss.open(path, cache='ram'), workers=2",
        "torch": "torch, one .npy per sample, num_workers=2",
    }
    thr = {k: rates(v, SAMPLE_BYTES / 1e9) for k, v in results.items()}
    table([(labels_[k], {"GB/s": thr[k], "samples/s": rates(results[k])}) for k in runs], [("GB/s", ".2f"), ("samples/s", ",.0f")])
    limit = [max(a, b) for a, b in zip(thr["np1"], thr["np2"])]
    faster = "2 threads" if statistics.median(thr["np2"]) > statistics.median(thr["np1"]) else "1 thread"
    print(f"    copy limit per repeat = the faster NumPy run (median: {faster})")
    verdict("slipstream workers=2 / NumPy copy limit", paired(thr["ss"], limit), 0.5, verdicts)
    verdict("slipstream workers=2 / torch .npy files", paired(thr["ss"], thr["torch"]), None, verdicts)
    verdict("slipstream workers=0 / NumPy copy limit", paired(thr["ss0"], limit), None, verdicts)
    verdict("slipstream cache='ram' workers=2 / NumPy copy limit", paired(thr["ram"], limit), None, verdicts)
    verdict("slipstream workers=2 / workers=0", paired(thr["ss"], thr["ss0"]), None, verdicts)
    del runs, os_ds, ram_ds
    gc.collect()


# -- case (2): small scalar fields ------------------------------------------------------------------
def loader_epoch(loader: ss.DataLoader) -> Run:
    def run(limit: int | None = None) -> tuple[int, float]:
        t0 = time.perf_counter()
        n = 0
        it = iter(loader)
        for k, batch in enumerate(it):
            n += len(batch["i"])
            if limit is not None and k + 1 >= limit:
                it.close()
                break
        return n, time.perf_counter() - t0

    return run


def getitem_epoch(ds: Any) -> Run:
    epochs = iter(range(1 << 62))

    def run(limit: int | None = None) -> tuple[int, float]:
        order = permutation(len(ds), next(epochs))
        if limit is not None:
            order = order[: limit * BATCH_2]
        order = order.tolist()
        t0 = time.perf_counter()
        for i in order:
            ds[i]
        return len(order), time.perf_counter() - t0

    return run


def case_2(tmp: Path, n: int, repeats: int, verdicts: Verdicts) -> None:
    print(f"\n(2) small scalar fields: {n:,} samples of F.Int + F.Float, batch {BATCH_2}, shuffle, workers=0")
    rng = np.random.default_rng(SEED + 2)
    arrays = {"i": rng.integers(0, 1 << 40, n), "x": rng.random(n)}
    path = tmp / "scalars.ss"
    t0 = time.perf_counter()
    ss.write(path, arrays, {"i": F.Int(), "x": F.Float()}, progress=False)
    t_write = time.perf_counter() - t0
    warm_page_cache([path])
    ds = ss.open(path)
    print(f"    packed file {path.stat().st_size / 1e6:.1f} MB in {ds.num_pages} pages, written in {t_write:.1f} s "
          f"({t_write / n * 1e6:.1f} us per sample)")
    first = next(iter(ss.DataLoader(ds, batch_size=BATCH_2, shuffle=True, seed=SEED)))
    rows = permutation(n, 0)[:BATCH_2]
    if not (np.array_equal(first["i"], arrays["i"][rows]) and np.array_equal(first["x"], arrays["x"][rows])):
        raise RuntimeError("slipstream returned the wrong samples")

    runs = {
        "ss": loader_epoch(ss.DataLoader(ds, batch_size=BATCH_2, shuffle=True, seed=SEED)),
        "get": getitem_epoch(ds),
        "floor": loader_epoch(ss.DataLoader(arrays, batch_size=BATCH_2, shuffle=True, seed=SEED)),
    }
    results = measure(runs, repeats, warmup=20)
    labels_ = {
        "ss": "slipstream DataLoader(ss.open(path))",
        "get": "ds[i] loop (same permutation)",
        "floor": "slipstream DataLoader({'i': ints, 'x': floats}) [floor]",
    }
    us = {k: micros(v) for k, v in results.items()}
    table([(labels_[k], {"us/sample": us[k], "samples/s": rates(results[k])}) for k in runs], [("us/sample", ".3f"), ("samples/s", ",.0f")])
    verdict("loader over packed file, us per sample", statistics.median(us["ss"]), 2.0, verdicts, unit=" us", at_most=True)
    verdict("ds[i], us per sample", statistics.median(us["get"]), None, verdicts, unit=" us")
    verdict("loader over packed file / in-memory arrays (time)", paired(us["ss"], us["floor"]), None, verdicts)


# -- case (3): writer throughput, JPEG ---------------------------------------------------------
def photo_sources() -> tuple[list[np.ndarray], str]:
    try:
        import skimage.data as data
    except ImportError:
        return [], "smooth synthetic images with noise (scikit-image is not installed)"
    sources = []
    for name in ("astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field", "immunohistochemistry", "retina", "stereo_motorcycle"):
        try:
            image = getattr(data, name)()
        except Exception:  # noqa: BLE001 - a photo that needs a download (pooch) is skipped
            continue
        image = image[0] if isinstance(image, tuple) else image
        if image.ndim == 3 and image.shape[2] == 3 and image.dtype == np.uint8:
            sources.append(np.ascontiguousarray(image))
    if not sources:
        return [], "smooth synthetic images with noise (no skimage.data photo could be loaded)"
    return sources, f"random crops of {len(sources)} skimage.data photos, rescaled and flipped"


def make_photos(n: int) -> tuple[list[np.ndarray], str]:
    """n deterministic photo-like RGB uint8 images of IMAGE_HW."""
    from PIL import Image

    height, width = IMAGE_HW
    rng = np.random.default_rng(SEED + 3)
    sources, how = photo_sources()
    out = []
    for i in range(n):
        if sources:
            src = sources[i % len(sources)]
            f = min(src.shape[0] / height, src.shape[1] / width) * rng.uniform(0.45, 1.0)
            h, w = max(8, int(height * f)), max(8, int(width * f))
            y, x = rng.integers(0, src.shape[0] - h + 1), rng.integers(0, src.shape[1] - w + 1)
            crop = Image.fromarray(src[y : y + h, x : x + w]).resize((width, height), Image.Resampling.BILINEAR)
            image = np.asarray(crop)
            if rng.random() < 0.5:
                image = image[:, ::-1]
        else:
            yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
            image = np.zeros((height, width, 3), np.float32)
            for c in range(3):
                fy, fx, phase = rng.uniform(0.005, 0.03, 2).tolist() + [rng.uniform(0, 6.3)]
                image[:, :, c] = 128 + 90 * np.sin(fy * yy + phase) * np.cos(fx * xx - phase)
            image += rng.normal(0, 6, image.shape).astype(np.float32)
            image = np.clip(image, 0, 255).astype(np.uint8)
        out.append(np.ascontiguousarray(image))
    return out, how


def encode(image: np.ndarray) -> bytes:
    """JPEG as the writer encodes it (its codec and settings: RGB, 4:2:0)."""
    return codecs.encode("jpeg", image, QUALITY)


def write_run(tmp: Path, samples: list[dict[str, Any]], workers: int, sizes: dict[str, int], key: str) -> Run:
    fields = {"image": F.Image(codec="jpeg", quality=QUALITY), "label": F.Int()}

    def run(limit: int | None = None) -> tuple[int, float]:
        data = samples if limit is None else samples[: limit * 32]
        path = tmp / f"jpeg-{key}.ss"
        t0 = time.perf_counter()
        ss.write(path, data, fields, workers=workers, progress=False)
        dt = time.perf_counter() - t0
        if limit is None:
            sizes[key] = path.stat().st_size
        path.unlink()
        return len(data), dt

    return run


def encode_run(images: list[np.ndarray], pool: ThreadPoolExecutor | None) -> Run:
    def run(limit: int | None = None) -> tuple[int, float]:
        data = images if limit is None else images[: limit * 32]
        t0 = time.perf_counter()
        if pool is None:
            for image in data:
                encode(image)
        else:
            h = len(data) // 2
            halves = [pool.submit(lambda part=part: [encode(image) for image in part]) for part in (data[:h], data[h:])]
            for half in halves:
                half.result()
        return len(data), time.perf_counter() - t0

    return run


def case_3(tmp: Path, n: int, repeats: int, verdicts: Verdicts) -> None:
    t0 = time.perf_counter()
    images, how = make_photos(n)
    jpegs = [encode(image) for image in images]
    height, width = IMAGE_HW
    raw_mb = height * width * 3 / 1e6
    jpeg_kb = statistics.mean(len(j) for j in jpegs) / 1e3
    print(f"\n(3) writer, JPEG quality {QUALITY}: {n} RGB images of {height}x{width} ({raw_mb:.2f} MB raw, "
          f"JPEG {jpeg_kb:.0f} KB on average): {how}; setup {time.perf_counter() - t0:.1f} s")
    arrays = [{"image": image, "label": i} for i, image in enumerate(images)]
    encoded = [{"image": jpeg, "label": i} for i, jpeg in enumerate(jpegs)]

    # correctness, untimed: pass-through keeps the bytes; re-encoding the same pixels gives the same bytes
    path = tmp / "check.ss"
    for samples in (arrays[:4], encoded[:4]):
        ss.write(path, samples, {"image": F.Image(codec="jpeg", quality=QUALITY), "label": F.Int()}, progress=False)
        ds = ss.open(path)
        stored = [ds.page(0)["image"].encoded(k).tobytes() for k in range(4)]  # a check, not timed
        if stored != jpegs[:4] or ds[3]["image"].shape != (height, width, 3):
            raise RuntimeError("the writer did not store the expected JPEG bytes")
        del ds
        path.unlink()

    pool = ThreadPoolExecutor(2, thread_name_prefix="bench-encode")
    sizes: dict[str, int] = {}
    runs = {
        "enc1": encode_run(images, None),
        "enc2": encode_run(images, pool),
        "w1": write_run(tmp, arrays, 1, sizes, "w1"),
        "w2": write_run(tmp, arrays, 2, sizes, "w2"),
        "p1": write_run(tmp, encoded, 1, sizes, "p1"),
        "p2": write_run(tmp, encoded, 2, sizes, "p2"),
    }
    results = measure(runs, repeats, warmup=2)
    pool.shutdown()
    labels_ = {
        "enc1": "bare codecs.encode loop, 1 thread    [reference]",
        "enc2": "bare codecs.encode, 2 threads       [reference]",
        "w1": "ss.write(arrays -> jpeg), workers=1",
        "w2": "ss.write(arrays -> jpeg), workers=2",
        "p1": "ss.write(JPEG bytes, pass-through), workers=1",
        "p2": "ss.write(JPEG bytes, pass-through), workers=2",
    }
    rows = []
    for k in runs:
        values = {"images/s": rates(results[k]), "in MB/s": rates(results[k], raw_mb)}
        if k in sizes:
            values["out MB/s"] = [sizes[k] / 1e6 / t for _, t in results[k]]
        rows.append((labels_[k], values))
    table(rows, [("images/s", ",.0f"), ("in MB/s", ".0f"), ("out MB/s", ".1f")])
    print(f"    file: {sizes['w1'] / 1e6:.1f} MB ({sizes['w1'] / n / 1e3:.0f} KB per image); pass-through file "
          f"{sizes['p1'] / 1e6:.1f} MB; 'in' counts raw pixels (3 bytes per pixel), 'out' the file written")
    ips = {k: rates(v) for k, v in results.items()}
    verdict("writer workers=1 / bare encode 1 thread", paired(ips["w1"], ips["enc1"]), None, verdicts)
    verdict("writer workers=2 / bare encode 2 threads", paired(ips["w2"], ips["enc2"]), None, verdicts)
    verdict("writer workers=2 / workers=1", paired(ips["w2"], ips["w1"]), None, verdicts)
    verdict("pass-through / re-encode, workers=1", paired(ips["p1"], ips["w1"]), None, verdicts)
    verdict("pass-through / re-encode, workers=2", paired(ips["p2"], ips["w2"]), None, verdicts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run: small files, fewer repeats")
    parser.add_argument("--repeats", type=int, default=None, help="timed runs per case (default 1/2/3: 7/3/5, quick 2/2/1)")
    parser.add_argument("--cases", default="123", help="which cases to run, e.g. '13' (default 123)")
    parser.add_argument("--tmp", default="/tmp", help="where to make the temporary data directory (default /tmp)")
    args = parser.parse_args(argv)
    repeats = [args.repeats or r for r in ((2, 2, 1) if args.quick else (7, 3, 5))]
    n_raw, n_scalar, n_images = (320, 50_000, 32) if args.quick else (4_000, 1_000_000, 600)

    set_footing()
    print(versions(f"pyarrow {__import__('pyarrow').__version__}", f"JPEG via {'_roijpeg' if compiled.EXTENSION is not None else 'Pillow'}"))
    print(
        "footing: torch.set_num_threads(1); one warm-up per run, then "
        f"{repeats[0]}/{repeats[1]}/{repeats[2]} timed runs (cases 1/2/3) in rotating order; "
        "figures are medians [min - max], ratios medians of back-to-back pairs"
    )
    verdicts = Verdicts(label_width=58, value_width=7, info="  (info)", detail=True)
    start = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="bench_packed_", dir=args.tmp))
    try:
        if "1" in args.cases:
            case_1(tmp, n_raw, repeats[0], verdicts)
        if "2" in args.cases:
            case_2(tmp, n_scalar, repeats[1], verdicts)
        if "3" in args.cases:
            case_3(tmp, n_images, repeats[2], verdicts)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    summary(verdicts, start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
