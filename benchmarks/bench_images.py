"""Benchmark: the image pipeline (JPEG files -> random-resized-crop batches) against torch and FFCV.

Data: 2,000 JPEGs (quality 90, 4:2:0, Pillow) of real photographs, sized like ImageNet (sides 200 to
800 px, about 400x350 on average), made deterministically by random crops, rescales, flips, a
light colour cast and light noise of the colour photos ``skimage.data`` ships (those that load
offline), written once as a class-per-folder tree (10 classes) under the cache folder (default
/tmp/slipstream-bench-images, reused when present) so torch and FFCV read the very same files.
slipstream packs the tree (``ss.imagefolder``) with ``ss.write`` into two files, also cached:
``F.Image(codec="jpeg", quality=90, max_side=512)`` (JPEGs that need no resize are stored as they
are; the larger ones are downscaled and re-encoded) and the same with ``policy="smart"`` (only
images whose raw size exceeds ``threshold`` = 256 KiB are compressed, the rest stored raw).

A second set (``--set imagenet``; ``--set both`` runs the two in one measurement, their runs
interleaved, and prints the slipstream/FFCV ratio of each): 3,000 photos of the same recipe sized
like ImageNet's train set (the long side 500 for 70% of them, else log-normal around 500 within 200
to 800; 4:3, 3:2 or square to 2:1; a quarter portrait: median 500x375, mean about 470x400), quality
90, under the cache folder's ``imagenet/`` (made once, like the default set).

Pipeline everywhere: RandomResizedCrop(224) (scale (0.08, 1), ratio (3/4, 4/3)), horizontal flip
(p=0.5), uint8 CHW, batch 64, shuffle, 2 workers; labels ride along. Cases:

(1) decode-only ceiling: a full libjpeg-turbo decode of each file's bytes (in memory: slipstream's
    compiled ``decode_jpeg``, Pillow's without the extension), one
    thread, no crop (two cores would give at most twice this);
(2) torch: ``torch.utils.data.DataLoader(num_workers=2, persistent_workers=True)``, default collate,
    over the files, with torchvision's ImageFolder + RandomResizedCrop + RandomHorizontalFlip +
    PILToTensor written with PIL directly (torchvision is not needed): PIL open + convert("RGB"),
    torchvision's crop-parameter algorithm with torch's RNG, crop + resize with PIL BILINEAR,
    flip, ``torch.from_numpy(np.array(img)).permute(2, 0, 1).contiguous()``;
(3) slipstream over the JPEG packed file: ``ss.DataLoader(ss.open(path).map(image=[
    ops.RandomResizedCrop(224), ops.RandomHorizontalFlip(), ops.ToCHW()]), batch_size=64,
    shuffle=True, seed=0, workers=2)``, each batch turned into tensors with ``torch.from_numpy``;
(4) the same over the smart-policy packed file; (3f, info) case 3 with ``ops.Decode(fast=True)``
    (libjpeg-turbo's fast DCT and upsampling, the setting FFCV's decoder uses);
(5) FFCV 1.0.2, when a Python that imports ffcv is at hand (``--ffcv-python PATH``, or the
    SLIPSTREAM_FFCV_PYTHON variable, or /tmp/ffcv-venv/bin/python when it exists): the same
    files converted to .beton (cached) with ``RGBImageField(max_resolution=512, jpeg_quality=90)``,
    write_mode='jpg' (5, compared with 3) and write_mode='smart' with smart_threshold=256 KiB (5s,
    compared with 4), loaded with ``RandomResizedCropRGBImageDecoder((224, 224))``,
    ``RandomHorizontalFlip()``, ``ToTensor()``, ``ToTorchImage()`` (its default channels_last
    layout: a CHW-shaped view of NHWC memory, which spares it the transposing copy the others
    make), batch 64, ``num_workers=2``, ``OrderOption.RANDOM``, ``os_cache=True``,
    ``drop_last=False``. FFCV runs in a child process of that Python, which waits between its
    epochs, so its epochs take turns with the others like any run here.

(6) the training recipe (DeiT-style), as the goal names it: ``RandomResizedCrop(224)``, flip,
    ``RandAugment(2, 9)`` (torchvision's default NEAREST), ``ColorJitter(0.4)`` (torchvision's
    meaning: brightness), ``Normalize`` (ImageNet's, float32), CHW, ``RandomErasing(0.25)`` after
    it, and ``MixUpOrCutMix(0.8, 1.0)`` on each batch (soft labels); (7) the same with torch's
    DataLoader (2 workers) and torchvision v2 on PIL images in torchvision's reference order, MixUp
    or CutMix in its collate_fn (the reference train.py's ``RandomChoice``), in a child process of
    its own venv (``SLIPSTREAM_TORCHVISION_PYTHON`` or /opt/tv-venv/bin/python: torch 2.14.1 and
    torchvision 0.29.1, which do not import beside this venv's torch); (6h, 7h) the heavier
    variant: BILINEAR RandAugment (torchvision's reference scripts') and three-factor
    ``ColorJitter(0.4, 0.4, 0.4)`` (timm's color_jitter=0.4). Goals: (6) >= 3x (7) and >= 0.6x (3).

Measuring: every figure is one whole epoch; one warm-up epoch per run (FFCV's includes its JIT
compile), then the runs take turns (the order rotates every repeat); figures are medians over
repeats, ratios the medians of per-repeat ratios of runs measured back to back. "1st batch" is
from creating the loader's iterator to the first batch in hand. "CPU ms/img" is the CPU time of
this process and all its children (torch's workers, the FFCV child) during the epoch, per image
(from /proc): on a shared machine it moves much less than img/s, and when a loader keeps both
cores busy the throughput ratio on a quiet machine follows the inverse ratio of CPU per image
(img/s x CPU ms/img / 1000 = cores kept busy). Goals (2 cores): (3) >= 2x (2), (3) >= 1.25x (5)
(stretch 1.5x; and >= 2x on each set; only when FFCV ran), on img/s.

GIL share: slipstream's pipeline run single-threaded (``workers=0``) over the JPEG and the smart
files, with the decode and the resampling (crop, resize, flip, CHW) timed as the pipeline reports
them (``core.timings``: inside the compiled task call, which runs a chunk of a batch without the
GIL; or around the per-sample path's decode and resample calls). GIL-held time per sample = total
time per sample (loader included) - that time; its share of the total bounds
what threads can overlap: with any number of workers the GIL-held part runs one at a time, so
throughput is at most 1 / (held time per sample) ("GIL bound"); two cores give at most
2 / (total time per sample) ("2-core bound"). The run also reports how many CPUs other processes
used while it measured (from /proc): the machine is shared, and that load widens every range.

Run:  python benchmarks/bench_images.py [--quick] [--repeats N] [--images N] [--cache DIR]
                                        [--set default|imagenet|both] [--cases decode,torch,ss,...]
                                        [--ffcv-python PATH] [--no-ffcv] [--rebuild] [--profile]
(``--cases`` keeps only the named loaders: decode, torch, ss, ssS, ssF, ffcv, ffcvS, recipe, tvrecipe,
heavy, tvheavy; ss always.) The torchvision venv: ``python3.11 -m venv /opt/tv-venv &&
/opt/tv-venv/bin/pip install torch==2.14.1 torchvision==0.29.1 numpy pillow`` (a CUDA build, 5.5 GB;
it runs on the CPU).
Making the 2,000 files takes about 20 s and packing them 4 s more, once (FFCV's conversion about
20 s more, once). The full run then takes about 3 minutes on two cores; ``--quick`` (the first
640 images, 2 repeats, no FFCV smart run) under a minute. ``--profile`` adds a cProfile of the
single-threaded slipstream pipeline. Needs torch, pillow, pyarrow and
scikit-image (the photos); FFCV goes in its own virtual environment, never this one:
    apt-get update && apt-get install -y pkg-config libturbojpeg0-dev libopencv-dev
    python3.11 -m venv /tmp/ffcv-venv
    /tmp/ffcv-venv/bin/pip install torch ffcv==1.0.2 pillow 'numpy<2' 'opencv-python<4.11'
(ffcv 1.0.2 builds from source against those libraries; it imports Pillow without declaring it,
and needs NumPy 1.x, hence an OpenCV wheel built for NumPy 1.)
"""

