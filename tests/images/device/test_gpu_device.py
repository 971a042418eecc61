"""slipstream.gpu.DeviceStage and HostReader: windows drawn on the CPU side from headers equal the
CPU pipeline's, and the device batch equals the CPU pipeline's output (run here on CPU tensors)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from packed import photo_like  # noqa: E402

import slipstream as ss  # noqa: E402
from slipstream import fields as F  # noqa: E402
from slipstream import ops  # noqa: E402
from slipstream.core.draws import Draws  # noqa: E402
from slipstream.core.errors import CorruptFileError  # noqa: E402
from slipstream.core.rng import sample_context  # noqa: E402
from slipstream.gpu import DeviceStage, HostReader, nvjpeg_available  # noqa: E402
from slipstream.images.pipeline import Pipeline  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
N = 12


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """Photo-like JPEGs of varied sizes (one grayscale source, stored RGB), and a JPEG/raw mix."""
    root = tmp_path_factory.mktemp("gpu")
    rng = np.random.default_rng(5)
    sizes = [(int(rng.integers(40, 260)), int(rng.integers(40, 260))) for _ in range(N)]
    images = [photo_like(h, w, seed=k, channels=1 if k == 3 else 3) for k, (h, w) in enumerate(sizes)]
    jpegs, mixed = root / "jpegs.arrow", root / "mixed.arrow"
    ss.write(jpegs, [{"image": im} for im in images], {"image": F.Image(codec="jpeg", quality=90, channels=3)}, progress=False)
    ss.write(mixed, [{"image": im} for im in images], {"image": F.Image(codec="jpeg", policy="proportion", channels=3)}, progress=False)
    return jpegs, mixed, sizes


def _cpu_batch(mapped, indices, seed, epoch) -> np.ndarray:
    """What a loader gets from the CPU pipeline for samples ``indices`` of ``epoch`` under ``seed``."""
    with sample_context(seed, epoch) as context:
        context.batch(np.asarray(indices))
        return np.stack(mapped.getobs_batch_into(None, indices)["image"])


def _worst(device: np.ndarray, cpu: np.ndarray, levels: np.ndarray) -> tuple[float, int]:
    """Worst per-image mean absolute difference in uint8 levels, and which image."""
    per_image = (np.abs(device.astype(np.float64) - cpu) * levels).reshape(len(cpu), -1).mean(axis=1)
    return float(per_image.max()), int(per_image.argmax())


CROPS = [
    [ops.RandomResizedCrop(32), ops.RandomHorizontalFlip()],
    [ops.RandomResizedCrop((24, 40), scale=(0.3, 1.0)), ops.RandomHorizontalFlip(0.9)],
    [ops.CenterCrop(30, resize=36)],
    [ops.Resize((20, 50)), ops.RandomHorizontalFlip()],
]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    seed=st.integers(0, 2**64),
    epoch=st.integers(0, 1000),
    indices=st.lists(st.integers(0, N - 1), min_size=1, max_size=N),
    crop=st.sampled_from(range(len(CROPS))),
    exact=st.booleans(),
)
def test_windows_are_the_cpu_pipelines_for_the_same_seed_epoch_and_indices(files, seed, epoch, indices, crop, exact):
    jpegs, mixed, sizes = files
    pipeline = [ops.Decode(exact=exact), *CROPS[crop], ops.Normalize(MEAN, STD)]
    batch = HostReader(ss.open(mixed), "image", pipeline).read(indices, seed, epoch)
    heights, widths = [sizes[i][0] for i in indices], [sizes[i][1] for i in indices]
    windows = Pipeline(pipeline).windows(heights, widths, Draws(seed, epoch, indices))
    expected = np.stack([windows.top, windows.left, windows.height, windows.width], axis=1)
    np.testing.assert_array_equal(batch.boxes, expected)  # full size: the source pixels, whatever exact says
    np.testing.assert_array_equal(batch.flips, windows.flip)
    assert batch.size == (int(windows.out_h[0]), int(windows.out_w[0]))
    assert batch.shapes.tolist() == [[h, w, 3] for h, w in zip(heights, widths)]
    assert batch.indices == list(indices) and set(batch.codecs) <= {"jpeg", "raw"}


def test_the_device_batch_matches_the_cpu_pipeline_decoding_at_full_size(files):
    jpegs, mixed, _ = files
    levels = np.array(STD)[None, :, None, None] * 255  # normalized units -> uint8 levels
    ops_ = [ops.Decode(exact=True), ops.RandomResizedCrop(48), ops.RandomHorizontalFlip(), ops.ToCHW(), ops.Normalize(MEAN, STD)]
    indices = list(range(N))
    for path in (jpegs, mixed):
        stage = DeviceStage(ss.open(path).map(image=ops_), "image")
        cpu = ss.open(path).map(image=ops_)
        for seed, epoch in [(0, 0), (0, 1), (123, 7)]:
            device = stage(indices, seed, epoch)
            assert device.shape == (N, 3, 48, 48) and device.dtype == torch.float32 and device.is_contiguous()
            worst, _ = _worst(device.numpy(), _cpu_batch(cpu, indices, seed, epoch), levels)
            assert worst <= 2.0, (path.name, seed, epoch, worst)  # measured: 0.23 levels at worst (sample 7, 68x49), no pixel over 1


def test_uint8_nhwc_and_the_other_layouts_follow_the_pipeline(files):
    jpegs, _, _ = files
    ops_ = [ops.Decode(exact=True), ops.CenterCrop(40, resize=44)]
    device = DeviceStage(ss.open(jpegs), "image", ops_)([5, 1, 3], 9, 0)
    assert device.shape == (3, 40, 40, 3) and device.dtype == torch.uint8  # the CPU pipeline's default: NHWC uint8
    cpu = _cpu_batch(ss.open(jpegs).map(image=ops_), [5, 1, 3], 9, 0)
    assert _worst(device.numpy(), cpu, np.ones(1))[0] <= 2.0
    last = DeviceStage(ss.open(jpegs), "image", [*ops_, ops.Normalize(MEAN, STD, "float16")], dtype="bfloat16", layout="channels_last")([5, 1], 9, 0)
    assert last.dtype == torch.bfloat16 and last.shape == (2, 3, 40, 40) and last.is_contiguous(memory_format=torch.channels_last)


def test_the_default_cpu_pipeline_decodes_at_a_reduced_dct_scale_and_differs_by_a_measured_amount(files):
    """The device decodes at full size; the CPU default decodes at 1/2..1/8 when the window allows."""
    jpegs, _, _ = files
    ops_ = [ops.RandomResizedCrop(32), ops.RandomHorizontalFlip(), ops.ToCHW()]
    stage = DeviceStage(ss.open(jpegs), "image", ops_)
    worst = max(_worst(stage(list(range(N)), seed, 0).numpy(), _cpu_batch(ss.open(jpegs).map(image=ops_), list(range(N)), seed, 0), np.ones(1))[0] for seed in range(3))
    assert 0.0 < worst <= 8.0  # measured on these images: 5.96 levels (of 255) at worst (sample 0, 187x217, seed 2)


def test_errors_name_the_sample_and_field(files):
    jpegs, _, _ = files
    stage = DeviceStage(ss.open(jpegs), "image", [ops.RandomResizedCrop(16)])
    batch = stage.host([2, 4, 6], 0, 0)
    batch.data[1] = batch.data[1][: len(batch.data[1]) // 2]  # truncated bytes, as damage on disk
    with pytest.raises(CorruptFileError, match=r"sample 4, field 'image': cannot decode jpeg image") as raised:
        stage.device_batch(batch)
    assert str(jpegs) in str(raised.value)
    with pytest.raises(ValueError, match="sample 3, field 'image': .*"):
        DeviceStage(ss.open(jpegs), "image", [ops.CenterCrop(1000)])([3], 0, 0)
    with pytest.raises(ValueError, match="one batch needs one output size"):
        DeviceStage(ss.open(jpegs), "image", [ops.Resize(30)])([0, 1, 2], 0, 0)
    with pytest.raises(ValueError, match="custom ops"):
        DeviceStage(ss.open(jpegs), "image", [ops.RandomResizedCrop(16), lambda image: image])
    with pytest.raises(ValueError, match="brings its own ops"):
        DeviceStage(ss.open(jpegs).map(image=[ops.ToCHW()]), "image", [ops.ToCHW()])
    with pytest.raises(TypeError, match="packed files"):
        HostReader([{"image": 1}], "image", [ops.ToCHW()])


@pytest.mark.skipif(not nvjpeg_available("cuda"), reason="needs CUDA and torchvision (nvJPEG)")
def test_on_cuda_the_batch_matches_the_cpu_pipeline(files):  # pragma: no cover - GPU only
    jpegs, _, _ = files
    ops_ = [ops.Decode(exact=True), ops.RandomResizedCrop(48), ops.RandomHorizontalFlip(), ops.ToCHW()]
    device = DeviceStage(ss.open(jpegs), "image", ops_, "cuda")(list(range(N)), 0, 0)
    assert device.device.type == "cuda"
    cpu = _cpu_batch(ss.open(jpegs).map(image=ops_), list(range(N)), 0, 0)
    assert _worst(device.cpu().numpy(), cpu, np.ones(1))[0] <= 2.0  # nvJPEG's IDCT may differ: a level or so


def test_mixed_channel_counts_name_the_dataset_sample_and_field(tmp_path):
    """A file packed with each image's own channels: a gray sample in an RGB batch is named by its
    dataset index and field when the batch is read (not by its position in the batch)."""
    path = tmp_path / "own.arrow"
    images = [photo_like(40, 40, seed=k, channels=1 if k == 5 else 3) for k in range(8)]
    ss.write(path, [{"image": image} for image in images], {"image": F.Image(codec="jpeg", channels=None)}, progress=False)
    stage = DeviceStage(ss.open(path), "image", [ops.Decode(exact=True), ops.RandomResizedCrop(16)])
    with pytest.raises(ValueError, match=r"sample 5, field 'image': 1 channel.* sample 7 has 3 .*ops\.ToRGB\(\)"):
        stage.host([7, 5], 0, 0)
    rgb = DeviceStage(ss.open(path), "image", [ops.Decode(exact=True), ops.RandomResizedCrop(16), ops.ToRGB()])
    assert rgb([7, 5], 0, 0).shape == (2, 16, 16, 3)
