"""The pixel ops on the device stage, run here on CPU tensors: ``images.device.pixelsteps.run_steps``
against the NumPy executor (``kernels.pixel_steps.run``) bit for bit, on random programs and on
torchvision's fixture cases, and the device stage with pixel ops against the CPU loader: the same
batch when both resample on the CPU (``cpu_share=1.0``), and the CPU path's pixel ops, formats and
erasing on the device stage's own geometry output when the device decodes and resamples."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from packed import photo_like  # noqa: E402
from tv2cases import CASES, DATA, case_steps  # noqa: E402

import slipstream as ss  # noqa: E402
from slipstream import fields as F  # noqa: E402
from slipstream import ops  # noqa: E402
from slipstream.core.draws import Draws  # noqa: E402
from slipstream.gpu import DeviceStage, HostReader  # noqa: E402
from slipstream.images.device.pixelstage import erase  # noqa: E402
from slipstream.images.device.pixelsteps import LAYOUT, run_steps  # noqa: E402
from slipstream.images.imageops import Normalize, ToCHW  # noqa: E402
from slipstream.images.kernels import pixel_steps as ps  # noqa: E402
from slipstream.images.pipeline import Pipeline  # noqa: E402
from slipstream.images.pixelops import PixelOp, inverse_affine_matrix  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)


def _device_run(images: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """``run_steps`` on uint8 (n, H, W, C) images, as NumPy (n, H, W, C)."""
    assert LAYOUT == "NCHW"
    batch = torch.from_numpy(images.copy()).permute(0, 3, 1, 2).contiguous()  # a copy: the steps write in place
    return run_steps(batch, steps).permute(0, 2, 3, 1).numpy()


def _numpy_run(images: np.ndarray, steps: np.ndarray) -> np.ndarray:
    return np.stack([ps.run(image.copy(), program) for image, program in zip(images, steps)])


# ------------------------------------------------------------------------------- random programs


def _row(code: int, rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """One step of ``code`` with parameters spread over (and past) what the ops compile."""
    row = np.zeros(ps.WORDS)
    row[0] = code
    if code in (ps.BRIGHTNESS, ps.CONTRAST, ps.SATURATION, ps.SHARPNESS):
        row[1] = rng.choice([0.0, 1.0, rng.uniform(0, 2), rng.uniform(0, 8), 0.1 + 0.2])
    elif code == ps.HUE:
        row[1] = rng.choice([-0.5, 0.5, 0.0, rng.uniform(-0.5, 0.5)])
    elif code == ps.POSTERIZE:
        row[1] = rng.choice([rng.integers(0, 10), rng.uniform(0, 9)])
    elif code == ps.SOLARIZE:
        row[1] = rng.choice([0.0, 255.0, 256.0, rng.uniform(0, 256), float(rng.integers(0, 256))])
    elif code == ps.BLUR:
        kx, ky = (int(rng.choice([k for k in (1, 3, 5, 7) if k // 2 < side] or [1])) for side in (width, height))
        row[1:5] = [kx, ky, rng.uniform(0.1, 3.0), rng.uniform(0.1, 3.0)]
    elif code == ps.AFFINE:
        matrix = inverse_affine_matrix(
            height,
            width,
            angle=rng.uniform(-180, 180),
            translate=(int(rng.integers(-8, 9)), int(rng.integers(-8, 9))),
            scale=rng.uniform(0.5, 1.5),
            shear=(rng.uniform(-30, 30), rng.uniform(-30, 30)),
            center=None if rng.random() < 0.5 else (rng.uniform(0, width), rng.uniform(0, height)),
        )
        row[1:7] = matrix
        row[7], row[8] = rng.integers(0, 2), rng.integers(0, 2)
        row[9:12] = rng.choice([rng.uniform(-20, 280, 3), rng.integers(0, 256, 3).astype(float)])
    elif code == ps.ROT90:
        row[1] = rng.integers(-5, 6) if height == width else 2 * rng.integers(-2, 3)
    elif code == ps.ERASE:
        row[1:5] = [
            rng.integers(-3, height + 2),
            rng.integers(-3, width + 2),
            rng.integers(-1, height + 3),
            rng.integers(-1, width + 3),
        ]
        row[5:8] = rng.integers(0, 256, 3)
    return row


def _images(rng: np.random.Generator, n: int, height: int, width: int, channels: int) -> np.ndarray:
    """Random, coarsely quantized, flat and photo-like images (the ops' edge cases: flat planes,
    grays, few levels)."""
    out = np.empty((n, height, width, channels), np.uint8)
    for i in range(n):
        kind = rng.integers(0, 4)
        if kind == 0:
            out[i] = rng.integers(0, 256, (height, width, channels))
        elif kind == 1:
            out[i] = rng.integers(0, 4, (height, width, channels)) * 85
        elif kind == 2:
            out[i] = rng.integers(0, 256, (1, 1, channels))
        else:
            photo = photo_like(height, width, seed=int(rng.integers(0, 1000)))
            out[i] = photo[:, :, :channels] if channels == 3 else photo[:, :, 1:2]
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(1, 6),
    height=st.integers(1, 20),
    width=st.integers(1, 20),
    channels=st.sampled_from([3, 3, 1]),
    codes=st.lists(st.lists(st.integers(0, len(ps.NAMES) - 1), min_size=1, max_size=4), min_size=1, max_size=6),
)
def test_random_programs_give_the_numpy_executors_bits(seed, n, height, width, channels, codes):
    rng = np.random.default_rng(seed)
    steps = np.zeros((n, len(codes), ps.WORDS))
    for s, choices in enumerate(codes):
        for i in range(n):  # each sample one of this position's opcodes: groups of several samples and opcodes
            steps[i, s] = _row(int(rng.choice(choices)), rng, height, width)
    images = _images(rng, n, height, width, channels)
    expected = _numpy_run(images, steps)
    got = _device_run(images, steps)
    assert got.dtype == np.uint8 and got.shape == expected.shape
    if not np.array_equal(got, expected):
        i = int(np.argmax((got != expected).reshape(n, -1).any(axis=1)))
        pytest.fail(
            f"sample {i} differs on {int((got[i] != expected[i]).sum())} values: steps {[ps.NAMES[int(c)] for c in steps[i, :, 0]]}"
        )


@pytest.mark.parametrize("size", [(24, 24), (23, 31), (3, 3), (2, 5), (1, 1)])
@pytest.mark.parametrize("channels", [3, 1])
def test_every_opcode_on_a_batch_of_its_own_gives_the_numpy_executors_bits(size, channels):
    height, width = size
    rng = np.random.default_rng(height * 100 + width + channels)
    for code in range(len(ps.NAMES)):
        n = 7
        steps = np.stack([np.stack([_row(code, rng, height, width) for _ in range(3)]) for _ in range(n)])
        images = _images(rng, n, height, width, channels)
        np.testing.assert_array_equal(_device_run(images, steps), _numpy_run(images, steps), err_msg=ps.NAMES[code])


def test_the_policies_and_jitter_programs_give_the_numpy_executors_bits():
    """What the ops compile (RandAugment both interpolations, TrivialAugmentWide, ColorJitter,
    the Random* ops, GaussianBlur, RandomRotation, RandomErasing before Normalize)."""
    height, width = 32, 32
    rng = np.random.default_rng(7)
    images = np.stack([photo_like(height, width, seed=k) for k in range(48)])
    pipeline = Pipeline(
        [
            ops.RandAugment(2, 9, interpolation="bilinear", fill=(10, 20, 30)),
            ops.RandAugment(3, 15),
            ops.TrivialAugmentWide(),
            ops.ColorJitter(0.4, 0.4, 0.4, 0.3),
            ops.RandomSolarize(128),
            ops.RandomPosterize(3),
            ops.RandomEqualize(),
            ops.RandomAutocontrast(),
            ops.RandomInvert(),
            ops.RandomAdjustSharpness(2.0),
            ops.RandomGrayscale(0.3),
            ops.GaussianBlur(5),
            ops.RandomRotation(40, interpolation="bilinear"),
            ops.RandomErasing(0.7, value=(1, 2, 3)),
        ]
    )
    for epoch in range(3):
        steps = pipeline.pixel_program(Draws(int(rng.integers(0, 1000)), epoch, np.arange(48)), [height] * 48, [width] * 48)
        np.testing.assert_array_equal(_device_run(images, steps), _numpy_run(images, steps))


# ------------------------------------------------------------------------------- torchvision's cases

def _case_row(case: dict) -> np.ndarray:
    """The step of a fixture case's torchvision call (a NONE row for its copying fast path)."""
    steps = case_steps(case)
    return steps[0] if len(steps) else np.zeros(ps.WORDS)


