"""The fused crop + resize + flip + layout (+ normalize) kernel against Pillow, in both implementations."""

import os
import subprocess
import sys

import numpy as np
import PIL
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from PIL import Image

from slipstream.images import kernels as K
from slipstream.images.kernels import numba_path, numpy_path

IMPLS = [
    pytest.param(numpy_path.resample, id="numpy"),
    pytest.param(numba_path.resample, id="numba", marks=pytest.mark.skipif(not K.NUMBA, reason="numba not active")),
]
needs_numba = pytest.mark.skipif(not K.NUMBA, reason="numba not active")
FILTERS = {"bilinear": Image.Resampling.BILINEAR, "box": Image.Resampling.BOX}
PILLOW_13 = int(PIL.__version__.split(".")[0]) >= 13
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def pillow(src, box, out_h, out_w, filter):
    top, left, height, width = box
    image = Image.fromarray(src[:, :, 0] if src.shape[2] == 1 else src)
    result = image.resize((out_w, out_h), resample=FILTERS[filter], box=(left, top, left + width, top + height))
    return np.asarray(result).reshape(out_h, out_w, src.shape[2])


def layout(image, flip, chw):
    image = image[:, ::-1] if flip else image
    return image.transpose(2, 0, 1) if chw else image


def assert_like_pillow(got, expected, src_shape, out_h, out_w):
    vertical_first = src_shape[0] - out_h > 0 and src_shape[0] - out_h > (src_shape[1] - out_w) * 2
    if PILLOW_13 or not vertical_first:
        np.testing.assert_array_equal(got, expected)
    else:  # Pillow < 13 always ran the horizontal pass first: its rounding between passes differs
        assert np.abs(got.astype(int) - expected).max() <= 1


def bits(array):
    return array.view({1: np.uint8, 2: np.uint16, 4: np.uint32}[array.dtype.itemsize])


@st.composite
def cases(draw, max_size=40):
    height = draw(st.integers(1, max_size))
    width = draw(st.integers(1, max_size))
    channels = draw(st.sampled_from([1, 3]))
    if draw(st.booleans()):  # whole-pixel box
        top, left = draw(st.integers(0, height - 1)), draw(st.integers(0, width - 1))
        box = (top, left, draw(st.integers(1, height - top)), draw(st.integers(1, width - left)))
    else:  # fractional box
        top = draw(st.floats(0, height, exclude_max=True))
        left = draw(st.floats(0, width, exclude_max=True))
        box_h = (height - top) * draw(st.floats(0.01, 1.0))
        box_w = (width - left) * draw(st.floats(0.01, 1.0))
        box = (top, left, box_h, box_w)
        edges = np.array([top, top + box_h, left, left + box_w], np.float32)
        assume(edges[1] <= height and edges[3] <= width and edges[1] > edges[0] and edges[3] > edges[2])
    out_h = draw(st.integers(1, 2 * max_size))
    out_w = draw(st.integers(1, 2 * max_size))
    seed = draw(st.integers(0, 2**32 - 1))
    src = np.random.default_rng(seed).integers(0, 256, (height, width, channels), dtype=np.uint8)
    return src, box, out_h, out_w


@pytest.mark.parametrize("impl", IMPLS)
@SETTINGS
@given(case=cases(), filter=st.sampled_from(["bilinear", "box"]), flip=st.booleans(), chw=st.booleans())
def test_uint8_equals_pillow(impl, case, filter, flip, chw):
    src, box, out_h, out_w = case
    channels = src.shape[2]
    out = np.empty((channels, out_h, out_w) if chw else (out_h, out_w, channels), np.uint8)
    assert impl(src, box, out, flip=flip, filter=filter, chw=chw) is out
    assert_like_pillow(out, layout(pillow(src, box, out_h, out_w, filter), flip, chw), src.shape, out_h, out_w)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("filter", ["bilinear", "box"])
