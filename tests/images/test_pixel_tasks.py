"""Pixel ops in compiled tasks: a chunk of a batch through decode, geometry, the pixel ops' steps
(``csrc/pixel.c``), layout and normalization in one compiled call gives the per-sample path's
batches with the NumPy executor (``kernels.pixel_steps``), bit for bit, for uint8, float32 and
float16 outputs, HWC and CHW, with 0 and 2 workers; a step that cannot apply sends its sample to
the per-sample path, which raises naming it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers import snapshot
from packed import photo_like

import slipstream as ss
from slipstream import fields as F
from slipstream import ops
from slipstream.images import pipeline as _pipeline
from slipstream.images.kernels import pixel_steps as _pixel_steps

_roijpeg = _pipeline.region_decoder()
needs_pixel_tasks = pytest.mark.skipif(
    not getattr(_roijpeg, "PIXEL_TASKS", False), reason="the _roijpeg extension (with pixel tasks) is not built"
)
_MEAN, _STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _recipe(dtype: str | None, chw: bool) -> list[Any]:
    """RandomResizedCrop, flip, RandAugment(2, 9), ColorJitter(0.4, 0.4, 0.4), then the formats and RandomErasing(1.0)."""
    formats = ([ops.Normalize(_MEAN, _STD, dtype=dtype)] if dtype else []) + ([ops.ToCHW()] if chw else [])
    return [
        ops.RandomResizedCrop(32),
        ops.RandomHorizontalFlip(),
        ops.RandAugment(2, 9),
        ops.ColorJitter(0.4, 0.4, 0.4),
        *formats,
        ops.RandomErasing(1.0),
    ]


_PIPELINES = {
    **{
        f"recipe-{dtype or 'uint8'}-{'chw' if chw else 'hwc'}": _recipe(dtype, chw)
        for dtype in (None, "float32", "float16")
        for chw in (False, True)
    },
    "every-op-uint8": [
        ops.CenterCrop(24, resize=30),
        ops.TrivialAugmentWide(interpolation="bilinear", fill=[10, 20, 30]),
        ops.ColorJitter(0.3, 0.3, 0.3, 0.1),
        ops.GaussianBlur(5),
        ops.RandomRotation(20, interpolation="bilinear", fill=7),
        ops.RandomGrayscale(0.3),
        ops.RandomSolarize(128),
        ops.RandomPosterize(4),
        ops.RandomEqualize(),
        ops.RandomAutocontrast(),
        ops.RandomInvert(),
        ops.RandomAdjustSharpness(2.0),
        ops.RandomErasing(0.5, value=(1, 2, 3)),
    ],
    "gray3-f32-chw": [
        ops.RandomResizedCrop((20, 28), interpolation="box"),
        ops.RandAugment(3, 12, interpolation="bilinear"),
        ops.Grayscale(3),
        ops.Normalize((0.5,), (0.25,)),
        ops.ToCHW(),
    ],
}


class _Counting:
    """The extension, counting the samples its compiled tasks write (a stand-in for ``_pipeline._roi``)."""

    PIXEL_TASKS = 1

    def __init__(self, module: Any):
        self.module, self.done = module, 0
        self.decode_region, self.place = module.decode_region, module.place

    def run_task(self, *args: Any, **kwargs: Any) -> tuple[int, str, float, float]:
        result = self.module.run_task(*args, **kwargs)
        self.done += result[0] - args[-1]
        return result


def _dataset(tmp_path: Any, n: int = 20) -> Any:
    images = [
        {"image": photo_like(40 + 7 * (k % 5), 60 - 6 * (k % 4), seed=k, channels=1 if k % 7 == 3 else 3), "label": k}
        for k in range(n)
    ]
    path = ss.write(tmp_path / "p.arrow", images, {"image": F.Image(codec="jpeg", channels=3), "label": F.Int()}, progress=False)
    return ss.open(path)


def _epochs(ds: Any, pipeline: list[Any], workers: int, epochs: int = 2) -> list[Any]:
    with ss.DataLoader(ds.map(image=pipeline), 8, shuffle=True, seed=5, workers=workers, backend="thread") as loader:
        return [[snapshot(b) for b in loader] for _ in range(epochs)]


def _numpy_steps(image: np.ndarray, steps: np.ndarray) -> np.ndarray:
    return _pixel_steps.run(image, steps) if len(steps) else image


def _assert_bits(got: list[Any], expected: list[Any], where: str) -> None:
    assert len(got) == len(expected), where
    for e, (a, b) in enumerate(zip(got, expected)):
        assert len(a) == len(b), f"{where}, epoch {e}"
        for k, (x, y) in enumerate(zip(a, b)):
            assert x["image"].shape == y["image"].shape and x["image"].dtype == y["image"].dtype, f"{where}, epoch {e}, batch {k}"
            assert x["image"].tobytes() == y["image"].tobytes(), f"{where}, epoch {e}, batch {k}: the pixels differ"
            np.testing.assert_array_equal(x["label"], y["label"])


@needs_pixel_tasks
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("name", list(_PIPELINES))
def test_compiled_tasks_with_pixel_ops_give_the_per_sample_numpy_paths_batches(tmp_path, name, workers, monkeypatch):
    ds = _dataset(tmp_path)
    counting = _Counting(_roijpeg)
    monkeypatch.setattr(_pipeline, "_roi", counting)
    compiled = _epochs(ds, _PIPELINES[name], workers)
    assert counting.done >= 2 * len(ds), f"the compiled path wrote {counting.done} samples"
    monkeypatch.setattr(_pipeline, "_roi", None)  # whole JPEG decodes, per sample
    monkeypatch.setattr(_pipeline, "run_steps", _numpy_steps)  # and the NumPy executor
    _assert_bits(_epochs(ds, _PIPELINES[name], workers), compiled, f"{name}, {workers} workers: per-sample path (NumPy steps)")


@needs_pixel_tasks
@pytest.mark.parametrize("name", ["recipe-float32-chw", "every-op-uint8"])
def test_gray_images_run_their_steps_on_one_channel_with_the_same_bits(tmp_path, name, monkeypatch):
    images = [{"image": photo_like(40 + 5 * (k % 4), 50, seed=k, channels=1), "label": k} for k in range(16)]
    path = ss.write(tmp_path / "g.arrow", images, {"image": F.Image(codec="jpeg", channels=1), "label": F.Int()}, progress=False)
    ds = ss.open(path)
    pipeline = [op if not isinstance(op, ops.Normalize) else ops.Normalize((0.5,), (0.25,)) for op in _PIPELINES[name]]
    counting = _Counting(_roijpeg)
    monkeypatch.setattr(_pipeline, "_roi", counting)
    compiled = _epochs(ds, pipeline, 0)
    assert counting.done >= 2 * len(ds) and compiled[0][0]["image"].shape[-1 if "hwc" in name or "uint8" in name else 1] == 1
    monkeypatch.setattr(_pipeline, "_roi", None)
    monkeypatch.setattr(_pipeline, "run_steps", _numpy_steps)
    _assert_bits(_epochs(ds, pipeline, 0), compiled, f"{name}, 1 channel: per-sample path (NumPy steps)")


@needs_pixel_tasks
def test_pipelines_without_pixel_ops_pass_no_steps(tmp_path, monkeypatch):
    ds = _dataset(tmp_path, n=8)
    calls: list[dict[str, Any]] = []

    class Recording(_Counting):
        def run_task(self, *args: Any, **kwargs: Any) -> tuple[int, str, float, float]:
            calls.append(kwargs)
            return super().run_task(*args, **kwargs)

    monkeypatch.setattr(_pipeline, "_roi", Recording(_roijpeg))
    _epochs(ds, [ops.RandomResizedCrop(16), ops.ToCHW()], 0, epochs=1)
    assert calls and all(kwargs == {} for kwargs in calls)
    calls.clear()
    _epochs(ds, [ops.RandomResizedCrop(16), ops.RandomInvert(), ops.ToCHW()], 0, epochs=1)
    assert calls and all(kwargs["steps"].shape == (8, 1, 12) for kwargs in calls)


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "per-sample"])
@pytest.mark.parametrize("workers", [0, 2])
def test_a_blur_wider_than_the_output_raises_naming_the_sample(tmp_path, compiled, workers, monkeypatch):
    if compiled and not getattr(_roijpeg, "PIXEL_TASKS", False):
        pytest.skip("the _roijpeg extension (with pixel tasks) is not built")
    if not compiled:
        monkeypatch.setattr(_pipeline, "_roi", None)
    base = _dataset(tmp_path, n=12)
    ds = base.map(image=[ops.RandomResizedCrop(16), ops.GaussianBlur(41)])  # half the kernel: 20 >= 16
    message = (
        r"^sample 0, field 'image': pixel step 0 \(BLUR\): a 41x41 blur kernel needs an image wider than 20 and taller than 20"
    )
    with pytest.raises(ValueError, match=message):
        list(ss.DataLoader(ds, 4, workers=workers))
    ok = base.map(image=[ops.RandomResizedCrop(16), ops.GaussianBlur(31)])  # 15 < 16: every batch loads
    assert [b["image"].shape for b in ss.DataLoader(ok, 4, workers=workers)] == [(4, 16, 16, 3)] * 3