@pytest.mark.parametrize("image", sorted({case["image"] for case in CASES}))
def test_torchvisions_cases_in_one_batch_give_the_numpy_executors_bits_and_torchvisions_pixels(image):
    """Every fixture case of one image as one sample of one batch: the NumPy executor's bits, and
    torchvision's pixels within the NumPy executor's own tolerance (0; 1 level for the blur and
    BILINEAR geometry, ``tests/images/kernels/test_pixel_steps.py``)."""
    cases = [case for case in CASES if case["image"] == image]
    source = DATA[image]
    steps = np.stack([_case_row(case) for case in cases])[:, None]
    images = np.repeat(source[None], len(cases), axis=0)
    got = _device_run(images, steps)
    np.testing.assert_array_equal(got, _numpy_run(images, steps))
    for k, case in enumerate(cases):
        expected = DATA[f"case/{case['name']}/{image}"]
        out = got[k][:, :, :1] if case["fn"] == "rgb_to_grayscale" and case["params"]["num_output_channels"] == 1 else got[k]
        limit = 1 if case["fn"] == "gaussian_blur" or case["params"].get("interpolation") == "bilinear" else 0
        assert int(np.abs(out.astype(np.int64) - expected).max()) <= limit, case["name"]


# ------------------------------------------------------------------------------- the executor's contract