@pytest.mark.parametrize(
    "shape, box, size",
    [
        ((350, 400, 3), (20, 50, 300, 300), (224, 224)),  # the training crop
        ((120, 90, 3), (10.25, 3.5, 100.5, 80.75), (224, 224)),  # fractional upscale
        ((300, 400, 3), (0, 0, 300, 400), (5, 7)),  # strong downscale
        ((500, 60, 1), (0, 0, 500, 60), (50, 40)),  # the height shrinks much more: vertical pass first
        ((301, 3, 3), (0, 0, 301, 3), (224, 224)),
        ((64, 64, 1), (0, 0, 64, 64), (64, 64)),  # identity
        ((9, 7, 3), (1.5, 0.5, 7, 6), (1, 1)),
        ((40, 1, 3), (0, 0, 40, 1), (7, 5)),  # a single column
    ],
)
def test_fixed_shapes_equal_pillow(impl, filter, shape, box, size):
    src = np.random.default_rng(sum(shape)).integers(0, 256, shape, dtype=np.uint8)
    out = impl(src, box, np.empty((*size, shape[2]), np.uint8), filter=filter)
    assert_like_pillow(out, pillow(src, box, *size, filter), shape, *size)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("chw", [False, True])
@pytest.mark.parametrize("channels", [1, 3])
def test_float_outputs_are_the_uint8_result_normalized_in_float32(impl, dtype, chw, channels):
    rng = np.random.default_rng(channels)
    src = rng.integers(0, 256, (57, 71, channels), dtype=np.uint8)
    box, size = (3.25, 5.5, 50, 60.5), (33, 29)
    reference = layout(pillow(src, box, *size, "bilinear"), True, chw).astype(np.float32)
    mean = rng.uniform(0, 255, channels).astype(np.float32)
    std = rng.uniform(20, 80, channels).astype(np.float32)
    scale, offset = (1 / std).astype(np.float32), (-mean / std).astype(np.float32)
    shape = (channels, *size) if chw else (*size, channels)
    per_channel = (slice(None), None, None) if chw else (None, None, slice(None))

    plain = impl(src, box, np.empty(shape, dtype), flip=True, chw=chw)
    np.testing.assert_array_equal(bits(plain), bits(reference.astype(dtype)))
    normalized = impl(src, box, np.empty(shape, dtype), flip=True, chw=chw, scale=scale, offset=offset)
    expected = (reference * scale[per_channel] + offset[per_channel]).astype(dtype)
    np.testing.assert_array_equal(bits(normalized), bits(expected))
    scaled = impl(src, box, np.empty(shape, dtype), flip=True, chw=chw, scale=np.float32(1 / 255))
    np.testing.assert_array_equal(bits(scaled), bits((reference * np.float32(1 / 255)).astype(dtype)))
    shifted = impl(src, box, np.empty(shape, dtype), flip=True, chw=chw, offset=[-128.0] * channels)
    np.testing.assert_array_equal(bits(shifted), bits((reference - np.float32(128)).astype(dtype)))


@needs_numba
@SETTINGS
@given(
    case=cases(max_size=24),
    filter=st.sampled_from(["bilinear", "box"]),
    flip=st.booleans(),
    chw=st.booleans(),
    dtype=st.sampled_from([np.uint8, np.float32, np.float16]),
    exponents=st.lists(st.integers(-30, 10), min_size=2, max_size=2),
    signs=st.lists(st.sampled_from([-1.0, 1.0]), min_size=2, max_size=2),
)
def test_numba_equals_numpy_bit_for_bit(case, filter, flip, chw, dtype, exponents, signs):
    """Wide scale/offset ranges also reach float16 subnormals, overflow to inf and rounding ties."""
    src, box, out_h, out_w = case
    channels = src.shape[2]
    shape = (channels, out_h, out_w) if chw else (out_h, out_w, channels)
    norm = {}
    if dtype != np.uint8:
        rng = np.random.default_rng([exponents[0] + 100, exponents[1] + 100])
        scale = (signs[0] * rng.uniform(1, 2, channels) * 2.0 ** exponents[0]).astype(np.float32)
        offset = (signs[1] * rng.uniform(0, 2, channels) * 2.0 ** exponents[1]).astype(np.float32)
        norm = {"scale": scale, "offset": offset}
    a = numba_path.resample(src, box, np.empty(shape, dtype), flip=flip, filter=filter, chw=chw, **norm)
    b = numpy_path.resample(src, box, np.empty(shape, dtype), flip=flip, filter=filter, chw=chw, **norm)
    np.testing.assert_array_equal(bits(a), bits(b))


