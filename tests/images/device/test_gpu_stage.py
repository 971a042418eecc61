"""images.device.batchpixels (``slipstream.gpu``): the batched crop + resize + flip + normalize + layout
stage, run on CPU tensors against the CPU pipeline's own resampler on the same windows."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from slipstream import ops  # noqa: E402
from slipstream.core.draws import Draws  # noqa: E402
from slipstream.gpu import boxes_of, resize_crops  # noqa: E402
from slipstream.images.device.batchpixels import PAD_FLOOR, _groups, finalize, resample  # noqa: E402
from slipstream.images.device.geometry import Plan, plan  # noqa: E402
from slipstream.images.kernels import resample_into  # noqa: E402
from slipstream.images.pipeline import ImageSource, Pipeline  # noqa: E402

TOLERANCE = 2.0  # mean absolute difference per image, in uint8 levels: 2/255 on the [0, 1] scale
MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _image(rng: np.random.Generator, height: int, width: int, channels: int) -> np.ndarray:
    """Noise plus a gradient: both the worst case (noise) and a photo-like ramp."""
    ramp = np.add.outer(np.linspace(0, 120, height), np.linspace(0, 100, width))[:, :, None]
    noise = rng.integers(0, 136, (height, width, channels))
    return (ramp + noise).clip(0, 255).astype(np.uint8)


def _window(rng: np.random.Generator, height: int, width: int) -> tuple[float, float, float, float]:
    box_h, box_w = rng.uniform(0.5, height), rng.uniform(0.5, width)
    return rng.uniform(0, height - box_h), rng.uniform(0, width - box_w), box_h, box_w


def _cpu(image: np.ndarray, box, size, flip: bool, filter: str = "bilinear") -> np.ndarray:
    """The CPU pipeline's resampler on the same window: uint8 (oh, ow, C)."""
    return resample_into(image, box, np.empty((*size, image.shape[2]), np.uint8), flip=flip, filter=filter)


def _as_input(image: np.ndarray, layout: str) -> torch.Tensor:
    tensor = torch.from_numpy(image)
    return tensor if layout == "HWC" else tensor.permute(2, 0, 1).contiguous()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 6),
    channels=st.sampled_from([1, 3]),
    size=st.tuples(st.integers(1, 40), st.integers(1, 40)),
    input_layout=st.sampled_from(["CHW", "HWC"]),
    filter=st.sampled_from(["bilinear", "box"]),
)
def test_batch_matches_the_cpu_resampler_on_the_same_windows(seed, n, channels, size, input_layout, filter):
    rng = np.random.default_rng(seed)
    images = [_image(rng, int(rng.integers(1, 90)), int(rng.integers(1, 90)), channels) for _ in range(n)]
    boxes = [_window(rng, *image.shape[:2]) for image in images]
    flips = rng.random(n) < 0.5
    batch = resize_crops([_as_input(image, input_layout) for image in images], boxes, size, flips, input_layout=input_layout, filter=filter, layout="NHWC")
    assert batch.shape == (n, *size, channels) and batch.dtype == torch.uint8
    diffs = [np.abs(batch[k].numpy().astype(int) - _cpu(images[k], boxes[k], size, bool(flips[k]), filter)) for k in range(n)]
    worst = max(range(n), key=lambda k: diffs[k].mean())
    assert diffs[worst].mean() <= TOLERANCE, f"sample {worst}: mean abs diff {diffs[worst].mean():.3f} levels"
    assert max(d.max() for d in diffs) <= 3  # a float32 stage against two fixed-point uint8 passes


