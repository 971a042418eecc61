"""slipstream.gpu.decode_batch: full-size CHW decode of a batch, on CPU here (nvJPEG's batching and
its one-by-one retry are driven by a stand-in decoder; the CUDA check skips without a GPU)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from packed import photo_like  # noqa: E402

from slipstream import ops  # noqa: E402
from slipstream.gpu import decode_batch, header_size  # noqa: E402
from slipstream.images.device import decode as gpu_decode  # noqa: E402
from slipstream.images.encoded import codecs  # noqa: E402
from slipstream.images.pipeline import ImageDecodeError, ImageSource  # noqa: E402


def _chw(image: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(image.transpose(2, 0, 1))


@pytest.fixture(scope="module")
def mixed():
    """A JPEG, a PNG, a QOI, raw pixels and a grayscale JPEG: (codec, bytes, stored shape, pixels)."""
    rgb = [photo_like(37, 53, seed=1), photo_like(20, 31, seed=2), photo_like(9, 14, seed=3), photo_like(12, 7, seed=4)]
    gray = photo_like(25, 18, seed=5, channels=1)
    items = [("jpeg", rgb[0]), ("png", rgb[1]), ("qoi", rgb[2]), ("raw", rgb[3]), ("jpeg", gray)]
    out = []
    for codec, image in items:
        data = codecs.encode(codec, image, 90)
        out.append((codec, data, image.shape, codecs.decode(codec, data, image.shape)))
    return out


def test_a_mixed_batch_decodes_at_full_size_to_the_cpu_decoders_pixels(mixed):
    images = decode_batch([d for _, d, _, _ in mixed], "cpu", [c for c, _, _, _ in mixed], [s for _, _, s, _ in mixed])
    assert [tuple(t.shape) for t in images] == [(s[2], s[0], s[1]) for _, _, s, _ in mixed]
    for tensor, (_, _, _, pixels) in zip(images, mixed):
        assert tensor.dtype == torch.uint8 and tensor.is_contiguous() and tensor.device.type == "cpu"
        np.testing.assert_array_equal(tensor.numpy(), _chw(pixels))


def test_codecs_are_sniffed_and_channels_converted(mixed):
    encoded = [(c, d, s, p) for c, d, s, p in mixed if c != "raw"]
    own = decode_batch([d for _, d, _, _ in encoded])
    assert [t.shape[0] for t in own] == [3, 3, 3, 1]  # each image's own
    rgb = decode_batch([d for _, d, _, _ in encoded], channels=3)
    assert all(t.shape[0] == 3 for t in rgb)
    gray = rgb[-1].numpy()
    assert (gray[0] == gray[1]).all() and (gray[1] == gray[2]).all()  # libjpeg's gray -> RGB: R = G = B
    np.testing.assert_array_equal(gray[0], encoded[-1][3][:, :, 0])
    luma = decode_batch([encoded[0][1]], channels=1)[0]
    assert luma.shape == (1, 37, 53)


def test_the_exact_option_and_the_fast_dct_decode_full_size(mixed):
    codec, data, shape, pixels = mixed[0]
    fast = decode_batch([data], codecs=[codec], shapes=[shape], fast=True)[0].numpy()
    assert fast.shape == _chw(pixels).shape
    assert np.abs(fast.astype(int) - _chw(pixels)).mean() < 2  # libjpeg's fast DCT: a little off
    window = ops.Windows([shape[0]], [shape[1]])
    exact, _ = ImageSource(codec, data, shape).decode(window, ops.Decode(exact=True))
    np.testing.assert_array_equal(decode_batch([data])[0].numpy(), _chw(exact))


def test_a_corrupt_jpeg_is_named_by_its_index_with_the_cpu_paths_wording(mixed):
    good = mixed[0][1]
    bad = good[: len(good) // 2]  # truncated
    with pytest.raises(ImageDecodeError) as cpu:
        ImageSource("jpeg", bad, mixed[0][2]).decode(ops.Windows([37], [53]), ops.Decode(exact=True))
    with pytest.raises(gpu_decode.SampleDecodeError, match=r"^sample 11: cannot decode jpeg image") as batch:
        decode_batch([good, bad, good], indices=[10, 11, 12])
    assert batch.value.index == 11 and str(cpu.value).startswith("cannot decode jpeg image")
    assert isinstance(batch.value, ValueError)
    with pytest.raises(gpu_decode.SampleDecodeError, match="sample 1: unknown image codec"):
        decode_batch([good, b"not an image"])
    with pytest.raises(gpu_decode.SampleDecodeError, match="sample 0: .*raw pixels need their shape"):
        decode_batch([b"\x00" * 12], codecs=["raw"])
    with pytest.raises(ValueError, match="one entry per image"):
        decode_batch([good], codecs=["jpeg", "png"])


def _stand_in(refused: bytes):
    """A decode_jpeg like torchvision's (list in, list out; RuntimeError when any fails), on CPU."""
    calls = []

    class Mode:
        GRAY, RGB, UNCHANGED = 1, 3, None

    def decode_jpeg(inputs, mode=None, device=None):
        batch = isinstance(inputs, list)
        calls.append(len(inputs) if batch else 1)
        out = []
        for tensor in inputs if batch else [inputs]:
            data = tensor.numpy().tobytes()
            if data == refused:
                raise RuntimeError("nvjpeg: unsupported")
            try:
                out.append(torch.from_numpy(_chw(codecs.decode("jpeg", data, None, channels=mode))))
            except ValueError as exc:
                raise RuntimeError(str(exc)) from exc
        return out if batch else out[0]

    return (decode_jpeg, Mode), calls


