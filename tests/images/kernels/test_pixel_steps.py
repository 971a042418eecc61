"""The pixel-step executors against torchvision v2's outputs (tests/images/data/torchvision_v2.npz)
on the same images and fixed parameters: pixel for pixel for the colour ops and NEAREST geometry,
within one grey level for the blur and BILINEAR geometry (float32 summation orders differ), and
the C executor bit for bit against the NumPy one."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from slipstream.images.kernels import pixel_steps as ps

DATA = np.load(Path(__file__).parents[1] / "data" / "torchvision_v2.npz")
CASES = json.loads(str(DATA["cases"]))

_SIMPLE = {
    "adjust_brightness": (ps.BRIGHTNESS, "factor"),
    "adjust_contrast": (ps.CONTRAST, "factor"),
    "adjust_saturation": (ps.SATURATION, "factor"),
    "adjust_hue": (ps.HUE, "hue_factor"),
    "adjust_sharpness": (ps.SHARPNESS, "factor"),
    "posterize": (ps.POSTERIZE, "bits"),
    "solarize": (ps.SOLARIZE, "threshold"),
    "autocontrast": (ps.AUTOCONTRAST, None),
    "equalize": (ps.EQUALIZE, None),
    "invert": (ps.INVERT, None),
}


def steps_of(case: dict, image: np.ndarray) -> np.ndarray:
    """The steps that the case's torchvision call corresponds to."""
    row = np.zeros(ps.WORDS)
    fn, p = case["fn"], case["params"]
    if fn in _SIMPLE:
        code, key = _SIMPLE[fn]
        row[0] = code
        if key is not None:
            row[1] = p[key]
    elif fn == "rgb_to_grayscale":
        row[0] = ps.GRAYSCALE
    elif fn == "gaussian_blur":
        row[0:5] = [ps.BLUR, *p["kernel_size"], *p["sigma"]]
    elif fn == "erase":
        value = np.resize(np.asarray(p["v"], np.float64), 3)
        row[0:8] = [ps.ERASE, p["i"], p["j"], p["h"], p["w"], *np.trunc(value)]
    elif fn in ("rotate", "shear", "translate", "affine"):
        fast = p.get("fast_path")
        if fast == "clone":
            return np.zeros((0, ps.WORDS))
        if fast:
            row[0:2] = [ps.ROT90, int(fast[-1])]
        else:
            fill = p["fill"]
            values = np.resize(np.asarray(fill if fill is not None else [0], np.float64), 3)
            row[0:12] = [ps.AFFINE, *p["matrix"], p["interpolation"] == "bilinear", fill is not None, *values]
    else:
        raise AssertionError(f"no steps for {fn}")
    return row[None]


def tolerance(case: dict) -> int:
    if case["fn"] == "gaussian_blur" or case["params"].get("interpolation") == "bilinear":
        return 1
    return 0


@pytest.mark.parametrize("case", CASES, ids=[f"{c['name']}-{c['image']}" for c in CASES])
def test_numpy_steps_give_torchvisions_pixels(case):
    source = DATA[case["image"]]
    expected = DATA[f"case/{case['name']}/{case['image']}"]
    image = source.copy()
    out = ps.run(image, steps_of(case, source))
    if case["fn"] == "rgb_to_grayscale" and case["params"]["num_output_channels"] == 1:
        out = out[:, :, :1]
    assert out.shape == expected.shape
    diff = np.abs(out.astype(np.int64) - expected.astype(np.int64))
    limit = tolerance(case)
    assert diff.max() <= limit, f"{int((diff > limit).sum())} pixels differ by more than {limit} (max {diff.max()})"
    if limit:  # within one level, and on few pixels
        assert (diff > 0).mean() < 0.05


def test_blur_weights_sum_to_one_and_match_the_gaussian():
    for size, sigma in ((3, 0.1), (5, 1.0), (23, 3.3), (31, 0.1)):
        w = ps.blur_weights(size, sigma)
        c = size // 2
        exact = np.exp(-((np.arange(size) - c) ** 2) / (2 * sigma * sigma))
        np.testing.assert_allclose(w, exact / exact.sum(), rtol=2e-6, atol=1e-30)
        assert w.dtype == np.float32 and abs(float(w.astype(np.float64).sum()) - 1) < 1e-5


def test_a_blur_wider_than_the_image_is_refused_naming_the_step():
    row = np.zeros((1, ps.WORDS))
    row[0, 0:5] = [ps.BLUR, 9, 3, 1.0, 1.0]
    with pytest.raises(ValueError, match=r"pixel step 0 \(BLUR\).*9x3.*4x4"):
        ps.run(np.zeros((4, 4, 3), np.uint8), row)


def test_an_unknown_opcode_and_a_quarter_turn_of_a_rectangle_are_refused():
    with pytest.raises(ValueError, match="unknown opcode 99"):
        ps.run(np.zeros((4, 4, 3), np.uint8), np.array([[99] + [0] * 11], np.float64))
    with pytest.raises(ValueError, match="square images only, got 4x5"):
        ps.run(np.zeros((4, 5, 3), np.uint8), np.array([[ps.ROT90, 1] + [0] * 10], np.float64))


def test_steps_compose_in_order_and_write_in_place():
    image = DATA["img_a"].copy()
    steps = np.zeros((2, ps.WORDS))
    steps[0, 0:2] = [ps.BRIGHTNESS, 1.5]
    steps[1, 0] = ps.INVERT
    expected = 255 - np.clip(image.astype(np.float32) * np.float32(1.5), 0, 255).astype(np.uint8)
    out = ps.run(image, steps)
    assert out is image and np.array_equal(image, expected)


def test_rotation_matrices_follow_torchvision():
    from slipstream.images.pixelops import inverse_affine_matrix

    for case in CASES:
        p = case["params"]
        if case["fn"] not in ("rotate", "shear", "translate", "affine") or p.get("fast_path"):
            continue
        h, w = DATA[case["image"]].shape[:2]
        if case["fn"] == "rotate":
            matrix = inverse_affine_matrix(h, w, angle=-(p["angle"] % 360))
        elif case["fn"] == "affine":
            matrix = inverse_affine_matrix(h, w, angle=p["angle"], translate=p["translate"], scale=p["scale"], shear=p["shear"])
        elif case["fn"] == "shear":
            matrix = inverse_affine_matrix(h, w, shear=p["shear"], center=(0.0, 0.0))
        else:
            matrix = inverse_affine_matrix(h, w, translate=(p["tx"], p["ty"]))
        assert matrix == pytest.approx(p["matrix"], rel=0, abs=0), case["name"]
    assert math.isfinite(matrix[0])