def test_worst_image_difference_over_a_fixed_set_is_well_inside_the_bound():
    """The worst pixel difference from the CPU pipeline, on 64 photo-sized images and RandomResizedCrop-like windows."""
    rng = np.random.default_rng(14)
    images = [_image(rng, int(rng.integers(150, 400)), int(rng.integers(150, 400)), 3) for _ in range(64)]
    boxes = [_window(rng, *image.shape[:2]) for image in images]
    flips = rng.random(64) < 0.5
    batch = resize_crops([_as_input(image, "HWC") for image in images], boxes, 64, flips, input_layout="HWC", layout="NHWC")
    mad = [np.abs(batch[k].numpy().astype(int) - _cpu(images[k], boxes[k], (64, 64), bool(flips[k]))).mean() for k in range(64)]
    assert max(mad) <= 0.5, f"worst image: sample {int(np.argmax(mad))}, {max(mad):.3f} levels"


def test_same_windows_as_the_cpu_pipeline_for_the_same_seed():
    """Windows drawn as the CPU pipeline draws them (``Pipeline.windows`` on ``core.draws``), then
    the batch stage, against ``Pipeline.run`` sample by sample: normalized float32 outputs."""
    rng = np.random.default_rng(3)
    images = [_image(rng, int(rng.integers(40, 120)), int(rng.integers(40, 120)), 3) for _ in range(8)]
    pipeline = Pipeline([ops.RandomResizedCrop(32), ops.RandomHorizontalFlip(), ops.Normalize(MEAN, STD), ops.ToCHW()])
    indices = np.arange(100, 108)
    heights, widths = [image.shape[0] for image in images], [image.shape[1] for image in images]
    boxes, flips, size = boxes_of(pipeline.windows(heights, widths, Draws(7, 2, indices)))
    assert flips.any() and not flips.all()  # both kinds exercised (fixed seed)
    batch = resize_crops([_as_input(image, "CHW") for image in images], boxes, size, flips, mean=MEAN, std=STD, dtype="float32")
    for k, image in enumerate(images):
        expected = pipeline.run(ImageSource("array", image, image.shape), draws=Draws(7, 2, indices[k : k + 1]))
        mad_levels = (np.abs(batch[k].numpy() - expected) * 255 * np.asarray(STD)[:, None, None]).mean()  # back to levels
        assert mad_levels <= TOLERANCE


def test_whole_image_at_its_own_size_is_the_image_and_flip_mirrors_it():
    rng = np.random.default_rng(1)
    image = _image(rng, 17, 23, 3)
    plain, mirrored = resize_crops([_as_input(image, "HWC")] * 2, [(0, 0, 17, 23)] * 2, (17, 23), [False, True], input_layout="HWC", layout="NHWC")
    assert torch.equal(plain, torch.from_numpy(image))
    assert torch.equal(mirrored, torch.from_numpy(image[:, ::-1].copy()))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", torch.float32])
@pytest.mark.parametrize("layout", ["NCHW", "channels_last", "NHWC"])
def test_layouts_and_dtypes_hold_the_same_normalized_values(dtype, layout):
    rng = np.random.default_rng(2)
    images = [_as_input(_image(rng, h, w, 3), "CHW") for h, w in ((30, 50), (61, 20), (44, 44))]
    boxes = [(1.5, 2.0, 20.0, 30.0), (10.0, 0.0, 50.0, 20.0), (0.0, 0.0, 44.0, 44.0)]
    reference = resize_crops(images, boxes, (12, 16), [True, False, True], mean=MEAN, std=STD, dtype="float32")
    batch = resize_crops(images, boxes, (12, 16), [True, False, True], mean=MEAN, std=STD, dtype=dtype, layout=layout)
    expected_dtype = dtype if isinstance(dtype, torch.dtype) else getattr(torch, dtype)
    assert batch.dtype == expected_dtype
    if layout == "NHWC":
        assert batch.shape == (3, 12, 16, 3) and batch.is_contiguous()
        batch = batch.permute(0, 3, 1, 2)
    else:
        assert batch.shape == (3, 3, 12, 16)
        assert batch.is_contiguous(memory_format=torch.channels_last if layout == "channels_last" else torch.contiguous_format)
    tolerance = {torch.float32: 0.0, torch.float16: 2e-3, torch.bfloat16: 2e-2}[expected_dtype]
    assert torch.allclose(batch.float(), reference, atol=tolerance, rtol=tolerance)


