"""_roijpeg's calls (decode_region, read_header, place, run_task, resample) run in many threads at once and give
what one thread gives, bit for bit: with the GIL released around each call on a normal interpreter,
and with no GIL at all on a free-threaded one, where importing slipstream and the extension must
leave the GIL disabled.

The threads run in a child interpreter, so a crash or a hang fails the test instead of the run.
"""

from __future__ import annotations

import json
import sysconfig

import pytest
from helpers import run_python

pytest.importorskip("slipstream.images._roijpeg", reason="the _roijpeg extension is not built (no compiler or libjpeg headers)")
pytest.importorskip("PIL", reason="the test encodes its JPEGs with Pillow")

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))

_CHILD = """
import io, json, sys, threading, warnings

warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    import numpy as np
    from PIL import Image
    import slipstream as ss
    from slipstream import ops
    from slipstream.images import _roijpeg, imagetasks
    from slipstream.images import pipeline as _pipeline
    from packed import photo_like
gil_after_import = sys._is_gil_enabled() if hasattr(sys, "_is_gil_enabled") else True

THREADS, ROUNDS = int(sys.argv[1]), int(sys.argv[2])
SIZE = 24

def jpeg(image, subsampling):
    buffer = io.BytesIO()
    Image.fromarray(image if image.shape[2] == 3 else image[:, :, 0]).save(buffer, format="JPEG", quality=90, subsampling=subsampling)
    return buffer.getvalue()

images, blobs = [], []
for k in range(12):
    channels = 1 if k % 4 == 3 else 3
    image = photo_like(97 + 13 * k, 131 - 7 * k, seed=k, channels=channels)
    images.append(image)
    blobs.append(jpeg(image, k % 3))  # 4:4:4, 4:2:2, 4:2:0
rgb = [k for k in range(12) if images[k].shape[2] == 3]
datas = [np.frombuffer(b, np.uint8).copy() for b in blobs]  # run_task reads the bytes through raw addresses
raws = [np.ascontiguousarray(images[k]) for k in rgb]
pipe = _pipeline.Pipeline([ops.Decode(), ops.RandomResizedCrop(SIZE), ops.RandomHorizontalFlip()])
lut = np.ascontiguousarray((np.arange(256, dtype=np.float32)[None, :] - np.float32(100)) * np.float32(0.02) * np.ones((3, 1), np.float32))

def regions(seed):
    out = bytearray(1 << 16)  # a bytearray: its Py_buffer view pins its size during the call
    got = []
    rng = np.random.default_rng(seed)
    for k, data in enumerate(blobs):
        height, width, channels = images[k].shape
        got.append(_roijpeg.read_header(data))
        for _ in range(3):
            top, left = int(rng.integers(0, height - 8)), int(rng.integers(0, width - 8))
            h, w = int(rng.integers(1, height - top + 1)), int(rng.integers(1, width - left + 1))
            fast = bool(rng.integers(0, 2))
            box = _roijpeg.decode_region(data, top, left, h, w, out, fast=fast, gray=channels == 1)
            got.append((box, bytes(out[: box[2] * box[3] * channels])))
    return got

def task(seed, dtype):
    # every RGB sample twice: once from its JPEG, once from its raw pixels
    shapes = np.array([images[k].shape for k in rgb] * 2, np.int32)
    codecs = np.array([1] * len(rgb) + [0] * len(rgb), np.uint8)
    addrs = np.array([datas[k].ctypes.data for k in rgb] + [r.ctypes.data for r in raws], np.uint64)
    sizes = np.array([datas[k].nbytes for k in rgb] + [r.nbytes for r in raws], np.uint64)
    n = len(codecs)
    draws = ss.core.draws.Draws(seed, 1, np.arange(n))
    placed = imagetasks._place(pipe, shapes[:, 0], shapes[:, 1], shapes, codecs == 1, draws)
    assert placed.valid.all()
    out = np.zeros((n, SIZE, SIZE, 3), np.uint8 if dtype == 0 else np.float32)
    marks = np.zeros(n, np.uint8)
    stop, why, _, _ = _roijpeg.run_task(
        addrs, sizes, codecs, shapes, placed.factor, placed.region, placed.edges, placed.flip, marks,
        np.arange(n, dtype=np.int64), out, out[0].nbytes, SIZE, SIZE, 3, 0, dtype, lut if dtype else np.empty(0, np.uint8), 0, 0, 0,
    )
    assert stop == n, why
    return [placed.factor.tobytes(), placed.region.tobytes(), placed.edges.tobytes(), placed.flip.tobytes(), marks.tobytes(), out.tobytes()]

def resampled(seed):
    got = []
    for k, image in enumerate(images):
        height, width, channels = image.shape
        box = (seed % 5, (seed + k) % 7, height - 5 - seed % 3, width - 7 - k % 4)
        out8 = np.empty((17, 19, channels), np.uint8)
        out16 = np.empty((channels, 13, 11), np.float16)
        _roijpeg.resample(image, box, out8, flip=bool(k % 2), filter="box" if k % 3 == 0 else "bilinear")
        _roijpeg.resample(image, box, out16, chw=True, scale=np.float32(1 / 255), offset=np.float32(-0.5))
        got += [out8.tobytes(), out16.tobytes()]
    return got

has_resample = hasattr(_roijpeg, "resample")

def work(r):
    return [regions(r), task(r, 0), task(r, 1)] + ([resampled(r)] if has_resample else [])

expected = [work(r) for r in range(ROUNDS)]  # one thread
failures, crashes = [], []
barrier = threading.Barrier(THREADS)

def run(t):
    try:
        barrier.wait()
        for i in range(ROUNDS):
            r = (i + t) % ROUNDS  # the threads run different rounds at any moment
            if work(r) != expected[r]:
                failures.append((t, r))
    except BaseException as exc:
        crashes.append(f"thread {t}: {type(exc).__name__}: {exc}")

threads = [threading.Thread(target=run, args=(t,)) for t in range(THREADS)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps({
    "gil_after_import": gil_after_import,
    "gil_after_run": sys._is_gil_enabled() if hasattr(sys, "_is_gil_enabled") else True,
    "warnings": [str(w.message) for w in caught if "GIL" in str(w.message)],
    "failures": failures, "crashes": crashes, "calls": THREADS * ROUNDS * (len(blobs) * 4 + 2),
}))
"""


def test_the_image_calls_in_many_threads_give_one_threads_results():
    result = run_python(_CHILD, timeout=300, argv=["8", "6"])
    assert result.returncode == 0, f"the child failed (rc {result.returncode}):\n{result.stderr[-3000:]}"
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["crashes"] == [], report["crashes"]
    assert report["failures"] == [], f"(thread, round) pairs whose results differ from one thread's: {report['failures']}"


@pytest.mark.skipif(not FREE_THREADED, reason="a free-threaded (3.13t) interpreter's check: this one has a GIL")
def test_importing_slipstream_and_running_the_image_calls_leaves_the_gil_disabled():
    result = run_python(_CHILD, timeout=300, argv=["4", "1"])
    assert result.returncode == 0, f"the child failed (rc {result.returncode}):\n{result.stderr[-3000:]}"
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["warnings"] == [], report["warnings"]  # each names the module that enabled the GIL
    assert (report["gil_after_import"], report["gil_after_run"]) == (False, False)
