"""The fused crop + resize + flip + layout (+ normalize) kernel against Pillow, in both implementations
(the C one in the ``_roijpeg`` extension and the NumPy reference), and the one against the other."""

import platform
import threading

import numpy as np
import PIL
import pytest
from helpers import run_python
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from PIL import Image

from slipstream.images import kernels as K
from slipstream.images.kernels import c_path, numpy_path

needs_c = pytest.mark.skipif(not K.C_RESAMPLER, reason=f"the C resampler is {K.resampler_status()}")
IMPLS = [
    pytest.param(numpy_path.resample, id="numpy"),
    pytest.param(c_path.resample, id="c", marks=needs_c),
]
FILTERS = {"bilinear": Image.Resampling.BILINEAR, "box": Image.Resampling.BOX}
PILLOW_13 = int(PIL.__version__.split(".")[0]) >= 13
SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# Pillow's wheels for other architectures (aarch64) place a few box edges differently: their compiler fuses
# ``in0 + (x + 0.5) * scale`` into one multiply-add, which moves an output pixel's support by one source pixel. Its
# x86_64 build is the reference; elsewhere the NumPy reference (equal to that build here, tested on x86_64) stands in.
PILLOW_IS_REFERENCE = platform.machine() in ("x86_64", "AMD64")


def pillow(src, box, out_h, out_w, filter):
    if not PILLOW_IS_REFERENCE:
        return numpy_path.resample(src, box, np.empty((out_h, out_w, src.shape[2]), np.uint8), filter=filter)
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


@needs_c
@SETTINGS
@given(
    case=cases(max_size=64),
    filter=st.sampled_from(["bilinear", "box"]),
    flip=st.booleans(),
    chw=st.booleans(),
    dtype=st.sampled_from([np.uint8, np.float32, np.float16]),
    exponents=st.lists(st.integers(-30, 10), min_size=2, max_size=2),
    signs=st.lists(st.sampled_from([-1.0, 1.0]), min_size=2, max_size=2),
)
def test_c_equals_numpy_bit_for_bit(case, filter, flip, chw, dtype, exponents, signs):
    """Wide scale/offset ranges also reach float16 subnormals, overflow to inf and rounding ties;
    sizes up to 64 -> 128 reach the passes' general tap loop (more than 6 taps) and both pass orders."""
    src, box, out_h, out_w = case
    channels = src.shape[2]
    shape = (channels, out_h, out_w) if chw else (out_h, out_w, channels)
    norm = {}
    if dtype != np.uint8:
        rng = np.random.default_rng([exponents[0] + 100, exponents[1] + 100])
        scale = (signs[0] * rng.uniform(1, 2, channels) * 2.0 ** exponents[0]).astype(np.float32)
        offset = (signs[1] * rng.uniform(0, 2, channels) * 2.0 ** exponents[1]).astype(np.float32)
        norm = {"scale": scale, "offset": offset}
    a = c_path.resample(src, box, np.empty(shape, dtype), flip=flip, filter=filter, chw=chw, **norm)
    b = numpy_path.resample(src, box, np.empty(shape, dtype), flip=flip, filter=filter, chw=chw, **norm)
    np.testing.assert_array_equal(bits(a), bits(b))


@needs_c
def test_c_float16_rounding_matches_numpy_on_special_values():
    """Each value as the offset of a black pixel (0 * 1 + offset): the C table rounds it to float16 as NumPy does."""
    values = np.array([0.0, -0.0, 1e-8, 2.0**-25, 2.0**-24, 3 * 2.0**-26, 6.1e-5, 65504.0, 65519.99, 65520.0, 1e9, np.inf, -np.inf, np.nan], np.float32)
    bits32 = np.concatenate([values.view(np.uint32), np.random.default_rng(0).integers(0, 2**32, 6000, dtype=np.uint64).astype(np.uint32)])
    offsets = bits32.view(np.float32)
    offsets = np.concatenate([offsets, np.zeros(-len(offsets) % 3, np.float32)]).reshape(-1, 3)
    src = np.zeros((2, 2, 3), np.uint8)
    got = np.empty((len(offsets), 1, 1, 3), np.float16)
    for k, offset in enumerate(offsets):
        c_path.resample(src, (0, 0, 2, 2), got[k], scale=1.0, offset=offset)
    with np.errstate(over="ignore", invalid="ignore"):
        expected = (np.float32(0) * np.float32(1) + offsets).astype(np.float16)
    np.testing.assert_array_equal(got.reshape(-1, 3).view(np.uint16), expected.view(np.uint16))


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