def test_uint8_and_unnormalized_float_outputs_agree():
    rng = np.random.default_rng(4)
    images = [_as_input(_image(rng, 40, 30, 1), "CHW"), _as_input(_image(rng, 25, 70, 1), "CHW")]
    boxes = [(3.0, 3.0, 30.0, 20.0), (0.0, 10.0, 25.0, 50.0)]
    as_uint8 = resize_crops(images, boxes, 10)
    as_float = resize_crops(images, boxes, 10, dtype="float32")
    assert as_uint8.shape == (2, 1, 10, 10) and torch.equal(as_uint8.float(), as_float)


def test_non_contiguous_inputs_are_read_correctly():
    rng = np.random.default_rng(5)
    image = _image(rng, 33, 47, 3)
    view = torch.from_numpy(image).permute(2, 0, 1)  # CHW, not contiguous
    box = (2.25, 3.5, 25.0, 40.0)
    batch = resize_crops([view, view.contiguous()], [box, box], (9, 13))
    assert torch.equal(batch[0], batch[1])
    assert np.abs(batch[0].permute(1, 2, 0).numpy().astype(int) - _cpu(image, box, (9, 13), False)).mean() <= TOLERANCE


@pytest.mark.parametrize(
    "box, message",
    [
        ((0.0, 0.0, 0.0, 10.0), "image 1 of the batch: window .* is empty"),
        ((0.0, 0.0, 10.0, -1.0), "image 1 of the batch: window .* is empty"),
        ((5.0, 0.0, 20.0, 10.0), r"image 1 of the batch: window .* lies outside the 20x30 image"),
        ((0.0, -0.5, 10.0, 10.0), r"image 1 of the batch: window .* lies outside the 20x30 image"),
        ((0.0, 25.0, 10.0, 6.0), r"image 1 of the batch: window .* lies outside the 20x30 image"),
        ((float("nan"), 0.0, 10.0, 10.0), "image 1 of the batch: window .* is not finite"),
    ],
)
def test_bad_windows_raise_naming_the_sample(box, message):
    images = [torch.zeros(3, 40, 40, dtype=torch.uint8), torch.zeros(3, 20, 30, dtype=torch.uint8)]
    with pytest.raises(ValueError, match=message):
        resize_crops(images, [(0.0, 0.0, 40.0, 40.0), box], 8)


def test_bad_batches_raise_clear_errors():
    gray, rgb = torch.zeros(1, 8, 8, dtype=torch.uint8), torch.zeros(3, 8, 8, dtype=torch.uint8)
    whole = (0.0, 0.0, 8.0, 8.0)
    with pytest.raises(ValueError, match="image 1 of the batch: 3 channels.*ops.ToRGB"):
        resize_crops([gray, rgb], [whole, whole], 4)
    with pytest.raises(ValueError, match="image 0 of the batch: need a uint8 CHW image"):
        resize_crops([rgb.float()], [whole], 4)
    with pytest.raises(ValueError, match="non-empty list"):
        resize_crops([], [], 4)
    with pytest.raises(ValueError, match=r"windows must have shape \(1, 4\)"):
        resize_crops([rgb], [whole, whole], 4)
    with pytest.raises(ValueError, match="mean/std need a float dtype"):
        resize_crops([rgb], [whole], 4, mean=MEAN, std=STD)
    with pytest.raises(ValueError, match="layout must be"):
        resize_crops([rgb], [whole], 4, layout="NCWH")
    with pytest.raises(ValueError, match="dtype must be"):
        resize_crops([rgb], [whole], 4, dtype="float64")
    with pytest.raises(ValueError, match="std > 0"):
        resize_crops([rgb], [whole], 4, mean=MEAN, std=(0.2, 0.0, 0.2), dtype="float32")


def test_boxes_of_refuses_mixed_output_sizes():
    windows = ops.Windows(np.array([10, 20]), np.array([10, 20]))  # no geometry op: each keeps its size
    with pytest.raises(ValueError, match="image 1 of the batch: output size 20x20 differs"):
        boxes_of(windows)


