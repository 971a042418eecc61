"""Benchmark: whole-image JPEG decode and encode, slipstream's extension against simplejpeg and Pillow.

The photos of ``skimage.data`` (astronaut 512x512, coffee 400x600, chelsea 300x451, and the
astronaut resized to 1024x1024 with Pillow's bicubic filter) or, without scikit-image, smooth
synthetic images with noise of the same sizes; encoded once at quality 90 with 4:2:0 subsampling.
Cases, each on every photo, one thread:

- decode: the whole image as RGB (``_roijpeg.decode_jpeg``, ``simplejpeg.decode_jpeg``,
  ``numpy.asarray(PIL.Image.open(...))``);
- decode 1/2: at half size by DCT scaling (``scale_denom=2``; simplejpeg's ``min_factor=2``;
  Pillow's ``draft``);
- decode into out: the whole image into a preallocated array (``out=``; simplejpeg's ``buffer=``);
- encode: RGB at quality 90, 4:2:0 (``_roijpeg.encode_jpeg(fast=True)``, the settings that give
  simplejpeg's bytes; ``simplejpeg.encode_jpeg``; Pillow's ``save(format="JPEG", quality=90)``).

Measuring: each repeat times ``--calls`` calls of every implementation in turn (the order rotates
every repeat); reported are the median microseconds per call over ``--repeats`` repeats and the
median of the per-repeat ratios to the extension (> 1: slower than the extension). Implementations
that are not installed are left out. Usage: ``python benchmarks/bench_codec.py [--repeats 15] [--calls 20]``.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

try:
    from slipstream.images import compiled
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from slipstream.images import compiled

from PIL import Image

try:
    import simplejpeg
except ImportError:
    simplejpeg = None


def photos() -> dict[str, np.ndarray]:
    """The benchmark's RGB images by name (see the module doc)."""
    try:
        import skimage.data as data

        images = {"astronaut": data.astronaut(), "coffee": data.coffee(), "chelsea": data.chelsea()}
    except ImportError:
        rng = np.random.default_rng(0)
        images = {}
        for name, (h, w) in {"astronaut": (512, 512), "coffee": (400, 600), "chelsea": (300, 451)}.items():
            y, x = np.mgrid[0:h, 0:w]
            base = np.stack([128 + 100 * np.sin(x / 37.0 + k) * np.cos(y / 23.0 - k) for k in range(3)], axis=2)
            images[name] = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
    images["astronaut1024"] = np.asarray(Image.fromarray(images["astronaut"]).resize((1024, 1024), Image.Resampling.BICUBIC))
    return images


def pil_decode(data: bytes, factor: int = 1) -> np.ndarray:
    pil = Image.open(io.BytesIO(data))
    if factor > 1:
        pil.draft("RGB", (max(1, pil.size[0] // factor), max(1, pil.size[1] // factor)))
    return np.asarray(pil)


def pil_encode(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def cases(image: np.ndarray, data: bytes) -> dict[str, dict[str, Callable[[], object]]]:
    """Per case, the implementations to time (the extension first: the ratios' reference)."""
    ext = compiled.EXTENSION
    h, w = image.shape[:2]
    out = np.empty_like(image)
    table: dict[str, dict[str, Callable[[], object]]] = {"decode": {}, "decode 1/2": {}, "decode into out": {}, "encode": {}}
    if ext is not None:
        table["decode"]["slipstream"] = lambda: ext.decode_jpeg(data)
        table["decode 1/2"]["slipstream"] = lambda: ext.decode_jpeg(data, scale_denom=2)
        table["decode into out"]["slipstream"] = lambda: ext.decode_jpeg(data, out)
        table["encode"]["slipstream"] = lambda: ext.encode_jpeg(image, 90, subsampling="420", fast=True)
    if simplejpeg is not None:
        table["decode"]["simplejpeg"] = lambda: simplejpeg.decode_jpeg(data)
        table["decode 1/2"]["simplejpeg"] = lambda: simplejpeg.decode_jpeg(
            data, min_factor=2, min_height=-(-h // 2), min_width=-(-w // 2)
        )
        table["decode into out"]["simplejpeg"] = lambda: simplejpeg.decode_jpeg(data, buffer=out)
        table["encode"]["simplejpeg"] = lambda: simplejpeg.encode_jpeg(image, quality=90, colorsubsampling="420")
    table["decode"]["Pillow"] = lambda: pil_decode(data)
    table["decode 1/2"]["Pillow"] = lambda: pil_decode(data, 2)
    table["encode"]["Pillow"] = lambda: pil_encode(image)
    return table


def measure(impls: dict[str, Callable[[], object]], repeats: int, calls: int) -> dict[str, list[float]]:
    """Microseconds per call of each implementation, one value per repeat, the order rotating."""
    names = list(impls)
    for name in names:  # warm up
        impls[name]()
    times: dict[str, list[float]] = {name: [] for name in names}
    for r in range(repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            fn = impls[name]
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            times[name].append((time.perf_counter() - start) / calls * 1e6)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    ext = compiled.EXTENSION
    print(f"extension: {compiled.STATUS}" + (f", libjpeg-turbo {ext.LIBJPEG_TURBO_VERSION_NUMBER}" if ext is not None else ""))
    print(f"simplejpeg: {getattr(simplejpeg, '__version__', 'missing')}; Pillow {Image.__version__}")
    print(f"{'image':<24} {'case':<16} {'implementation':<12} {'us/call':>10} {'ratio':>7}")
    for name, image in photos().items():
        data = simplejpeg.encode_jpeg(image, quality=90, colorsubsampling="420") if simplejpeg is not None else pil_encode(image)
        for case, impls in cases(image, data).items():
            times = measure(impls, args.repeats, args.calls)
            ref = times.get("slipstream")
            for impl, values in times.items():
                ratio = statistics.median(v / r for v, r in zip(values, ref)) if ref else float("nan")
                print(
                    f"{name + ' ' + 'x'.join(map(str, image.shape[:2])):<24} {case:<16} {impl:<12} {statistics.median(values):>10.0f} {ratio:>7.2f}"
                )


if __name__ == "__main__":
    main()
