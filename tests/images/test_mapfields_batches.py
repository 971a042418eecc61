"""A mapped packed file (``ss.open(p).map(image=[ops...])``) batches like ``default_collate`` of
the same samples, for every field kind beside the mapped images (a property test), names the
1-vs-3-channel fix from the first batch on, and still writes fitting images straight into the
batch buffer."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import assert_batches_equal_default_collate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from packed import photo_like
from samples import packed_samples

import slipstream as ss
from slipstream import fields as F
from slipstream import ops
from slipstream.images import mapfields as _mapped
from slipstream.images import pipeline as _pipeline


def _to_float32(image: np.ndarray) -> np.ndarray:
    return image.astype(np.float32)


def _wider_when_bright(image: np.ndarray) -> np.ndarray:
    """float32 for dark images, float64 for bright ones: batches of one kind stack, mixed ones are refused."""
    return image.astype(np.float64 if image.mean() > 127 else np.float32)


def _as_list(image: np.ndarray) -> list[int]:
    return [int(image[0, 0, 0]), int(image.shape[0])]


PIPELINES = {
    "decode only": [],
    "center crop": [ops.CenterCrop(4)],
    "resize": [ops.Resize((5, 6))],
    "shorter side": [ops.Resize(6)],  # the output size follows each image's aspect ratio
    "random crop and flip": [ops.RandomResizedCrop(4), ops.RandomHorizontalFlip(), ops.ToCHW()],
    "rgb": [ops.ToRGB(), ops.CenterCrop(6)],
    "normalize": [ops.CenterCrop(4), ops.Normalize((0.5,), (0.25,), dtype="float16"), ops.ToCHW()],
    "custom float32": [ops.CenterCrop(4), ops.Apply(_to_float32)],
    "custom dtype changes": [ops.Apply(_wider_when_bright)],
    "custom list": [ops.Apply(_as_list)],
}


@st.composite
def mapped_cases(draw: Any) -> tuple[list[dict[str, Any]], dict[str, Any], str]:
    """Samples with drawn fields of every kind plus an image field ``im`` of mostly one size and
    channel count (sometimes mixed), the fields, and the name of the pipeline to map ``im`` with."""
    samples, fields = draw(packed_samples())
    mixed_channels = draw(st.booleans())
    channel_counts = st.sampled_from([1, 3]) if mixed_channels else st.just(draw(st.sampled_from([1, 3])))
    sizes = st.sampled_from([(8, 8), (8, 8), (9, 8)])
    for sample in samples:
        sample["im"] = draw(hnp.arrays(np.uint8, (*draw(sizes), draw(channel_counts))))
    fields = {**fields, "im": F.Image(codec=draw(st.sampled_from(["raw", "png"])), channels=None)}
    return samples, fields, draw(st.sampled_from(sorted(PIPELINES)))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mapped_cases(), st.integers(1, 5), st.sampled_from([0, 2]))
def test_loader_batches_of_a_mapped_packed_file_equal_default_collate_of_its_samples(case, batch_size, workers):
    samples, fields, pipeline = case
    with tempfile.TemporaryDirectory() as folder:
        path = ss.write(Path(folder) / "m.arrow", samples, fields, page_size=300, progress=False)
        assert_batches_equal_default_collate(ss.open(path).map(im=PIPELINES[pipeline]), batch_size, workers)


def _ragged_file(folder: Path) -> Any:
    """Sample i has ``i // 2 + 1`` tokens and tags: equal within each batch of 2, longer each batch."""
    samples = [
        {"tokens": np.arange(i // 2 + 1, dtype=np.int32), "tags": list(range(i // 2 + 1)), "meta": {"i": i}, "image": np.full((8, 8, 3), i, np.uint8)}
        for i in range(8)
    ]
    fields = {"tokens": F.Array(np.int32), "tags": F.JSON(), "meta": F.JSON(), "image": F.Image(codec="png")}
    return ss.write(folder / "ragged.arrow", samples, fields, progress=False)


@pytest.mark.parametrize("workers", [0, 2])
def test_ragged_arrays_and_json_of_a_mapped_file_batch_past_the_first_batch(tmp_path, workers):
    """Was: the buffers took the first batch's token length, and batch 1 raised ValueError."""
    ds = ss.open(_ragged_file(tmp_path)).map(image=[ops.CenterCrop(4)])
    assert_batches_equal_default_collate(ds, 2, workers)


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_a_mapped_file_batches_like_default_collate_in_worker_processes(tmp_path, start):
    ds = ss.open(_ragged_file(tmp_path)).map(image=[ops.RandomResizedCrop(4), ops.RandomHorizontalFlip(), ops.ToCHW()])
    assert_batches_equal_default_collate(ds, 2, workers=2, backend="process", mp_context=start)


def _mixed_channels(folder: Path) -> Any:
    channels = [1, 3, 3, 1, 3, 1, 1, 3]
    samples = [{"image": photo_like(16, 16, seed=k, channels=c)} for k, c in enumerate(channels)]
    return ss.open(ss.write(folder / "keep.arrow", samples, {"image": F.Image(codec="png", channels=None)}, progress=False))


@pytest.mark.parametrize(("batch_size", "workers"), [(2, 0), (4, 0), (2, 2)])
def test_mixed_channels_in_the_first_batch_name_the_channel_fix(tmp_path, batch_size, workers):
    """Was: the first batch (shaped from its first sample) gave only the generic 'pass collate=' hint."""
    ds = _mixed_channels(tmp_path).map(image=[ops.RandomResizedCrop(8)])
    with pytest.raises(ValueError, match=r"sample 1, field \['image'\].*mix 1 and 3 channels.*ops\.ToRGB\(\)"):
        list(ss.DataLoader(ds, batch_size=batch_size, workers=workers))
    rgb = ss.open(ds.data.path).map(image=[ops.ToRGB(), ops.RandomResizedCrop(8)])
    assert [b["image"].shape for b in ss.DataLoader(rgb, batch_size=4)] == [(4, 8, 8, 3)] * 2


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled tasks", "per-sample path"])
@pytest.mark.parametrize("workers", [0, 2])
def test_the_benchmark_pipeline_still_writes_images_straight_into_reused_batch_buffers(tmp_path, workers, compiled, monkeypatch):
    if compiled and _pipeline.region_decoder() is None:
        pytest.skip("the _roijpeg extension is not built")
    if not compiled:
        monkeypatch.setattr(_pipeline, "_roi", None)
    images = [photo_like(60 + 7 * (k % 5), 80 - 5 * (k % 4), seed=k) for k in range(16)]
    path = ss.write(tmp_path / "train.arrow", [{"image": im, "label": k} for k, im in enumerate(images)], {"image": F.Image(codec="jpeg"), "label": F.Int()}, progress=False)
    record: list[bool] = []
    real = _mapped.run_task

    def spy(pipeline: Any, table: Any, draws: Any, target: Any, one: Any) -> Any:
        result = real(pipeline, table, draws, target, one)
        record.extend([target is not None and result is target] * len(table))  # every row written into the batch
        return result

    monkeypatch.setattr(_mapped, "run_task", spy)
    pipeline = [ops.RandomResizedCrop(224), ops.RandomHorizontalFlip(), ops.ToCHW()]
    loader = ss.DataLoader(ss.open(path).map(image=pipeline), 4, workers=workers, prefetch=1)
    buffers = set()
    for _ in range(3):
        for batch in loader:
            assert batch["image"].shape == (4, 3, 224, 224) and batch["image"].dtype == np.uint8
            buffers.add(batch["image"].__array_interface__["data"][0])
    assert len(record) == 48 and all(record)  # every image decoded into its row of the batch
    assert len(buffers) <= 1 + 4 + 1  # 12 batches in a few reused slots (prefetch + 4), not one buffer each
