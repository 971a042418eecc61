"""inplace.storage: image rows that cannot be kept as their bytes (CMYK JPEGs, WEBP, GIF, BMP, TIFF,
QOI) are decoded once, by the conversion's rule, and stored as raw pixels in the same column,
while the JPEG and PNG rows beside them keep their bytes; what they decode to is bounded before
anything is allocated for it, and every refusal names the row.

The expected pixels are what ``ss.write`` stores for the same bytes with ``F.Image(codec="raw")``
(the conversion's own path), never written down.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hfdata import jpeg, pixels

import slipstream as ss
from slipstream import ops
from slipstream.convert.columns import Column
from slipstream.core.errors import CorruptFileError
from slipstream.files import field_kinds as F
from slipstream.images.encoded.codecs import CODECS
from slipstream.inplace import storage
from slipstream.inplace.storage import stored_array

IMAGE_STRUCT = pa.struct([("bytes", pa.binary()), ("path", pa.string())])


def saved(image: Any, kind: str, **options: Any) -> bytes:
    out = io.BytesIO()
    image.save(out, kind, **options)
    return out.getvalue()


def foreign_images() -> dict[str, bytes]:
    """One image of every kind a column may hold that is not a JPEG or PNG kept as it is (and those two)."""
    from PIL import Image

    rgb = Image.fromarray(pixels(3, 13, 17))
    gray16 = Image.fromarray(pixels(5, 9, 11)[:, :, 0].astype(np.uint16) * 257).convert("I;16")
    rgba = rgb.convert("RGBA")
    rgba.putalpha(Image.fromarray(pixels(7, 13, 17)[:, :, 1]))
    return {
        "jpeg": jpeg(1, 12, 16),
        "gray_jpeg": jpeg(2, 10, 14, channels=1),
        "png": saved(rgb, "PNG"),
        "cmyk_jpeg": saved(rgb.convert("CMYK"), "JPEG", quality=90),
        "webp_rgba": saved(rgba, "WEBP", lossless=True),
        "gif_palette": saved(rgb.convert("P"), "GIF"),
        "bmp_gray": saved(rgb.convert("L"), "BMP"),
        "tiff_gray16": saved(gray16, "TIFF"),
        "tiff_rgb": saved(rgb, "TIFF", compression="tiff_deflate"),
        "qoi": __import__("qoi").encode(np.ascontiguousarray(pixels(9, 8, 6))),
    }


KEPT = {"jpeg": "jpeg", "gray_jpeg": "jpeg", "png": "png"}  # the rows kept as their bytes, by codec


def converted(tmp_path: Path, blobs: list[bytes], channels: int | None) -> Any:
    """The bytes packed by ``ss.write`` as raw pixels: the pixels the conversion's rule gives."""
    path = tmp_path / f"raw-{channels}.arrow"
    return ss.open(ss.write(path, [{"img": b} for b in blobs], {"img": F.Image(codec="raw", channels=channels)}, progress=False))


def column(field: F.Image) -> Column:
    return Column("img", field, lambda array, first: array.to_pylist())


@pytest.mark.parametrize("channels", [None, 3, 1])
def test_rows_that_cannot_be_kept_as_bytes_are_stored_as_the_pixels_the_conversion_gives(tmp_path: Path, channels: int | None) -> None:
    images = foreign_images()
    names, blobs = list(images), list(images.values())
    stored = stored_array(column(F.Image(codec="jpeg", channels=channels)), pa.array(blobs, pa.binary()), 40, "x.parquet: row group 3")
    expected = converted(tmp_path, blobs, channels)
    codes = stored.field("codec").to_numpy()
    for k, name in enumerate(names):
        data = stored.field("data")[k].as_py()
        shape = tuple(stored.field(f)[k].as_py() for f in ("height", "width", "channels"))
        pixels_expected = expected[k]["img"]
        if name in KEPT:  # its bytes as they are, its stored shape from the header
            assert codes[k] == CODECS[KEPT[name]] and data == blobs[k], name
            assert shape[:2] == pixels_expected.shape[:2], name
            continue
        assert codes[k] == 0 and shape == pixels_expected.shape, name  # raw pixels (H, W, C)
        np.testing.assert_array_equal(np.frombuffer(data, np.uint8).reshape(shape), pixels_expected, err_msg=name)
        if channels is not None:
            assert shape[2] == channels
    own = {name: expected[k]["img"].shape[2] for k, name in enumerate(names)}
    if channels is None:  # each image's own channels: alpha dropped, palette and CMYK to RGB, gray kept
        assert own["webp_rgba"] == own["gif_palette"] == own["cmyk_jpeg"] == own["tiff_rgb"] == 3
        assert own["bmp_gray"] == own["tiff_gray16"] == 1


def test_a_parquet_column_of_mixed_images_reads_and_loads_as_its_conversion(tmp_path: Path) -> None:
    images = foreign_images()
    blobs = list(images.values()) * 2
    path = tmp_path / "mixed.parquet"
    pq.write_table(pa.table({"img": pa.array(blobs, pa.binary()), "i": range(len(blobs))}), path, row_group_size=7)
    for channels in (None, 3):
        ds = ss.open(path, image=F.Image(channels=channels))
        expected = converted(tmp_path, blobs, channels)
        for i in range(len(blobs)):
            np.testing.assert_array_equal(ds[i]["img"], expected[i]["img"], err_msg=f"row {i}")
            codec = ds.encoded(i, "img")[0]
            assert codec == KEPT.get(list(images)[i % len(images)], "raw"), i
    pipeline = [ops.CenterCrop(6), ops.ToCHW()]
    ds, expected = ss.open(path, image=F.Image(channels=3)), converted(tmp_path, blobs, 3)
    ours = list(ss.DataLoader(ds.map(img=pipeline), batch_size=5, workers=0))
    theirs = list(ss.DataLoader(expected.map(img=pipeline), batch_size=5, workers=0))
    assert len(ours) == len(theirs) == 4
    for a, b in zip(ours, theirs):
        np.testing.assert_array_equal(a["img"], b["img"])


