"""``ss.to_huggingface``: a packed file as a Hugging Face ``datasets.Dataset``, checked row by row against ``ss.open``."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys

import numpy as np
import pytest
from helpers import overwrite_offsets, run_python
from packed import photo_like

import slipstream as ss
from slipstream import fields as F

datasets = pytest.importorskip("datasets")
pa = pytest.importorskip("pyarrow")


def _pixels(image) -> np.ndarray:
    """A PIL image as slipstream lays images out: (H, W, C), C = 1 for grayscale."""
    array = np.asarray(image)
    return array[:, :, None] if array.ndim == 2 else array


def _equal(hf_value, ss_value) -> bool:
    if hasattr(hf_value, "getpixel"):  # a PIL image
        return np.array_equal(_pixels(hf_value), ss_value)
    if isinstance(ss_value, (np.ndarray, np.generic)):  # dtypes are checked by the features test
        value = np.asarray(hf_value, dtype=ss_value.dtype)
        if ss_value.size == 0:  # nested Python lists cannot say (0, 4): datasets gives []
            return value.size == 0
        return value.shape == ss_value.shape and np.array_equal(value, ss_value)
    return type(hf_value) is type(ss_value) and hf_value == ss_value


def _sample(i: int) -> dict:
    return {
        "jpeg": photo_like(24 + i % 5, 32, seed=i),
        "png": photo_like(16, 12 + i % 3, seed=i, channels=1),
        "qoi": photo_like(9, 11, seed=i),
        "label": i % 4,
        "score": i / 7,
        "flag": i % 2 == 0,
        "text": f"sample {i} é",
        "blob": bytes([i]) * (i % 3),
        "meta": {"id": i, "tags": ["a"] * (i % 3), "none": None} if i % 2 else [i, 1.5, "x"],
        "scalar": np.float32(i),
        "vector": np.arange(3, dtype=np.int16) - i,
        "matrix": np.arange(6, dtype=np.float16).reshape(2, 3) * i,
        "mask": np.array([i % 2 == 0, True, False]),
        "tokens": np.arange(i % 5, dtype=np.int64),
        "boxes": np.full((i % 3, 4), i, np.float32),
    }


FIELDS = {
    "jpeg": F.Image(codec="jpeg"),
    "png": F.Image(codec="png"),
    "qoi": F.Image(codec="qoi"),
    "label": F.Int(),
    "score": F.Float(),
    "flag": F.Bool(),
    "text": F.Text(),
    "blob": F.Bytes(),
    "meta": F.JSON(),
    "scalar": F.Array(shape=()),
    "vector": F.Array(shape=(3,)),
    "matrix": F.Array(shape=(2, 3)),
    "mask": F.Array(shape=(3,)),
    "tokens": F.Array(),
    "boxes": F.Array(),
}


@pytest.fixture(scope="module")
def packed_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("hf") / "mixed.arrow"
    ss.write(path, [_sample(i) for i in range(37)], FIELDS, progress=False, page_size=2048)  # several pages
    return path


def test_every_row_equals_what_ss_open_reads(packed_path):
    packed = ss.open(packed_path)
    assert packed.num_pages > 3
    ds = ss.to_huggingface(packed_path)
    assert len(ds) == len(packed) and ds.column_names == list(FIELDS)
    for i in range(len(packed)):
        row, expected = ds[i], packed[i]
        for name in FIELDS:
            assert _equal(row[name], expected[name]), (i, name, row[name], expected[name])


def test_features_are_the_natural_ones_for_each_field(packed_path):
    features = ss.to_huggingface(packed_path).features
    for name in ("jpeg", "png", "qoi"):
        assert features[name] == datasets.Image()
    assert features["label"] == datasets.Value("int64")
    assert features["score"] == datasets.Value("float64") and features["flag"] == datasets.Value("bool")
    assert features["text"] == datasets.Value("large_string") and features["blob"] == datasets.Value("large_binary")
    assert features["meta"] == datasets.Json()
    assert features["scalar"] == datasets.Value("float32")
    assert features["vector"] == datasets.Sequence(datasets.Value("int16"), length=3)
    assert features["matrix"] == datasets.Array2D(shape=(2, 3), dtype="float16")
    assert features["mask"] == datasets.Sequence(datasets.Value("bool"), length=3)
    assert features["tokens"] == datasets.Sequence(datasets.Value("int64"))
    assert features["boxes"] == datasets.Array2D(shape=(None, 4), dtype="float32")


def test_images_are_the_stored_bytes_undecoded(packed_path):
    packed = ss.open(packed_path)
    ds = ss.to_huggingface(packed_path).cast_column("jpeg", datasets.Image(decode=False))
    for i in (0, 17, 36):
        assert ds[i]["jpeg"] == {"bytes": packed.encoded(i, "jpeg")[1].tobytes(), "path": None}


def test_casting_the_image_column_to_image_again_keeps_the_images(packed_path):
    """The papercut: ``cast_column("image", Image())`` on a table read with pyarrow gave empty images."""
    packed = ss.open(packed_path)
    ds = ss.to_huggingface(packed_path).cast_column("jpeg", datasets.Image()).cast_column("png", datasets.Image(mode="RGB"))
    assert np.array_equal(_pixels(ds[5]["jpeg"]), packed[5]["jpeg"])
    assert np.array_equal(_pixels(ds[5]["png"]), np.repeat(packed[5]["png"], 3, axis=2))


def test_hugging_face_cannot_open_a_packed_file_itself(packed_path):
    """Why ``to_huggingface`` exists: ``Dataset.from_file`` reads Arrow *streams*, a packed file is an Arrow *file*."""
    with pytest.raises(Exception):  # noqa: B017 - whatever datasets raises, it does not open it
        datasets.Dataset.from_file(str(packed_path))


def test_an_opened_dataset_and_a_field_selection_are_accepted(packed_path):
    ds = ss.to_huggingface(ss.open(packed_path, fields=["label", "jpeg"]))
    assert ds.column_names == ["label", "jpeg"]
    assert ss.to_huggingface(ss.open(packed_path), fields=["text"]).column_names == ["text"]
    assert ss.to_huggingface(packed_path, fields=["text"])[3]["text"] == "sample 3 é"
    with pytest.raises(ss.MissingFieldError, match="'nope'"):
        ss.to_huggingface(packed_path, fields=["nope"])


def test_class_names_make_a_class_label_feature(packed_path):
    ds = ss.to_huggingface(packed_path, fields=["label"], class_names={"label": ["cat", "dog", "fox", "owl"]})
    assert ds.features["label"] == datasets.ClassLabel(names=["cat", "dog", "fox", "owl"])
    assert ds[6]["label"] == 2 and ds.features["label"].int2str(ds[6]["label"]) == "fox"


def test_class_names_the_file_records_make_a_class_label_feature(tmp_path):
    path = tmp_path / "labels.arrow"
    metadata = {"class_names": {"label": ["cat", "dog"], "text": ["ignored: not an F.Int field"]}}
    ss.write(path, [{"label": i % 2, "text": "t"} for i in range(4)], {"label": F.Int(), "text": F.Text()}, progress=False, metadata=metadata)
    ds = ss.to_huggingface(path)
    assert ds.features["label"] == datasets.ClassLabel(names=["cat", "dog"]) and ds.features["text"] == datasets.Value("large_string")
    assert pickle.loads(pickle.dumps(ds)).features == ds.features
    assert ss.to_huggingface(path, class_names={"label": ["a", "b", "c"]}).features["label"].names == ["a", "b", "c"]


def test_class_names_that_do_not_cover_the_labels_raise_naming_the_field(packed_path):
    with pytest.raises(ValueError, match=r"field 'label' holds label 3, but class_names gives 3 names"):
        ss.to_huggingface(packed_path, class_names={"label": ["cat", "dog", "fox"]})
    with pytest.raises(ValueError, match=r"'text'.*class labels are F.Int fields"):
        ss.to_huggingface(packed_path, class_names={"text": ["a"]})
    with pytest.raises(ValueError, match=r"class_names names field 'jpeg', which is not read"):
        ss.to_huggingface(packed_path, fields=["label"], class_names={"jpeg": ["a"]})


def _raw_file(tmp_path, **image):
    images = [photo_like(10 + i, 14, seed=i, channels=1 + 2 * (i % 2)) for i in range(9)]
    path = tmp_path / "raw.arrow"
    ss.write(path, [{"image": im} for im in images], {"image": F.Image(**image)}, progress=False, page_size=1024)
    return path


def test_raw_images_are_refused_naming_the_field_and_the_way_out(tmp_path):
    path = _raw_file(tmp_path, codec="raw")
    with pytest.raises(ValueError, match=r"raw.arrow: field 'image' holds raw-pixel images \(sample 0 is the first\).*encode_raw=True"):
        ss.to_huggingface(path)


@pytest.mark.parametrize("image", [{"codec": "raw"}, {"codec": "png", "policy": "smart", "threshold": 500}], ids=["raw", "smart"])
def test_raw_images_encoded_to_png_on_request_decode_pixel_for_pixel(tmp_path, image):
    path = _raw_file(tmp_path, **image)
    packed = ss.open(path)
    codecs = {packed.encoded(i, "image")[0] for i in range(len(packed))}
    assert "raw" in codecs
    ds = ss.to_huggingface(path, encode_raw=True)
    for i in range(len(packed)):
        assert np.array_equal(_pixels(ds[i]["image"]), packed[i]["image"]), i


def test_the_channels_setting_decodes_to_the_same_mode(tmp_path):
    path = tmp_path / "rgb.arrow"
    gray = [photo_like(12, 10, seed=i, channels=1) for i in range(3)]
    ss.write(path, [{"image": g} for g in gray], {"image": F.Image(codec="png", channels=3)}, progress=False)
    ds = ss.to_huggingface(path)
    assert ds.features["image"] == datasets.Image(mode="RGB")
    packed = ss.open(path)
    for i in range(3):
        assert packed[i]["image"].shape[2] == 3 and np.array_equal(_pixels(ds[i]["image"]), packed[i]["image"])


def test_colour_jpegs_stored_as_gray_decode_to_the_same_luma(tmp_path):
    import io

    from PIL import Image

    jpegs = []
    for i in range(4):
        buffer = io.BytesIO()
        Image.fromarray(photo_like(40, 48, seed=i)).save(buffer, format="JPEG", quality=90)
        jpegs.append(buffer.getvalue())
    path = tmp_path / "luma.arrow"
    ss.write(path, [{"image": j} for j in jpegs], {"image": F.Image(codec="jpeg", channels=1)}, progress=False)
    packed, ds = ss.open(path), ss.to_huggingface(path)
    assert ds.features["image"] == datasets.Image(mode="L")
    for i in range(4):
        assert packed.encoded(i, "image")[1].tobytes() == jpegs[i]  # kept as it is: the colour JPEG
        assert np.array_equal(_pixels(ds[i]["image"]), packed[i]["image"]), i


def test_the_columns_are_views_of_the_memory_mapped_file(tmp_path):
    path = tmp_path / "big.arrow"
    rng = np.random.default_rng(0)
    blobs = [rng.integers(0, 256, 1 << 20, dtype=np.uint8).tobytes() for _ in range(24)]
    ss.write(path, [{"blob": b, "label": i} for i, b in enumerate(blobs)], {"blob": F.Bytes(), "label": F.Int()}, progress=False)
    size = os.path.getsize(path)
    before = pa.total_allocated_bytes()
    ds = ss.to_huggingface(path)
    allocated = pa.total_allocated_bytes() - before
    assert size > 24 << 20 and allocated < 64 << 10, (size, allocated)  # offsets and the like, not the 24 MiB
    assert ds[23]["blob"] == blobs[23] and ds[7]["label"] == 7
    assert len(pickle.dumps(ds)) < 64 << 10  # pickled as the path, not the data
    again = pickle.loads(pickle.dumps(ds))
    assert again[11]["blob"] == blobs[11] and again.features == ds.features and again._fingerprint == ds._fingerprint


def test_images_share_the_memory_map_too(packed_path):
    before = pa.total_allocated_bytes()
    ds = ss.to_huggingface(packed_path, fields=["jpeg"])
    allocated = pa.total_allocated_bytes() - before
    stored = sum(len(ss.open(packed_path).encoded(i, "jpeg")[1]) for i in range(len(ds)))
    assert allocated < stored / 4, (allocated, stored)


def test_a_pickled_dataset_whose_file_changed_refuses_to_load(tmp_path):
    path = tmp_path / "ints.arrow"
    ss.write(path, [{"x": i} for i in range(5)], {"x": F.Int()}, progress=False)
    state = pickle.dumps(ss.to_huggingface(path))
    ss.write(path, [{"x": i} for i in range(6)], {"x": F.Int()}, progress=False)
    with pytest.raises(RuntimeError, match=r"ints.arrow: the packed file changed since ss.to_huggingface opened it"):
        pickle.loads(state)


def test_an_empty_file_gives_an_empty_dataset(tmp_path):
    path = tmp_path / "empty.arrow"
    ss.write(path, [], {"image": F.Image(codec="jpeg"), "x": F.Int()}, progress=False)
    ds = ss.to_huggingface(path)
    assert len(ds) == 0 and ds.features["image"] == datasets.Image()


def test_fields_datasets_cannot_express_raise_naming_the_field(tmp_path):
    path = tmp_path / "odd.arrow"
    samples = [{"z": np.ones(2, np.complex64), "r": np.zeros((1, 1 + i), np.uint8), "ok": i} for i in range(3)]
    ss.write(path, samples, {"z": F.Array(shape=(2,)), "r": F.Array(), "ok": F.Int()}, progress=False)
    with pytest.raises(ValueError, match=r"odd.arrow: field 'z' holds complex64 arrays.*fields=\[\.\.\.\]"):
        ss.to_huggingface(path, fields=["z"])
    with pytest.raises(ValueError, match=r"field 'r': ragged arrays vary in more than their first dimension \(sample 1 has shape \(1, 2\)"):
        ss.to_huggingface(path, fields=["r"])
    assert ss.to_huggingface(path, fields=["ok"])["ok"] == [0, 1, 2]


def test_import_slipstream_does_not_import_datasets():
    result = run_python("import sys, slipstream; print('datasets' in sys.modules, 'pandas' in sys.modules)")
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "False"]


def test_without_datasets_the_error_says_what_to_install(packed_path):
    code = f"import sys; sys.modules['datasets'] = None\nimport slipstream as ss\nss.to_huggingface({str(packed_path)!r})"
    result = run_python(code)
    assert result.returncode != 0
    assert "Error: ss.to_huggingface needs Hugging Face datasets: pip install 'slipstream[hf]'" in result.stderr


# -- what datasets' Json decoding would change, and sharded folders ----------------------------------
def test_json_that_datasets_would_decode_differently_is_refused_naming_the_sample(tmp_path):
    """datasets decodes Json with pandas' ujson: lone surrogates vanish, floats round, big integers fail."""
    path = tmp_path / "json.arrow"
    values = [{"ok": [1, "é😀", None]}, {"name": "\ud800x"}, 0.13436424411240122, 2**70, ["\udfff"]]
    ss.write(path, [{"j": v, "i": k} for k, v in enumerate(values)], {"j": F.JSON(), "i": F.Int()}, progress=False)
    with pytest.raises(ValueError, match=r"json.arrow: field 'j', sample 1: datasets' Json feature .* json_as_text=True"):
        ss.to_huggingface(path)
    for k, value in enumerate(values):  # each alone: what ujson reads back the same passes (a lone low surrogate does)
        one = tmp_path / f"one{k}.arrow"
        ss.write(one, [{"j": "plain"}, {"j": value}], {"j": F.JSON()}, progress=False)
        if k in (0, 4):
            assert ss.to_huggingface(one)[1]["j"] == value
        else:
            with pytest.raises(ValueError, match="sample 1: datasets' Json feature"):
                ss.to_huggingface(one)
    text = ss.to_huggingface(path, json_as_text=True)
    assert text.features["j"] == datasets.Value("large_string")
    assert [json.loads(row) for row in text["j"]] == values  # exact, surrogates and all
    assert pickle.loads(pickle.dumps(text))[1]["j"] == text[1]["j"]
    assert ss.to_huggingface(path, fields=["i"])["i"] == list(range(5))