def test_a_failed_batch_decode_retries_one_by_one_and_refused_jpegs_go_to_the_cpu(monkeypatch, mixed):
    jpeg, gray = mixed[0], mixed[4]
    other = codecs.encode("jpeg", photo_like(16, 16, seed=9), 90)
    decoder, calls = _stand_in(refused=other)
    monkeypatch.setattr(gpu_decode, "nvjpeg_available", lambda device: True)
    monkeypatch.setattr(gpu_decode, "_torchvision_decode", lambda: decoder)
    data = [jpeg[1], other, mixed[1][1], jpeg[1]]
    images = decode_batch(data, channels=3)
    assert calls == [3, 1, 1, 1]  # the batch of three JPEGs failed on ``other``: one by one
    np.testing.assert_array_equal(images[1].numpy(), _chw(codecs.decode("jpeg", other, None)))  # by the CPU decoder
    np.testing.assert_array_equal(images[0].numpy(), _chw(jpeg[3]))
    calls.clear()
    decode_batch([jpeg[1], gray[1], jpeg[1]])  # own channels: one batch per channel count
    assert sorted(calls) == [1, 2]
    bad = jpeg[1][: len(jpeg[1]) // 2]
    with pytest.raises(gpu_decode.SampleDecodeError, match="sample 7: cannot decode jpeg image"):
        decode_batch([jpeg[1], bad], indices=[6, 7])


def test_header_sizes_of_every_codec(mixed):
    for codec, data, shape, _ in mixed:
        assert header_size(codec, data) == (None if codec == "raw" else shape[:2])
    assert header_size("jpeg", b"\xff\xd8\xff garbage") is None
    assert header_size("png", b"\x89PNG\r\n\x1a\n") is None


@pytest.mark.skipif(not gpu_decode.nvjpeg_available("cuda"), reason="needs CUDA and torchvision (nvJPEG)")
def test_nvjpeg_matches_the_cpu_decoder_closely(mixed):  # pragma: no cover - GPU only
    data = [d for c, d, _, _ in mixed if c == "jpeg"]
    gpu = decode_batch(data, "cuda", channels=3)
    cpu = decode_batch(data, "cpu", channels=3)
    for g, c in zip(gpu, cpu):
        assert g.device.type == "cuda" and g.shape == c.shape
        assert (g.cpu().int() - c.int()).abs().float().mean() < 2  # IDCT / upsampling differences


def test_header_size_of_truncated_or_zero_size_headers_is_none(mixed):
    by_codec = {codec: bytes(memoryview(data).cast("B")) if not isinstance(data, bytes) else data for codec, data, _, _ in mixed}
    png, qoi = by_codec["png"], by_codec["qoi"]
    for cut in (0, 9, 16, 20, 23):
        assert header_size("png", png[:cut]) is None, cut
    for cut in (0, 4, 9, 12, 13):
        assert header_size("qoi", qoi[:cut]) is None, cut
    assert header_size("png", png[:16] + bytes(4) + png[20:]) is None  # width 0
    assert header_size("qoi", qoi[:8] + bytes(4) + qoi[12:]) is None  # height 0
    assert header_size("png", png[:24]) == header_size("png", png) and header_size("qoi", qoi[:14]) == header_size("qoi", qoi)


def test_the_fast_path_checks_the_stored_shape_before_sizing_a_buffer(monkeypatch, mixed):
    """A damaged JPEG header (a huge SOF) must never size the decode buffer: the stored shape is checked first."""
    codec, data, shape, _ = next(item for item in mixed if item[0] == "jpeg")
    data = bytes(memoryview(data).cast("B")) if not isinstance(data, bytes) else data
    calls = []
    real = gpu_decode._imaging.decode_jpeg_scaled
    monkeypatch.setattr(gpu_decode._imaging, "decode_jpeg_scaled", lambda *args: calls.append(args[2].shape) or real(*args))
    wrong = (shape[0] + 1, shape[1], shape[2])
    with pytest.raises(gpu_decode.SampleDecodeError, match=r"sample 0: .*stored shape"):
        decode_batch([data], codecs=["jpeg"], shapes=[wrong], fast=True)
    assert calls == []
    assert decode_batch([data], codecs=["jpeg"], shapes=[shape], fast=True)[0].shape[1:] == shape[:2] and len(calls) == 1


@pytest.mark.parametrize("version, usable", [("0.18.1", False), ("0.19.0", True), ("0.26.0+cu130", True), ("nightly", False)])
def test_nvjpeg_needs_a_torchvision_that_decodes_lists(monkeypatch, version, usable):
    import sys
    import types

    vision, io = types.ModuleType("torchvision"), types.ModuleType("torchvision.io")
    vision.__version__, vision.io = version, io
    io.decode_jpeg, io.ImageReadMode = object(), object()
    monkeypatch.setitem(sys.modules, "torchvision", vision)
    monkeypatch.setitem(sys.modules, "torchvision.io", io)
    assert (gpu_decode._torchvision_decode() is not None) is usable