class _CountOps(TorchDispatchMode):
    """Counts the aten ops that compute (views are metadata only: no kernel runs for them)."""

    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not func.is_view:
            self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("dtype, layout, mean", [("uint8", "NCHW", None), ("bfloat16", "channels_last", MEAN)])
def test_op_count_does_not_grow_with_the_batch(dtype, layout, mean):
    rng = np.random.default_rng(6)
    counts = {}
    for n in (4, 64):
        images = [_as_input(_image(rng, int(rng.integers(20, 60)), int(rng.integers(20, 60)), 3), "CHW") for _ in range(n)]
        boxes = [_window(rng, image.shape[1], image.shape[2]) for image in images]
        with _CountOps() as counter:
            resize_crops(images, boxes, 16, rng.random(n) < 0.5, mean=mean, std=None if mean is None else STD, dtype=dtype, layout=layout)
        counts[n] = counter.ops
    assert counts[4] == counts[64] and len(counts[4]) < 40, counts


@pytest.mark.parametrize("axis", [0, 1])
def test_box_filter_scan_of_crop_and_output_sizes_matches_the_cpu_resampler(axis):
    """Box ("area") upscales and downscales over many (crop size, output size) pairs, whole images
    and integer windows at an offset, on both axes (the horizontal one flipped too): every output
    pixel is the CPU resampler's up to rounding. A float32 box test once dropped the only tap of
    some rows (a black row, or a shifted one)."""
    rng = np.random.default_rng(11)
    tall = rng.integers(0, 256, (400, 1, 1), dtype=np.uint8)
    tall = tall if axis == 0 else tall.transpose(1, 0, 2).copy()
    crops = list(range(1, 61)) + [97, 150, 223, 224, 300, 399]
    outputs = list(range(1, 70)) + [98, 112, 149, 224, 299]
    for out in outputs:
        for top in (0, 7):
            boxes = [(float(top), 0.0, float(h), 1.0) if axis == 0 else (0.0, float(top), 1.0, float(h)) for h in crops if top + h <= 400]
            size = (out, 1) if axis == 0 else (1, out)
            flips = np.arange(len(boxes)) % 2 == 1 if axis == 1 else None
            got = resize_crops([torch.from_numpy(tall)] * len(boxes), boxes, size, flips, input_layout="HWC", layout="NHWC", filter="box").numpy()
            for k, box in enumerate(boxes):
                want = _cpu(tall, box, size, bool(flips[k]) if flips is not None else False, "box")
                assert np.abs(got[k].astype(int) - want).max() <= 1, f"box {box} -> {size}: {got[k].ravel()[:8]} vs {want.ravel()[:8]}"


def test_box_filter_never_gives_black_rows_on_a_constant_image():
    """A constant image stays constant: each row's weights sum to 1 (never 0) at every scale."""
    for out in (49, 98, 224, 299):
        heights = list(range(1, 120))
        images = [torch.full((1, h, 3), 200, dtype=torch.uint8) for h in heights]
        got = resize_crops(images, [(0.0, 0.0, float(h), 3.0) for h in heights], (out, 5), filter="box")
        assert (got == 200).all(), [heights[k] for k in torch.nonzero((got != 200).flatten(1).any(1)).flatten().tolist()]


def test_autocast_around_the_call_does_not_lower_the_resize_precision():
    """A training loop's autocast context must not run the resize matmuls in bfloat16."""
    rng = np.random.default_rng(12)
    images = [_image(rng, int(rng.integers(150, 300)), int(rng.integers(150, 300)), 3) for _ in range(3)]
    boxes = [(0.0, 0.0, float(image.shape[0]), float(image.shape[1])) for image in images]
    inputs = [_as_input(image, "CHW") for image in images]
    plain = resize_crops(inputs, boxes, 64, mean=MEAN, std=STD, dtype="float32")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        inside = resize_crops(inputs, boxes, 64, mean=MEAN, std=STD, dtype="float32")
    assert inside.dtype == torch.float32 and torch.equal(plain, inside)