def test_the_batch_is_written_in_place_and_rows_of_none_leave_samples_alone():
    images = np.stack([DATA["img_b"], 255 - DATA["img_b"]])
    steps = np.zeros((2, 2, ps.WORDS))
    steps[0, 0, 0:2] = [ps.BRIGHTNESS, 1.5]
    steps[0, 1, 0] = ps.INVERT
    batch = torch.from_numpy(images.copy()).permute(0, 3, 1, 2).contiguous()
    out = run_steps(batch, steps)
    assert out is batch
    np.testing.assert_array_equal(out[1].permute(1, 2, 0).numpy(), images[1])
    np.testing.assert_array_equal(out[0].permute(1, 2, 0).numpy(), ps.run(images[0].copy(), steps[0]))
    assert run_steps(batch, np.zeros((2, 0, ps.WORDS))) is batch
    assert run_steps(batch, torch.zeros((2, 1, ps.WORDS), dtype=torch.float64)) is batch  # a CPU tensor of steps


def test_bad_steps_are_refused_before_any_pixel_changes_naming_the_step_and_sample():
    images = torch.full((3, 3, 4, 5), 100, dtype=torch.uint8)
    steps = np.zeros((3, 2, ps.WORDS))
    steps[:, 0, 0:2] = [ps.BRIGHTNESS, 2.0]

    def refused(code_row, sample, match):
        bad = steps.copy()
        bad[sample, 1, : len(code_row)] = code_row
        with pytest.raises(ValueError, match=match):
            run_steps(images, bad)
        assert bool((images == 100).all())  # the first step did not run

    refused([99], 2, r"pixel step 1 \(99\) of image 2 of the batch: unknown opcode 99")
    refused([ps.BLUR, 11, 3, 1.0, 1.0], 1, r"pixel step 1 \(BLUR\) of image 1 of the batch: a 11x3 blur kernel .* got 4x5")
    refused(
        [ps.ROT90, 3],
        0,
        r"pixel step 1 \(ROT90\) of image 0 of the batch: a quarter turn keeps the size of square images only, got 4x5",
    )
    refused([ps.POSTERIZE, -2.5], 0, r"pixel step 1 \(POSTERIZE\) of image 0 of the batch: posterize keeps 0..8 bits, got -2")
    refused(
        [ps.NONE, np.nan],
        1,
        r"pixel step 1 \(NONE\) of image 1 of the batch: step words must be finite numbers, got nan in column 1",
    )
    with pytest.raises(ps.StepError) as raised:
        run_steps(images, np.where(np.arange(3)[:, None, None] == 1, np.inf, steps))
    assert raised.value.sample == 1 and isinstance(raised.value, ValueError)
    with pytest.raises(ValueError, match=r"uint8 \(N, C, H, W\) tensor with C 1 or 3, got torch.float32"):
        run_steps(images.float(), steps)
    with pytest.raises(ValueError, match=r"uint8 \(N, C, H, W\) tensor with C 1 or 3, got torch.uint8 of shape \(3, 4, 5, 3\)"):
        run_steps(images.permute(0, 2, 3, 1), steps)
    with pytest.raises(ValueError, match=r"steps must be float64 \(3, steps, 12\) for 3 images, got shape \(2, 2, 12\)"):
        run_steps(images, steps[:2])