def test_public_function_runs_the_c_path_when_the_extension_is_built(monkeypatch):
    src = np.random.default_rng(1).integers(0, 256, (20, 20, 3), dtype=np.uint8)
    expected = pillow(src, (0, 0, 20, 20), 10, 10, "bilinear")
    calls = []
    for module in (c_path, numpy_path):
        monkeypatch.setattr(module, "resample", lambda *a, _f=module.resample, _m=module.__name__, **k: calls.append(_m) or _f(*a, **k))
    np.testing.assert_array_equal(K.resample_into(src, (0, 0, 20, 20), np.empty((10, 10, 3), np.uint8)), expected)
    monkeypatch.setattr(c_path, "AVAILABLE", False)
    np.testing.assert_array_equal(K.resample_into(src, (0, 0, 20, 20), np.empty((10, 10, 3), np.uint8)), expected)
    first = "slipstream.images.kernels.c_path" if K.C_RESAMPLER else "slipstream.images.kernels.numpy_path"
    assert calls == [first, "slipstream.images.kernels.numpy_path"]
    assert K.C_RESAMPLER == (K.resampler_status() == "active")


def test_the_c_path_without_the_extension_says_why():
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(c_path, "_roi", None)
        patch.setattr(c_path, "_status", "not built")
        with pytest.raises(RuntimeError, match="not built"):
            c_path.resample(np.zeros((4, 4, 3), np.uint8), (0, 0, 4, 4), np.empty((2, 2, 3), np.uint8))


_FALLBACK_RUN = """
    import sys, warnings, zlib
    warnings.simplefilter("error")  # the fallback is chosen silently
    import numpy as np
    from slipstream import ops
    from slipstream.images import kernels
    from slipstream.images.kernels import numpy_path
    from slipstream.images.pipeline import ImageSource, Pipeline
    calls = []
    plain = numpy_path.resample
    numpy_path.resample = lambda *a, **k: calls.append(1) or plain(*a, **k)
    image = np.random.default_rng(0).integers(0, 256, (57, 43, 3), dtype=np.uint8)
    out = np.empty((3, 24, 30), np.float16)
    kernels.resample_into(image, (3.5, 2.25, 40, 33.5), out, flip=True, filter="box", chw=True, scale=1 / 58.0, offset=-2.0)
    batch = Pipeline([ops.CenterCrop(16, resize=21), ops.Normalize((0.5, 0.4, 0.3), (0.2, 0.3, 0.25)), ops.ToCHW()]).run(ImageSource.of(image))
    print("STATUS", kernels.C_RESAMPLER, kernels.resampler_status())
    print("NUMPY CALLS", len(calls) > 0, "NUMBA IMPORTED", "numba" in sys.modules)
    print("CRC", zlib.crc32(out.tobytes()), zlib.crc32(np.ascontiguousarray(batch).tobytes()))
"""


@needs_c
def test_the_numpy_fallback_runs_under_SLIPSTREAM_NO_ROIJPEG_and_gives_the_same_bits():
    from helpers import run_python

    compiled = run_python(_FALLBACK_RUN, env={"SLIPSTREAM_NO_ROIJPEG": ""})
    fallback = run_python(_FALLBACK_RUN, env={"SLIPSTREAM_NO_ROIJPEG": "1"})
    assert compiled.returncode == 0 and fallback.returncode == 0, compiled.stderr + fallback.stderr
    assert "STATUS True active" in compiled.stdout and "NUMPY CALLS False NUMBA IMPORTED False" in compiled.stdout
    assert "STATUS False disabled by SLIPSTREAM_NO_ROIJPEG" in fallback.stdout and "NUMPY CALLS True" in fallback.stdout
    crc = [line for line in compiled.stdout.splitlines() if line.startswith("CRC")]
    assert crc and crc == [line for line in fallback.stdout.splitlines() if line.startswith("CRC")]


@needs_c
def test_the_extension_function_checks_its_arguments():
    """``_roijpeg.resample`` called directly: what ``c_path`` leaves to it is refused with a clear error."""
    from slipstream.images import _roijpeg

    src = np.zeros((10, 12, 3), np.uint8)
    out = np.empty((5, 6, 3), np.uint8)
    with pytest.raises(ValueError, match="src must be C-contiguous"):
        _roijpeg.resample(np.zeros((10, 24, 3), np.uint8)[:, ::2], (0, 0, 10, 12), out)
    with pytest.raises(ValueError, match="out must be C-contiguous"):
        _roijpeg.resample(src, (0, 0, 10, 12), np.empty((5, 12, 3), np.uint8)[:, ::2])
    with pytest.raises(ValueError, match="out overlaps src"):
        _roijpeg.resample(src, (0, 0, 10, 12), src.reshape(-1)[: 5 * 6 * 3].reshape(5, 6, 3))
    with pytest.raises(TypeError, match="src must be a uint8 buffer"):
        _roijpeg.resample([[[0]]], (0, 0, 1, 1), out)
    with pytest.raises(ValueError, match="src must have shape"):
        _roijpeg.resample(b"\0" * 12, (0, 0, 1, 1), out)
    with pytest.raises(TypeError, match="out must be uint8, float32 or float16"):
        _roijpeg.resample(src, (0, 0, 10, 12), np.empty((5, 6, 3), np.int16))
    with pytest.raises(ValueError, match="out must be writable, got a read-only array"):
        _roijpeg.resample(src, (0, 0, 10, 12), memoryview(bytes(90)).cast("B", (5, 6, 3)))
    floats = np.empty((5, 6, 3), np.float32)
    with pytest.raises(TypeError, match="scale must be float32"):
        _roijpeg.resample(src, (0, 0, 10, 12), floats, scale=np.ones(3))
    with pytest.raises(ValueError, match="scale must be a C-contiguous scalar or 1-D"):
        _roijpeg.resample(src, (0, 0, 10, 12), floats, scale=np.ones((1, 3), np.float32))
    with pytest.raises(ValueError, match="offset must hold 1 or 3 float32 values"):
        _roijpeg.resample(src, (0, 0, 10, 12), floats, offset=np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="filter must be 'bilinear' or 'box'"):
        _roijpeg.resample(src, (0, 0, 10, 12), out, filter=1)
    with pytest.raises(TypeError, match="box must be a sequence"):
        _roijpeg.resample(src, "0 0 10 12", out)
    with pytest.raises(TypeError, match="box must hold real numbers"):
        _roijpeg.resample(src, (0, 0, True, 12), out)
    _roijpeg.resample(src, (0, 0, 10, 12), out, True, "box", False, None, None)  # positionally, as c_path calls it


