"""The pixel-step executors against torchvision v2's outputs (tests/images/data/torchvision_v2.npz)
on the same images and fixed parameters: pixel for pixel for the colour ops and NEAREST geometry,
within one grey level for the blur and BILINEAR geometry (float32 summation orders differ), and
the C executor (``_roijpeg.pixel_steps``) bit for bit against the NumPy one, on those cases and on
random programs (the same pixels, or the same ValueError)."""

from __future__ import annotations

import math
import threading
from pathlib import Path

import numpy as np
import pytest
from helpers import run_python
from hypothesis import given, settings
from hypothesis import strategies as st
from tv2cases import CASES, DATA, case_steps

from slipstream.images import compiled as _compiled
from slipstream.images.kernels import pixel_steps as ps
from slipstream.images.pixelops import inverse_affine_matrix


def steps_of(case: dict, image: np.ndarray) -> np.ndarray:
    """The steps that the case's torchvision call corresponds to."""
    return case_steps(case)


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


# ------------------------------------------------------------------------------ the C executor


_executor = getattr(_compiled.EXTENSION, "pixel_steps", None)
needs_c = pytest.mark.skipif(_executor is None, reason="the _roijpeg extension (with pixel_steps) is not built")


def _outcome(run, image: np.ndarray, steps: np.ndarray) -> tuple[str, object]:
    """The image after ``run`` (the array's bytes), or the ValueError's message."""
    try:
        run(image, steps)
    except ValueError as exc:
        return "error", str(exc)
    return "image", image.tobytes()


def _both(image: np.ndarray, steps: np.ndarray) -> None:
    steps = np.ascontiguousarray(steps, np.float64)
    assert _outcome(_executor, image.copy(), steps) == _outcome(ps.run, image.copy(), steps)


@needs_c
@pytest.mark.parametrize("case", CASES, ids=[f"{c['name']}-{c['image']}" for c in CASES])
def test_the_c_executor_gives_the_numpy_executors_bits_on_every_case(case):
    source = DATA[case["image"]]
    _both(source, steps_of(case, source))
    if source.shape[2] == 3:  # and on one channel
        _both(np.ascontiguousarray(source[:, :, 1:2]), steps_of(case, source))


def _affine_step(draw, height: int, width: int) -> list[float]:
    angle = draw(st.floats(-180, 180))
    translate = (draw(st.integers(-8, 8)), draw(st.integers(-8, 8)))
    shear = (draw(st.floats(-40, 40)), draw(st.floats(-40, 40)))
    scale = draw(st.floats(0.5, 2.0))
    center = draw(st.one_of(st.none(), st.tuples(st.floats(0, width), st.floats(0, height))))
    matrix = inverse_affine_matrix(height, width, angle=angle, translate=translate, scale=scale, shear=shear, center=center)
    fill = [draw(st.floats(-20, 280)) for _ in range(3)]
    return [ps.AFFINE, *matrix, draw(st.sampled_from([0, 1])), draw(st.sampled_from([0, 1])), *fill]


@st.composite
def _step(draw, height: int, width: int) -> list[float]:
    """One step with parameters in its op's range (sometimes past it: a too-wide blur, an odd turn of a
    rectangle, an unknown opcode, boxes partly outside)."""
    code = draw(st.integers(0, 16))
    factor = st.floats(0.0, 3.0)
    if code in (ps.BRIGHTNESS, ps.CONTRAST, ps.SATURATION, ps.SHARPNESS):
        return [code, draw(factor)]
    if code == ps.HUE:
        return [code, draw(st.floats(-0.5, 0.5))]
    if code == ps.POSTERIZE:
        return [code, draw(st.integers(0, 8))]
    if code == ps.SOLARIZE:
        return [code, draw(st.floats(0, 255))]
    if (
        code == ps.BLUR
    ):  # odd sizes, as GaussianBlur gives; sometimes even, zero or negative ones (the reference's arithmetic still)
        size = st.one_of(st.integers(0, 12).map(lambda k: 2 * k + 1), st.integers(-2, 26))
        return [code, draw(size), draw(size), draw(st.floats(0.05, 30.0)), draw(st.floats(0.05, 30.0))]
    if code == ps.AFFINE:
        return _affine_step(draw, height, width)
    if code == ps.ROT90:
        return [code, draw(st.integers(-5, 5))]
    if code == ps.ERASE:
        box = [
            draw(st.integers(-2, height + 1)),
            draw(st.integers(-2, width + 1)),
            draw(st.integers(0, height + 2)),
            draw(st.integers(0, width + 2)),
        ]
        return [code, *box, *(draw(st.integers(0, 255)) for _ in range(3))]
    if code == 16:
        return [draw(st.sampled_from([16, 99, -3]))]
    return [code]


