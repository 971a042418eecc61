"""``F.Image``: lossless codecs round-trip exactly and JPEG closely; resizing (``max_side``/``min_side``) and the
compression policies; the channel rules (``channels=1/3`` and the default); 16-bit input; bad
images refused naming the sample (a PNG claiming a huge size included); decoding straight into a batch buffer."""

import io

import numpy as np
import pytest
from jpegs import decode_jpeg, encode_jpeg
from packed import photo_like, roundtrip
from PIL import Image

from slipstream import fields as F
from slipstream.images.encoded import codecs as _imaging


@pytest.mark.parametrize("codec", ["raw", "png", "qoi"])
@pytest.mark.parametrize("channels", [1, 3])
def test_lossless_codecs_round_trip_exactly(tmp_path, codec, channels):
    images = [photo_like(17 + k, 23 + 2 * k, seed=k, channels=channels) for k in range(4)]
    ds = roundtrip(tmp_path, [{"im": im} for im in images], {"im": F.Image(codec=codec)})
    for k, im in enumerate(images):
        np.testing.assert_array_equal(ds[k]["im"], im)


@pytest.mark.parametrize("channels", [1, 3])
def test_jpeg_round_trips_closely_with_the_stored_shape(tmp_path, channels):
    image = photo_like(64, 48, channels=channels)
    got = roundtrip(tmp_path, [{"im": image}], {"im": F.Image(codec="jpeg", quality=95)})[0]["im"]
    assert got.shape == image.shape and got.dtype == np.uint8
    colorspace = "GRAY" if channels == 1 else "RGB"
    reference = _imaging.encode("jpeg", image, 95)  # the writer's encoder, decoded by Pillow
    np.testing.assert_array_equal(got.reshape(image.shape), decode_jpeg(reference, colorspace=colorspace).reshape(image.shape))
    assert np.abs(got.astype(int) - image).mean() < 6


def test_grayscale_2d_arrays_and_pil_images_are_accepted(tmp_path):
    gray = photo_like(10, 12, channels=1)[:, :, 0]
    pil = Image.fromarray(photo_like(10, 12, seed=3))
    ds = roundtrip(tmp_path, [{"im": gray}, {"im": pil}], {"im": F.Image(codec="png")})
    np.testing.assert_array_equal(ds[0]["im"][:, :, 0], gray)
    np.testing.assert_array_equal(ds[1]["im"], np.asarray(pil))


def test_jpeg_bytes_that_need_no_resize_are_stored_unchanged(tmp_path):
    encoded = encode_jpeg(photo_like(40, 30), quality=77)
    ds = roundtrip(tmp_path, [{"im": encoded}], {"im": F.Image(codec="jpeg", max_side=100)})
    page = ds.page(0)["im"]
    assert page.encoded(0).tobytes() == encoded


def test_encoded_png_bytes_are_decoded_and_re_encoded_with_the_fields_codec(tmp_path):
    image = photo_like(20, 20)
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    ds = roundtrip(tmp_path, [{"im": buffer.getvalue()}], {"im": F.Image(codec="qoi")})
    np.testing.assert_array_equal(ds[0]["im"], image)
    assert ds.page(0)["im"].codec(0) == "qoi"


def test_max_side_and_min_side_downscale_with_area_averaging_and_never_upscale(tmp_path):
    big, small = photo_like(200, 100), photo_like(30, 20)
    ds = roundtrip(tmp_path, [{"im": big}, {"im": small}], {"im": F.Image(max_side=50)})
    assert ds[0]["im"].shape == (50, 25, 3) and ds[1]["im"].shape == (30, 20, 3)
    block_means = big.reshape(50, 4, 25, 4, 3).mean(axis=(1, 3))
    assert np.abs(ds[0]["im"].astype(float) - block_means).max() <= 1.0  # exact 4x4 areas
    ds = roundtrip(tmp_path, [{"im": big}], {"im": F.Image(min_side=40)}, name="min.arrow")
    assert ds[0]["im"].shape == (80, 40, 3)
    assert _imaging.target_size(100, 300, max_side=150, min_side=20) == (20, 60)


def test_jpeg_bytes_that_need_a_resize_are_decoded_resized_and_encoded(tmp_path):
    encoded = encode_jpeg(photo_like(80, 60), quality=90)
    ds = roundtrip(tmp_path, [{"im": encoded}], {"im": F.Image(codec="jpeg", max_side=40)})
    assert ds[0]["im"].shape == (40, 30, 3)


def test_the_smart_policy_compresses_only_images_over_the_threshold(tmp_path):
    images = [photo_like(8, 8), photo_like(64, 64)]
    ds = roundtrip(tmp_path, [{"im": im} for im in images], {"im": F.Image(codec="png", policy="smart", threshold=8 * 8 * 3)})
    column = ds.page(0)["im"]
    assert [column.codec(0), column.codec(1)] == ["raw", "png"]