from __future__ import annotations

import argparse
import gc
import io
import itertools
import json
import math
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

FFCV_WORKER = "--ffcv-worker"  # argv of the FFCV child process, which runs in FFCV's own venv: no slipstream there
TV_WORKER = "--torchvision-worker"  # argv of the torchvision child (the recipe's baseline), in its own venv too
if FFCV_WORKER not in sys.argv and TV_WORKER not in sys.argv:
    # _common first: it makes slipstream importable from a checkout, and exits with a message when torch is missing
    import torch
    from _common import SEED, Verdicts, paired, rates, set_footing, summary, table, verdict, versions
    from torch.utils.data import DataLoader as TorchLoader
    from torch.utils.data import Dataset

    import slipstream as ss
    from slipstream import fields as F
    from slipstream import ops
    from slipstream.cli.demo import torch_rrc_params
    from slipstream.images.compiled import EXTENSION as _compiled_core

    try:
        from PIL import Image
    except ImportError:
        sys.exit("bench_images.py needs pillow and pyarrow: pip install -e '.[files]'")
else:
    SEED = 0
    Dataset = object
    torch_rrc_params = None  # (the FFCV child has no slipstream; the torch baseline is the parent's)

N_IMAGES = 2000
N_IMAGENET = 3000  # the ImageNet-like set (--set imagenet)
N_QUICK = 640
CLASSES = 10
QUALITY = 90
SIDES = (200, 800)
CROP = 224
BATCH = 64
WORKERS = 2
MAX_SIDE = 512
THRESHOLD = 1 << 18  # smart policy: compress when the raw image exceeds this many bytes (slipstream's default)
GENERATOR = 1  # bump when the image recipe changes: a cache made by another recipe is rebuilt
PHOTOS = ("astronaut", "chelsea", "coffee", "rocket", "hubble_deep_field", "immunohistochemistry", "retina", "stereo_motorcycle")
DEFAULT_CACHE = Path("/tmp/slipstream-bench-images")
DEFAULT_FFCV = Path("/tmp/ffcv-venv/bin/python")
DEFAULT_TV = Path("/opt/tv-venv/bin/python")
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)  # ImageNet's, the recipe's Normalize


# -- the images ----------------------------------------------------------------------------------
def photo_sources() -> list[np.ndarray]:
    """The colour photos of ``skimage.data`` that load offline (the second view of stereo_motorcycle too)."""
    try:
        from skimage import data
    except ImportError:
        sys.exit("bench_images.py needs scikit-image for its photos: pip install scikit-image")
    sources = []
    for name in PHOTOS:
        try:
            loaded = getattr(data, name)()
        except Exception:  # noqa: BLE001, S112 - a photo that needs a download (pooch) is skipped
            continue
        for image in loaded[:2] if isinstance(loaded, tuple) else (loaded,):
            if image.ndim == 3 and image.shape[2] == 3 and image.dtype == np.uint8:
                sources.append(np.ascontiguousarray(image))
    if not sources:
        sys.exit("no colour photo of skimage.data could be loaded")
    return sources


def default_size(rng: np.random.Generator) -> tuple[int, int]:
    """The default set's (width, height): about 400x350 on average, sides 200 to 800."""
    width = int(np.clip(round(math.exp(rng.normal(math.log(395), 0.22))), *SIDES))
    return width, int(np.clip(round(width / math.exp(rng.normal(math.log(1.15), 0.15))), *SIDES))


def imagenet_size(rng: np.random.Generator) -> tuple[int, int]:
    """An ImageNet-train-like (width, height): the long side 500 for 70% of images (else log-normal
    around 500, sides 200 to 800), 4:3 for half of them, 3:2 for a quarter, else square to 2:1;
    a quarter portrait. Median about 500x375."""
    long = 500 if rng.random() < 0.7 else int(np.clip(round(math.exp(rng.normal(math.log(500), 0.3))), *SIDES))
    kind = rng.random()
    aspect = 4 / 3 if kind < 0.5 else 3 / 2 if kind < 0.75 else rng.uniform(1.0, 2.0)
    short = int(np.clip(round(long / aspect), *SIDES))
    return (short, long) if rng.random() < 0.25 else (long, short)


class ImageSet:
    """One benchmark set: its name (the cache's subfolder, '' for the default set's top level), how many
    images it has, how big each is (``size(rng)`` -> (width, height)) and its description."""

    def __init__(self, name: str, folder: str, count: int, size: Any, about: str):
        self.name, self.folder, self.count, self.size, self.about = name, folder, count, size, about

    def cache(self, root: Path) -> Path:
        return root / self.folder if self.folder else root


SETS = {
    "default": ImageSet("default", "", N_IMAGES, default_size, "sides 200-800, about 400x350"),
    "imagenet": ImageSet("imagenet", "imagenet", N_IMAGENET, imagenet_size, "ImageNet-train-like sizes, median about 500x375"),
}


def make_photo(sources: list[np.ndarray], i: int, size: Any = default_size) -> np.ndarray:
    """Image ``i``: a random crop of a photo, rescaled to ``size(rng)`` (width, height), flipped, tinted, with light noise."""
    rng = np.random.default_rng((SEED, 7, i))
    src = sources[i % len(sources)]
    width, height = size(rng)
    aspect = width / height
    crop_h = min(src.shape[0], src.shape[1] / aspect) * rng.uniform(0.5, 1.0)
    crop_w = crop_h * aspect
    top, left = rng.uniform(0, src.shape[0] - crop_h), rng.uniform(0, src.shape[1] - crop_w)
    pil = Image.fromarray(src).resize((width, height), Image.Resampling.BICUBIC, box=(left, top, left + crop_w, top + crop_h))
    image = np.asarray(pil, dtype=np.float32) * rng.uniform(0.9, 1.1, 3).astype(np.float32)
    image += rng.standard_normal(image.shape, dtype=np.float32) * 2.0
    image = np.clip(image, 0, 255).astype(np.uint8)
    return np.ascontiguousarray(image[:, ::-1]) if rng.random() < 0.5 else image