def test_the_resize_never_switches_the_process_tf32_flag_and_ignores_autocast(monkeypatch):
    """A loader's finish thread runs the resize: switching the process-wide TF32 flag there raced
    with the training loop and other loaders (a user's True was lost), so it is left alone."""
    from slipstream.images.device import batchpixels as gpu_stage

    seen = []
    real = torch.matmul
    monkeypatch.setattr(gpu_stage.torch, "matmul", lambda a, b: seen.append((torch.backends.cuda.matmul.allow_tf32, a.dtype)) or real(a, b))
    before = torch.backends.cuda.matmul.allow_tf32
    try:
        for flag in (True, False):
            torch.backends.cuda.matmul.allow_tf32 = flag
            with gpu_stage._precise(torch.device("cuda")):
                assert torch.backends.cuda.matmul.allow_tf32 is flag and not torch.is_autocast_enabled("cuda")
            assert torch.backends.cuda.matmul.allow_tf32 is flag
        image = torch.zeros(3, 8, 8, dtype=torch.uint8)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            resize_crops([image], [(0.0, 0.0, 8.0, 8.0)], 4)
        assert seen and all(dtype == torch.float32 for _, dtype in seen)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


@pytest.mark.parametrize("input_layout", ["CHW", "HWC"])
@pytest.mark.parametrize("dtype, layout, mean", [("uint8", "NCHW", None), ("uint8", "NHWC", None), ("float32", "NCHW", None), ("float32", "NHWC", MEAN), ("float16", "channels_last", MEAN), ("bfloat16", "NCHW", MEAN), (torch.float32, "channels_last", None)])
def test_finalize_of_resample_is_resize_crops(dtype, layout, mean, input_layout):
    rng = np.random.default_rng(20)
    images = [_image(rng, h, w, 3) for h, w in ((30, 50), (61, 20), (44, 44), (9, 7))]
    boxes, flips = [_window(rng, *image.shape[:2]) for image in images], [True, False, True, False]
    inputs, std = [_as_input(image, input_layout) for image in images], None if mean is None else STD
    values = resample(inputs, boxes, (12, 16), flips, input_layout, "bilinear")
    assert values.dtype == torch.float32 and values.shape == (4, 3, 12, 16) and values.is_contiguous()
    assert torch.equal(values, values.round().clamp(0, 255))  # uint8 values
    expected = resize_crops(inputs, boxes, (12, 16), flips, mean, std, dtype, layout, input_layout)
    got = finalize(values.clone(), mean, std, dtype, layout)
    assert torch.equal(got, expected) and got.stride() == expected.stride() and got.dtype == expected.dtype


def test_finalize_takes_a_joined_batch_of_any_strides_and_leaves_it_unchanged():
    """A batch joined from resampled rows and uint8 rows made elsewhere (converted to float32)."""
    rng = np.random.default_rng(21)
    images = [_as_input(_image(rng, 40, 50, 3), "CHW") for _ in range(2)]
    boxes = [(0.0, 0.0, 40.0, 50.0), (5.5, 3.0, 30.0, 40.0)]
    resampled = resample(images, boxes, (10, 12), filter="box")
    elsewhere = torch.from_numpy(rng.integers(0, 256, (3, 10, 12, 3), dtype=np.uint8)).permute(0, 3, 1, 2).float()
    joined = torch.cat([resampled, elsewhere])
    before = joined.clone()
    for values in (joined, joined.contiguous(memory_format=torch.channels_last), joined.permute(1, 0, 2, 3).contiguous().permute(1, 0, 2, 3)):
        got = finalize(values, MEAN, STD, "float32", "NHWC")
        want = (joined * torch.tensor(1 / (255 * np.asarray(STD)), dtype=torch.float32).view(1, 3, 1, 1) + torch.tensor(-np.asarray(MEAN) / STD, dtype=torch.float32).view(1, 3, 1, 1)).permute(0, 2, 3, 1)
        assert torch.allclose(got, want, atol=1e-6) and got.shape == (5, 10, 12, 3) and got.is_contiguous()
        assert torch.equal(finalize(values, dtype="uint8").float(), joined) and torch.equal(values, before)
    assert torch.equal(got[:2], resize_crops(images, boxes, (10, 12), mean=MEAN, std=STD, dtype="float32", layout="NHWC", filter="box"))


