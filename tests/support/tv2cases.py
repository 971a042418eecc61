"""torchvision v2's reference outputs (tests/images/data/torchvision_v2.npz) and the pixel steps
each fixed-parameter case corresponds to, for the executors' tests."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from slipstream.images.kernels import pixel_steps as ps

DATA = np.load(Path(__file__).parents[1] / "images" / "data" / "torchvision_v2.npz")
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


def case_steps(case: dict) -> np.ndarray:
    """The (k, WORDS) steps of the case's torchvision call (none for its copying fast path)."""
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
        row[0:8] = [ps.ERASE, p["i"], p["j"], p["h"], p["w"], *np.trunc(np.resize(np.asarray(p["v"], np.float64), 3))]
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


def expected(case: dict) -> np.ndarray:
    """torchvision's output for the case (uint8 HWC)."""
    return DATA[f"case/{case['name']}/{case['image']}"]
