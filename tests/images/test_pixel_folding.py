"""Table steps folded together: runs of steps that map each value through a table per channel
(BRIGHTNESS, CONTRAST, POSTERIZE, SOLARIZE, AUTOCONTRAST, EQUALIZE, INVERT) are composed into one
table, and a program's trailing run is applied by the compiled task as it writes the row (uint8,
float32 or float16, HWC or CHW). The image-dependent tables (AUTOCONTRAST's min and max, EQUALIZE's
histogram, CONTRAST's mean) after other table steps see the image with those applied: the C
executor gives the NumPy executor's bits, and the compiled task the per-sample path's.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from packed import photo_like
from test_pixel_tasks import _assert_bits, _Counting, _epochs, _numpy_steps, _roijpeg, needs_pixel_tasks

import slipstream as ss
from slipstream import fields as F
from slipstream import ops
from slipstream.images import pipeline as _pipeline
from slipstream.images.kernels import pixel_steps as ps

_MEAN, _STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
_TABLE = (ps.BRIGHTNESS, ps.CONTRAST, ps.POSTERIZE, ps.SOLARIZE, ps.AUTOCONTRAST, ps.EQUALIZE, ps.INVERT)
_OTHER = (ps.SATURATION, ps.HUE, ps.SHARPNESS, ps.GRAYSCALE, ps.BLUR, ps.ERASE, ps.NONE)


def _row(code: int, rng: np.random.Generator, height: int, width: int) -> list[float]:
    """One step of opcode ``code`` with parameters drawn from ``rng`` (every one applies to the image)."""
    row = [float(code)] + [0.0] * (ps.WORDS - 1)
    if code in (ps.BRIGHTNESS, ps.CONTRAST, ps.SATURATION, ps.SHARPNESS):
        row[1] = float(rng.uniform(0.0, 2.5))
    elif code == ps.HUE:
        row[1] = float(rng.uniform(-0.5, 0.5))
    elif code == ps.POSTERIZE:
        row[1] = float(rng.integers(0, 9))
    elif code == ps.SOLARIZE:
        row[1] = float(rng.uniform(0, 256))
    elif code == ps.BLUR:
        row[1:5] = [3.0, 3.0, float(rng.uniform(0.2, 2.0)), float(rng.uniform(0.2, 2.0))]
    elif code == ps.ERASE:
        row[1:8] = [float(rng.integers(0, height)), float(rng.integers(0, width)), 3.0, 4.0, 9.0, 99.0, 199.0]
    return row


def _program(rng: np.random.Generator, height: int, width: int, runs: int) -> np.ndarray:
    """Runs of table steps (1 to 5 each), separated by one other step."""
    rows: list[list[float]] = []
    for k in range(runs):
        if k:
            rows.append(_row(int(rng.choice(_OTHER)), rng, height, width))
        rows += [_row(int(rng.choice(_TABLE)), rng, height, width) for _ in range(int(rng.integers(1, 6)))]
    return np.array(rows, np.float64)


@pytest.mark.skipif(_roijpeg is None, reason="the _roijpeg extension is not built")
@pytest.mark.parametrize("channels", [1, 3])
def test_runs_of_table_steps_give_the_numpy_executors_bits(channels):
    rng = np.random.default_rng(11 + channels)
    for trial in range(300):
        height, width = int(rng.integers(2, 24)), int(rng.integers(2, 24))  # (a 3x3 blur needs 2)
        image = photo_like(height, width, seed=trial, channels=channels)
        if trial % 5 == 0:  # few distinct values: flat channels and sparse histograms
            image = (image // 64 * 60).astype(np.uint8)
        steps = _program(rng, height, width, runs=int(rng.integers(1, 4)))
        expected = ps.run(image.copy(), steps)
        got = image.copy()
        _roijpeg.pixel_steps(got, steps)
        assert got.tobytes() == expected.tobytes(), f"trial {trial}: {[ps.NAMES[int(r[0])] for r in steps]}"


@pytest.mark.skipif(_roijpeg is None, reason="the _roijpeg extension is not built")
@pytest.mark.parametrize(
    "names",
    [
        ("BRIGHTNESS", "AUTOCONTRAST"),
        ("SOLARIZE", "EQUALIZE"),
        ("INVERT", "POSTERIZE", "CONTRAST"),
        ("AUTOCONTRAST", "EQUALIZE", "AUTOCONTRAST"),
        ("EQUALIZE", "SOLARIZE", "CONTRAST", "AUTOCONTRAST"),
    ],
)
def test_an_image_dependent_table_after_other_table_steps_sees_them(names):
    rng = np.random.default_rng(3)
    image = photo_like(31, 17, seed=4, channels=3)
    steps = np.array([_row(ps.NAMES.index(name), rng, 31, 17) for name in names], np.float64)
    steps[steps[:, 0] == ps.SOLARIZE, 1] = 90.0
    steps[steps[:, 0] == ps.BRIGHTNESS, 1] = 1.7
    expected = ps.run(image.copy(), steps)
    got = image.copy()
    _roijpeg.pixel_steps(got, steps)
    assert got.tobytes() == expected.tobytes()


def _formats(dtype: str | None, chw: bool, gray: bool = False) -> list[Any]:
    mean, std = ((0.5,), (0.25,)) if gray else (_MEAN, _STD)
    return ([ops.Normalize(mean, std, dtype=dtype)] if dtype else []) + ([ops.ToCHW()] if chw else [])


_TAILS = {  # the pixel ops before the formats
    "tables-only": [
        ops.RandomSolarize(100, p=1.0),
        ops.RandomPosterize(5, p=0.7),
        ops.RandomAutocontrast(p=0.8),
        ops.RandomEqualize(p=0.8),
        ops.ColorJitter(brightness=0.5, contrast=0.5),
        ops.RandomInvert(p=0.5),
    ],
    "tables-around-others": [
        ops.RandomInvert(p=0.7),
        ops.ColorJitter(brightness=0.4, contrast=0.6),
        ops.RandomAutocontrast(p=0.7),
        ops.RandomAdjustSharpness(2.0, p=0.6),
        ops.RandomSolarize(128, p=0.6),
        ops.RandomEqualize(p=0.7),
        ops.ColorJitter(0.4, 0.4, 0.4),
        ops.RandomPosterize(3, p=0.6),
    ],
    "randaugment-then-brightness": [ops.RandAugment(2, 9), ops.ColorJitter(0.4)],
}
_CASES = [(tail, dtype, chw) for tail in _TAILS for dtype in (None, "float32", "float16") for chw in (False, True)]


def _dataset(tmp_path: Any, channels: int, n: int = 16) -> Any:
    images = [{"image": photo_like(36 + 5 * (k % 4), 50 - 4 * (k % 3), seed=k, channels=channels), "label": k} for k in range(n)]
    path = ss.write(
        tmp_path / "t.arrow", images, {"image": F.Image(codec="jpeg", channels=channels), "label": F.Int()}, progress=False
    )
    return ss.open(path)


@needs_pixel_tasks
@pytest.mark.parametrize("channels", [3, 1])
@pytest.mark.parametrize("tail, dtype, chw", _CASES, ids=[f"{t}-{d or 'uint8'}-{'chw' if c else 'hwc'}" for t, d, c in _CASES])
def test_a_trailing_run_of_table_steps_folded_into_the_write_gives_the_per_sample_bits(
    tmp_path, tail, dtype, chw, channels, monkeypatch
):
    ds = _dataset(tmp_path, channels)
    pipeline = [ops.RandomResizedCrop(24), ops.RandomHorizontalFlip(), *_TAILS[tail], *_formats(dtype, chw, channels == 1)]
    counting = _Counting(_roijpeg)
    monkeypatch.setattr(_pipeline, "_roi", counting)
    compiled = _epochs(ds, pipeline, 0)
    assert counting.done >= 2 * len(ds), f"the compiled path wrote {counting.done} samples"
    monkeypatch.setattr(_pipeline, "_roi", None)  # whole JPEG decodes, per sample
    monkeypatch.setattr(_pipeline, "run_steps", _numpy_steps)  # and the NumPy executor
    _assert_bits(_epochs(ds, pipeline, 0), compiled, f"{tail}, {dtype}, chw {chw}, {channels} channels")


@pytest.mark.skipif(_roijpeg is None, reason="the _roijpeg extension is not built")
def test_autocontrast_finds_each_channels_extremes_wherever_they_are():
    rng = np.random.default_rng(8)
    steps = np.zeros((1, ps.WORDS))
    steps[0, 0] = ps.AUTOCONTRAST
    for trial in range(600):
        height, width = (int(v) for v in rng.integers(1, 40, 2))
        low = int(rng.integers(0, 200))
        image = rng.integers(low, low + int(rng.integers(1, 56)), (height, width, 3), dtype=np.uint8)
        image[rng.integers(0, height), rng.integers(0, width), rng.integers(0, 3)] = rng.integers(0, 256)  # one outlier
        got = image.copy()
        _roijpeg.pixel_steps(got, steps)
        assert got.tobytes() == ps.run(image.copy(), steps).tobytes(), f"trial {trial}: {height}x{width}"
