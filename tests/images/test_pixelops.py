"""The pixel ops (images.pixelops) against torchvision v2: their output distributions over 2,500
draws on the same images (tests/images/data/torchvision_v2.npz: torchvision's per-draw means,
channel means, unchanged and erased fractions), their tables and fixed settings pixel for pixel,
and their place in a pipeline: order rules, determinism across workers and backends, resume."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from helpers import assert_resumes_exactly, assert_same, snapshot
from hypothesis import given, settings
from hypothesis import strategies as st
from tv2cases import DATA

import slipstream as ss
from slipstream import ops
from slipstream.core.draws import Draws
from slipstream.images import pixelops
from slipstream.images.kernels import pixel_steps as ps
from slipstream.images.pipeline import ImageSource, Pipeline, run_steps

DISTS = {d["name"]: d for d in json.loads(str(DATA["dist_meta"]))}
_INTERP = {"nearest": "nearest", "bilinear": "bilinear"}

# our op for each torchvision constructor the fixture recorded
OURS = {
    "colorjitter_0.4_0.4_0.4_0.1": lambda: ops.ColorJitter(0.4, 0.4, 0.4, 0.1),
    "colorjitter_b0.4": lambda: ops.ColorJitter(brightness=0.4),
    "colorjitter_h0.5": lambda: ops.ColorJitter(hue=0.5),
    "randaugment_2_9_nearest": lambda: ops.RandAugment(2, 9),
    "randaugment_2_9_bilinear": lambda: ops.RandAugment(2, 9, interpolation="bilinear"),
    "randaugment_1_15_nearest": lambda: ops.RandAugment(1, 15),
    "trivialaugmentwide_nearest": lambda: ops.TrivialAugmentWide(),
    "trivialaugmentwide_bilinear": lambda: ops.TrivialAugmentWide(interpolation="bilinear"),
    "randomerasing_p0.25": lambda: ops.RandomErasing(p=0.25),
    "randomerasing_p1_v10-20-30": lambda: ops.RandomErasing(p=1.0, value=[10, 20, 30]),
    "randomgrayscale_p0.1": lambda: ops.RandomGrayscale(p=0.1),
    "gaussianblur_5_0.1-2.0": lambda: ops.GaussianBlur(5, sigma=(0.1, 2.0)),
    "randomrotation_30_nearest": lambda: ops.RandomRotation(30),
    "randomaffine_15_0.1_0.8-1.2_10_nearest": lambda: ops.RandomAffine(15, (0.1, 0.1), (0.8, 1.2), 10),
    "autoaugment_imagenet_nearest": lambda: ops.AutoAugment(),
}


def _outputs(op: pixelops.PixelOp, image: np.ndarray, n: int, seed: int = 0) -> np.ndarray:
    """n outputs of ``op`` on ``image`` (draws of samples 0..n-1 under ``seed``)."""
    u = Draws(seed, 0, np.arange(n)).uniforms(0, op.draws)
    program = op.program(u, np.full(n, image.shape[0]), np.full(n, image.shape[1]))
    return np.stack([run_steps(image.copy(), program[i]) for i in range(n)])


def _ks(a: np.ndarray, b: np.ndarray) -> float:
    """The two-sample Kolmogorov-Smirnov statistic."""
    grid = np.concatenate([a, b])
    fa = np.searchsorted(np.sort(a), grid, side="right") / len(a)
    fb = np.searchsorted(np.sort(b), grid, side="right") / len(b)
    return float(np.abs(fa - fb).max())


def _ks_limit(n: int, m: int, alpha: float = 1e-3) -> float:
    return math.sqrt(-math.log(alpha / 2) / 2) * math.sqrt((n + m) / (n * m))


def _same_proportion(p: float, q: float, n: int) -> bool:
    pooled = (p + q) / 2
    return abs(p - q) <= 4 * math.sqrt(max(pooled * (1 - pooled), 1 / n) * 2 / n)


@pytest.mark.parametrize("name", sorted(DISTS))
def test_the_output_distribution_matches_torchvisions(name):
    meta = DISTS[name]
    base = name[: -len(meta["image"]) - 1]
    image, n = DATA[meta["image"]], meta["n"]
    op = OURS[base]()
    out = _outputs(op, image, n, seed=11)
    means = out.reshape(n, -1).mean(axis=1, dtype=np.float64)
    theirs = DATA[f"dist/{name}/means"]
    limit = _ks_limit(n, len(theirs))
    assert _ks(means, theirs) < limit, f"per-draw means: KS {_ks(means, theirs):.4f} >= {limit:.4f}"
    channel = out.reshape(n, -1, image.shape[2]).mean(axis=1, dtype=np.float64)
    for c in range(image.shape[2]):
        assert _ks(channel[:, c], DATA[f"dist/{name}/channel_means"][:, c]) < limit, f"channel {c}"
    unchanged = (out == image[None]).reshape(n, -1).all(axis=1).mean()
    assert _same_proportion(unchanged, DATA[f"dist/{name}/unchanged"].mean(), n), (
        unchanged,
        DATA[f"dist/{name}/unchanged"].mean(),
    )
    if base.startswith("randomerasing"):
        erased = np.any(out != image[None], axis=3).reshape(n, -1).mean(axis=1)
        assert _ks(erased, DATA[f"dist/{name}/erased"]) < limit
        theirs_box = DATA[f"dist/{name}/box"]
        ours_box = op.boxes(
            Draws(11, 0, np.arange(n)).uniforms(0, op.draws), np.full(n, image.shape[0]), np.full(n, image.shape[1])
        )
        assert _same_proportion(
            (ours_box[:, 2] >= 0).mean(), (theirs_box[:, 2] > 0).mean() + (theirs_box[:, 0] >= 0).mean() * 0, n
        )
        for column in range(4):  # top, left, height, width of the erased boxes
            a, b = ours_box[ours_box[:, 2] >= 0, column], theirs_box[theirs_box[:, 0] >= 0, column]
            assert _ks(a.astype(float), b.astype(float)) < _ks_limit(len(a), len(b)), f"box column {column}"


def test_the_magnitude_tables_are_torchvisions():
    ra = pixelops.RandAugment()
    assert ra._table("Brightness", 224, 224)[9] == 0.26999998092651367
    assert ra._table("Rotate", 224, 224)[9] == 9.0
    assert [int(v) for v in ra._table("TranslateX", 224, 224)] == [
        0, 3, 6, 10, 13, 16, 20, 23, 27, 30, 33, 37, 40, 43, 47, 50, 54, 57, 60, 64, 67, 71, 74, 77, 81, 84, 87, 91, 94, 98, 101,
    ]  # fmt: skip
    assert 255 * ra._table("Solarize", 224, 224)[9] == pytest.approx(178.49999696, abs=1e-8)
    assert ra._table("Posterize", 1, 1).astype(int).tolist() == [
        8,
        8,
        8,
        8,
        7,
        7,
        7,
        7,
        7,
        7,
        7,
        7,
        6,
        6,
        6,
        6,
        6,
        6,
        6,
        5,
        5,
        5,
        5,
        5,
        5,
        5,
        5,
        4,
        4,
        4,
        4,
    ]
    taw = pixelops.TrivialAugmentWide()
    assert taw._table("Posterize", 1, 1).astype(int).tolist() == [
        8,
        8,
        8,
        7,
        7,
        7,
        7,
        7,
        6,
        6,
        6,
        6,
        6,
        5,
        5,
        5,
        5,
        5,
        4,
        4,
        4,
        4,
        4,
        3,
        3,
        3,
        3,
        3,
        2,
        2,
        2,
    ]
    translate = [int(v) for v in taw._table("TranslateX", 1, 1)]
    assert translate == [*range(16), *range(17, 31), 32]  # bin 15 is 15.999999: 16 and 31 never occur, as in torchvision


def _case(name: str, image: str) -> np.ndarray:
    return DATA[f"case/{name}/{image}"]


@pytest.mark.parametrize("image", ["img_a", "img_b"])
def test_fixed_settings_give_torchvisions_pixels(image):
    src = DATA[image]
    fixed = [
        (ops.ColorJitter(brightness=(1.37, 1.37)), "adjust_brightness_1.37", 0),
        (ops.ColorJitter(contrast=(0.6, 0.6)), "adjust_contrast_0.6", 0),
        (ops.ColorJitter(saturation=(1.9, 1.9)), "adjust_saturation_1.9", 0),
        (ops.ColorJitter(hue=(0.37, 0.37)), "adjust_hue_0.37", 0),
        (ops.RandomAdjustSharpness(1.27, p=1), "adjust_sharpness_1.27", 0),
        (ops.RandomPosterize(3, p=1), "posterize_3", 0),
        (ops.RandomSolarize(128, p=1), "solarize_128", 0),
        (ops.RandomAutocontrast(p=1), "autocontrast", 0),
        (ops.RandomEqualize(p=1), "equalize", 0),
        (ops.RandomInvert(p=1), "invert", 0),
        (ops.RandomGrayscale(p=1), "rgb_to_grayscale_3", 0),
        (ops.Grayscale(3), "rgb_to_grayscale_3", 0),
        (ops.GaussianBlur((7, 3), sigma=(1.5, 1.5)), None, 1),
        (ops.RandomRotation((30, 30), fill=None), "rotate_+30_nearest_fillnone", 0),
        (ops.RandomRotation((-9, -9), interpolation="bilinear", fill=[10, 200, 30]), "rotate_-9_bilinear_fill10-200-30", 1),
        (ops.RandomRotation((180, 180)), "rotate_+180_nearest_fillnone", 0),
    ]
    for op, name, tolerance in fixed:
        out = _outputs(op, src, 3)
        if name is None:  # GaussianBlur's case has sigma (1.5, 0.7): compare with the functional of the same sigma instead
            expected = run_steps(src.copy(), np.array([[ps.BLUR, 7, 3, 1.5, 1.5] + [0] * 7], np.float64))
        else:
            expected = _case(name, image)
        for k in range(3):
            diff = np.abs(out[k].astype(int) - expected.astype(int))
            assert diff.max() <= tolerance, f"{op!r} vs {name}: max difference {diff.max()}"


def test_grayscale_with_one_output_channel_gives_torchvisions_single_channel():
    out = Pipeline([ops.Grayscale()]).run(ImageSource.of(DATA["img_a"]), draws=Draws(0, 0, [0]))
    np.testing.assert_array_equal(out, _case("rgb_to_grayscale_1", "img_a"))


def test_pixel_ops_on_a_gray_image_follow_torchvision():
    gray = DATA["img_gray"]
    for op, name in (
        (ops.ColorJitter(saturation=(1.37, 1.37)), "adjust_saturation_1.37"),
        (ops.ColorJitter(hue=(0.37, 0.37)), "adjust_hue_0.37"),
        (ops.ColorJitter(contrast=(1.9, 1.9)), "adjust_contrast_1.9"),
        (ops.RandomEqualize(p=1), "equalize"),
        (ops.RandomRotation((30, 30), fill=[77]), "rotate_+30_nearest_fill77"),
    ):
        np.testing.assert_array_equal(_outputs(op, gray, 1)[0], _case(name, "img_gray"), err_msg=repr(op))


# ---------------------------------------------------------------------------------- draws and programs


@settings(max_examples=60, deadline=None)
@given(
    st.integers(2, 400),
    st.integers(2, 400),
    st.integers(0, 2**32),
    st.floats(0.0, 1.0),
    st.floats(0.01, 0.5),
    st.floats(1.0, 10.0),
)
def test_erasing_boxes_lie_inside_and_follow_torchvisions_rules(height, width, seed, p, low, ratio_hi):
    op = ops.RandomErasing(p=p, scale=(low, min(1.0, low * 2)), ratio=(1 / ratio_hi, ratio_hi))
    n = 64
    boxes = op.boxes(Draws(seed, 0, np.arange(n)).uniforms(0, op.draws), np.full(n, height), np.full(n, width))
    erased = boxes[:, 2] >= 0
    top, left, h, w = boxes[erased].T
    assert ((h < height) & (w < width) & (top >= 0) & (left >= 0) & (top + h <= height) & (left + w <= width)).all()
    if p == 0:
        assert not erased.any()


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**32), st.floats(0, 0.99), st.floats(0, 0.99), st.floats(0, 0.99), st.floats(0, 0.5))
def test_color_jitter_draws_each_factor_in_its_range_once_in_a_random_order(seed, b, c, s, h):
    op = ops.ColorJitter(b, c, s, h)
    rows = op.program(Draws(seed, 0, np.arange(32)).uniforms(0, op.draws), np.full(32, 8), np.full(32, 8))
    for code, span in zip(
        (ps.BRIGHTNESS, ps.CONTRAST, ps.SATURATION, ps.HUE), (op.brightness, op.contrast, op.saturation, op.hue)
    ):
        hits = rows[:, :, 0] == code
        assert (hits.sum(axis=1) == (0 if span is None else 1)).all()
        if span is not None:
            assert ((rows[:, :, 1][hits] >= span[0]) & (rows[:, :, 1][hits] <= span[1])).all()


def test_rand_augment_chooses_every_op_evenly():
    op = ops.RandAugment(1, 9)
    n = 14 * 400
    rows = op.program(Draws(5, 0, np.arange(n)).uniforms(0, op.draws), np.full(n, 32), np.full(n, 32))
    codes = rows[:, 0, 0].astype(int)
    # Identity, AutoContrast... map to distinct codes except shears/translates/rotate (AFFINE) and Identity (NONE)
    counts = {code: int((codes == code).sum()) for code in np.unique(codes)}
    assert counts[ps.AFFINE] == pytest.approx(
        n * 5 / 14, rel=0.1
    )  # shear x2, translate x2, rotate (a square image: 9 degrees, not a fast path)
    for code in (
        ps.BRIGHTNESS,
        ps.SATURATION,
        ps.CONTRAST,
        ps.SHARPNESS,
        ps.POSTERIZE,
        ps.SOLARIZE,
        ps.AUTOCONTRAST,
        ps.EQUALIZE,
        ps.NONE,
    ):
        assert counts[code] == pytest.approx(n / 14, rel=0.2), ps.NAMES[code]
    factors = rows[codes == ps.BRIGHTNESS, 0, 1]
    assert set(np.round(factors, 6)) == {0.73, 1.27}


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: ops.RandAugment(magnitude=31), "magnitude must be an int in"),
        (lambda: ops.ColorJitter(hue=0.6), r"hue range must lie in \[-0.5, 0.5\]"),
        (lambda: ops.ColorJitter(brightness=-1), "brightness must be a non-negative number"),
        (lambda: ops.GaussianBlur(4), "kernel_size must be an odd positive int"),
        (lambda: ops.GaussianBlur(3, sigma=0), "sigma must be a positive number"),
        (lambda: ops.RandomErasing(value="random"), "not supported"),
        (lambda: ops.RandomErasing(scale=(0.5, 0.1)), "scale must be an increasing"),
        (lambda: ops.RandomRotation(10, expand=True), "expand=True changes the image size"),
        (lambda: ops.RandomSolarize(300), r"threshold must be in \[0, 255\]"),
        (lambda: ops.RandomPosterize(9), r"bits must be an int in \[0, 8\]"),
        (lambda: ops.RandomInvert(p=2), r"p must be a probability in \[0, 1\]"),
        (lambda: ops.Grayscale(2), "num_output_channels must be 1 or 3"),
        (lambda: ops.AutoAugment("cifar10"), "policy must be 'imagenet'"),
        (lambda: ops.RandomAffine(10, translate=(1.5, 0)), r"translate must be None or \(fx, fy\) fractions"),
        (lambda: ops.RandomAffine(10, shear=(1, 2, 3)), "shear must be None, a number, or 2 or 4 numbers"),
    ],
)
def test_bad_settings_are_refused_naming_the_op_and_what_was_expected(make, message):
    with pytest.raises(ValueError, match=message):
        make()


# ------------------------------------------------------------------------------------- in a pipeline


def test_geometry_after_a_pixel_op_and_a_pixel_op_after_normalize_are_refused():
    with pytest.raises(ValueError, match="comes after ops.ColorJitter.*crops, resizes and flips come before the pixel ops"):
        Pipeline([ops.ColorJitter(0.4), ops.RandomResizedCrop(8)])
    with pytest.raises(ValueError, match="works on uint8 pixels: put it before ops.Normalize"):
        Pipeline([ops.Normalize((0.5,), (0.5,)), ops.RandAugment()])
    Pipeline([ops.RandomResizedCrop(8), ops.Normalize((0.5,), (0.5,)), ops.ToCHW(), ops.RandomErasing()])  # allowed


def test_erasing_after_normalize_erases_the_output_with_its_value():
    src = DATA["img_b"]
    normalize = ops.Normalize((0.5, 0.4, 0.3), (0.2, 0.2, 0.2))
    plain = Pipeline([ops.CenterCrop(32), normalize, ops.ToCHW()])
    erased = Pipeline([ops.CenterCrop(32), normalize, ops.ToCHW(), ops.RandomErasing(p=1.0, value=[1.5, -2.0, 0.0])])
    draws = Draws(3, 0, [7])
    a, b = plain.run(ImageSource.of(src), draws=draws), erased.run(ImageSource.of(src), draws=draws)
    (box,) = erased.erase_boxes(draws, [32], [32])[0][1]
    top, left, h, w = box.tolist()
    assert h >= 0
    region = np.zeros(a.shape, bool)
    region[:, top : top + h, left : left + w] = True
    np.testing.assert_array_equal(b[~region], a[~region])
    np.testing.assert_array_equal(
        b[:, top : top + h, left : left + w], np.broadcast_to(np.float32([1.5, -2.0, 0.0])[:, None, None], (3, h, w))
    )


def test_erasing_uint8_with_a_value_outside_0_255_is_refused():
    with pytest.raises(ValueError, match="value must be in 0..255"):
        Pipeline([ops.RandomErasing(p=1.0, value=-1)]).run(ImageSource.of(DATA["img_a"]), draws=Draws(0, 0, [0]))


def test_a_pixel_op_after_a_custom_op_runs_on_its_output():
    src = DATA["img_a"]
    after = Pipeline([ops.Apply(lambda x: x[::-1].copy()), ops.RandomInvert(p=1)]).run(
        ImageSource.of(src), draws=Draws(0, 0, [0])
    )
    np.testing.assert_array_equal(after, 255 - src[::-1])
    with pytest.raises(TypeError, match="needs a uint8 .H, W, 1 or 3. image"):
        Pipeline([ops.Apply(lambda x: x.astype(np.float32)), ops.RandomInvert(p=1)]).run(
            ImageSource.of(src), draws=Draws(0, 0, [0])
        )


def test_the_device_stage_refuses_a_one_channel_grayscale_clearly():
    from slipstream.images.device.hostbatch import _pipeline

    _pipeline([ops.RandomResizedCrop(8), ops.RandAugment(), ops.Grayscale(3)])  # the device stage runs pixel ops
    with pytest.raises(ValueError, match=r"ops.Grayscale\(num_output_channels=1\).*map the field without device="):
        _pipeline([ops.RandomResizedCrop(8), ops.RandAugment(), ops.Grayscale()])


def _recipe_loader(workers: int = 0, backend: str = "thread", seed: int = 4):
    rng = np.random.default_rng(0)
    data = [{"image": rng.integers(0, 256, (40, 48, 3), dtype=np.uint8), "label": i} for i in range(12)]
    mapped = ss.mapfields(
        data,
        image=[
            ops.RandomResizedCrop(24),
            ops.RandomHorizontalFlip(),
            ops.RandAugment(2, 9),
            ops.ColorJitter(0.4, 0.4, 0.4),
            ops.Normalize((0.5, 0.5, 0.5), (0.25, 0.25, 0.25)),
            ops.ToCHW(),
            ops.RandomErasing(0.5),
        ],
    )
    return ss.DataLoader(mapped, 4, shuffle=True, seed=seed, workers=workers, backend=backend)


@pytest.mark.parametrize("workers, backend", [(2, "thread"), (2, "process")])
def test_a_recipe_gives_the_same_batches_with_any_workers_and_backend(workers, backend):
    expected = [snapshot(b) for b in _recipe_loader()]
    got = [snapshot(b) for b in _recipe_loader(workers, backend)]
    assert len(got) == len(expected) == 3
    for k, (a, b) in enumerate(zip(got, expected)):
        assert_same(a, b, f"batch {k}")
    other = [snapshot(b) for b in _recipe_loader(seed=5)]
    assert not np.array_equal(other[0]["image"], expected[0]["image"])


def test_a_recipe_resumes_exactly():
    assert assert_resumes_exactly(lambda: _recipe_loader(), epochs=2) > 4


def test_erasing_after_a_custom_op_that_returns_channels_first_erases_one_box_on_every_channel():
    src = DATA["img_b"]
    op = ops.RandomErasing(p=1.0, value=7, ratio=(0.5, 2.0))
    pipe = Pipeline([ops.Apply(lambda x: np.ascontiguousarray(x.transpose(2, 0, 1)).astype(np.float32)), op])
    out = pipe.run(ImageSource.of(src), draws=Draws(0, 0, [3]))
    chw = src.transpose(2, 0, 1).astype(np.float32)
    changed = (out != chw).any(axis=0)
    assert out.shape == chw.shape and changed.any()
    rows, cols = np.flatnonzero(changed.any(axis=1)), np.flatnonzero(changed.any(axis=0))
    box = (slice(rows[0], rows[-1] + 1), slice(cols[0], cols[-1] + 1))
    assert (out[:, box[0], box[1]] == 7).all()  # one rectangle, every channel


def test_changing_an_ops_settings_between_epochs_takes_effect():
    src = DATA["img_a"]
    op = ops.RandomErasing(p=1.0, value=0)
    pipe = Pipeline([op])
    draws = Draws(0, 0, [1])
    before = pipe.run(ImageSource.of(src), draws=draws)
    op.value = 200
    after = pipe.run(ImageSource.of(src), draws=draws)
    assert (after[before != src] == 200).all()
    rotation = ops.RandomRotation((30, 30), fill=None)
    rotated = Pipeline([rotation])
    dark = rotated.run(ImageSource.of(src), draws=draws)
    rotation.fill = 255
    light = rotated.run(ImageSource.of(src), draws=draws)
    assert (light[dark != light] == 255).all() and (dark != light).any()
    augment = ops.RandAugment(1, 9)
    grown = Pipeline([augment])
    augment.num_ops = 3
    assert grown.pixel_program(Draws(0, 0, np.arange(4)), np.full(4, 37), np.full(4, 53)).shape == (4, 3, ps.WORDS)


def test_grayscale_with_three_outputs_repeats_a_one_channel_image_as_torchvision():
    gray = DATA["img_gray"]
    out = Pipeline([ops.Grayscale(3)]).run(ImageSource.of(gray), draws=Draws(0, 0, [0]))
    np.testing.assert_array_equal(out, np.repeat(gray, 3, axis=2))


def test_pixel_ops_may_follow_tochw_and_geometry_may_not_follow_erasing():
    pipe = Pipeline([ops.ToCHW(), ops.CenterCrop(16), ops.ColorJitter(0.4), ops.Normalize((0.5,), (0.5,)), ops.RandomErasing()])
    assert pipe.run(ImageSource.of(DATA["img_a"]), draws=Draws(0, 0, [0])).shape == (3, 16, 16)
    with pytest.raises(ValueError, match="comes after ops.RandomErasing"):
        Pipeline([ops.Normalize((0.5,), (0.5,)), ops.RandomErasing(), ops.RandomHorizontalFlip()])


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: ops.RandomRotation(float("nan")), "degrees must be finite"),
        (lambda: ops.RandomAffine(0, scale=(1, float("inf"))), "scale must be finite"),
        (lambda: ops.GaussianBlur(3, (0.1, float("inf"))), "sigma must be"),
        (lambda: ops.ColorJitter(brightness=float("inf")), "brightness must be finite"),
        (lambda: ops.RandomErasing(ratio=(1, float("inf"))), "ratio must be finite"),
        (lambda: ops.RandomRotation(10, fill=300), r"fill must be None, or 1 or 3 numbers in 0..255"),
        (lambda: Pipeline([ops.RandomErasing(value=300)]), r"erases uint8 pixels here: value must be in 0..255"),
    ],
)
def test_settings_that_cannot_apply_are_refused_when_the_op_or_pipeline_is_made(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_random_apply_applies_its_ops_with_probability_p_and_as_they_would_alone():
    src = DATA["img_a"]
    jitter = ops.ColorJitter(0.4, 0.4, 0.4, 0.1)
    op = ops.RandomApply([jitter, ops.RandomInvert(p=1.0)], p=0.8)
    n = 400
    u = Draws(2, 0, np.arange(n)).uniforms(0, op.draws)
    rows = op.program(u, np.full(n, 37), np.full(n, 53))
    applied = u[:, 0] < 0.8
    assert (rows[~applied] == 0).all() and (rows[applied, :, 0] != 0).any(axis=1).all()
    alone = jitter.program(u[:, 1 : 1 + jitter.draws], np.full(n, 37), np.full(n, 53))
    np.testing.assert_array_equal(rows[applied, :4], alone[applied])
    assert (rows[applied, 4, 0] == ps.INVERT).all()
    out = _outputs(op, src, 200, seed=3)
    unchanged = (out == src[None]).reshape(200, -1).all(axis=1).mean()
    assert 0.1 < unchanged < 0.3  # 1 - p, give or take the draws


def test_random_choice_picks_each_op_by_its_weight():
    op = ops.RandomChoice([ops.RandomInvert(p=1.0), ops.RandomEqualize(p=1.0), ops.GaussianBlur(3)], p=[2, 1, 1])
    n = 4000
    rows = op.program(Draws(4, 0, np.arange(n)).uniforms(0, op.draws), np.full(n, 16), np.full(n, 16))
    codes = rows[:, 0, 0]
    assert (codes == ps.INVERT).mean() == pytest.approx(0.5, abs=0.03)
    assert (codes == ps.EQUALIZE).mean() == pytest.approx(0.25, abs=0.03)
    assert (codes == ps.BLUR).mean() == pytest.approx(0.25, abs=0.03)
    with pytest.raises(ValueError, match="changes the channel count"):
        ops.RandomApply([ops.Grayscale()])
    with pytest.raises(ValueError, match="one non-negative weight per transform"):
        ops.RandomChoice([ops.RandomInvert()], p=[1, 2])


def test_a_simclr_style_recipe_runs_in_a_loader_and_resumes_exactly():
    rng = np.random.default_rng(1)
    data = [{"image": rng.integers(0, 256, (40, 48, 3), dtype=np.uint8)} for _ in range(8)]
    view = [
        ops.RandomResizedCrop(24, scale=(0.2, 1.0)), ops.RandomHorizontalFlip(),
        ops.RandomApply([ops.ColorJitter(0.4, 0.4, 0.4, 0.1)], p=0.8), ops.RandomGrayscale(0.2),
        ops.RandomApply([ops.GaussianBlur(3)], p=0.5), ops.ToCHW(),
    ]  # fmt: skip
    assert assert_resumes_exactly(lambda: ss.DataLoader(ss.mapfields(data, image=view), 4, shuffle=True, seed=1), epochs=2) > 2
