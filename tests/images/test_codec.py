"""Whole-image JPEG coding: ``_roijpeg.decode_jpeg`` / ``encode_jpeg`` (csrc/codec.c) and the codecs module around them.

The extension decodes what Pillow decodes, bit for bit (the same libjpeg settings), at full and
DCT-reduced scale; it encodes what Pillow encodes at the same quality and subsampling with the
accurate DCT; it refuses every truncation and damaged file in strict mode with a ValueError (never a
crash), a forged header without allocating for it, and a wrong ``out`` with an error naming it; and
8 threads give what one gives. Without the extension, ``images.encoded.codecs`` decodes the same
pixels with Pillow.
"""

from __future__ import annotations

import io

import numpy as np
import pytest
from helpers import run_python
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packed import photo_like
from PIL import Image

from slipstream.images import compiled
from slipstream.images.encoded import codecs, headers

roi = pytest.importorskip(
    "slipstream.images._roijpeg", reason="the _roijpeg extension is not built (no compiler or libjpeg headers)"
)

_PIL_SUBSAMPLING = {"444": 0, "422": 1, "420": 2}


def pil_jpeg(image: np.ndarray, quality: int = 90, subsampling: str = "420", **options) -> bytes:
    buffer = io.BytesIO()
    if image.shape[2] == 1:
        Image.fromarray(image[:, :, 0]).save(buffer, format="JPEG", quality=quality, **options)
    else:
        Image.fromarray(image).save(buffer, format="JPEG", quality=quality, subsampling=_PIL_SUBSAMPLING[subsampling], **options)
    return buffer.getvalue()


