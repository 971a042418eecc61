"""``ss.write(path, hf_dataset)``: a Hugging Face ``datasets.Dataset`` packed by its features (images as
their stored bytes, ``ClassLabel`` names kept), with or without ``fields=``."""

from __future__ import annotations

import io

import numpy as np
import pytest
from jpegs import encode_jpeg
from packed import photo_like
from PIL import Image

import slipstream as ss
from slipstream import fields as F

datasets = pytest.importorskip("datasets")


def _png(i: int) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(photo_like(10, 12 + i % 3, seed=i)).save(buffer, format="PNG")
    return buffer.getvalue()


def _jpeg(i: int) -> bytes:
    return encode_jpeg(photo_like(10 + i % 2, 14, seed=i), quality=85)


def _dataset(image, n: int = 6):
    features = datasets.Features(
        {
            "image": datasets.Image(),
            "label": datasets.ClassLabel(names=["cat", "dog", "owl"]),
            "box": datasets.Array2D(shape=(2, 2), dtype="int16"),
            "meta": datasets.Json(),
            "text": datasets.Value("string"),
        }
    )
    columns = {
        "image": [{"bytes": image(i), "path": None} for i in range(n)],
        "label": [i % 3 for i in range(n)],
        "box": [np.full((2, 2), i, np.int16) for i in range(n)],
        "meta": [{"i": i, "tags": ["a"] * (i % 2)} for i in range(n)],
        "text": [f"row {i}" for i in range(n)],
    }
    return datasets.Dataset.from_dict(columns, features=features)


def test_an_image_column_is_packed_from_its_bytes_and_class_labels_keep_their_names(tmp_path):
    hf = _dataset(_png)
    path = ss.write(tmp_path / "hf.arrow", hf, progress=False)
    ds = ss.open(path)
    assert ds.fields == {
        "image": F.Image(codec="png"), "label": F.Int(), "box": F.Array(dtype=np.int16, shape=(2, 2)), "meta": F.JSON(), "text": F.Text(),
    }  # fmt: skip
    assert ds.metadata == {"class_names": {"label": ["cat", "dog", "owl"]}}
    for i in range(len(hf)):
        row = ds[i]
        np.testing.assert_array_equal(row["image"], np.asarray(hf[i]["image"]))  # lossless
        assert (row["label"], row["meta"], row["text"]) == (i % 3, {"i": i, "tags": ["a"] * (i % 2)}, f"row {i}")
        np.testing.assert_array_equal(row["box"], np.full((2, 2), i, np.int16))
    back = ss.to_huggingface(path)
    assert back.features["label"] == datasets.ClassLabel(names=["cat", "dog", "owl"])


def test_fields_chooses_the_columns_and_still_keeps_the_class_names(tmp_path):
    hf = _dataset(_png)
    path = ss.write(tmp_path / "two.arrow", hf, {"image": F.Image(codec="jpeg", channels=1), "label": F.Int()}, progress=False)
    ds = ss.open(path)
    assert list(ds.fields) == ["image", "label"] and ds[0]["image"].shape == (10, 12, 1)
    assert ds.metadata == {"class_names": {"label": ["cat", "dog", "owl"]}}
    mine = ss.write(tmp_path / "mine.arrow", hf, {"label": F.Int()}, progress=False, metadata={"class_names": {"label": ["a", "b", "c"]}, "v": 1})
    assert ss.open(mine).metadata == {"class_names": {"label": ["a", "b", "c"]}, "v": 1}  # yours win
    assert ss.open(ss.write(tmp_path / "text.arrow", hf, {"text": F.Text()}, progress=False)).metadata == {}


def test_jpeg_images_are_kept_byte_for_byte_through_a_shuffle_and_into_shards(tmp_path):
    hf = _dataset(_jpeg, n=9).shuffle(seed=3)
    stored = hf.cast_column("image", datasets.Image(decode=False))
    path = ss.write(tmp_path / "jpeg.arrow", hf, progress=False)
    ds = ss.open(path)
    assert ds.fields["image"] == F.Image(codec="jpeg")
    assert [ds[i]["label"] for i in range(9)] == hf["label"]
    assert all(ds.encoded(i, "image")[1].tobytes() == stored[i]["image"]["bytes"] for i in range(9))
    folder = ss.write(tmp_path / "shards", hf, progress=False, shard_size="3kB", page_size=800)
    sharded = ss.open(folder)
    assert len(sharded.shards) > 1 and [sharded[i]["text"] for i in range(9)] == hf["text"]
    assert sharded.metadata == ds.metadata


def test_a_pil_image_in_other_data_is_inferred_as_a_lossless_image(tmp_path):
    pixels = photo_like(6, 7, seed=1)
    path = ss.write(tmp_path / "pil.arrow", [{"image": Image.fromarray(pixels), "y": 1}], progress=False)
    assert ss.open(path).fields["image"] == F.Image(codec="png")
    np.testing.assert_array_equal(ss.open(path)[0]["image"], pixels)