def test_a_sharded_folder_is_one_dataset_of_its_shards_in_order(tmp_path):
    folder = tmp_path / "shards"
    samples = [{"image": photo_like(8, 9 + i % 3, seed=i), "label": i % 3, "text": f"t{i}"} for i in range(40)]
    fields = {"image": F.Image(codec="png"), "label": F.Int(), "text": F.Text()}
    ss.write(folder, samples, fields, progress=False, shard_size="2kB", page_size=600, metadata={"class_names": {"label": ["a", "b", "c"]}})
    opened = ss.open(folder)
    assert len(opened.shards) > 3
    for source in (folder, str(folder), opened):
        ds = ss.to_huggingface(source)
        assert len(ds) == 40 and ds.features["label"] == datasets.ClassLabel(names=["a", "b", "c"])
        assert ds["text"] == [f"t{i}" for i in range(40)]
        assert all(np.array_equal(_pixels(ds[i]["image"]), samples[i]["image"]) for i in (0, 17, 39))
    again = pickle.loads(pickle.dumps(ss.to_huggingface(folder)))
    assert again["label"] == [i % 3 for i in range(40)]
    assert ss.to_huggingface(folder, fields=["text"]).column_names == ["text"]
    assert ss.to_huggingface(opened, fields=["label"])["label"][5] == 2
    ss.write(tmp_path / "b.arrow", samples[:3], fields, progress=False)
    assert ss.to_huggingface(ss.open([tmp_path / "b.arrow", tmp_path / "b.arrow"]))["text"] == ["t0", "t1", "t2"] * 2
    with pytest.raises(ss.MissingShardError, match="index.json"):
        ss.to_huggingface(tmp_path)  # a folder that is not a dataset: said so, not IsADirectoryError