def test_finalize_checks_its_arguments():
    values = torch.zeros(2, 3, 4, 4)
    for bad in (values.to(torch.uint8), values.double(), values[0], values.numpy()):
        with pytest.raises(ValueError, match=r"values must be a float32 \(n, C, H, W\) tensor"):
            finalize(bad)
    with pytest.raises(ValueError, match="dtype must be"):
        finalize(values, dtype="float64")
    with pytest.raises(ValueError, match="layout must be"):
        finalize(values, layout="NCWH")
    with pytest.raises(ValueError, match="mean and std go together"):
        finalize(values, mean=MEAN, dtype="float32")
    with pytest.raises(ValueError, match="mean/std need a float dtype"):
        finalize(values, MEAN, STD)
    with pytest.raises(ValueError, match="std > 0"):
        finalize(values, MEAN, (0.2, 0.0, 0.2), "float32")


@pytest.mark.parametrize("input_layout, filter", [("CHW", "bilinear"), ("HWC", "box")])
def test_a_huge_window_among_small_ones_is_resampled_in_groups_as_each_alone(input_layout, filter):
    """One 1200x1600 whole-image window among 31 60x80 ones: padding every region to the largest
    would cost 32 x 1200 x 1600; the groups keep the small ones apart, and each sample's values are
    those of the sample resampled alone."""
    rng = np.random.default_rng(22)
    shapes = [(60, 80)] * 12 + [(1200, 1600)] + [(60, 80)] * 19
    images = [_as_input(_image(rng, h, w, 3), input_layout) for h, w in shapes]
    boxes, flips = [(0.0, 0.0, float(h), float(w)) for h, w in shapes], rng.random(32) < 0.5
    groups = _groups(plan(shapes, boxes, (24, 32), flips, filter))
    assert len(groups) == 2 and groups[1].tolist() == [12] and sorted(np.concatenate(groups).tolist()) == list(range(32))
    batch = resample(images, boxes, (24, 32), flips, input_layout, filter)
    for k in range(32):
        assert torch.equal(batch[k], resample(images[k : k + 1], boxes[k : k + 1], (24, 32), flips[k : k + 1], input_layout, filter)[0]), k
    assert torch.equal(resize_crops(images, boxes, (24, 32), flips, MEAN, STD, "bfloat16", "NHWC", input_layout, filter), finalize(batch, MEAN, STD, "bfloat16", "NHWC"))


def test_groups_keep_similar_sizes_together_and_bound_the_padding():
    rng = np.random.default_rng(23)

    def regions(tall, wide):
        n = len(tall)
        return Plan(np.stack([np.zeros(n, np.int64), tall], 1), np.stack([np.zeros(n, np.int64), wide], 1), np.empty((n, 4, 2), np.float32), (1, 1), False)

    for n in (1, 4, 64, 256):  # similar sizes (sides within 20%), or small ones: one group
        assert len(_groups(regions(rng.integers(300, 360, n), rng.integers(300, 360, n)))) == 1
        assert len(_groups(regions(rng.integers(1, 100, n), rng.integers(1, 100, n)))) == 1
    for _ in range(50):  # spread sizes: every sample in one group, each within the rule
        n = int(rng.integers(1, 200))
        tall, wide = np.exp(rng.uniform(0, 8, n)).astype(np.int64) + 1, np.exp(rng.uniform(0, 8, n)).astype(np.int64) + 1
        groups = _groups(regions(tall, wide))
        assert sorted(np.concatenate(groups).tolist()) == list(range(n))
        for g in groups:
            assert len(g) * tall[g].max() * wide[g].max() <= max(2 * (tall[g] * wide[g]).sum(), PAD_FLOOR)