@needs_numba
def test_float16_rounding_matches_numpy_on_special_values():
    values = np.array([0.0, -0.0, 1e-8, 2.0**-25, 2.0**-24, 3 * 2.0**-26, 6.1e-5, 65504.0, 65519.99, 65520.0, 1e9, np.inf, -np.inf, np.nan], np.float32)
    bits32 = np.concatenate([values.view(np.uint32), np.random.default_rng(0).integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32)])
    with np.errstate(over="ignore"):
        expected = bits32.view(np.float32).astype(np.float16).view(np.uint16)
    got = np.array([numba_path.half_bits(int(b)) for b in bits32], np.uint16)
    np.testing.assert_array_equal(got, expected)


@pytest.mark.parametrize("impl", IMPLS)
def test_views_scratch_buffers_and_strided_outputs(impl):
    rng = np.random.default_rng(5)
    image = rng.integers(0, 256, (31, 45, 3), dtype=np.uint8)
    expected = pillow(image, (2, 3, 25, 40), 20, 30, "bilinear")
    scratch = np.zeros(image.size + 1000, np.uint8)
    scratch[: image.size] = image.ravel()
    src = scratch[: image.size].reshape(image.shape)  # a view of a reused scratch buffer
    np.testing.assert_array_equal(impl(src, (2, 3, 25, 40), np.empty((20, 30, 3), np.uint8)), expected)
    readonly = image.copy()
    readonly.flags.writeable = False
    np.testing.assert_array_equal(impl(readonly, (2, 3, 25, 40), np.empty((20, 30, 3), np.uint8)), expected)
    padded = np.zeros((40, 64, 3), np.uint8)
    np.testing.assert_array_equal(impl(image[:, ::-1][:, ::-1], (2, 3, 25, 40), padded[5:25, 10:40]), expected)  # strided src and out
    assert padded.sum() == expected.astype(int).sum()
    batch = np.zeros((4, 3, 20, 30), np.float16)
    impl(image, (2, 3, 25, 40), batch[2], chw=True)  # a slot of a batch
    np.testing.assert_array_equal(batch[2], expected.transpose(2, 0, 1).astype(np.float16))
    assert not batch[[0, 1, 3]].any()


@pytest.mark.parametrize("impl", IMPLS)
def test_bad_arguments_raise_clear_errors(impl):
    src = np.zeros((10, 12, 3), np.uint8)
    out = np.empty((5, 6, 3), np.uint8)
    box = (0, 0, 10, 12)
    for bad_box in [(-1, 0, 5, 5), (0, -0.5, 5, 5), (6, 0, 5, 5), (0, 0, 10, 12.5), (0, 0, 0, 5), (0, 0, 5, -1), (0, 0, np.nan, 5), (0, 0, 5), (3, 0, 1e-9, 5)]:
        with pytest.raises(ValueError, match="box"):
            impl(src, bad_box, out)
    with pytest.raises(TypeError, match="box"):
        impl(src, (0, 0, "5", 5), out)
    with pytest.raises(TypeError, match="box"):
        impl(src, 5, out)
    with pytest.raises(TypeError, match="src"):
        impl(src.astype(np.float32), box, out)
    with pytest.raises(TypeError, match="src"):
        impl(src.tolist(), box, out)
    with pytest.raises(ValueError, match="channels"):
        impl(np.zeros((10, 12, 4), np.uint8), box, np.empty((5, 6, 4), np.uint8))
    with pytest.raises(ValueError, match="src"):
        impl(np.zeros((10, 12), np.uint8), box, out)
    with pytest.raises(ValueError, match="out shape"):
        impl(src, box, np.empty((5, 6, 1), np.uint8))
    with pytest.raises(ValueError, match="out shape"):
        impl(src, box, out, chw=True)  # (5, 6, 3) read as (C, oh, ow)
    with pytest.raises(ValueError, match="out"):
        impl(src, box, np.empty((5, 6), np.uint8))
    with pytest.raises(TypeError, match="out"):
        impl(src, box, np.empty((5, 6, 3), np.float64))
    readonly = np.empty((5, 6, 3), np.uint8)
    readonly.flags.writeable = False
    with pytest.raises(ValueError, match="read-only"):
        impl(src, box, readonly)
    with pytest.raises(ValueError, match="filter"):
        impl(src, box, out, filter="bicubic")
    with pytest.raises(ValueError, match="float32 or float16"):
        impl(src, box, out, scale=np.ones(3, np.float32))
    with pytest.raises(ValueError, match="scale"):
        impl(src, box, np.empty((5, 6, 3), np.float32), scale=np.ones(2, np.float32))
    with pytest.raises(TypeError, match="offset"):
        impl(src, box, np.empty((5, 6, 3), np.float32), offset="mean")