def image_path(root: Path, i: int) -> Path:
    return root / f"class{i % CLASSES:02d}" / f"{i:05d}.jpg"


def ensure_images(cache: Path, n: int, rebuild: bool, image_set: ImageSet = SETS["default"]) -> tuple[Path, dict[str, Any]]:
    """The class-per-folder JPEG tree of at least ``n`` images of ``image_set`` under ``cache/images``
    (the set's own cache folder: ``image_set.cache(cache)``), made once."""
    cache = image_set.cache(cache)
    root, manifest_path = cache / "images", cache / "images.json"
    want = {"generator": GENERATOR, "seed": SEED, "quality": QUALITY, "classes": CLASSES}
    if not rebuild and manifest_path.exists():
        manifest = json.loads(manifest_path.read_text())
        same = {k: manifest.get(k) for k in want} == want and manifest["count"] >= n
        if same and all(image_path(root, i).exists() for i in range(n)):
            return root, manifest
    count = max(n, image_set.count)
    print(f"making {count} JPEGs under {root} (once) ...", flush=True)
    t0 = time.perf_counter()
    sources = photo_sources()
    if manifest_path.exists():
        manifest_path.unlink()
    for k in range(CLASSES):
        (root / f"class{k:02d}").mkdir(parents=True, exist_ok=True)

    def one(i: int) -> tuple[int, int, int]:
        image = make_photo(sources, i, image_set.size)
        Image.fromarray(image).save(image_path(root, i), quality=QUALITY)
        return image.shape[0], image.shape[1], image_path(root, i).stat().st_size

    with ThreadPoolExecutor(os.cpu_count() or 2) as pool:  # Pillow's resize and encode release the GIL
        shapes = list(pool.map(one, range(count)))
    hs, ws, sizes = (np.array(x) for x in zip(*shapes))
    manifest = {
        **want,
        "count": count,
        "sources": len(sources),
        "mean_hw": [float(hs.mean()), float(ws.mean())],
        "median_hw": [float(np.median(hs)), float(np.median(ws))],
        "side_range": [int(min(hs.min(), ws.min())), int(max(hs.max(), ws.max()))],
        "max_side_over_512": float(np.mean(np.maximum(hs, ws) > MAX_SIDE)),
        "raw_over_threshold": float(np.mean(hs * ws * 3 > THRESHOLD)),
        "mean_kb": float(sizes.mean() / 1e3),
        "seconds": time.perf_counter() - t0,
    }
    manifest_path.write_text(json.dumps(manifest))
    print(f"  made in {manifest['seconds']:.1f} s", flush=True)
    return root, manifest


def subset(folder: Any, n: int) -> list[int]:
    """Positions in ``ss.imagefolder`` order of the first ``n`` images made (the same files for every loader)."""
    return [k for k, (path, _) in enumerate(folder.samples) if int(Path(path).stem) < n]


def source_fingerprint() -> str:
    """What packed files depend on: slipstream's version and its writer's sources (a change rebuilds them)."""
    import hashlib

    digest = hashlib.sha256(ss.__version__.encode())
    package = Path(ss.__file__).parent
    for name in ("write/writer.py", "fields.py", "files/field_image.py", "images/encoded/codecs.py", "files/format.py"):
        path = package / name
        if path.exists():
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def ensure_packed(cache: Path, folder: Any, idx: list[int], kind: str, rebuild: bool) -> tuple[Path, float | None]:
    """The packed file of ``kind`` ('jpeg' or 'smart') for the images ``idx`` (made once per writer version)."""
    n = len(idx)
    path = cache / f"slipstream-{kind}{MAX_SIDE}-n{n}.ss"
    stamp = path.with_suffix(".json")
    key = {"fingerprint": source_fingerprint(), "images": (cache / "images.json").stat().st_mtime_ns}
    if not rebuild and path.exists() and stamp.exists() and json.loads(stamp.read_text()) == key:
        try:
            if len(ss.open(path)) == n:
                return path, None
        except Exception:  # noqa: BLE001, S110 - an unreadable old file is made again
            pass
    policy = "smart" if kind == "smart" else None
    image = F.Image(codec="jpeg", quality=QUALITY, max_side=MAX_SIDE, policy=policy, threshold=THRESHOLD)
    data = folder if n == len(folder) else ss.obsview(folder, idx)
    t0 = time.perf_counter()
    ss.write(path, data, fields={"image": image, "label": F.Int()}, workers=WORKERS, progress=False)
    stamp.write_text(json.dumps(key))
    return path, time.perf_counter() - t0


# -- (1) decode-only ceiling ---------------------------------------------------------------------
def decode_epoch(blobs: list[bytes]):
    def run():
        t0 = time.perf_counter()
        for blob in blobs:
            if _compiled_core is not None:
                _compiled_core.decode_jpeg(blob)
            else:
                Image.open(io.BytesIO(blob)).convert("RGB")
        return len(blobs), time.perf_counter() - t0, float("nan")

    return run


# -- (2) torch with torchvision's transforms, written with PIL -------------------------------------
rrc_params = torch_rrc_params  # torchvision's RandomResizedCrop.get_params, with torch's RNG (shared with the demo)


class TorchvisionStyleFolder(Dataset):
    """torchvision's ``ImageFolder`` with ``RandomResizedCrop(224)``, ``RandomHorizontalFlip()``, ``PILToTensor()``, in PIL."""

    def __init__(self, samples: list[tuple[str, int]]):
        self.samples = samples

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        path, label = self.samples[index]
        with open(path, "rb") as f:  # torchvision's pil_loader
            img = Image.open(f).convert("RGB")
        top, left, h, w = rrc_params(img.height, img.width)
        img = img.crop((left, top, left + w, top + h)).resize((CROP, CROP), Image.Resampling.BILINEAR)
        if torch.rand(1) < 0.5:
            img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
        return torch.from_numpy(np.array(img)).permute(2, 0, 1).contiguous(), label


def torch_epoch(loader: Any):
    def run():
        t0 = time.perf_counter()
        it = iter(loader)
        images, _ = next(it)
        t1 = time.perf_counter()
        n = len(images)
        for images, _ in it:
            n += len(images)
        del it
        return n, time.perf_counter() - t0, t1 - t0

    return run


# -- (3), (4) slipstream ---------------------------------------------------------------------------
def pipeline(fast: bool = False) -> list[Any]:
    decode = [ops.Decode(fast=True)] if fast else []  # FFCV's decoder setting: fast DCT and upsampling
    return [*decode, ops.RandomResizedCrop(CROP), ops.RandomHorizontalFlip(), ops.ToCHW()]