def test_erase_sets_each_box_in_every_layout_with_the_value_cast_to_the_dtype():
    rng = np.random.default_rng(1)
    base = torch.from_numpy(rng.normal(size=(3, 3, 6, 7)).astype(np.float32))
    boxes = np.array([[1, 2, 3, 4], [0, 0, -1, 0], [5, 6, 1, 1]])
    values = (0.1, -2.5, 1e9)
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        expected = base.to(dtype).clone()
        if dtype == torch.bfloat16:
            cast = torch.tensor(values, dtype=torch.float64).to(dtype)
        else:
            with np.errstate(over="ignore"):  # 1e9 is inf in float16
                cast = torch.from_numpy(np.array(values).astype({torch.float32: np.float32, torch.float16: np.float16}[dtype]))
        expected[0, :, 1:4, 2:6] = cast.view(3, 1, 1)
        expected[2, :, 5, 6] = expected[0, :, 1, 2]
        for layout in ("NCHW", "channels_last", "NHWC"):
            out = base.to(dtype).clone()
            out = (
                out.permute(0, 2, 3, 1).contiguous()
                if layout == "NHWC"
                else out.contiguous(memory_format=torch.channels_last)
                if layout == "channels_last"
                else out
            )
            assert erase(out, boxes, values, layout) is out
            got = out.permute(0, 3, 1, 2) if layout == "NHWC" else out
            assert torch.equal(got, expected), (dtype, layout)
    uint8 = torch.zeros((1, 1, 4, 4), dtype=torch.uint8)
    erase(uint8, [[0, 0, 2, 2]], (12.7, 0, 0), "NCHW")  # a 1-channel batch takes the first value, truncated as NumPy casts
    assert uint8[0, 0, :2, :2].eq(12).all() and int(uint8.sum()) == 48
    with pytest.raises(ValueError, match="value must be in 0..255"):
        erase(uint8, [[0, 0, 2, 2]], (300, 0, 0), "NCHW")


# ------------------------------------------------------------------------------- the device stage

RECIPE = [
    ops.RandomResizedCrop(24),
    ops.RandomHorizontalFlip(),
    ops.RandAugment(2, 9, interpolation="bilinear"),
    ops.ColorJitter(0.4, 0.4, 0.4),
    ops.Normalize(MEAN, STD),
    ops.ToCHW(),
    ops.RandomErasing(0.5),
]
VARIANTS = {
    "recipe": RECIPE,
    "nhwc-uint8": [
        ops.CenterCrop(20, resize=26),
        ops.TrivialAugmentWide(),
        ops.RandomErasing(0.8, value=(9, 99, 199)),
        ops.RandomEqualize(),
        ops.RandomErasing(0.8, value=7),
    ],
    "chw-uint8-erasing-after": [
        ops.RandomResizedCrop(20),
        ops.RandomSolarize(100),
        ops.GaussianBlur(3),
        ops.RandomGrayscale(0.5),
        ops.ToCHW(),
        ops.RandomErasing(0.9, value=(5, 6, 7)),
    ],
    "two-erasings-after": [
        ops.RandomResizedCrop(22),
        ops.RandomRotation(30),
        ops.Normalize(MEAN, STD),
        ops.RandomErasing(0.9, value=(-1.5, 0.5, 2.0)),
        ops.RandomErasing(0.9),
    ],
}
N = 20


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    rng = np.random.default_rng(3)
    samples = [
        {"image": photo_like(int(rng.integers(30, 120)), int(rng.integers(30, 120)), seed=k), "label": k} for k in range(N)
    ]
    return ss.write(
        tmp_path_factory.mktemp("pixelops") / "jpegs.arrow",
        samples,
        {"image": F.Image(codec="jpeg", quality=90), "label": F.Int()},
        progress=False,
    )


