import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slipstream import ops
from slipstream.ops import Window


@given(st.integers(1, 600), st.integers(1, 600), st.integers(0, 2**32 - 1))
@settings(max_examples=200, deadline=None)
def test_random_resized_crop_boxes_stay_inside_and_follow_scale_and_ratio(height, width, seed):
    op = ops.RandomResizedCrop(224)
    top, left, h, w = op.box(height, width, np.random.default_rng(seed))
    assert 0 <= top and top + h <= height and 0 <= left and left + w <= width and h > 0 and w > 0
    area = h * w / (height * width)
    in_range = 0.08 - 0.02 <= area <= 1.0 and 3 / 4 - 0.1 <= w / h <= 4 / 3 + 0.1
    centered = (top, left) == ((height - h) // 2, (width - w) // 2)
    if min(height, width) >= 32:  # on tiny images rounding alone moves a box out of the ranges
        assert in_range or centered  # a sampled box, or torchvision's center fallback


def test_the_fallback_is_the_whole_image_clamped_to_the_ratio_range():
    op = ops.RandomResizedCrop(8, scale=(5.0, 5.0))  # no sampled box can fit: always the fallback
    assert op.box(100, 400, np.random.default_rng(0)) == (0, 133, 100, 133)
    assert op.box(400, 100, np.random.default_rng(0)) == (133, 0, 133, 100)
    assert op.box(90, 100, np.random.default_rng(0)) == (0, 0, 90, 100)


def test_the_same_generator_state_gives_the_same_box():
    op = ops.RandomResizedCrop(224)
    assert op.box(375, 500, np.random.default_rng(7)) == op.box(375, 500, np.random.default_rng(7))


def test_resize_keeps_the_aspect_ratio_with_torchvisions_rounding():
    assert ops.Resize(256).target(375, 500) == (256, 341)
    assert ops.Resize(256).target(500, 375) == (341, 256)
    assert ops.Resize((10, 20)).target(375, 500) == (10, 20)


def test_geometry_composes_into_one_window_of_the_source():
    window = Window(375, 500)
    ops.CenterCrop(224, resize=256).apply(window, np.random.default_rng)
    scale = 375 / 256
    assert (window.out_h, window.out_w) == (224, 224)
    assert math.isclose(window.height, 224 * scale) and math.isclose(window.width, 224 * 500 / 341)
    assert math.isclose(window.top, 16 * scale)  # round((256 - 224) / 2) rows of the resized image
    assert math.isclose(window.left, 58 * 500 / 341)


def test_a_crop_after_a_flip_is_mirrored_into_source_coordinates():
    window = Window(10, 100)
    ops.RandomHorizontalFlip(p=1.0).apply(window, np.random.default_rng)
    window.crop(0, 0, 10, 30, 10, 30)  # the left 30 columns of the mirrored image...
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
        (lambda: ops.Normalize((0.5,), (0.5,), dtype="int8"), "float32 or float16"),
        (lambda: ops.Resize(8, interpolation="cubic"), "interpolation must be"),
        (lambda: ops.Apply(3), "needs a callable"),
    ],
)
def test_bad_op_settings_are_refused(make, message):
    with pytest.raises((ValueError, TypeError), match=message):
        make()