def slipstream_loader(path: Path, workers: int = WORKERS, fast: bool = False) -> Any:
    return ss.DataLoader(ss.open(path).map(image=pipeline(fast)), batch_size=BATCH, shuffle=True, seed=SEED, workers=workers)


def slipstream_epoch(loader: Any):
    def run():
        t0 = time.perf_counter()
        it = iter(loader)
        batch = next(it)
        images, _labels = torch.from_numpy(batch["image"]), torch.from_numpy(batch["label"])
        t1 = time.perf_counter()
        n = len(images)
        for batch in it:
            images, _labels = torch.from_numpy(batch["image"]), torch.from_numpy(batch["label"])
            n += len(images)
        return n, time.perf_counter() - t0, t1 - t0

    return run


def check_batch(loader: Any) -> str:
    """One batch's layout, checked: uint8 (64, 3, 224, 224)."""
    batch = next(iter(loader))
    image = batch["image"] if isinstance(batch, dict) else batch[0]
    shape, dtype = tuple(image.shape), str(image.dtype).replace("torch.", "")
    if shape != (BATCH, 3, CROP, CROP) or dtype != "uint8":
        raise RuntimeError(f"unexpected batch: {dtype} {shape}")
    return f"{dtype} {shape}"


# -- (6), (7) the training recipe -------------------------------------------------------------------
RECIPES = {  # name -> (RandAugment's interpolation, ColorJitter's arguments)
    "recipe": ("nearest", (0.4,)),  # as the goal names it: RandAugment(2, 9) (torchvision's default NEAREST), ColorJitter(0.4) (brightness)
    "heavy": ("bilinear", (0.4, 0.4, 0.4)),  # torchvision's reference interpolation, and timm's color_jitter=0.4 (three factors)
}


def recipe_pipeline(kind: str = "recipe") -> list[Any]:
    """The DeiT-style recipe's per-image part (torchvision's reference recipe with a ColorJitter)."""
    interpolation, jitter = RECIPES[kind]
    return [
        ops.RandomResizedCrop(CROP), ops.RandomHorizontalFlip(), ops.RandAugment(2, 9, interpolation=interpolation),
        ops.ColorJitter(*jitter), ops.Normalize(MEAN, STD), ops.ToCHW(), ops.RandomErasing(0.25),
    ]  # fmt: skip


def recipe_loader(path: Path, workers: int = WORKERS, kind: str = "recipe") -> Any:
    from slipstream.images.batchops import MixUpOrCutMix

    mapped = ss.open(path).map(image=recipe_pipeline(kind))
    return ss.DataLoader(mapped, batch_size=BATCH, shuffle=True, seed=SEED, workers=workers, batch_ops=[MixUpOrCutMix(num_classes=CLASSES)])


def check_recipe_batch(loader: Any) -> str:
    """One recipe batch's layout, checked: float32 (64, 3, 224, 224) images and (64, classes) soft labels."""
    batch = next(iter(loader))
    image, label = (batch["image"], batch["label"]) if isinstance(batch, dict) else batch[:2]
    shapes = (tuple(image.shape), str(image.dtype).replace("torch.", ""), tuple(label.shape))
    if shapes != ((BATCH, 3, CROP, CROP), "float32", (BATCH, CLASSES)):
        raise RuntimeError(f"unexpected recipe batch: {shapes}")
    return f"{shapes[1]} {shapes[0]}, labels {shapes[2]}"


def child_protocol() -> tuple[Any, dict[str, Any]]:
    """A child loader's side of the protocol: its reply function (one JSON line each on the
    process's original stdout; whatever the libraries print goes to stderr) and the job it was sent."""
    reply = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr

    def answer(message: dict[str, Any]) -> None:
        reply.write(json.dumps(message) + "\n")
        reply.flush()

    return answer, json.loads(sys.stdin.readline())


def serve_epochs(answer: Any, loaders: dict[str, Any], name: str) -> None:
    """Run one epoch of ``loaders[request["run"]]`` per request line until "quit", replying with
    the samples, seconds and the first batch's seconds."""
    for line in sys.stdin:
        request = json.loads(line)
        if "quit" in request:
            break
        try:
            t0 = time.perf_counter()
            it = iter(loaders[request["run"]])
            images, _ = next(it)
            t1 = time.perf_counter()
            count = len(images)
            for images, _ in it:
                count += len(images)
            answer({"n": count, "seconds": time.perf_counter() - t0, "first": t1 - t0})
        except Exception as exc:  # noqa: BLE001
            answer({"error": f"{name} epoch failed: {type(exc).__name__}: {exc}"})


def tv_python() -> tuple[Path | None, str]:
    """The Python with torchvision v2 for the recipe's baseline, and why there is none."""
    choice = os.environ.get("SLIPSTREAM_TORCHVISION_PYTHON")
    python = Path(choice) if choice else DEFAULT_TV
    if python.exists():
        return python, ""
    return None, (f"torchvision not importable: no {python} (make it: python3.11 -m venv /opt/tv-venv && "
                  "/opt/tv-venv/bin/pip install torch==2.14.1 torchvision==0.29.1 numpy pillow; or set SLIPSTREAM_TORCHVISION_PYTHON)")


def tv_worker() -> int:
    """The torchvision child (its own venv, no slipstream): torch's DataLoader with torchvision v2's
    reference recipe, one epoch per request (the FFCV child's protocol)."""
    answer, job = child_protocol()
    try:
        import torch as ch
        import torchvision
        from PIL import Image as PILImage
        from torch.utils.data import DataLoader, default_collate
        from torchvision.transforms import v2
    except Exception as exc:  # noqa: BLE001 - reported as the reason the baseline could not run
        answer({"error": f"torchvision not importable: {type(exc).__name__}: {exc}"})
        return 1
    ch.set_num_threads(1)
    bilinear = v2.InterpolationMode.BILINEAR

    def transform_of(kind: str) -> Any:  # references/classification/presets.py's order, on PIL images until PILToTensor
        interpolation, jitter = RECIPES[kind]
        return v2.Compose([
            v2.RandomResizedCrop(CROP, interpolation=bilinear, antialias=True), v2.RandomHorizontalFlip(),
            v2.RandAugment(2, 9, interpolation=v2.InterpolationMode(interpolation)), v2.ColorJitter(*jitter), v2.PILToTensor(),
            v2.ToDtype(ch.float32, scale=True), v2.Normalize(MEAN, STD), v2.RandomErasing(0.25),
        ])  # fmt: skip

    mix = v2.RandomChoice([v2.MixUp(alpha=0.8, num_classes=CLASSES), v2.CutMix(alpha=1.0, num_classes=CLASSES)])

    def collate(batch: list) -> Any:  # in the worker, as the reference train.py does
        return mix(*default_collate(batch))

    class Files(ch.utils.data.Dataset):
        def __init__(self, samples, transform):
            self.samples, self.transform = samples, transform

        def __len__(self):
            return len(self.samples)

        def __getitem__(self, i):
            path, label = self.samples[i]
            with open(path, "rb") as f:
                return self.transform(PILImage.open(f).convert("RGB")), label

    samples = [tuple(s) for s in job["samples"]]
    try:
        loaders = {
            kind: DataLoader(Files(samples, transform_of(kind)), batch_size=BATCH, shuffle=True, num_workers=WORKERS,
                             persistent_workers=True, collate_fn=collate, generator=ch.Generator().manual_seed(SEED))
            for kind in job["modes"]
        }  # fmt: skip
        images, labels = next(iter(loaders[job["modes"][0]]))
        layout = f"{str(images.dtype).replace('torch.', '')} {tuple(images.shape)}, labels {tuple(labels.shape)}"
    except Exception as exc:  # noqa: BLE001
        answer({"error": f"torchvision recipe failed: {type(exc).__name__}: {exc}"})
        return 1
    answer({"torch": ch.__version__, "torchvision": torchvision.__version__, "sizes": {}, "converted": {}, "layout": layout})
    serve_epochs(answer, loaders, "torchvision")
    return 0