def _batches(mapped, **kwargs) -> list[dict]:
    with ss.DataLoader(mapped, batch_size=8, shuffle=True, seed=13, **kwargs) as loader:
        return [
            {k: (v.numpy() if isinstance(v, torch.Tensor) else np.array(v)) for k, v in b.items()}
            for _ in range(2)
            for b in loader
        ]


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_with_the_cpu_resampling_every_row_the_device_stage_gives_the_cpu_loaders_batches(jpegs, name):
    """``cpu_share=1.0``: the workers resample every row as the CPU pipeline does (its crop-aware
    decode included), the device runs the steps, formats and erasing: the CPU loader's batches, bit
    for bit, over two epochs."""
    pipe = VARIANTS[name]
    device = _batches(ss.open(jpegs).map(image=pipe, device="cpu", cpu_share=1.0))
    cpu = _batches(ss.open(jpegs).map(image=pipe))
    assert len(device) == len(cpu) == 6
    for a, b in zip(device, cpu):
        np.testing.assert_array_equal(a["label"], b["label"])
        assert a["image"].dtype == b["image"].dtype and a["image"].shape == b["image"].shape
        np.testing.assert_array_equal(a["image"], b["image"])


@pytest.fixture(scope="module")
def grays(tmp_path_factory):
    rng = np.random.default_rng(4)
    samples = [
        {"image": photo_like(int(rng.integers(30, 90)), int(rng.integers(30, 90)), seed=k, channels=1), "label": k}
        for k in range(12)
    ]
    fields = {"image": F.Image(codec="jpeg", quality=90, channels=1), "label": F.Int()}
    return ss.write(tmp_path_factory.mktemp("grays") / "grays.arrow", samples, fields, progress=False)


@pytest.mark.parametrize(
    "pipe",
    [
        [
            ops.RandomResizedCrop(20),
            ops.RandAugment(2, 9),
            ops.ColorJitter(0.4, 0.4),
            ops.Normalize(MEAN, STD),
            ops.RandomErasing(0.7),
        ],
        [ops.CenterCrop(18), ops.RandomEqualize(), ops.Grayscale(3), ops.ColorJitter(0.4, 0.4, 0.4, 0.2), ops.ToCHW()],
    ],
    ids=["one-channel", "grayscale-3-of-one-channel"],
)
def test_one_channel_batches_and_a_grayscale_3_of_them_give_the_cpu_loaders_batches(grays, pipe):
    """Gray JPEGs without ToRGB: 1-channel batches; a ``Grayscale(3)`` makes three equal channels
    where the CPU pipeline makes them (when its ``channels`` says so), the later steps on those."""
    device = _batches(ss.open(grays).map(image=pipe, device="cpu", cpu_share=1.0))
    cpu = _batches(ss.open(grays).map(image=pipe))
    for a, b in zip(device, cpu):
        assert a["image"].shape == b["image"].shape and a["image"].dtype == b["image"].dtype
        np.testing.assert_array_equal(a["image"], b["image"])
    geometry = DeviceStage(ss.open(grays), "image", [op for op in pipe if not isinstance(op, (PixelOp, Normalize, ToCHW))])
    got = DeviceStage(ss.open(grays), "image", pipe)([3, 1, 4, 1, 5], 8, 1).numpy()
    np.testing.assert_array_equal(got, _cpu_pixel_path(pipe, geometry([3, 1, 4, 1, 5], 8, 1).numpy(), [3, 1, 4, 1, 5], 8, 1))


def test_process_workers_carry_the_steps_to_the_finisher(jpegs):
    mapped = ss.open(jpegs).map(image=RECIPE, device="cpu", cpu_share=0.5)
    single = _batches(mapped)
    for a, b in zip(single, _batches(mapped, workers=2, backend="process")):
        np.testing.assert_array_equal(a["label"], b["label"])
        np.testing.assert_array_equal(a["image"], b["image"])


