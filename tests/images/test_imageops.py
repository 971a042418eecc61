"""images.imageops, the image operations: RandomResizedCrop's boxes (inside the image, distributed as torchvision's,
the fallback, the same for the same draws), Resize's rounding, geometry composed into one source window
(flips included), Normalize's coefficients, and bad settings refused."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slipstream.core.draws import Draws
from slipstream.images import imageops as ops
from slipstream.images.imageops import WindowError, Windows


def _box(op, height, width, seed=0, epoch=0, n=1):
    """The (top, left, h, w) boxes ``op`` places on fresh windows of n height x width images."""
    windows = Windows([height] * n, [width] * n)
    op.place(windows, Draws(seed, epoch, np.arange(n)).uniforms(0, op.draws))
    boxes = [tuple(int(round(v)) for v in (windows.top[i], windows.left[i], windows.height[i], windows.width[i])) for i in range(n)]
    return boxes if n > 1 else boxes[0]


@given(st.integers(1, 600), st.integers(1, 600), st.integers(0, 2**32 - 1))
@settings(max_examples=200, deadline=None)
def test_random_resized_crop_boxes_stay_inside_and_follow_scale_and_ratio(height, width, seed):
    op = ops.RandomResizedCrop(224)
    for top, left, h, w in _box(op, height, width, seed, n=8):
        assert 0 <= top and top + h <= height and 0 <= left and left + w <= width and h > 0 and w > 0
        area = h * w / (height * width)
        in_range = 0.08 - 0.02 <= area <= 1.0 and 3 / 4 - 0.1 <= w / h <= 4 / 3 + 0.1
        centered = (top, left) == ((height - h) // 2, (width - w) // 2)
        if min(height, width) >= 32:  # on tiny images rounding alone moves a box out of the ranges
            assert in_range or centered  # a sampled box, or torchvision's center fallback


def _torchvision_box(height, width, rng, scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """torchvision's RandomResizedCrop.get_params, with a NumPy generator."""
    area = height * width
    for _ in range(10):
        target = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(math.log(ratio[0]), math.log(ratio[1])))
        w, h = int(round(math.sqrt(target * aspect))), int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return int(rng.integers(0, height - h + 1)), int(rng.integers(0, width - w + 1)), h, w
    return None


@pytest.mark.parametrize("height, width", [(1000, 1000), (300, 900)])
def test_random_resized_crop_boxes_are_distributed_as_torchvisions(height, width):
    n = 4000
    ours = np.array(_box(ops.RandomResizedCrop(8), height, width, seed=3, n=n), np.float64)
    rng = np.random.default_rng(3)
    theirs = np.array([b for b in (_torchvision_box(height, width, rng) for _ in range(n)) if b is not None], np.float64)
    for boxes in (ours, theirs):
        boxes[:, 0] /= np.maximum(1, height - boxes[:, 2])  # the position along the free range
        boxes[:, 1] /= np.maximum(1, width - boxes[:, 3])
    stats = lambda b: [(b[:, 2] * b[:, 3]).mean() / (height * width), np.log(b[:, 3] / b[:, 2]).mean(), b[:, 0].mean(), b[:, 1].mean()]  # noqa: E731
    np.testing.assert_allclose(stats(ours), stats(theirs), atol=0.02)


def test_the_fallback_is_the_whole_image_clamped_to_the_ratio_range():
    op = ops.RandomResizedCrop(8, scale=(5.0, 5.0))  # no sampled box can fit: always the fallback
    assert _box(op, 100, 400) == (0, 133, 100, 133)
    assert _box(op, 400, 100) == (133, 0, 133, 100)
    assert _box(op, 90, 100) == (0, 0, 90, 100)


def test_the_same_draws_give_the_same_box_and_any_subset_of_samples_draws_the_same():
    op = ops.RandomResizedCrop(224)
    assert _box(op, 375, 500, seed=7) == _box(op, 375, 500, seed=7)
    many = _box(op, 375, 500, seed=7, n=6)
    windows = Windows([375], [500])
    op.place(windows, Draws(7, 0, [4]).uniforms(0, op.draws))
    assert (round(windows.top[0]), round(windows.left[0]), round(windows.height[0]), round(windows.width[0])) == many[4]
    assert len(set(many)) == 6 and _box(op, 375, 500, seed=8) != many[0]


def test_exp_is_accurate_on_the_ratio_ranges():
    x = np.linspace(-3, 3, 10001)
    for halvings in (ops.RandomResizedCrop(8).halvings, ops.RandomResizedCrop(8, ratio=(0.05, 20)).halvings):
        inside = np.abs(x) <= 2.0**halvings / 16
        np.testing.assert_allclose(ops._exp(x[inside], halvings), np.exp(x[inside]), rtol=1e-12)


def test_resize_keeps_the_aspect_ratio_with_torchvisions_rounding():
    for size, (height, width), expected in [(256, (375, 500), (256, 341)), (256, (500, 375), (341, 256)), ((10, 20), (375, 500), (10, 20))]:
        windows = Windows([height], [width])
        ops.Resize(size).place(windows, np.empty((1, 0)))
        assert (windows.out_h[0], windows.out_w[0]) == expected


def test_geometry_composes_into_one_window_of_the_source():
    windows = Windows([375], [500])
    ops.CenterCrop(224, resize=256).place(windows, np.empty((1, 0)))
    window = windows.row(0)
    scale = 375 / 256
    assert (window.out_h, window.out_w) == (224, 224)
    assert math.isclose(window.height, 224 * scale) and math.isclose(window.width, 224 * 500 / 341)
    assert math.isclose(window.top, 16 * scale)  # round((256 - 224) / 2) rows of the resized image
    assert math.isclose(window.left, 58 * 500 / 341)


def test_a_center_crop_larger_than_an_image_names_its_position():
    windows = Windows([300, 100, 300], [300, 300, 50])
    with pytest.raises(WindowError, match="larger than the 100x300 image") as info:
        ops.CenterCrop(224).place(windows, np.empty((3, 0)))
    assert info.value.position == 1


def test_a_crop_after_a_flip_is_mirrored_into_source_coordinates():
    windows = Windows([10], [100])
    ops.RandomHorizontalFlip(p=1.0).place(windows, np.zeros((1, 1)))
    windows.crop(0, 0, 10, 30, 10, 30)  # the left 30 columns of the mirrored image...
    window = windows.row(0)
    assert window.flip and window.left == 70 and window.width == 30  # ...are the right 30 of the source


def test_normalize_coefficients_match_the_torchvision_formula():
    norm = ops.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), dtype="float16")
    scale, offset = norm.coefficients(3)
    x = np.array([0, 128, 255], np.float32)
    np.testing.assert_allclose(x[:, None] * scale + offset, (x[:, None] / 255 - np.array(norm.mean)) / np.array(norm.std), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: ops.RandomResizedCrop(0), "size must be a positive int"),
        (lambda: ops.RandomResizedCrop(8, scale=(0.5, 0.1)), "increasing positive ranges"),
        (lambda: ops.RandomHorizontalFlip(p=2), r"p must be in \[0, 1\]"),
        (lambda: ops.Normalize((0.5,), (0.0,)), "std > 0"),
        (lambda: ops.Normalize((0.5,), (0.5,), dtype="int8"), "float32, float16 or bfloat16"),
        (lambda: ops.Resize(8, interpolation="cubic"), "interpolation must be"),
        (lambda: ops.Apply(3), "needs a callable"),
    ],
)
def test_bad_op_settings_are_refused(make, message):
    with pytest.raises((ValueError, TypeError), match=message):
        make()