@st.composite
def _programs(draw) -> tuple[np.ndarray, np.ndarray]:
    height, width = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    if draw(st.booleans()):
        width = height  # quarter turns apply
    channels = draw(st.sampled_from([1, 3]))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    kind = draw(st.sampled_from(["noise", "narrow", "flat"]))
    if kind == "noise":
        image = rng.integers(0, 256, (height, width, channels), dtype=np.uint8)
    elif kind == "narrow":  # few values: ties in hue, flat histograms
        image = rng.integers(100, 104, (height, width, channels), dtype=np.uint8)
    else:
        image = np.broadcast_to(rng.integers(0, 256, (1, 1, channels), dtype=np.uint8), (height, width, channels)).copy()
    rows = draw(st.lists(_step(height, width), min_size=1, max_size=4))
    steps = np.zeros((len(rows), ps.WORDS))
    for k, row in enumerate(rows):
        steps[k, : len(row)] = row
    return image, steps


@needs_c
@settings(max_examples=1500, deadline=None)
@given(_programs())
def test_random_programs_give_the_same_bits_or_the_same_error_in_c_and_numpy(program):
    image, steps = program
    _both(image, steps)


@needs_c
@pytest.mark.parametrize(
    ("row", "shape", "message"),
    [
        (
            [ps.BLUR, 9, 3, 1.0, 1.0],
            (4, 4, 3),
            r"^pixel step 0 \(BLUR\): a 9x3 blur kernel needs an image wider than 4 and taller than 1 pixels",
        ),
        ([ps.ROT90, 3], (4, 5, 1), r"^pixel step 0 \(ROT90\): a quarter turn keeps the size of square images only, got 4x5$"),
        ([99], (2, 2, 3), r"^pixel step 0 \(99\): unknown opcode 99 \(expected 0\.\.15\)$"),
        ([ps.POSTERIZE, -1], (2, 2, 3), r"^pixel step 0 \(POSTERIZE\): posterize keeps 0\.\.8 bits, got -1$"),
        ([ps.BRIGHTNESS, float("nan")], (2, 2, 3), r"^pixel step 0: step words must be finite numbers, got nan in column 1$"),
        ([ps.SOLARIZE, float("-inf")], (2, 2, 3), r"^pixel step 0: step words must be finite numbers, got -inf in column 1$"),
        ([ps.HUE, 1e39], (1, 1, 3), r"^pixel step 0 \(HUE\): the hue shift must be within float32's range, got 1e\+39$"),
        ([ps.HUE, -1e39], (1, 1, 1), r"^pixel step 0 \(HUE\): the hue shift must be within float32's range, got -1e\+39$"),
    ],
)
def test_refused_steps_raise_the_same_message_in_c_and_numpy(row, shape, message):
    steps = np.zeros((2, ps.WORDS))
    steps[0, 0] = ps.INVERT
    steps[1, : len(row)] = row
    image = np.zeros(shape, np.uint8)
    for run in (ps.run, _executor):
        with pytest.raises(ValueError, match=message.replace("step 0", "step 1")):
            run(image.copy(), steps)


@needs_c
def test_the_c_executor_takes_flat_steps_and_refuses_wrong_arguments_naming_them():
    image = DATA["img_a"].copy()
    steps = np.zeros((1, ps.WORDS))
    steps[0, :2] = [ps.BRIGHTNESS, 1.5]
    expected = ps.run(image.copy(), steps)
    assert _executor(image, steps.reshape(-1)) is None
    assert np.array_equal(image, expected)
    with pytest.raises(TypeError, match="image must be uint8, got format 'f'"):
        _executor(np.zeros((2, 2, 3), np.float32), steps)
    with pytest.raises(ValueError, match=r"image must have shape \(H, W, 1 or 3\), got \(2, 2, 4\)"):
        _executor(np.zeros((2, 2, 4), np.uint8), steps)
    with pytest.raises(ValueError, match="image must have shape .*got 2 dimensions"):
        _executor(np.zeros((2, 2), np.uint8), steps)
    with pytest.raises(ValueError, match="image must be writable"):
        frozen = np.zeros((2, 2, 3), np.uint8)
        frozen.flags.writeable = False
        _executor(frozen, steps)
    with pytest.raises(ValueError, match="image must be C-contiguous"):
        _executor(np.zeros((2, 4, 3), np.uint8)[:, ::2], steps)
    with pytest.raises(TypeError, match="steps must be float64, got format 'f'"):
        _executor(np.zeros((2, 2, 3), np.uint8), steps.astype(np.float32))
    with pytest.raises(ValueError, match="steps must hold rows of 12 float64"):
        _executor(np.zeros((2, 2, 3), np.uint8), np.zeros((2, 6)))
    with pytest.raises(TypeError, match="image must be a uint8 array"):
        _executor([[0]], steps)