def test_public_function_dispatches_and_warm_up():
    src = np.random.default_rng(1).integers(0, 256, (20, 20, 3), dtype=np.uint8)
    out = K.resample_into(src, (0, 0, 20, 20), np.empty((10, 10, 3), np.uint8))
    np.testing.assert_array_equal(out, pillow(src, (0, 0, 20, 20), 10, 10, "bilinear"))
    seconds = K.warm_up()
    assert seconds >= 0.0 and (K.NUMBA or seconds == 0.0)
    if K.NUMBA:
        assert numba_path.resample_u8.targetoptions["nogil"] and numba_path.write_lut.targetoptions["nogil"]
    else:
        with pytest.raises(RuntimeError):
            numba_path.resample(src, (0, 0, 20, 20), out)


def test_environment_variable_selects_the_numpy_fallback():
    env = dict(os.environ, SLIPSTREAM_NO_NUMBA="1")
    env["PYTHONPATH"] = os.pathsep.join(p for p in [os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(K.__file__)))), env.get("PYTHONPATH")] if p)
    code = "from slipstream.images import kernels as K; print(K.NUMBA, K.warm_up())"
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[:2] == ["False", "0.0"]


def test_the_first_calls_run_on_numpy_while_numba_compiles_in_the_background():
    from helpers import run_python

    result = run_python(
        """
        import numpy as np
        from slipstream.images import kernels as _kernels
        from slipstream.images.kernels import numba_path
        src = np.zeros((8, 8, 3), np.uint8)
        out = np.empty((4, 4, 3), np.uint8)
        _kernels.resample_into(src, (0, 0, 8, 8), out)  # starts the compile, returns at once
        print("WARMED", _kernels.warm_up("uint8") >= 0, numba_path.ready[np.dtype("uint8")].is_set() == _kernels.NUMBA)
        _kernels.warm_up()
        print("ALL", all(event.is_set() == _kernels.NUMBA for event in numba_path.ready.values()))
        """,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "WARMED True True" in result.stdout and "ALL True" in result.stdout


_TWO_PIPELINE_RUNS = """
    import sys, warnings
    if "{missing}" == "yes":
        sys.modules["numba"] = None  # numba not installed
    warnings.simplefilter("always")  # a once-only warning must not rely on the filters
    import numpy as np
    from slipstream import ops
    from slipstream.images import kernels
    from slipstream.images.pipeline import ImageSource, Pipeline
    image = np.random.default_rng(0).integers(0, 256, (20, 20, 3), dtype=np.uint8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            Pipeline([ops.RandomResizedCrop(8), ops.ToCHW()]).run(ImageSource.of(image))
    print("STATUS", kernels.numba_status())
    for w in caught:
        print("WARNING", w.category.__name__, w.message)
"""


def test_a_missing_numba_warns_once_when_a_pipeline_first_runs_the_numpy_fallback():
    from helpers import run_python

    result = run_python(_TWO_PIPELINE_RUNS.format(missing="yes"), env={"SLIPSTREAM_NO_NUMBA": ""})  # even where the suite disables it
    assert result.returncode == 0, result.stderr
    warnings_ = [line for line in result.stdout.splitlines() if line.startswith("WARNING")]
    assert "STATUS missing" in result.stdout
    assert len(warnings_) == 1 and warnings_[0].startswith("WARNING RuntimeWarning ")
    assert "4x slower" in warnings_[0] and "pip install 'slipstream[files]'" in warnings_[0] and "pip install numba" in warnings_[0]


def test_numba_switched_off_on_purpose_does_not_warn():
    from helpers import run_python

    result = run_python(_TWO_PIPELINE_RUNS.format(missing="no"), env={"SLIPSTREAM_NO_NUMBA": "1"})
    assert result.returncode == 0, result.stderr
    assert "STATUS disabled by SLIPSTREAM_NO_NUMBA" in result.stdout and "WARNING" not in result.stdout


def test_warn_once_warns_the_first_time_a_key_is_given_only():
    import warnings

    from slipstream.images.kernels import numba_path

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            numba_path.warn_once("test-key-only-here", "slipstream: test warning")
    assert [(w.category, str(w.message)) for w in caught] == [(RuntimeWarning, "slipstream: test warning")]
