"""Benchmark: data read where it lives (Parquet, WebDataset tar shards) against a packed file and webdataset.

Images: the JPEGs of ``bench_images.py`` (real photographs, ImageNet-sized; its cache folder,
made once), the first ``--images`` of them, stored four ways holding the very same JPEG bytes:
a packed file (``ss.write`` with ``F.Image(codec="jpeg")``: JPEGs are kept as they are), a
Parquet file with a binary ``image`` column and an int ``label`` column (row groups of
``ROW_GROUP`` rows, as Hugging Face's hub files hold image datasets), and WebDataset-style tar
shards of ``SHARD`` samples (members ``<key>.jpg`` and ``<key>.cls``). Pipeline everywhere:
RandomResizedCrop(224) + horizontal flip, uint8 CHW, batch 64, shuffle, 2 workers:

(1) slipstream over the packed file: ``ss.DataLoader(ss.open(path).map(image=[...]), ...)``;
(2) slipstream over the Parquet file, read in place (``ss.open("x.parquet")``);
(3) slipstream over the tar shards, read in place (``ss.open([shard, ...])``), when this
    slipstream reads them;
(4) webdataset's own loader: ``wds.WebDataset(shards, shardshuffle=...).shuffle(1000)
    .decode("pil").to_tuple("jpg", "cls")``, torchvision's RandomResizedCrop + flip + PILToTensor
    written with PIL (as ``bench_images.py`` does: torchvision is not needed), ``.batched(64)``,
    in ``torch.utils.data.DataLoader(batch_size=None, num_workers=2, persistent_workers=True)``.

Tokens: documents of 64..2048 int32 tokens (``--documents``), in a packed file (``F.Tokens``)
and in a Parquet file (a ``list<int32>`` column, row groups of ``TOKEN_ROW_GROUP`` documents),
each packed into rows of 2048 tokens by ``ss.pack`` and loaded (batch 16, shuffle, 2 workers):
(5) from the packed file, (6) from the Parquet file; each timed repeat is ``TOKEN_EPOCHS`` epochs
(one epoch of rows is about 0.1 s).

Goals (2 cores, img/s and rows/s): (2) and (3) at least 0.9x (1); (2) and (3) at least 2x (4);
(6) at least 0.9x (5). Measuring as in ``bench_images.py``: one warm-up epoch per run, then the
runs take turns; medians over repeats, ratios the medians of per-repeat ratios.

Run:  python benchmarks/bench_inplace.py [--quick] [--repeats N] [--images N] [--documents N] [--cache DIR]
"""

from __future__ import annotations

import argparse
import io
import tarfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _common import SEED, Verdicts, measure, paired, rates, set_footing, summary, table, verdict, versions
from bench_images import (
    BATCH,
    CROP,
    DEFAULT_CACHE,
    WORKERS,
    cpu_snapshot,
    ensure_images,
    mb,
    others_share,
    pipeline,
    rrc_params,
    subset,
    torch_epoch,
    with_cpu,
)
from PIL import Image
from torch.utils.data import DataLoader as TorchLoader

import slipstream as ss
from slipstream import fields as F

ROW_GROUP = 256  # images per Parquet row group
SHARD = 250  # samples per tar shard
TOKEN_ROW_GROUP = 4096  # documents per Parquet row group
SEQ = 2048
TOKEN_BATCH = 16