# -- (5) FFCV, in a child process of its own venv ----------------------------------------------------
class FfcvClient:
    """A child loader in its own venv (FFCV's, or torchvision's with ``flag=TV_WORKER``): the FFCV
    one converts the files (cached .beton); both then run one epoch per request."""

    def __init__(self, python: Path, cache: Path, samples: list[tuple[str, int]], modes: list[str], flag: str = FFCV_WORKER):
        self.log = cache / ("ffcv-child.log" if flag == FFCV_WORKER else "torchvision-child.log")
        self.name = "FFCV" if flag == FFCV_WORKER else "torchvision"
        job = {"cache": str(cache), "samples": samples, "modes": modes, "stamp": (cache / "images.json").stat().st_mtime_ns}
        with open(self.log, "w") as log:
            self.proc = subprocess.Popen(
                [str(python), str(Path(__file__).resolve()), flag],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True, cwd=str(cache),
            )
        self.hello = self._ask(job)

    def _ask(self, message: dict[str, Any]) -> dict[str, Any]:
        try:
            self.proc.stdin.write(json.dumps(message) + "\n")
            self.proc.stdin.flush()
            line = self.proc.stdout.readline()
        except BrokenPipeError:
            line = ""
        if not line:
            self.proc.wait(timeout=30)
            raise RuntimeError(f"the {self.name} child exited ({self.proc.returncode}): {last_error(self.log)}")
        reply = json.loads(line)
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply

    def epoch(self, mode: str):
        def run():
            reply = self._ask({"run": mode})
            return reply["n"], reply["seconds"], reply["first"]

        return run

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"quit": True}) + "\n")
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except Exception:  # noqa: BLE001
                self.proc.kill()


def last_error(log: Path) -> str:
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()] if log.exists() else []
    errors = [line for line in lines if "Error" in line or "error" in line]
    return (errors or lines or ["no output"])[-1][:300]


def ffcv_python(arg: str | None) -> tuple[Path | None, str]:
    """The Python to run FFCV with, and why there is none."""
    choice = arg or os.environ.get("SLIPSTREAM_FFCV_PYTHON")
    if choice:
        return (Path(choice), "") if Path(choice).exists() else (None, f"FFCV not importable: {choice} does not exist")
    if DEFAULT_FFCV.exists():
        return DEFAULT_FFCV, ""
    return None, f"FFCV not importable: no FFCV Python given (--ffcv-python PATH or SLIPSTREAM_FFCV_PYTHON; no {DEFAULT_FFCV})"


def ffcv_worker() -> int:
    """The FFCV child process (run by FFCV's venv): one JSON request per stdin line, one JSON reply per stdout line."""
    answer, job = child_protocol()
    try:
        from importlib.metadata import version

        import torch as ch
        from ffcv.fields import IntField, RGBImageField
        from ffcv.fields.decoders import IntDecoder, RandomResizedCropRGBImageDecoder
        from ffcv.loader import Loader, OrderOption
        from ffcv.transforms import RandomHorizontalFlip, ToTensor, ToTorchImage
        from ffcv.writer import DatasetWriter
        from PIL import Image as PILImage
    except Exception as exc:  # noqa: BLE001 - reported as the reason FFCV could not run
        answer({"error": f"FFCV not importable: {type(exc).__name__}: {exc}"})
        return 1
    ch.set_num_threads(1)

    class Files:
        def __init__(self, samples):
            self.samples = samples

        def __len__(self):
            return len(self.samples)

        def __getitem__(self, i):
            path, label = self.samples[i]
            with open(path, "rb") as f:
                return PILImage.open(f).convert("RGB"), label

    samples = [tuple(s) for s in job["samples"]]
    cache, n = Path(job["cache"]), len(samples)
    loaders, converted, sizes = {}, {}, {}
    try:
        for mode in job["modes"]:
            path = cache / f"ffcv-{mode}{MAX_SIDE}-n{n}.beton"
            stamp = path.with_suffix(".json")
            if not (path.exists() and stamp.exists() and json.loads(stamp.read_text()) == job["stamp"]):
                t0 = time.perf_counter()
                tmp = path.with_suffix(".tmp")
                field = RGBImageField(write_mode=mode, max_resolution=MAX_SIDE, jpeg_quality=QUALITY,
                                      smart_threshold=THRESHOLD if mode == "smart" else None)
                writer = DatasetWriter(str(tmp), {"image": field, "label": IntField()}, num_workers=WORKERS)
                writer.from_indexed_dataset(Files(samples))
                tmp.rename(path)
                stamp.write_text(json.dumps(job["stamp"]))
                converted[mode] = time.perf_counter() - t0
            sizes[mode] = path.stat().st_size
            loaders[mode] = Loader(
                str(path), batch_size=BATCH, num_workers=WORKERS, order=OrderOption.RANDOM, seed=SEED,
                os_cache=True, drop_last=False,
                pipelines={
                    "image": [RandomResizedCropRGBImageDecoder((CROP, CROP)), RandomHorizontalFlip(), ToTensor(), ToTorchImage()],
                    "label": [IntDecoder(), ToTensor()],
                },
            )
        images, _ = next(iter(loaders["jpg"]))
        layout = f"{str(images.dtype).replace('torch.', '')} {tuple(images.shape)}, contiguous={images.is_contiguous()}"
    except Exception as exc:  # noqa: BLE001
        answer({"error": f"FFCV failed: {type(exc).__name__}: {exc}"})
        return 1
    answer({"ffcv": version("ffcv"), "numpy": version("numpy"), "opencv": version("opencv-python"),
            "converted": converted, "sizes": sizes, "layout": layout})
    serve_epochs(answer, loaders, "FFCV")
    return 0