def test_the_proportion_policy_is_a_seeded_per_sample_coin(tmp_path):
    samples = [{"im": photo_like(4, 4, seed=k)} for k in range(200)]
    field = F.Image(codec="png", policy="proportion", proportion=0.3, seed=5)
    codecs = [field._codec_for(k, 48) for k in range(200)]
    assert codecs == [field._codec_for(k, 48) for k in range(200)]
    assert 30 < codecs.count("png") < 90
    ds = roundtrip(tmp_path, samples, {"im": field}, workers=3)
    stored = [ds.page(p)["im"].codec(r) for p in range(ds.num_pages) for r in range(len(ds.page(p)["im"].codes))]
    assert stored == codecs


def test_bad_images_are_refused_naming_the_sample(tmp_path):
    good = encode_jpeg(photo_like(16, 16))
    cases = [
        (np.zeros((4, 4, 3), np.float32), TypeError, r"sample 0, field 'im': an image must be uint8"),
        (np.zeros((4, 4, 4), np.uint8), ValueError, r"shape \(H, W\), \(H, W, 1\) or \(H, W, 3\)"),
        (b"definitely not an image", ValueError, "not an image Pillow can read"),
        (good[: len(good) // 2], ValueError, "JPEG bytes do not decode"),
    ]
    for value, error, message in cases:
        with pytest.raises(error, match=message):
            roundtrip(tmp_path, [{"im": value}], {"im": F.Image(codec="jpeg")})


def test_images_decode_straight_into_a_buffer_of_the_right_shape(tmp_path):
    images = [photo_like(12, 10, seed=k) for k in range(3)]
    for codec in ("raw", "jpeg", "png"):
        ds = roundtrip(tmp_path, [{"im": im} for im in images], {"im": F.Image(codec=codec, quality=100)}, name=f"{codec}.arrow")
        buffer = np.zeros((12, 10, 3), np.uint8)
        out = ds.getobs_into({"im": buffer}, 2)
        assert out["im"] is buffer
        assert np.abs(buffer.astype(int) - images[2]).mean() < 4


def _png(array: np.ndarray, mode: str | None = None) -> bytes:
    buffer = io.BytesIO()
    image = Image.fromarray(array[:, :, 0] if array.ndim == 3 and array.shape[2] == 1 else array)
    (image.convert(mode) if mode else image).save(buffer, format="PNG")
    return buffer.getvalue()


def _mixed_inputs() -> list:
    """Grayscale and colour JPEGs and PNGs, RGBA, LA and palette PNGs, a gray array, a PIL image."""
    rgb, gray = photo_like(24, 20, seed=1), photo_like(24, 20, seed=2, channels=1)
    rgba = np.concatenate([rgb, np.full((24, 20, 1), 128, np.uint8)], axis=2)
    return [
        encode_jpeg(rgb, quality=90),
        encode_jpeg(gray, quality=90, colorspace="GRAY", colorsubsampling="Gray"),
        _png(rgb),
        _png(gray),
        _png(rgba),
        _png(rgb, "LA"),
        _png(rgb, "P"),
        gray[:, :, 0],
        Image.fromarray(rgb),
    ]


@pytest.mark.parametrize("codec", ["raw", "jpeg", "png", "qoi"])
def test_channels_3_makes_every_image_rgb(tmp_path, codec):
    inputs = _mixed_inputs()
    ds = roundtrip(tmp_path, [{"im": value} for value in inputs], {"im": F.Image(codec=codec, channels=3)})
    for k, value in enumerate(inputs):
        image = ds[k]["im"]
        assert image.shape == (24, 20, 3), f"input {k}: {image.shape}"
        own = _imaging.as_image(value, "input")
        if own.shape[2] == 1:
            assert (image == image[:, :, :1]).all(), f"input {k}: a grayscale image becomes R = G = B"
            if codec != "jpeg":
                np.testing.assert_array_equal(image[:, :, 0], own[:, :, 0])
    assert ds.fields["im"] == F.Image(codec=codec, channels=3)  # the setting is kept in the file


def test_a_grayscale_jpeg_stored_as_rgb_is_kept_as_it_is_and_decoded_to_rgb_directly(tmp_path):
    gray = encode_jpeg(photo_like(24, 20, seed=2, channels=1), quality=90, colorspace="GRAY", colorsubsampling="Gray")
    ds = roundtrip(tmp_path, [{"im": gray}], {"im": F.Image(codec="jpeg", channels=3)})
    assert ds.page(0)["im"].encoded(0).tobytes() == gray and ds.page(0)["im"].shape(0) == (24, 20, 3)
    expected = decode_jpeg(gray, colorspace="GRAY")
    np.testing.assert_array_equal(ds[0]["im"], np.repeat(expected, 3, axis=2))
    buffer = np.zeros((24, 20, 3), np.uint8)
    assert ds.getobs_into({"im": buffer}, 0)["im"] is buffer
    np.testing.assert_array_equal(buffer, ds[0]["im"])


@pytest.mark.parametrize("codec", ["raw", "png", "qoi"])
def test_channels_1_makes_every_image_grayscale_with_pillows_luma(tmp_path, codec):
    rgb = photo_like(24, 20, seed=4)
    ds = roundtrip(tmp_path, [{"im": rgb}, {"im": _png(rgb, "RGBA")}], {"im": F.Image(codec=codec, channels=1)})
    luma = np.asarray(Image.fromarray(rgb).convert("L"))
    for k in range(2):
        assert ds[k]["im"].shape == (24, 20, 1)
        np.testing.assert_array_equal(ds[k]["im"][:, :, 0], luma)


def test_the_default_keeps_each_images_own_channels_and_writes_the_same_spec_as_before():
    assert F.Image(codec="jpeg").spec() == {
        "kind": "image", "version": 1, "codec": "jpeg", "quality": 90, "max_side": None, "min_side": None,
        "policy": None, "threshold": 1 << 18, "proportion": 0.5, "seed": 0,
    }
    assert F.Image(channels=3).spec()["version"] == 2 and F.Image(channels=3).spec()["channels"] == 3
    for bad in (2, 4, 0, True, "rgb"):
        with pytest.raises(ValueError, match="channels must be None"):
            F.Image(channels=bad)


def test_pil_and_encoded_inputs_follow_one_channel_rule():
    rgb = photo_like(12, 10, seed=6)
    la = Image.fromarray(rgb).convert("LA")
    assert _imaging.as_image(la, "x").shape == (12, 10, 1)  # the same as LA PNG bytes
    assert _imaging.as_image(_png(rgb, "LA"), "x").shape == (12, 10, 1)
    np.testing.assert_array_equal(_imaging.as_image(la, "x"), _imaging.as_image(_png(rgb, "LA"), "x"))
    for mode in ("RGBA", "P", "CMYK", "YCbCr"):
        assert _imaging.as_image(Image.fromarray(rgb).convert(mode), "x").shape == (12, 10, 3)


def _png16(samples: np.ndarray) -> bytes:
    """A 16-bit PNG (gray, gray+alpha, RGB or RGBA by the last axis) written with numpy and zlib."""
    import struct
    import zlib

    height, width, channels = samples.shape
    rows = b"".join(b"\x00" + samples[y].astype(">u2").tobytes() for y in range(height))

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 16, {1: 0, 2: 4, 3: 2, 4: 6}[channels], 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows)) + chunk(b"IEND", b"")


