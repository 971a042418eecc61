"""images.device.hostfield through the loaders: grayscale, ToRGB, PNG, CMYK and progressive JPEGs, crops larger than the
image, each against the CPU pipeline (device="cpu")."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gpudata import N_IMAGES, data_fixture  # noqa: E402, F401 - the fixture ``data``
from packed import photo_like  # noqa: E402

import slipstream as ss  # noqa: E402
from slipstream import fields as F  # noqa: E402
from slipstream import ops  # noqa: E402

N = N_IMAGES
PIPE = [ops.RandomResizedCrop(16), ops.RandomHorizontalFlip()]



# -- host side ----------------------------------------------------------------------------------------


def _pair(path, pipe, batch_size=4, **options):
    """(CPU-mapped batches, device-mapped batches) of the same loader settings."""
    cpu = [b for b in ss.DataLoader(ss.open(path).map(image=pipe), batch_size=batch_size, seed=3, shuffle=True)]
    dev = [b for b in ss.DataLoader(ss.open(path).map(image=pipe, device="cpu", **options), batch_size=batch_size, seed=3, shuffle=True)]
    return cpu, dev


def _close(cpu, dev, most=1):
    assert len(cpu) == len(dev)
    for a, b in zip(cpu, dev):
        np.testing.assert_array_equal(a["label"], b["label"])
        x, y = np.asarray(a["image"]), b["image"].numpy()
        assert x.shape == y.shape and x.dtype == y.dtype, (x.shape, y.shape, x.dtype, y.dtype)
        assert int(np.abs(x.astype(int) - y.astype(int)).max()) <= most


@pytest.mark.parametrize("key", ["gray_png", "gray_jpeg"])
@pytest.mark.parametrize("share", [0.0, 0.5, 1.0])
def test_gray_images_with_to_rgb_match_the_cpu_pipeline(data, key, share):
    pipe = [ops.Decode(exact=True), ops.RandomResizedCrop(16), ops.RandomHorizontalFlip(), ops.ToRGB()]
    cpu, dev = _pair(data[key], pipe, cpu_share=share)
    assert dev[0]["image"].shape == (4, 16, 16, 3)
    _close(cpu, dev, most=0 if key == "gray_png" or share == 1.0 else 1)


@pytest.mark.parametrize("key", ["gray_png", "gray_jpeg"])
@pytest.mark.parametrize("share", [0.0, 1.0])
def test_gray_images_without_to_rgb_match_the_cpu_pipeline(data, key, share):
    pipe = [ops.Decode(exact=True), ops.RandomResizedCrop(16)]
    cpu, dev = _pair(data[key], pipe, cpu_share=share)
    _close(cpu, dev, most=0 if key == "gray_png" or share == 1.0 else 1)


@pytest.mark.parametrize("share", [0.0, 0.5, 1.0])
def test_mixed_gray_and_rgb_jpegs_with_to_rgb(data, share):
    pipe = [ops.Decode(exact=True), ops.RandomResizedCrop(16), ops.ToRGB(), ops.ToCHW()]
    cpu, dev = _pair(data["mixed_jpeg"], pipe, cpu_share=share)
    _close(cpu, dev, most=0 if share == 1.0 else 1)


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_all_png_with_any_cpu_share_equals_the_cpu_pipeline(data, share):
    pipe = [ops.RandomResizedCrop(16), ops.RandomHorizontalFlip(), ops.Normalize((0.5, 0.4, 0.3), (0.2, 0.25, 0.3)), ops.ToCHW()]
    cpu, dev = _pair(data["png"], pipe, cpu_share=share)
    for a, b in zip(cpu, dev):
        assert b["image"].shape == a["image"].shape and b["image"].dtype == torch.float32
        assert float(np.abs(np.asarray(a["image"]) - b["image"].numpy()).max()) < 1e-5


def test_center_crop_larger_than_the_image_behaves_as_the_cpu_pipeline(data):
    pipe = [ops.CenterCrop(100)]
    try:
        cpu = list(ss.DataLoader(ss.open(data["jpeg"]).map(image=pipe), batch_size=4))
        cpu_error = None
    except Exception as exc:  # noqa: BLE001
        cpu, cpu_error = None, exc
    try:
        dev = list(ss.DataLoader(ss.open(data["jpeg"]).map(image=pipe, device="cpu"), batch_size=4))
        dev_error = None
    except Exception as exc:  # noqa: BLE001
        dev, dev_error = None, exc
    print("cpu:", type(cpu_error).__name__, cpu_error, "| device:", type(dev_error).__name__, dev_error)
    assert type(cpu_error) is type(dev_error)
    if cpu is not None:
        _close(cpu, dev)


def test_progressive_and_restart_jpegs_kept_as_bytes(data):
    import io

    from PIL import Image as PILImage

    root = data["root"]
    rng = np.random.default_rng(3)
    samples = []
    for k in range(8):
        buf = io.BytesIO()
        pixels = photo_like(int(rng.integers(30, 60)), int(rng.integers(30, 60)), seed=k)
        PILImage.fromarray(pixels).save(buf, "JPEG", quality=85, progressive=k % 2 == 0, subsampling=k % 3)
        samples.append({"image": buf.getvalue(), "label": k})
    path = ss.write(root / "prog.arrow", samples, {"image": F.Image(codec="jpeg"), "label": F.Int()}, progress=False)
    ds = ss.open(path)
    assert all(ds.encoded(k, "image")[1].tobytes() == samples[k]["image"] for k in range(8))  # kept as they are
    pipe = [ops.Decode(exact=True), ops.RandomResizedCrop(16), ops.RandomHorizontalFlip()]
    cpu, dev = _pair(path, pipe, batch_size=3, cpu_share=0.5)
    _close(cpu, dev)


def test_cmyk_jpeg_rows_go_to_the_cpu_and_decode_as_rgb():
    import io

    from PIL import Image as PILImage

    from slipstream.images.device.hostfield import StagedField

    buf = io.BytesIO()
    PILImage.new("CMYK", (40, 30), (10, 200, 30, 5)).save(buf, "JPEG", quality=95)
    raw = np.frombuffer(buf.getvalue(), np.uint8)

    class Fake:
        fields = {"image": None}

        def encoded(self, index, name, check=True):
            return "jpeg", raw, (30, 40, 3)

        def source_of(self, index):
            return "fake"

    from slipstream.core.draws import Draws

    field = StagedField(Fake(), "image", [ops.CenterCrop(20)], cpu_share=0.0)
    rows = field.rows([0, 1], Draws(1, 0, [0, 1]))
    assert all(not row.on_device for row in rows)
    expected = np.asarray(PILImage.open(io.BytesIO(buf.getvalue())).convert("RGB"))[5:25, 10:30]
    assert rows[0].pixels.shape == (20, 20, 3)
    assert int(np.abs(rows[0].pixels.astype(int) - expected.astype(int)).max()) <= 2