def _mixed_program(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """One step of every opcode, shuffled, with parameters drawn in the ops' ranges."""
    matrix = inverse_affine_matrix(height, width, angle=float(rng.uniform(-40, 40)), shear=(float(rng.uniform(-20, 20)), 0.0))
    rows = [
        [ps.BRIGHTNESS, rng.uniform(0.5, 1.5)], [ps.CONTRAST, rng.uniform(0.5, 1.5)], [ps.SATURATION, rng.uniform(0, 2)],
        [ps.HUE, rng.uniform(-0.5, 0.5)], [ps.SHARPNESS, rng.uniform(0, 2)], [ps.POSTERIZE, rng.integers(1, 8)],
        [ps.SOLARIZE, rng.uniform(0, 255)], [ps.AUTOCONTRAST], [ps.EQUALIZE], [ps.INVERT], [ps.GRAYSCALE],
        [ps.BLUR, 5, 7, rng.uniform(0.1, 2), rng.uniform(0.1, 2)], [ps.AFFINE, *matrix, rng.integers(0, 2), 1, 10, 20, 30],
        [ps.ROT90, 2], [ps.ERASE, 3, 4, 10, 12, 1, 2, 3],
    ]  # fmt: skip
    steps = np.zeros((len(rows), ps.WORDS))
    for k, row in enumerate(rows):
        steps[k, : len(row)] = row
    return steps[rng.permutation(len(rows))]


@needs_c
@pytest.mark.parametrize("seed", range(4))
def test_every_opcode_on_large_images_gives_the_same_bits(seed):
    rng = np.random.default_rng(seed)
    height, width = (224, 224) if seed % 2 else (int(rng.integers(150, 300)), int(rng.integers(150, 300)))
    image = np.ascontiguousarray(DATA["img_a"][:, :, : 1 if seed == 3 else 3])
    image = np.resize(image, (height, width, image.shape[2])).astype(np.uint8)  # (tiled: real pixels, any size)
    steps = _mixed_program(rng, height, width)
    if height != width:
        steps = steps[steps[:, 0] != ps.ROT90]
    for k in range(len(steps)):  # each step alone, then the whole program
        _both(image, steps[k : k + 1])
    _both(image, steps)


@needs_c
def test_the_c_executor_runs_in_many_threads_at_once_with_the_numpy_bits():
    rng = np.random.default_rng(3)
    jobs = []
    for _ in range(24):
        height, width = int(rng.integers(20, 90)), int(rng.integers(20, 90))
        image = rng.integers(0, 256, (height, width, int(rng.choice([1, 3]))), dtype=np.uint8)
        steps = _mixed_program(rng, height, width)
        jobs.append((image, steps, ps.run(image.copy(), steps)))
    results: list[list[bytes]] = [[] for _ in range(4)]

    def work(t: int) -> None:
        for _ in range(5):
            for image, steps, _ in jobs:
                out = image.copy()
                _executor(out, steps)
                results[t].append(out.tobytes())

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    expected = [e.tobytes() for _, _, e in jobs] * 5
    assert all(result == expected for result in results)


_BASELINE = """
import hashlib, sys, numpy as np
from slipstream.images import compiled
sys.path.insert(0, {here!r})
from test_pixel_steps import _mixed_program
rng = np.random.default_rng(8)
for k in range(60):
    height, width = int(rng.integers(1, 80)), int(rng.integers(1, 80))
    image = rng.integers(0, 256, (height, width, int(rng.choice([1, 3]))), dtype=np.uint8)
    steps = _mixed_program(rng, height, width)
    steps = steps[steps[:, 0] != 12] if min(height, width) < 8 else steps  # (a 7-row blur needs 4 rows)
    steps = steps[steps[:, 0] != 14] if height != width else steps
    compiled.EXTENSION.pixel_steps(image, steps)
    sys.stdout.write(hashlib.sha256(image.tobytes()).hexdigest() + "\\n")
"""


@needs_c
def test_the_avx2_and_baseline_loops_give_the_same_bits():
    """The executor's loops are compiled for AVX2 and for the baseline (chosen as the resampler's are; SLIPSTREAM_NO_AVX2
    forces the baseline): both give the same bytes."""
    code = _BASELINE.format(here=str(Path(__file__).parent))
    runs = [run_python(code, timeout=300, env={"SLIPSTREAM_NO_AVX2": off}) for off in ("", "1")]
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
    assert len(runs[0].stdout.split()) == 60 and runs[0].stdout == runs[1].stdout