def pil_decode(data: bytes, gray: bool = False, factor: int = 1) -> np.ndarray:
    with Image.open(io.BytesIO(data)) as pil:
        width, height = pil.size
        if gray or factor > 1:
            pil.draft("L" if gray else pil.mode, (max(1, width // factor), max(1, height // factor)))
        array = np.asarray(pil.convert("L" if gray else "RGB"))
    return array[:, :, None] if array.ndim == 2 else array


@pytest.mark.parametrize("subsampling", ["444", "422", "420", "gray"])
def test_a_round_trip_keeps_the_shape_and_roughly_the_pixels(subsampling):
    channels = 1 if subsampling == "gray" else 3
    image = photo_like(61, 83, seed=4, channels=channels)
    data = roi.encode_jpeg(image, 95, subsampling=subsampling)
    assert data[:3] == b"\xff\xd8\xff" and data[-2:] == b"\xff\xd9"
    decoded = roi.decode_jpeg(data, colorspace="GRAY" if channels == 1 else "RGB")
    assert decoded.dtype == np.uint8 and decoded.shape == image.shape and decoded.flags.c_contiguous
    assert np.abs(decoded.astype(int) - image).mean() < 5
    assert roi.read_header(data)[:3] == (61, 83, channels)
    flat = roi.encode_jpeg(image[:, :, 0], 95) if channels == 1 else None  # (H, W) is a gray image too
    assert flat is None or flat == data


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    height=st.integers(1, 70),
    width=st.integers(1, 70),
    subsampling=st.sampled_from(["444", "422", "420", "gray"]),
    quality=st.integers(1, 100),
    progressive=st.booleans(),
    seed=st.integers(0, 1000),
)
def test_decoding_gives_pillows_pixels_bit_for_bit(height, width, subsampling, quality, progressive, seed):
    gray = subsampling == "gray"
    image = photo_like(height, width, seed=seed, channels=1 if gray else 3)
    data = pil_jpeg(image, quality, "420" if gray else subsampling, progressive=progressive)
    for want_gray in (False, True):
        np.testing.assert_array_equal(
            roi.decode_jpeg(data, colorspace="GRAY" if want_gray else "RGB"), pil_decode(data, want_gray)
        )
    for factor in (2, 4, 8):
        if height >= factor and width >= factor:  # Pillow's draft reaches the scale
            scaled = roi.decode_jpeg(data, scale_denom=factor)
            assert scaled.shape == (-(-height // factor), -(-width // factor), 3)
            np.testing.assert_array_equal(scaled, pil_decode(data, factor=factor))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    height=st.integers(1, 60),
    width=st.integers(1, 60),
    subsampling=st.sampled_from(["444", "422", "420", "gray"]),
    quality=st.integers(1, 100),
    seed=st.integers(0, 1000),
)
def test_encoding_with_the_accurate_dct_decodes_to_pillows_encoding(height, width, subsampling, quality, seed):
    gray = subsampling == "gray"
    image = photo_like(height, width, seed=seed, channels=1 if gray else 3)
    ours = roi.encode_jpeg(image, quality, subsampling=subsampling)
    theirs = pil_jpeg(image, quality, "420" if gray else subsampling)
    np.testing.assert_array_equal(pil_decode(ours, gray), pil_decode(theirs, gray))
    np.testing.assert_array_equal(roi.decode_jpeg(ours, colorspace="GRAY" if gray else "RGB"), pil_decode(ours, gray))


def test_encoding_gives_simplejpegs_bytes_with_its_dct_choice_and_decoding_its_pixels():
    """TurboJPEG's tjCompress2 (simplejpeg's encode_jpeg) uses the fast forward DCT below quality
    96: with the same choice the bytes are the same, so files written before are rewritten alike."""
    simplejpeg = pytest.importorskip("simplejpeg")
    for seed, (height, width) in enumerate([(37, 53), (64, 48), (1, 1)]):
        image = photo_like(height, width, seed=seed)
        for quality in (50, 90, 96, 100):
            for subsampling in ("444", "422", "420"):
                ref = simplejpeg.encode_jpeg(image, quality=quality, colorspace="RGB", colorsubsampling=subsampling)
                assert roi.encode_jpeg(image, quality, subsampling=subsampling, fast=quality < 96) == ref
            gray = np.ascontiguousarray(image[:, :, :1])
            ref = simplejpeg.encode_jpeg(gray, quality=quality, colorspace="GRAY", colorsubsampling="Gray")
            assert roi.encode_jpeg(gray, quality, fast=quality < 96) == ref
        data = simplejpeg.encode_jpeg(image, quality=90, colorsubsampling="420")
        for fast in (False, True):  # and decodes as it decodes
            np.testing.assert_array_equal(roi.decode_jpeg(data, fast=fast), simplejpeg.decode_jpeg(data, fastdct=fast, fastupsample=fast))


def test_fast_decoding_is_close_and_cmyk_converts_as_simplejpeg_does():
    image = photo_like(48, 64, seed=3)
    data = pil_jpeg(image, 90)
    assert np.abs(roi.decode_jpeg(data, fast=True).astype(int) - roi.decode_jpeg(data)).max() < 16
    buffer = io.BytesIO()
    Image.fromarray(image).convert("CMYK").save(buffer, format="JPEG", quality=90)
    cmyk = buffer.getvalue()
    with Image.open(io.BytesIO(cmyk)) as pil:
        inverted = np.asarray(pil).astype(np.int64)  # Pillow's CMYK is libjpeg's, inverted
    c, k = 255 - inverted[:, :, :3], 255 - inverted[:, :, 3:]
    rgb = k - (((255 - c) * k) >> 8)
    np.testing.assert_array_equal(roi.decode_jpeg(cmyk), rgb)
    gray = (rgb[:, :, :1] * 4899 + rgb[:, :, 1:2] * 9617 + rgb[:, :, 2:] * 1868 + 8192) >> 14
    np.testing.assert_array_equal(roi.decode_jpeg(cmyk, colorspace="GRAY"), gray)
    assert roi.read_header(cmyk)[3] == 4  # JCS_CMYK


def test_every_truncation_raises_a_clean_error_and_strict_false_decodes_what_it_can():
    data = pil_jpeg(photo_like(24, 40, seed=5), 85)
    for n in range(len(data)):
        with pytest.raises(ValueError, match="JPEG|header"):
            roi.decode_jpeg(data[:n])
    assert roi.decode_jpeg(data[:-30], strict=False).shape == (24, 40, 3)


def test_damage_raises_a_value_error_or_decodes_never_worse():
    data = pil_jpeg(photo_like(32, 32, seed=6), 85)
    start = data.index(b"\xff\xda")  # the scan
    extraneous = data[:start] + b"\x00\x00" + data[start:]
    with pytest.raises(ValueError, match="JPEG decode failed: Corrupt JPEG data: 2 extraneous bytes"):  # a libjpeg warning
        roi.decode_jpeg(extraneous)
    np.testing.assert_array_equal(roi.decode_jpeg(extraneous, strict=False), roi.decode_jpeg(data))
    rng = np.random.default_rng(0)
    refused = 0
    for _ in range(300):
        damaged = bytearray(data)
        for position in rng.integers(2, len(data) - 2, size=int(rng.integers(1, 4))):
            damaged[position] = int(rng.integers(0, 256))
        try:
            image = roi.decode_jpeg(bytes(damaged))
        except ValueError:
            refused += 1
        else:
            assert image.dtype == np.uint8 and image.ndim == 3
    assert refused > 100 and start > 0


def _forged(height: int, width: int, progressive: bool) -> bytes:
    """A small (baseline or progressive) JPEG whose frame header declares ``height`` x ``width``."""
    data = bytearray(pil_jpeg(photo_like(16, 16), 90, progressive=progressive))
    sof = data.index(b"\xff\xc2" if progressive else b"\xff\xc0")
    data[sof + 5 : sof + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
    return bytes(data)


def test_a_forged_header_is_refused_without_allocating_for_it(tmp_path):
    """Checked in a child: its peak memory stays far below what the headers declare."""
    cases = [(60000, 60000, False, True), (25000, 25000, True, True), (60000, 60000, False, False), (25000, 25000, True, False)]
    paths = []
    for k, (height, width, progressive, strict) in enumerate(cases):
        path = tmp_path / f"{k}-{int(strict)}.jpg"
        path.write_bytes(_forged(height, width, progressive))
        paths.append(str(path))
    child = run_python(
        """
        import resource, sys
        from slipstream.images import _roijpeg
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        for path in sys.argv[1:]:
            try:
                _roijpeg.decode_jpeg(open(path, "rb").read(), strict=path.endswith("-1.jpg"))
                print("ACCEPTED", path)
            except ValueError as exc:
                print("REFUSED", str(exc)[:200])
        print("GROWTH_MB", (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)
        """,
        timeout=120,
        argv=paths,
    )
    assert child.returncode == 0, child.stderr
    lines = child.stdout.splitlines()
    assert [line.split()[0] for line in lines[:4]] == ["REFUSED"] * 4, child.stdout
    assert "the header is damaged" in lines[0] and "the header is damaged" in lines[1], (
        child.stdout
    )  # strict: the data cannot fill it
    assert "2147483648 bytes" in lines[2], child.stdout  # 60000 x 60000 x 3 is over the cap
    # 25000 x 25000 progressive: libjpeg's memory is capped (libjpeg-turbo 2.x says "Backing store not supported", 3.x
    # "Memory limit exceeded": the wheels link 3.1, a source build the system's)
    assert "Backing store not supported" in lines[3] or "Memory limit exceeded" in lines[3], child.stdout
    assert int(lines[-1].split()[1]) < 200, child.stdout


def test_out_is_filled_when_it_fits_and_refused_with_a_clear_error_otherwise():
    data = pil_jpeg(photo_like(20, 30, seed=7), 90)
    out = np.zeros((20, 30, 3), np.uint8)
    assert roi.decode_jpeg(data, out) is out
    np.testing.assert_array_equal(out, pil_decode(data))
    gray = np.zeros((10, 15, 1), np.uint8)
    assert roi.decode_jpeg(data, gray, colorspace="GRAY", scale_denom=2) is gray
    read_only = np.zeros((20, 30, 3), np.uint8)
    read_only.flags.writeable = False
    cases = [
        (np.zeros((20, 30, 3), np.float32), TypeError, r"out must be uint8, got format 'f'"),
        (np.zeros((20, 31, 3), np.uint8), ValueError, r"out must have shape \(20, 30, 3\), got \(20, 31, 3\)"),
        (np.zeros((20, 30), np.uint8), ValueError, r"out must have shape \(20, 30, 3\), got \(20, 30\)"),
        (np.zeros((20, 30, 6), np.uint8)[:, :, ::2], ValueError, "out must be C-contiguous"),
        (read_only, ValueError, "out must be writable"),
        ("pixels", TypeError, "out must be a uint8 array"),
    ]
    for bad, error, message in cases:
        with pytest.raises(error, match=message):
            roi.decode_jpeg(data, bad)


def test_the_other_arguments_are_checked():
    image = photo_like(8, 8)
    data = roi.encode_jpeg(image, 90)
    with pytest.raises(ValueError, match="colorspace must be 'RGB' or 'GRAY', got 'CMYK'"):
        roi.decode_jpeg(data, colorspace="CMYK")
    with pytest.raises(ValueError, match="scale_denom must be 1, 2, 4 or 8, got 3"):
        roi.decode_jpeg(data, scale_denom=3)
    with pytest.raises(ValueError, match="JPEG decode failed: Not a JPEG file"):
        roi.decode_jpeg(b"\x89PNG\r\n\x1a\n" + bytes(40))
    with pytest.raises(ValueError, match="subsampling must be"):
        roi.encode_jpeg(image, 90, subsampling="411")
    with pytest.raises(ValueError, match="quality must be 1..100, got 0"):
        roi.encode_jpeg(image, 0)
    with pytest.raises(ValueError, match="colorspace 'GRAY' needs 1 channels, the image has 3"):
        roi.encode_jpeg(image, 90, colorspace="GRAY")
    with pytest.raises(ValueError, match="a gray image is encoded with subsampling 'gray'"):
        roi.encode_jpeg(np.ascontiguousarray(image[:, :, :1]), 90, subsampling="420")
    with pytest.raises(TypeError, match="image must be uint8"):
        roi.encode_jpeg(image.astype(np.float32), 90)
    with pytest.raises(ValueError, match="C-contiguous"):
        roi.encode_jpeg(image[:, ::2], 90)
    with pytest.raises(ValueError, match="1 to 65500 pixels"):
        roi.encode_jpeg(np.zeros((0, 4, 3), np.uint8), 90)
    assert roi.decode_jpeg(roi.encode_jpeg(image, 90, subsampling="gray"), colorspace="GRAY").shape == (8, 8, 1)  # RGB to luma


def test_eight_threads_give_what_one_gives():
    child = run_python(
        """
        import io, sys
        from concurrent.futures import ThreadPoolExecutor
        import numpy as np
        from slipstream.images import _roijpeg
        from packed import photo_like
        images = [photo_like(40 + k % 7 * 9, 50 + k % 5 * 11, seed=k, channels=1 if k % 4 == 3 else 3) for k in range(48)]

        def work(k):
            image = images[k]
            gray = image.shape[2] == 1
            data = _roijpeg.encode_jpeg(image, 60 + k % 40, subsampling="gray" if gray else ("444", "422", "420")[k % 3], fast=k % 2 == 0)
            decoded = [_roijpeg.decode_jpeg(data, scale_denom=s, fast=k % 3 == 0, colorspace="GRAY" if gray else "RGB") for s in (1, 2, 4, 8)]
            try:
                _roijpeg.decode_jpeg(data[: len(data) // 2])
                refused = None
            except ValueError as exc:
                refused = str(exc)
            return data, [d.tobytes() for d in decoded], refused

        one = [work(k) for k in range(len(images))]
        for _ in range(3):
            with ThreadPoolExecutor(8) as pool:
                many = list(pool.map(work, list(range(len(images))) * 4))
            assert many == one * 4
        print("SAME")
        """,
        timeout=300,
    )
    assert child.returncode == 0 and "SAME" in child.stdout, child.stderr


# ---------------------------------------------------------------- the codecs module, with and without the extension


@pytest.fixture(params=["extension", "pillow"])
def backend(request, monkeypatch):
    if request.param == "pillow":
        monkeypatch.setattr(compiled, "EXTENSION", None)
    return request.param


def _jpegs() -> dict[str, bytes]:
    rgb = photo_like(30, 41, seed=8)
    cmyk = io.BytesIO()
    Image.fromarray(rgb).convert("CMYK").save(cmyk, format="JPEG", quality=90)
    return {
        "YCbCr": pil_jpeg(rgb, 90),
        "Gray": pil_jpeg(rgb[:, :, :1], 90),
        "CMYK": cmyk.getvalue(),
        "progressive": pil_jpeg(rgb, 80, progressive=True),
    }


def test_codecs_decode_the_same_pixels_and_headers_on_both_paths(backend):
    for name, data in _jpegs().items():
        assert codecs.jpeg_info(data) == (30, 41, "YCbCr" if name == "progressive" else name)
        for channels in (1, 3):
            expected = roi.decode_jpeg(data, colorspace="GRAY" if channels == 1 else "RGB")
            np.testing.assert_array_equal(codecs.decode("jpeg", data, (30, 41, 3), channels=channels), expected)
            buffer = np.empty(1 << 16, np.uint8)
            for factor in (1, 2, 4):
                h, w = -(-30 // factor), -(-41 // factor)
                scaled = codecs.decode_jpeg_scaled(data, "GRAY" if channels == 1 else "RGB", buffer, False, factor, h, w)
                assert np.shares_memory(scaled, buffer)
                np.testing.assert_array_equal(
                    scaled, roi.decode_jpeg(data, colorspace="GRAY" if channels == 1 else "RGB", scale_denom=factor)
                )
        codecs.verify_jpeg(data, "sample 0")


def test_codecs_refuse_truncated_and_foreign_bytes_on_both_paths(backend):
    data = _jpegs()["YCbCr"]
    for n in (20, len(data) // 3, len(data) // 2, len(data) - 40):
        with pytest.raises(ValueError, match="cannot decode jpeg image"):
            codecs.decode("jpeg", data[:n], (30, 41, 3))
        with pytest.raises(ValueError, match="sample 3: the JPEG bytes do not decode"):
            codecs.verify_jpeg(data[:n], "sample 3")
    with pytest.raises(ValueError):
        codecs.jpeg_info(b"\xff\xd8\xff\xe0" + bytes(10))


@pytest.mark.parametrize(("height", "width"), [(5, 5), (3, 40), (100, 6), (7, 7)])
def test_verify_jpeg_accepts_an_image_with_a_side_under_8_pixels_on_both_paths(backend, height, width):
    """Pillow's draft() cannot scale a side under 8 pixels by 1/8: the check then decodes at full scale."""
    codecs.verify_jpeg(codecs.encode("jpeg", photo_like(height, width, seed=3), 90), "sample 0")


def test_an_mpo_jpeg_decodes_to_its_first_image_on_both_paths(backend):
    """A camera's MPO file (a JPEG with more images after its EOI, which Pillow opens as format "MPO")."""
    buffer = io.BytesIO()
    Image.fromarray(photo_like(30, 41, seed=4)).save(
        buffer, format="MPO", save_all=True, append_images=[Image.fromarray(photo_like(30, 41, seed=5))]
    )
    data = buffer.getvalue()
    np.testing.assert_array_equal(codecs.decode("jpeg", data, (30, 41, 3)), roi.decode_jpeg(data))
    scaled = codecs.decode_jpeg_scaled(data, "RGB", np.empty(1 << 14, np.uint8), False, 2, 15, 21)
    np.testing.assert_array_equal(scaled, roi.decode_jpeg(data, scale_denom=2))
    codecs.verify_jpeg(data, "sample 0")


@pytest.mark.xfail(
    strict=True,
    reason="without the extension, Pillow's draft() picks a smaller DCT scale than 1/factor for a side shorter than the factor "
    "(scale = min(side // requested)), so decode_jpeg_scaled raises where the extension decodes",
)
def test_decode_jpeg_scaled_scales_a_side_shorter_than_the_factor_without_the_extension(monkeypatch):
    data = codecs.encode("jpeg", photo_like(5, 40, seed=6), 90)
    expected = roi.decode_jpeg(data, scale_denom=8)
    assert expected.shape == (1, 5, 3)
    monkeypatch.setattr(compiled, "EXTENSION", None)
    np.testing.assert_array_equal(codecs.decode_jpeg_scaled(data, "RGB", np.empty(64, np.uint8), False, 8, 1, 5), expected)


def test_codecs_encode_jpeg_on_both_paths(backend):
    image = photo_like(33, 47, seed=9)
    for quality in (70, 97):
        data = codecs.encode("jpeg", image, quality)
        decoded = codecs.decode("jpeg", data, (33, 47, 3))
        assert np.abs(decoded.astype(int) - image).mean() < 4
        if backend == "extension":
            assert data == roi.encode_jpeg(image, quality, subsampling="420", fast=quality < 96)
        else:  # Pillow: its own bytes, the accurate DCT
            assert data == pil_jpeg(image, quality)
    gray = codecs.encode("jpeg", image[:, :, :1], 90)
    assert codecs.jpeg_header(gray) == (33, 47, 1)


def test_the_qoi_hint_names_its_own_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "qoi", None)
    with pytest.raises(ImportError, match=r"slipstream\[qoi\]"):
        codecs.encode("qoi", photo_like(4, 4), 90)


def test_headers_colour_space_rule_without_the_extension(monkeypatch):
    """The marker reader gives libjpeg's colour space: component ids R, G, B without JFIF is RGB."""
    data = bytearray(_jpegs()["YCbCr"])
    app0 = data.index(b"\xff\xe0")
    length = int.from_bytes(data[app0 + 2 : app0 + 4], "big")
    del data[app0 : app0 + 2 + length]  # no JFIF marker
    sof, sos = data.index(b"\xff\xc0"), data.index(b"\xff\xda")
    for k, cid in enumerate(b"RGB"):  # the frame's component ids, and the scan's references to them
        data[sof + 10 + 3 * k] = cid
        data[sos + 5 + 2 * k] = cid
    assert codecs.jpeg_info(bytes(data))[2] == "RGB"  # libjpeg's reading
    monkeypatch.setattr(compiled, "EXTENSION", None)
    assert headers.jpeg_info(bytes(data)) == (30, 41, "RGB")