# -- the files ---------------------------------------------------------------------------------------
def image_files(cache: Path, samples: list[tuple[str, int]]) -> dict[str, Any]:
    """The packed file, the Parquet file (and the same rows in a folder of files of ``SHARD`` rows:
    ``parquet_parts``) and the tar shards of ``samples`` (made when missing)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = len(samples)
    where = cache / f"inplace-n{n}"
    where.mkdir(parents=True, exist_ok=True)
    blobs = [Path(path).read_bytes() for path, _ in samples]
    labels = [int(label) for _, label in samples]
    packed = where / "images.ss"
    if not packed.exists():
        rows = [{"image": blob, "label": label} for blob, label in zip(blobs, labels)]
        ss.write(packed, rows, fields={"image": F.Image(codec="jpeg"), "label": F.Int()}, progress=False)
    parquet = where / "images.parquet"
    table_ = pa.table({"image": pa.array(blobs, pa.binary()), "label": pa.array(labels, pa.int64())})
    if not parquet.exists():
        pq.write_table(table_, parquet, row_group_size=ROW_GROUP)
    folder = where / "parquet"  # the same rows in hub-style files of SHARD rows (one row group each)
    count = -(-n // SHARD)
    parts = [folder / f"train-{k:05d}-of-{count:05d}.parquet" for k in range(count)]
    if not all(part.exists() for part in parts):
        folder.mkdir(exist_ok=True)
        for k, part in enumerate(parts):
            partial = part.with_suffix(".partial")
            pq.write_table(table_.slice(k * SHARD, SHARD), partial, row_group_size=ROW_GROUP)
            partial.rename(part)
    shards = []
    for s in range(0, n, SHARD):
        shard = where / f"shard-{s // SHARD:04d}.tar"
        shards.append(shard)
        if shard.exists():
            continue
        partial = shard.with_suffix(".partial")
        with tarfile.open(partial, "w", format=tarfile.USTAR_FORMAT) as tar:
            for i in range(s, min(n, s + SHARD)):
                for ext, data in (("jpg", blobs[i]), ("cls", str(labels[i]).encode())):
                    info = tarfile.TarInfo(f"{i:06d}.{ext}")
                    info.size = len(data)
                    tar.addfile(info, io.BytesIO(data))
        partial.rename(shard)
    return {"packed": packed, "parquet": parquet, "parquet_parts": parts, "shards": shards, "bytes": sum(map(len, blobs))}


def token_files(cache: Path, documents: int) -> dict[str, Any]:
    """A packed file and a Parquet file of the same token documents (made when missing)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    where = cache / f"inplace-tokens-n{documents}"
    where.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(SEED)
    lengths = rng.integers(64, 2049, documents)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = rng.integers(0, 50_000, int(offsets[-1]), dtype=np.int32)
    packed = where / "tokens.ss"
    if not packed.exists():
        docs = [values[offsets[k] : offsets[k + 1]] for k in range(documents)]
        ss.write(packed, [{"tokens": d} for d in docs], fields={"tokens": F.Tokens(dtype="int32")}, progress=False)
    parquet = where / "tokens.parquet"
    if not parquet.exists():
        column = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
        pq.write_table(pa.table({"tokens": column}), parquet, row_group_size=TOKEN_ROW_GROUP)
    return {"packed": packed, "parquet": parquet, "tokens": int(offsets[-1])}


# -- (1)-(3) slipstream -------------------------------------------------------------------------------
def image_loader(source: Any, image: str = "image", label: str = "label") -> Any:
    """The pipeline over the fields ``image`` and ``label`` of ``source`` read by ``ss.open``."""
    data = ss.open(source, fields=[image, label]).map(**{image: pipeline()})
    return ss.DataLoader(data, batch_size=BATCH, shuffle=True, seed=SEED, workers=WORKERS)


def image_epoch(loader: Any, image: str = "image", label: str = "label"):
    """One epoch of ``loader``, each batch turned into tensors: (images, seconds, first batch seconds)."""

    def run():
        t0 = time.perf_counter()
        n, first = 0, None
        for batch in loader:
            images_, _labels = torch.from_numpy(batch[image]), torch.from_numpy(batch[label])
            n += len(images_)
            if first is None:
                first = time.perf_counter() - t0
        return n, time.perf_counter() - t0, first

    return run


# -- (4) webdataset ---------------------------------------------------------------------------------
def torchvision_style(image: Image.Image) -> torch.Tensor:
    """torchvision's RandomResizedCrop(224) + RandomHorizontalFlip + PILToTensor, written with PIL."""
    image = image.convert("RGB")
    top, left, h, w = rrc_params(image.height, image.width)
    image = image.crop((left, top, left + w, top + h)).resize((CROP, CROP), Image.Resampling.BILINEAR)
    if torch.rand(1) < 0.5:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    return torch.from_numpy(np.array(image)).permute(2, 0, 1).contiguous()


def webdataset_loader(shards: list[Path]) -> Any:
    import webdataset as wds

    urls = [str(s) for s in shards]
    data = (
        wds.WebDataset(urls, shardshuffle=len(urls), empty_check=False)
        .shuffle(1000)
        .decode("pil")
        .to_tuple("jpg", "cls")
        .map_tuple(torchvision_style, int)
        .batched(BATCH)
    )
    return TorchLoader(data, batch_size=None, num_workers=WORKERS, persistent_workers=True)


# -- tokens -------------------------------------------------------------------------------------------
def token_loader(path: Path) -> Any:
    rows = ss.pack(ss.open(path), SEQ)
    return ss.DataLoader(rows, batch_size=TOKEN_BATCH, shuffle=True, seed=SEED, workers=WORKERS)


TOKEN_EPOCHS = 8  # epochs per timed repeat: one epoch of rows takes about 0.1 s, too short to time alone on a shared machine