def _cpu_pixel_path(pipe: list, geometry: np.ndarray, indices: list[int], seed: int, epoch: int) -> np.ndarray:
    """The CPU pipeline's part after its geometry (``Pipeline._run_pixel``'s order), on the uint8
    (n, H, W, C) ``geometry``: each sample's steps (NumPy executor), the formats, then the erasing."""
    pipeline = Pipeline(pipe)
    draws = Draws(seed, epoch, indices)
    n, height, width, _ = geometry.shape
    program = pipeline.pixel_program(draws, [height] * n, [width] * n)
    out = None
    for i in range(n):
        pixels, start = geometry[i].copy(), 0
        for _, op in pipeline.pixel:  # op by op, as Pipeline._run_pixel: an op may set the channel count
            pixels = ps.run(np.ascontiguousarray(pixels), program[i, start : start + op.steps])
            start += op.steps
            if op.channels == 3 and pixels.shape[2] == 1:
                pixels = np.repeat(pixels, 3, axis=2)
        if out is None:
            shape, dtype = pipeline.output(pixels.shape[2], height, width)
            out = np.empty((n, *shape), dtype)
        if pipeline.normalize is not None:
            scale, offset = pipeline.normalize.coefficients(pixels.shape[2])
            pixels = (pixels.astype(np.float32) * scale + offset).astype(dtype)
        out[i] = pixels.transpose(2, 0, 1) if pipeline.chw else pixels
    for op, boxes in pipeline.erase_boxes(draws, [height] * n, [width] * n):
        op.erase(out, boxes, pipeline.chw)
    return out


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_on_the_devices_own_geometry_the_device_stage_gives_the_cpu_paths_pixel_ops(jpegs, name):
    """The device decodes and resamples (its geometry is the CPU's up to a level a pixel,
    ``test_gpu_device.py``); on that uint8 output, its steps, formats and erasing are the CPU
    path's bit for bit, for DeviceStage and for a loader over the device view."""
    pipe = VARIANTS[name]
    geometry_ops = [op for op in pipe if not isinstance(op, (PixelOp, Normalize, ToCHW))]
    indices = [3, 0, 17, 9, 12, 5]
    stage = DeviceStage(ss.open(jpegs), "image", pipe)
    geometry = DeviceStage(ss.open(jpegs), "image", geometry_ops)
    for seed, epoch in ((0, 0), (5, 3)):
        got = stage(indices, seed, epoch).numpy()
        expected = _cpu_pixel_path(pipe, geometry(indices, seed, epoch).numpy(), indices, seed, epoch)
        assert got.dtype == expected.dtype and got.shape == expected.shape
        np.testing.assert_array_equal(got, expected)
    for batch, epoch in zip(_batches(ss.open(jpegs).map(image=pipe, device="cpu")), (0, 0, 0, 1, 1, 1)):
        labels = [int(v) for v in batch["label"]]
        np.testing.assert_array_equal(batch["image"], stage(labels, 13, epoch).numpy())


def test_against_the_cpu_loader_decoding_at_full_size_the_pixel_ops_keep_the_geometrys_small_differences(jpegs):
    """The device's geometry is a level off on some pixels; pixel ops can amplify a level into many
    on a pixel (a solarize threshold, a posterize bit, an equalize bin), but not much on an image."""
    pipe = [
        ops.Decode(exact=True),
        ops.RandomResizedCrop(24),
        ops.RandomHorizontalFlip(),
        ops.RandAugment(2, 9, interpolation="bilinear"),
        ops.ColorJitter(0.4, 0.4, 0.4),
    ]
    with ss.DataLoader(ss.open(jpegs).map(image=pipe, device="cpu"), batch_size=N, seed=3) as loader:
        device = next(iter(loader))["image"].numpy().astype(np.float64)
    with ss.DataLoader(ss.open(jpegs).map(image=pipe), batch_size=N, seed=3) as loader:
        cpu = next(iter(loader))["image"].astype(np.float64)
    per_image = np.abs(device - cpu).reshape(N, -1).mean(axis=1)
    assert per_image.max() <= 2.0, per_image.max()  # measured: 0.60 levels at worst on 64 such images (one pixel 94 levels off)