def _damaged_text(path, field, values, offsets):
    """A packed file of three ``field`` values (1000, 3000 and 5000 bytes) whose stored offsets
    (0, 1000, 4000, 9000, int64) are overwritten with ``offsets``."""
    ss.write(path, [{"x": v} for v in values], {"x": field}, progress=False)
    overwrite_offsets(path, [0, 1000, 4000, 9000], offsets, np.int64)
    return path


@pytest.mark.parametrize(
    "field,values",
    [(F.Text(), ["a" * 1000, "b" * 3000, "c" * 5000]), (F.Bytes(), [b"a" * 1000, b"b" * 3000, b"c" * 5000]), (F.JSON(), ["a" * 998, "b" * 2998, "c" * 4998])],
)
def test_damaged_text_and_bytes_offsets_are_refused_before_datasets_reads_through_them(tmp_path, field, values):
    decreasing = _damaged_text(tmp_path / "d.ss", field, values, [0, 1000, 500, 9000])  # passes Arrow's cheap validation
    with pytest.raises(ss.CorruptFileError, match=r"field 'x', samples 0\.\.2"):
        ss.to_huggingface(decreasing)
    far = _damaged_text(tmp_path / "far.ss", field, values, [0, 300_000_000, 4000, 9000])  # datasets would read far past the page
    code = "import sys, slipstream as ss\ntry:\n    ss.to_huggingface(sys.argv[1])['x']\nexcept ss.CorruptFileError as exc:\n    print('refused:', exc)"
    run = subprocess.run([sys.executable, "-c", code, str(far)], check=False, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "refused:" in run.stdout, (run.returncode, run.stdout[-500:], run.stderr[-2000:])


# -- the other way: ss.write of a datasets.Dataset holding PIL images and a ClassLabel -----------


def _pil_dataset():
    from PIL import Image

    images = [Image.fromarray(photo_like(10, 12 + i % 3, seed=i)) for i in range(5)]
    images.append(Image.fromarray(photo_like(8, 9, seed=9, channels=1)[:, :, 0], "L"))
    label = datasets.ClassLabel(names=["cat", "dog", "owl"])
    features = datasets.Features({"image": datasets.Image(), "label": label, "n": datasets.Value("int32")})
    columns = {"image": images, "label": [i % 3 for i in range(6)], "n": list(range(6))}
    return datasets.Dataset.from_dict(columns, features=features), images


@pytest.mark.parametrize(
    "fields",
    [None, {"image": F.Image(codec="png"), "label": F.Int()}, {"label": F.Int(), "n": F.Int()}],
    ids=["no-fields", "fields", "fields-without-the-image"],
)
def test_ss_write_packs_a_pil_image_column_and_keeps_the_class_names(tmp_path, fields):
    hf, images = _pil_dataset()
    assert hasattr(hf[0]["image"], "getpixel")  # the dataset hands out PIL images
    ds = ss.open(ss.write(tmp_path / "pil.arrow", hf, fields, progress=False))
    assert list(ds.fields) == (list(fields) if fields is not None else ["image", "label", "n"])
    assert ds.metadata == {"class_names": {"label": ["cat", "dog", "owl"]}}
    for i, image in enumerate(images):
        assert ds[i]["label"] == i % 3
        if "image" in ds.fields:
            np.testing.assert_array_equal(ds[i]["image"], _pixels(image))  # PNG: lossless, each image's own channels
    assert ss.to_huggingface(ds.path).features["label"] == datasets.ClassLabel(names=["cat", "dog", "owl"])