def token_epoch(loader: Any):
    """``TOKEN_EPOCHS`` epochs of ``loader`` timed together: (rows, seconds, the first epoch's first batch)."""

    def run():
        t0 = time.perf_counter()
        n, first = 0, None
        for _ in range(TOKEN_EPOCHS):
            for batch in loader:
                if first is None:
                    first = time.perf_counter() - t0
                n += len(batch["tokens"])
        return n, time.perf_counter() - t0, first

    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="320 images, 4,000 documents, 2 repeats")
    parser.add_argument("--repeats", type=int, default=None, help="timed epochs per loader (default 5, quick 2)")
    parser.add_argument("--images", type=int, default=None, help="images per epoch (default 1000, quick 320)")
    parser.add_argument("--documents", type=int, default=None, help="token documents (default 16000, quick 4000)")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"where the files are kept (default {DEFAULT_CACHE})")
    args = parser.parse_args(argv)
    repeats = args.repeats or (2 if args.quick else 5)
    n = args.images or (320 if args.quick else 1000)
    documents = args.documents or (4000 if args.quick else 16000)
    set_footing()
    start = time.perf_counter()
    args.cache.mkdir(parents=True, exist_ok=True)
    root, _ = ensure_images(args.cache, n, False)
    folder = ss.imagefolder(root)
    samples = [folder.samples[k] for k in subset(folder, n)]
    images = image_files(args.cache, samples)
    tokens = token_files(args.cache, documents)
    import pyarrow
    import webdataset

    print(versions(f"pyarrow {pyarrow.__version__}", f"webdataset {webdataset.__version__}"))
    print(f"images: {n} JPEGs ({mb(images['bytes'])}); Parquet row groups of {ROW_GROUP}; {len(images['shards'])} tar shards of {SHARD}; "
          f"tokens: {documents} documents, {tokens['tokens'] / 1e6:.1f} M tokens, rows of {SEQ}; setup {time.perf_counter() - start:.0f} s")

    runs = {
        "packed": image_epoch(image_loader(images["packed"])),
        "parquet": image_epoch(image_loader(images["parquet"])),
        "tar": image_epoch(image_loader(images["shards"], "jpg", "cls"), "jpg", "cls"),  # WebDataset's member names
    }
    wds_loader = webdataset_loader(images["shards"])

    runs["wds"] = torch_epoch(wds_loader)
    token_runs = {
        "tokens_packed": token_epoch(token_loader(tokens["packed"])),
        "tokens_parquet": token_epoch(token_loader(tokens["parquet"])),
    }
    runs = {name: with_cpu(run) for name, run in runs.items()}
    before = cpu_snapshot()
    results = measure(runs, repeats, noun="image runs")
    results.update(measure(token_runs, repeats, noun="token runs"))
    others = others_share(before, cpu_snapshot())
    labels = {
        "packed": "(1) slipstream, packed file",
        "parquet": "(2) slipstream, Parquet in place",
        "tar": "(3) slipstream, tar shards in place",
        "wds": "(4) webdataset + PIL (torchvision's ops)",
    }
    rows = [(label, {"img/s": rates(results[k]), "CPU ms/img": [1e3 * r[3] / r[0] for r in results[k]],
                     "1st batch ms": [1e3 * r[2] for r in results[k]]}) for k, label in labels.items() if k in results]
    table(rows, [("img/s", ".0f"), ("CPU ms/img", ".2f"), ("1st batch ms", ".0f")], corner="images (one epoch)")
    token_rows = [(label, {"rows/s": rates(results[k]), "1st batch ms": [1e3 * r[2] for r in results[k]]})
                  for k, label in (("tokens_packed", "(5) ss.pack of the packed file"), ("tokens_parquet", "(6) ss.pack of the Parquet file"))]
    table(token_rows, [("rows/s", ".0f"), ("1st batch ms", ".0f")], corner=f"token rows of {SEQ} ({TOKEN_EPOCHS} epochs)")
    if others is not None:
        print(f"other processes used {others:.2f} CPUs while this ran")
    verdicts = Verdicts(44, 6)
    rate = {k: rates(v) for k, v in results.items()}
    verdict("(2) Parquet in place / (1) packed", paired(rate["parquet"], rate["packed"]), 0.9, verdicts)
    if "tar" in rate:
        verdict("(3) tar in place / (1) packed", paired(rate["tar"], rate["packed"]), 0.9, verdicts)
        verdict("(3) tar in place / (4) webdataset", paired(rate["tar"], rate["wds"]), 2.0, verdicts)
    verdict("(2) Parquet in place / (4) webdataset", paired(rate["parquet"], rate["wds"]), 2.0, verdicts)
    verdict("(6) Parquet tokens / (5) packed tokens", paired(rate["tokens_parquet"], rate["tokens_packed"]), 0.9, verdicts)
    summary(verdicts, start)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