# -- the GIL share ---------------------------------------------------------------------------------
def gil_share(path: Path, samples: int, runs: int) -> dict[str, float]:
    """Per-sample microseconds, single-threaded: total, decoding and augmenting (as the pipeline
    reports them through ``core.timings``: measured inside the compiled task call, which runs
    without the GIL, or around the per-sample path's decode and resample calls), and the rest,
    which holds the GIL (the loader, windows, checks, the calls' own Python)."""
    from slipstream.core import timings as stages

    loader = slipstream_loader(path, workers=0)
    batches = max(1, samples // BATCH)
    rows: list[dict[str, float]] = []
    for r in range(runs + 1):  # the first is a warm-up
        spent: dict[str, float] = {}
        gc.collect()
        stages.install(spent)
        try:
            t0 = time.perf_counter()
            n = 0
            for k, batch in enumerate(loader):
                n += len(batch["image"])
                if k + 1 == batches:
                    break
            total = time.perf_counter() - t0
        finally:
            stages.install(None)
        if r:
            us = {"total": total / n * 1e6, "decode": spent.get("decode", 0.0) / n * 1e6, "resample": spent.get("augment", 0.0) / n * 1e6}
            us["held"] = us["total"] - us["decode"] - us["resample"]
            rows.append(us)
    return {key: statistics.median(row[key] for row in rows) for key in rows[0]}


def profile(path: Path, samples: int, top: int = 14) -> None:
    """cProfile of the single-threaded pipeline (workers=0), sorted by own time."""
    import cProfile
    import io
    import pstats

    loader = slipstream_loader(path, workers=0)
    next(iter(loader))
    prof = cProfile.Profile()
    prof.enable()
    for k, _ in enumerate(loader):
        if k + 1 == max(1, samples // BATCH):
            break
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(top)
    text = out.getvalue()
    print("\n".join(line for line in text.splitlines()[text.splitlines().index("") + 1 :] if line.strip()))


# -- reporting ---------------------------------------------------------------------------------------
def cpu_snapshot() -> tuple[float, float, float] | None:
    """(seconds, CPU-seconds busy on the machine, CPU-seconds of this process and its descendants); None off Linux."""
    try:
        tick = os.sysconf("SC_CLK_TCK")
        fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        busy = sum(fields) - fields[3] - fields[4]  # all but idle and iowait (steal counts as busy: not ours)
        parents: dict[int, int] = {}
        used: dict[int, int] = {}
        for entry in os.scandir("/proc"):
            if entry.name.isdigit():
                try:
                    stat = Path(entry.path, "stat").read_text()
                except OSError:
                    continue
                rest = stat[stat.rindex(")") + 2 :].split()
                parents[int(entry.name)], used[int(entry.name)] = int(rest[1]), int(rest[11]) + int(rest[12])
        ours, frontier = {os.getpid()}, [os.getpid()]
        while frontier:
            pid = frontier.pop()
            for child, parent in parents.items():
                if parent == pid and child not in ours:
                    ours.add(child)
                    frontier.append(child)
        return time.perf_counter(), busy / tick, sum(used.get(pid, 0) for pid in ours) / tick
    except (OSError, ValueError):
        return None


def with_cpu(run: Any) -> Any:
    """``run`` whose result gains the CPU-seconds this process and its children (workers, the FFCV child) spent in it."""

    def timed(*args: Any) -> tuple:
        before = cpu_snapshot()
        result = run(*args)
        after = cpu_snapshot()
        return (*result, after[2] - before[2] if before and after else float("nan"))

    return timed


def others_share(before: Any, after: Any) -> float | None:
    """The CPUs that other processes (and the hypervisor's steal) used between two snapshots, as a count of CPUs."""
    if before is None or after is None:
        return None
    return max(0.0, (after[1] - before[1]) - (after[2] - before[2])) / (after[0] - before[0])


def mb(nbytes: int) -> str:
    return f"{nbytes / 1e6:.0f} MB"


CASES = ("decode", "torch", "ss", "ssS", "ssF", "ffcv", "ffcvS", "recipe", "tvrecipe", "heavy", "tvheavy")
LABELS = {
    "decode": "(1) libjpeg-turbo full decode, 1 thread [ceiling]",
    "torch": "(2) torch DataLoader + PIL (torchvision's ops)",
    "ss": f"(3) slipstream, jpeg max_side {MAX_SIDE}",
    "ssS": "(4) slipstream, smart policy",
    "ssF": "(3f) slipstream jpeg, ops.Decode(fast=True)",
    "ffcv": "(5) FFCV 1.0.2, write_mode='jpg'",
    "ffcvS": "(5s) FFCV 1.0.2, write_mode='smart'",
    "recipe": "(6) slipstream, DeiT-style recipe",
    "tvrecipe": "(7) torch DataLoader + torchvision v2 recipe",
    "heavy": "(6h) slipstream, recipe: bilinear RA, 3-factor jitter",
    "tvheavy": "(7h) torchvision v2, the same",
}


class Bench:
    """One set's files, loaders and runs (``runs``: case -> one epoch), and what its report prints."""

    def __init__(self, image_set: ImageSet, args: Any, n: int, cases: list[str]):
        self.set, self.n, self.client, self.why_not = image_set, n, None, ""
        cache = image_set.cache(args.cache)
        cache.mkdir(parents=True, exist_ok=True)
        self.root, self.made = ensure_images(args.cache, n, args.rebuild, image_set)
        folder = ss.imagefolder(self.root)
        idx = subset(folder, n)
        self.samples = [folder.samples[k] for k in idx]
        self.packed = {kind: ensure_packed(cache, folder, idx, kind, args.rebuild) for kind in ("jpeg", "smart")}
        self.blobs = [Path(path).read_bytes() for path, _ in self.samples]
        for path, _ in self.packed.values():
            path.read_bytes()  # into the page cache, like the JPEG files just read
        want_ffcv = [mode for mode, case in (("jpg", "ffcv"), ("smart", "ffcvS")) if case in cases and not (args.quick and mode == "smart")]
        python, self.why_not = (None, "FFCV skipped (--no-ffcv)") if args.no_ffcv else ffcv_python(args.ffcv_python)
        if python is not None and want_ffcv:
            print(f"starting FFCV for the {image_set.name} set with {python} (JIT compiling; its first start also converts "
                  "the files to .beton) ...", flush=True)
            try:  # each FFCV pipeline takes ~8 s to compile
                modes = ["jpg", *(["smart"] if "smart" in want_ffcv else [])]  # (jpg always: its first batch shows the layout)
                self.client = FfcvClient(python, cache, [(str(p), int(label)) for p, label in self.samples], modes)
            except Exception as exc:  # noqa: BLE001
                self.why_not = str(exc) if str(exc).startswith("FFCV not importable") else f"FFCV not importable: {exc}"
        elif python is not None:
            self.why_not = "FFCV not among --cases"
        self.tv, self.tv_why_not = None, ""
        tv_modes = [kind for kind, case in (("recipe", "tvrecipe"), ("heavy", "tvheavy")) if case in cases]
        if tv_modes:
            python, self.tv_why_not = tv_python()
            if python is not None:
                print(f"starting the torchvision recipe for the {image_set.name} set with {python} ...", flush=True)
                try:
                    self.tv = FfcvClient(python, cache, [(str(p), int(label)) for p, label in self.samples], tv_modes, flag=TV_WORKER)
                except Exception as exc:  # noqa: BLE001
                    self.tv_why_not = str(exc)
        loaders = {
            "ss": slipstream_loader(self.packed["jpeg"][0]),
            "ssS": slipstream_loader(self.packed["smart"][0]),
            "ssF": slipstream_loader(self.packed["jpeg"][0], fast=True),
        }
        self.layouts = {"ss": check_batch(loaders["ss"])}
        runs = {"decode": decode_epoch(self.blobs)}
        if "torch" in cases:
            torch_loader = TorchLoader(
                TorchvisionStyleFolder(self.samples), batch_size=BATCH, shuffle=True, num_workers=WORKERS,
                persistent_workers=True, generator=torch.Generator().manual_seed(SEED),
            )
            self.layouts["torch"] = check_batch(torch_loader)
            runs["torch"] = torch_epoch(torch_loader)
        for kind in RECIPES:
            if kind in cases:
                loaders[kind] = recipe_loader(self.packed["jpeg"][0], kind=kind)
                self.layouts[kind] = check_recipe_batch(loaders[kind])
        runs.update({key: slipstream_epoch(loader) for key, loader in loaders.items()})
        for kind in tv_modes if self.tv is not None else []:
            runs["tv" + kind] = self.tv.epoch(kind)
        if self.client is not None:
            runs["ffcv"] = self.client.epoch("jpg")
            if "smart" in self.client.hello["sizes"]:
                runs["ffcvS"] = self.client.epoch("smart")
        self.runs = {case: with_cpu(run) for case, run in runs.items() if case in cases}

    def describe(self) -> None:
        made, n = self.made, self.n
        hs, ws = made["mean_hw"]
        median = f", median {made['median_hw'][1]:.0f}x{made['median_hw'][0]:.0f}" if "median_hw" in made else ""
        print(f"{self.set.name} set: {n} JPEGs q{QUALITY} (of {made['count']} in {self.root}), {CLASSES} classes, "
              f"from {made['sources']} skimage.data photos, {self.set.about}; mean {ws:.0f}x{hs:.0f} (WxH){median}, "
              f"{mb(sum(map(len, self.blobs)))}, {100 * made['max_side_over_512']:.0f}% with a side over {MAX_SIDE}, "
              f"{100 * made['raw_over_threshold']:.0f}% over {THRESHOLD >> 10} KiB raw")
        for kind, (path, seconds) in self.packed.items():
            made_now = f", written now in {seconds:.1f} s" if seconds is not None else ""
            print(f"  slipstream {kind:<5} file {path.name}: {mb(path.stat().st_size)}{made_now}")
        if self.client is not None:
            for mode, size in self.client.hello["sizes"].items():
                made_now = f", converted now in {self.client.hello['converted'][mode]:.1f} s" if mode in self.client.hello["converted"] else ""
                print(f"  FFCV {mode:<5} .beton: {mb(size)}{made_now}")

    def close(self) -> None:
        for client in (self.client, self.tv):
            if client is not None:
                client.close()


def measure_sets(benches: list[Bench], repeats: int) -> dict[str, dict[str, list[tuple]]]:
    """``measure`` over every set's runs at once: a warm-up epoch each, then ``repeats`` rounds in an
    order that rotates every round (the sets' runs interleaved). The runs of one set must agree on
    their samples per epoch."""
    queues = [[(k, case) for case in bench.runs] for k, bench in enumerate(benches)]
    names = [name for group in itertools.zip_longest(*queues) for name in group if name is not None]  # the sets alternate
    for k, case in names:
        benches[k].runs[case]()
    results: dict[str, dict[str, list[tuple]]] = {bench.set.name: {case: [] for case in bench.runs} for bench in benches}
    for r in range(repeats):
        for k, case in names[r % len(names) :] + names[: r % len(names)]:
            gc.collect()
            results[benches[k].set.name][case].append(benches[k].runs[case]())
    for name, per_case in results.items():
        counts = {case: {res[0] for res in rs} for case, rs in per_case.items()}
        if len({c for cs in counts.values() for c in cs}) != 1:
            raise RuntimeError(f"the {name} set's runs disagree on samples per epoch: {counts}")
    return results


def report(bench: Bench, results: dict[str, list[tuple]], verdicts: Verdicts, prefix: str) -> dict[str, float]:
    """One set's table and ratios (verdict labels start with ``prefix``); returns the ratios the summary names."""
    client = bench.client
    layouts = bench.layouts
    print(f"\n{bench.set.name} set: batches: slipstream {layouts['ss']}" + (f"; torch {layouts['torch']}" if "torch" in layouts else "")
          + (f"; FFCV {client.hello['layout']}" if client is not None else ""))
    cpu_ms = {key: [1e3 * r[3] / r[0] for r in res] for key, res in results.items()}
    rows = []
    for key, label in LABELS.items():
        if key in results:  # the decode loop has no first batch
            firsts = {} if key == "decode" else {"1st batch ms": [1e3 * r[2] for r in results[key]]}
            rows.append((label, {"img/s": rates(results[key]), "CPU ms/img": cpu_ms[key], **firsts}))
    table(rows, [("img/s", ".0f"), ("CPU ms/img", ".2f"), ("1st batch ms", ".0f")], corner="loader (one epoch)")
    recipe = next((layouts[kind] for kind in RECIPES if kind in layouts), None)
    if recipe is not None:
        print(f"  recipe batches: slipstream {recipe}" + (f"; torchvision {bench.tv.hello['layout']}" if bench.tv is not None else ""))
    if bench.tv is None and bench.tv_why_not:
        print(f"  (7) {bench.tv_why_not}")
    if client is None:
        print(f"  (5) {bench.why_not}")
    elif "ffcvS" not in results:
        print("  (5s) FFCV smart: not run (--quick or --cases)")
    thr = {key: rates(res) for key, res in results.items()}
    ratios: dict[str, float] = {}

    def check(label: str, a: str, b: str, goal: float | None, values: dict[str, list[float]] = thr) -> None:
        if a in values and b in values:
            value = paired(values[a], values[b])
            verdict(prefix + label, value, goal, verdicts)
            ratios[label] = value

    print()
    check("(3) slipstream jpeg / (2) torch", "ss", "torch", 2.0)
    check("(3) slipstream jpeg / (5) FFCV jpg", "ss", "ffcv", 1.25)
    check("(3) slipstream jpeg / (5) FFCV (stretch)", "ss", "ffcv", 1.5)
    check("(3) slipstream jpeg / (5) FFCV (2x goal)", "ss", "ffcv", 2.0)
    check("(4) slipstream smart / (5s) FFCV smart", "ssS", "ffcvS", None)
    check("(3f) fast decode / (5) FFCV (its DCT)", "ssF", "ffcv", None)
    check("(4) slipstream smart / (2) torch", "ssS", "torch", None)
    check("(3f) fast decode / (2) torch", "ssF", "torch", None)
    check("(3) slipstream jpeg / (1) 1-thread decode", "ss", "decode", None)
    check("(6) recipe / (7) torchvision recipe", "recipe", "tvrecipe", 3.0)
    check("(6) recipe / (3) crop+flip only", "recipe", "ss", 0.6)
    check("(6h) heavy recipe / (7h) torchvision", "heavy", "tvheavy", None)
    check("(6h) heavy recipe / (3) crop+flip only", "heavy", "ss", None)
    print("  CPU per image (all processes of the run; less sensitive to other load than img/s):")
    check("(2) torch / (3) slipstream jpeg", "torch", "ss", None, cpu_ms)
    check("(5) FFCV jpg / (3) slipstream jpeg", "ffcv", "ss", None, cpu_ms)
    check("(5s) FFCV smart / (4) slipstream smart", "ffcvS", "ssS", None, cpu_ms)
    first_ms = {key: statistics.median(r[2] for r in results[key]) * 1e3 for key in ("ss", "ssS") if key in results}
    if first_ms:
        print("  time to first batch, slipstream (from iter()): " + ", ".join(f"{'jpeg' if k == 'ss' else 'smart'} {v:.0f} ms" for k, v in first_ms.items())
              + " (medians)")
    return ratios


def gil_report(bench: Bench, samples: int, runs: int) -> None:
    print(f"\nGIL share of slipstream's pipeline, {bench.set.name} set, single-threaded (workers=0, {samples} samples x {runs} runs, medians):")
    print("  held = total per sample (loader included) - decode and resample+layout time as the pipeline reports them")
    print("         (core.timings: timed inside the compiled task call, which releases the GIL for the whole chunk)")
    print(f"  {'file':<6} {'total us':>9} {'decode us':>10} {'resample us':>12} {'held us':>8} {'held share':>11} "
          f"{'GIL bound img/s':>16} {'2-core bound img/s':>19}")
    for kind in ("jpeg", "smart"):
        try:
            us = gil_share(bench.packed[kind][0], samples, runs)
        except Exception as exc:  # noqa: BLE001 - the internals moved: say so, keep the rest
            print(f"  {kind:<6} could not be measured: {type(exc).__name__}: {exc}")
            continue
        print(f"  {kind:<6} {us['total']:9.0f} {us['decode']:10.0f} {us['resample']:12.0f} {us['held']:8.0f} "
              f"{us['held'] / us['total']:10.0%} {1e6 / max(us['held'], 1e-9):16.0f} {WORKERS * 1e6 / us['total']:19.0f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"the first {N_QUICK} images, 2 repeats: under a minute")
    parser.add_argument("--repeats", type=int, default=None, help="timed epochs per loader (default 7, quick 2)")
    parser.add_argument("--images", type=int, default=None,
                        help=f"images per epoch and set (default: the set's, {N_IMAGES} or {N_IMAGENET}; quick {N_QUICK})")
    parser.add_argument("--set", choices=["default", "imagenet", "both"], default="default",
                        help=f"which images: the default set ({N_IMAGES}), the ImageNet-like one ({N_IMAGENET}), or both in one run")
    parser.add_argument("--cases", default=",".join(CASES), help=f"the loaders to run, comma-separated (default all: {','.join(CASES)})")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"where the files are kept (default {DEFAULT_CACHE})")
    parser.add_argument("--ffcv-python", default=None, help="a Python that imports ffcv 1.0.2 (or set SLIPSTREAM_FFCV_PYTHON)")
    parser.add_argument("--no-ffcv", action="store_true", help="skip FFCV")
    parser.add_argument("--rebuild", action="store_true", help="make the images and packed files again")
    parser.add_argument("--profile", action="store_true", help="also print a cProfile of the single-threaded slipstream pipeline")
    args = parser.parse_args(argv)
    cases = [case for case in args.cases.split(",") if case]
    unknown = sorted(set(cases) - set(CASES))
    if unknown or "ss" not in cases:
        parser.error(f"--cases: {', '.join(unknown) or 'ss is needed'} (known: {', '.join(CASES)}; ss always runs)")
    repeats = args.repeats or (2 if args.quick else 7)
    gil_samples, gil_runs = (256, 1) if args.quick else (640, 3)
    set_footing()  # one torch thread; the workers are asked for on any machine

    start = time.perf_counter()
    chosen = list(SETS.values()) if args.set == "both" else [SETS[args.set]]
    benches: list[Bench] = []
    try:
        for image_set in chosen:
            benches.append(Bench(image_set, args, args.images or (N_QUICK if args.quick else image_set.count), cases))
        setup = time.perf_counter() - start

        import PIL

        extra = [f"Pillow {PIL.__version__}"]
        hello = next((bench.client.hello for bench in benches if bench.client is not None), None)
        if hello is not None:
            extra.append(f"FFCV {hello['ffcv']} (numpy {hello['numpy']}, opencv {hello['opencv']})")
        print(versions(*extra))
        for bench in benches:
            bench.describe()
        print(f"pipeline: RandomResizedCrop({CROP}) + flip, uint8 CHW, batch {BATCH}, shuffle, {WORKERS} workers; "
              f"1 warm-up epoch per run, then {repeats} epochs each in rotating order"
              + (", the sets' runs interleaved" if len(benches) > 1 else "") + f" (setup {setup:.0f} s)")
        before = cpu_snapshot()
        results = measure_sets(benches, repeats)
        others = others_share(before, cpu_snapshot())
    finally:
        for bench in benches:
            bench.close()

    verdicts = Verdicts(label_width=40 + (11 if len(benches) > 1 else 0), value_width=6)
    ratios = {}
    for bench in benches:
        prefix = f"{bench.set.name}: " if len(benches) > 1 else ""
        ratios[bench.set.name] = report(bench, results[bench.set.name], verdicts, prefix)
    if others is not None:
        noisy = "  NOISY: other load shared the CPUs, expect wide ranges" if others > 0.2 else ""
        print(f"\n  other processes used {others:.2f} of {os.cpu_count()} CPUs while this ran{noisy}")
    key = "(3) slipstream jpeg / (5) FFCV jpg"
    if len(benches) > 1 and any(key in r for r in ratios.values()):
        print("  slipstream / FFCV (img/s, medians of paired ratios): "
              + ", ".join(f"{name} {r[key]:.2f}x" for name, r in ratios.items() if key in r))
    for bench in benches:
        gil_report(bench, gil_samples, gil_runs)
    if args.profile:
        for bench in benches:
            print(f"\ncProfile, {bench.set.name} set, slipstream jpeg file, workers=0, {gil_samples} samples (by own time):")
            profile(bench.packed["jpeg"][0], gil_samples)
    summary(verdicts, start)
    return 0


if __name__ == "__main__":
    sys.exit(ffcv_worker() if FFCV_WORKER in sys.argv else tv_worker() if TV_WORKER in sys.argv else main())