def test_an_hf_image_feature_holding_a_gif_is_decoded(tmp_path: Path) -> None:
    images = foreign_images()
    meta = {b"huggingface": json.dumps({"info": {"features": {"image": {"_type": "Image"}}}}).encode()}
    column_ = pa.array([{"bytes": images["jpeg"], "path": None}, {"bytes": images["gif_palette"], "path": "x.gif"}], IMAGE_STRUCT)
    path = tmp_path / "hf.parquet"
    pq.write_table(pa.table({"image": column_}).replace_schema_metadata(meta), path, row_group_size=1)
    ds, expected = ss.open(path), converted(tmp_path, [images["jpeg"], images["gif_palette"]], None)
    assert ds.encoded(1, "image")[0] == "raw"
    np.testing.assert_array_equal(ds[1]["image"], expected[1]["img"])


def _cmyk_declaring(height: int, width: int) -> bytes:
    """A CMYK JPEG whose frame header (SOF0) declares ``height`` x ``width``, its data that of a small one."""
    data = bytearray(foreign_images()["cmyk_jpeg"])
    at = data.index(b"\xff\xc0")
    data[at + 5 : at + 9] = height.to_bytes(2, "big") + width.to_bytes(2, "big")
    return bytes(data)


def _gif_declaring(height: int, width: int) -> bytes:
    """A GIF whose logical screen declares ``height`` x ``width``."""
    from PIL import Image

    data = bytearray(saved(Image.new("P", (4, 3)), "GIF"))
    data[6:10] = width.to_bytes(2, "little") + height.to_bytes(2, "little")
    return bytes(data)


def _refused(blob: bytes, match: str) -> None:
    good = jpeg(0, 8, 8)
    with pytest.raises(ValueError, match=rf"^x\.parquet: row group 1: column 'img', row 6: {match}"):
        stored_array(column(F.Image()), pa.array([good, good, blob, good], pa.binary()), 4, "x.parquet: row group 1")


def test_what_an_image_declares_is_bounded_before_it_is_decoded_naming_the_row(monkeypatch: pytest.MonkeyPatch) -> None:
    # a CMYK JPEG header the bytes cannot fill, and a size past the limit: refused before decoding
    _refused(_cmyk_declaring(60000, 60000), r"the jpeg header declares a 60000x60000 image, which takes at least \d+ bytes")
    # a GIF past Pillow's own bomb limit (Pillow refuses it when it reads the header)
    _refused(_gif_declaring(65000, 65000), r".*decompression bomb")
    monkeypatch.setattr(storage, "MAX_DECODED_PIXELS", 100)
    _refused(_gif_declaring(11, 10), r"the GIF image declares 11x10 pixels, more than the 100 decoded here")
    _refused(foreign_images()["cmyk_jpeg"], r"the JPEG image declares 13x17 pixels, more than the 100 decoded here")
    from PIL import Image

    at_limit = saved(Image.new("RGB", (10, 10), (5, 6, 7)).convert("P"), "GIF")
    stored = stored_array(column(F.Image()), pa.array([at_limit], pa.binary()), 0, "x")
    assert stored.field("codec")[0].as_py() == 0 and stored.field("height")[0].as_py() == 10


def test_images_that_do_not_decode_are_refused_naming_the_row() -> None:
    images = foreign_images()
    _refused(b"not an image at all", r"the image bytes are neither JPEG nor PNG nor an image Pillow reads")
    _refused(images["webp_rgba"][: len(images["webp_rgba"]) // 2], r"the WEBP image does not decode")
    _refused(images["tiff_rgb"][:200], r"the image bytes are neither JPEG nor PNG nor an image Pillow reads .*: a damaged TIFF header")
    garbled = bytearray(images["tiff_rgb"])  # its deflated strip (the directory is at the end)
    garbled[12:60] = b"\xff" * 48
    _refused(bytes(garbled), r"the TIFF image does not decode")
    good = jpeg(0, 8, 8)
    field = column(F.Image(max_side=4))
    with pytest.raises(ValueError, match="resizes at write time"):
        stored_array(field, pa.array([good], pa.binary()), 0, "x")


def test_a_loader_names_the_row_of_an_image_that_does_not_decode(tmp_path: Path) -> None:
    images = foreign_images()
    blobs = [jpeg(i, 8, 8) for i in range(6)]
    blobs[4] = images["gif_palette"][:-8]
    path = tmp_path / "cut.parquet"
    pq.write_table(pa.table({"img": pa.array(blobs, pa.binary())}), path, row_group_size=3)
    ds = ss.open(path)
    assert ds[0]["img"].shape == (8, 8, 3)
    with pytest.raises(CorruptFileError, match=rf"{path}: row group 1: column 'img', row 4: the GIF image does not decode"):
        ds[4]