def test_other_dtypes_and_layouts_are_the_float32_batch_cast_and_laid_out(jpegs):
    indices = [1, 2, 3, 4]
    plain = DeviceStage(ss.open(jpegs), "image", RECIPE)(indices, 2, 0)
    for dtype, layout in (("bfloat16", "channels_last"), ("float16", "NHWC"), ("float32", "NCHW")):
        got = DeviceStage(ss.open(jpegs), "image", RECIPE, dtype=dtype, layout=layout)(indices, 2, 0)
        assert got.dtype == getattr(torch, dtype)
        if layout == "channels_last":
            assert got.is_contiguous(memory_format=torch.channels_last)
        nchw = got.permute(0, 3, 1, 2) if layout == "NHWC" else got
        expected = plain.to(getattr(torch, dtype))
        # the erased boxes hold RandomErasing's value cast to the dtype, as the cast of the float32 value
        assert torch.equal(nchw, expected), (dtype, layout)


def test_the_host_side_compiles_the_cpu_pipelines_steps_and_boxes(jpegs):
    indices = [4, 8, 15, 16]
    batch = HostReader(ss.open(jpegs), "image", RECIPE).read(indices, 21, 2)
    pipeline = Pipeline(RECIPE)
    draws = Draws(21, 2, indices)
    np.testing.assert_array_equal(batch.steps, pipeline.pixel_program(draws, [24] * 4, [24] * 4))
    assert batch.steps.shape == (4, 6, ps.WORDS)  # RandAugment's 2, ColorJitter's 4
    ((_, boxes),) = pipeline.erase_boxes(draws, [24] * 4, [24] * 4)
    np.testing.assert_array_equal(batch.erase, boxes[None])
    rows = ss.open(jpegs).map(image=RECIPE, device="cpu").staged["image"].rows(indices, draws)
    for k, row in enumerate(rows):
        np.testing.assert_array_equal(row.steps, batch.steps[k])
        np.testing.assert_array_equal(row.erase, batch.erase[:, k])
    plain = HostReader(ss.open(jpegs), "image", RECIPE[:2]).read(indices, 21, 2)
    assert plain.steps.shape == (4, 0, ps.WORDS) and plain.erase.shape == (0, 4, 4)


def test_a_step_the_output_cannot_take_names_the_sample_and_field(jpegs):
    pipe = [ops.CenterCrop(6), ops.GaussianBlur(15)]
    with pytest.raises(
        ps.StepError, match=r"sample 7, field 'image': pixel step 0 \(BLUR\) of image 0 of the batch: a 15x15 blur kernel"
    ):
        DeviceStage(ss.open(jpegs), "image", pipe)([7, 2], 0, 0)
    with pytest.raises(ps.StepError, match=r"sample 0, field 'image': pixel step 0 \(BLUR\)"):
        next(iter(ss.DataLoader(ss.open(jpegs).map(image=pipe, device="cpu"), batch_size=4)))


def test_a_one_channel_grayscale_is_refused_by_the_device_stage(jpegs):
    with pytest.raises(ValueError, match=r"does not run ops.Grayscale\(num_output_channels=1\)"):
        ss.open(jpegs).map(image=[ops.CenterCrop(20), ops.Grayscale()], device="cpu")
    with pytest.raises(ValueError, match=r"ops.Grayscale\(num_output_channels=1\)"):
        DeviceStage(ss.open(jpegs), "image", [ops.CenterCrop(20), ops.Grayscale()])
    three = DeviceStage(ss.open(jpegs), "image", [ops.CenterCrop(20), ops.Grayscale(3)])([0, 1], 0, 0)
    assert three.shape == (2, 20, 20, 3) and bool((three[..., 0] == three[..., 2]).all())


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@CUDA
def test_on_cuda_the_executor_gives_the_cpu_tensors_bits():  # pragma: no cover - GPU only
    rng = np.random.default_rng(11)
    for height, width in ((32, 32), (23, 37)):
        for code in range(len(ps.NAMES)):
            steps = np.stack([np.stack([_row(code, rng, height, width) for _ in range(3)]) for _ in range(16)])
            images = torch.from_numpy(_images(rng, 16, height, width, 3)).permute(0, 3, 1, 2).contiguous()
            on_cpu = run_steps(images.clone(), steps)
            on_gpu = run_steps(images.cuda(), steps).cpu()
            assert torch.equal(on_cpu, on_gpu), ps.NAMES[code]