def _sixteen_bit() -> np.ndarray:
    values = np.array([0, 255, 256, 1000, 32767, 32896, 65280, 65535], np.uint16)
    return np.tile(values, (3, 1))  # (3, 8), every value above 255 but the first two


def test_16_bit_images_keep_their_high_byte_instead_of_saturating(tmp_path):
    samples = _sixteen_bit()
    expected = (samples >> 8).astype(np.uint8)[:, :, None]  # 0 0 1 3 127 128 255 255
    tiff = io.BytesIO()
    Image.fromarray(samples).save(tiff, format="TIFF")
    pillow_png = io.BytesIO()
    Image.fromarray(samples).save(pillow_png, format="PNG")
    gray_inputs = {"Pillow 16-bit PNG": pillow_png.getvalue(), "numpy 16-bit PNG": _png16(samples[:, :, None]),
                   "16-bit TIFF": tiff.getvalue(), "PIL I;16 image": Image.fromarray(samples)}
    for name, value in gray_inputs.items():
        np.testing.assert_array_equal(_imaging.as_image(value, name), expected, err_msg=name)
    colour = _imaging.as_image(_png16(np.repeat(samples[:, :, None], 3, axis=2)), "RGB")  # Pillow's own rule for colour
    np.testing.assert_array_equal(colour, np.repeat(expected, 3, axis=2))
    ds = roundtrip(tmp_path, [{"im": v} for v in gray_inputs.values()], {"im": F.Image(codec="png")})
    for k in range(len(gray_inputs)):
        np.testing.assert_array_equal(ds[k]["im"], expected)


def test_images_without_a_known_8_or_16_bit_range_are_refused():
    with pytest.raises(TypeError, match=r"sample 3: an image must be uint8, got uint16 \(scale and convert it first\)"):
        _imaging.as_image(_sixteen_bit(), "sample 3")
    with pytest.raises(ValueError, match=r"sample 4: a floating-point image \(PIL mode 'F'\)"):
        _imaging.as_image(Image.fromarray(np.zeros((4, 4), np.float32)), "sample 4")
    with pytest.raises(ValueError, match=r"sample 5: a 32-bit integer image .* values 0..70000"):
        _imaging.as_image(Image.fromarray(np.array([[0, 70000]], np.int32)), "sample 5")


def test_a_png_claiming_a_huge_size_is_refused_naming_the_sample():
    import struct
    import zlib

    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    huge = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 20000, 20000, 8, 0, 0, 0, 0)) + chunk(b"IEND", b"")
    # refused from its header and size before Pillow allocates (or warns of a decompression bomb)
    with pytest.raises(ValueError, match=r"sample 7: cannot decode png image: the png header declares a 20000x20000 image, .*the header is damaged"):
        _imaging.as_image(huge, "sample 7")
    with pytest.raises(ValueError, match=r"cannot decode png image"):
        _imaging.decode("png", huge, (20000, 20000, 1))