@needs_c
def test_the_c_path_gives_the_same_bits_from_many_threads_at_once():
    """Each thread its own scratch, the GIL released: concurrent calls of different sizes do not mix."""
    rng = np.random.default_rng(3)
    jobs = []
    for k in range(24):
        h, w = int(rng.integers(20, 300)), int(rng.integers(20, 300))
        src = rng.integers(0, 256, (h, w, 3), np.uint8)
        size = (int(rng.integers(8, 200)), int(rng.integers(8, 200)))
        dtype = (np.uint8, np.float32, np.float16)[k % 3]
        norm = {} if dtype == np.uint8 else {"scale": np.float32(1 / 255), "offset": np.float32(-0.5)}
        jobs.append((src, (1.5, 2.0, h - 3.0, w - 2.5), size, dtype, norm))
    expected = [numpy_path.resample(s, b, np.empty((3, *z), d), chw=True, **n) for s, b, z, d, n in jobs]
    results = [[None] * len(jobs) for _ in range(4)]

    def work(t):
        for _ in range(3):
            for i in range(len(jobs))[t % 2 :: 1 + t % 2]:
                s, b, z, d, n = jobs[i]
                results[t][i] = c_path.resample(s, b, np.empty((3, *z), d), chw=True, **n)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert not any(thread.is_alive() for thread in threads)
    for t in range(4):
        for i in range(len(jobs))[t % 2 :: 1 + t % 2]:
            np.testing.assert_array_equal(bits(results[t][i]), bits(expected[i]), f"thread {t}, job {i}")


_BASELINE = """
import hashlib, sys, numpy as np
from slipstream.images.kernels import c_path
rng = np.random.default_rng(5)
for k in range(40):
    h, w, c = int(rng.integers(1, 300)), int(rng.integers(1, 300)), int(rng.choice([1, 3]))
    src = rng.integers(0, 256, (h, w, c), dtype=np.uint8)
    top, left = float(rng.uniform(0, h / 2)), float(rng.uniform(0, w / 2))
    box = (top, left, float(rng.uniform(0.5, h - top)), float(rng.uniform(0.5, w - left)))
    out = np.empty((int(rng.integers(1, 260)), int(rng.integers(1, 260)), c), np.uint8)
    c_path.resample(src, box, out, filter=["bilinear", "box"][k % 2], flip=bool(k % 3 == 0))
    sys.stdout.write(hashlib.sha256(out.tobytes()).hexdigest() + "\\n")
"""


@needs_c
def test_the_avx2_and_baseline_passes_give_the_same_bits():
    """The resampler's passes are compiled for AVX2 and for the baseline, chosen by cpuid; SLIPSTREAM_NO_AVX2 forces
    the baseline. Both give the same bytes (on a CPU without AVX2 both runs take the baseline)."""
    runs = [run_python(_BASELINE, timeout=300, env={"SLIPSTREAM_NO_AVX2": off}) for off in ("", "1")]
    for run in runs:
        assert run.returncode == 0, run.stderr[-2000:]
    assert len(runs[0].stdout.split()) == 40 and runs[0].stdout == runs[1].stdout


@needs_c
@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="AVX2 is x86-64's")
def test_the_resampler_uses_avx2_exactly_when_the_cpu_has_it():
    """Whatever compiler built the extension (the wheels' zig cc has no CPU feature table), its AVX2 passes run
    where /proc/cpuinfo lists avx2, and not under SLIPSTREAM_NO_AVX2."""
    with open("/proc/cpuinfo") as info:
        has = any(line.startswith("flags") and " avx2" in line for line in info)
    probe = "from slipstream.images import _roijpeg; print(_roijpeg.RESAMPLE_AVX2)"
    for off, want in (("", has), ("1", False)):
        run = run_python(probe, timeout=120, env={"SLIPSTREAM_NO_AVX2": off})
        assert run.returncode == 0, run.stderr[-2000:]
        assert run.stdout.strip() == str(int(want)), (off, run.stdout)
