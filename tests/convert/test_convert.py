"""``slipstream convert``: every source kind converts and reads back equal; bad sources fail clearly."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc
import pyarrow.parquet as pq
import pytest
from hfdata import HF_FEATURES, hf_table, jpeg, pixels, save_to_disk
from jpegs import decode_jpeg
from PIL import Image

import slipstream as ss
from slipstream import fields as F
from slipstream.cli.main import main
from slipstream.convert.sources import ConvertError, open_source


def _png(image: np.ndarray) -> bytes:
    import io

    buffer = io.BytesIO()
    Image.fromarray(image[:, :, 0] if image.shape[2] == 1 else image).save(buffer, format="PNG")
    return buffer.getvalue()


def _convert(*args: object) -> int:
    return main(["convert", *map(str, args), "--no-progress", "--workers", "2"])


def _stored(ds: ss.PackedDataset, name: str, index: int) -> tuple[str, bytes]:
    """(codec, stored bytes) of an image sample."""
    starts = list(ds.page_starts())
    page = max(p for p, s in enumerate(starts) if s <= index)
    column = ds.page(page)[name]
    return column.codec(index - starts[page]), column.encoded(index - starts[page]).tobytes()


# -- image folders -----------------------------------------------------------------------------------
@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path / "tree"
    for label, cls in enumerate(["cat", "dog"]):
        (root / cls).mkdir(parents=True)
        for i in range(3):
            (root / cls / f"{i}.jpg").write_bytes(jpeg(10 * label + i, 24 + i, 32, channels=1 if i == 2 else 3))
        (root / cls / "z.png").write_bytes(_png(pixels(label, 20, 16)))
    return root


def test_image_folder_stores_jpegs_unchanged_labels_and_relative_paths(tree: Path, tmp_path: Path):
    out = tmp_path / "tree.ss"
    assert _convert(tree, out) == 0
    ds = ss.open(out)
    assert len(ds) == 8 and list(ds.fields) == ["image", "label", "path"]
    assert ds.fields["image"] == F.Image(codec="jpeg", quality=90, channels=3)  # RGB by default, as torchvision's ImageFolder
    for i in range(len(ds)):
        sample = ds[i]
        assert sample["label"] == (0 if sample["path"].startswith("cat/") else 1)
        source = (tree / sample["path"]).read_bytes()
        codec, stored = _stored(ds, "image", i)
        assert codec == "jpeg"
        if sample["path"].endswith(".jpg"):
            assert stored == source  # passed through: no second lossy encode
            decoded = ss.images.encoded.codecs.as_image(source, "x")
            np.testing.assert_array_equal(sample["image"], np.repeat(decoded, 3 // decoded.shape[2], axis=2))
        else:  # a PNG re-encoded as JPEG: close to its pixels
            original = np.asarray(Image.open(tree / sample["path"]).convert("RGB"))
            assert sample["image"].shape == original.shape
            assert np.abs(sample["image"].astype(int) - original).mean() < 6
    assert [ds[i]["path"] for i in range(8)] == ["cat/0.jpg", "cat/1.jpg", "cat/2.jpg", "cat/z.png", "dog/0.jpg", "dog/1.jpg", "dog/2.jpg", "dog/z.png"]
    assert ds[2]["image"].shape == (26, 32, 3)  # a grayscale JPEG, stored as it was, read as RGB


def test_image_folder_lossless_codec_and_resize_options(tree: Path, tmp_path: Path):
    out = tmp_path / "png.ss"
    assert _convert(tree, out, "--codec", "png") == 0
    ds = ss.open(out)
    for i in range(len(ds)):
        sample = ds[i]
        assert _stored(ds, "image", i)[0] == "png"
        decoded = ss.images.encoded.codecs.as_image((tree / sample["path"]).read_bytes(), "x")
        np.testing.assert_array_equal(sample["image"], np.repeat(decoded, 3 // decoded.shape[2], axis=2))  # RGB
    small = tmp_path / "small.ss"
    assert _convert(tree, small, "--codec", "qoi", "--max-side", "8", "--page-size", "1K") == 0
    ds = ss.open(small)
    assert ds.fields["image"] == F.Image(codec="qoi", max_side=8, channels=3) and ds.num_pages > 1
    assert all(max(ds[i]["image"].shape[:2]) == 8 for i in range(len(ds)))


# -- NumPy -------------------------------------------------------------------------------------------
def test_npy_arrays_keep_shape_and_dtype_and_1d_arrays_become_scalars(tmp_path: Path):
    cases = {
        "grid": (np.arange(60, dtype=np.float32).reshape(5, 3, 4), F.Array(dtype=np.float32, shape=(3, 4))),
        "bigendian": (np.arange(10, dtype=">i2").reshape(5, 2), F.Array(dtype="<i2", shape=(2,))),
        "ints": (np.array([3, -1, 7], np.int32), F.Int()),
        "floats": (np.array([0.5, -2.0], np.float64), F.Float()),
        "flags": (np.array([True, False, True]), F.Bool()),
        "words": (np.array(["a", "bc", ""]), F.Text()),
    }
    for name, (array, field) in cases.items():
        np.save(tmp_path / f"{name}.npy", array)
        out = tmp_path / f"{name}.ss"
        assert _convert(tmp_path / f"{name}.npy", out) == 0, name
        ds = ss.open(out)
        assert ds.fields == {"data": field}, name
        assert len(ds) == len(array)
        for i in range(len(array)):
            value = ds[i]["data"]
            if array.ndim > 1:
                assert value.dtype == array.dtype.newbyteorder("<") and value.shape == array.shape[1:]
                np.testing.assert_array_equal(value, array[i])
            else:
                assert type(value) is type(array[i].item()) and value == array[i].item(), name


def test_npz_fields_per_key_memory_mapped_when_stored(tmp_path: Path):
    x = np.random.default_rng(0).integers(0, 255, (6, 4, 4, 3), dtype=np.uint8)
    y = np.arange(6, dtype=np.int64) % 3
    w = np.linspace(0, 1, 6)
    np.savez(tmp_path / "plain.npz", x=x, y=y, w=w)
    np.savez_compressed(tmp_path / "packed.npz", x=x, y=y, w=w)
    plain = open_source(tmp_path / "plain.npz")
    assert all(isinstance(a, np.memmap) for a in plain.data.arrays.values())  # not copied into memory
    for name in ("plain", "packed"):
        out = tmp_path / f"{name}.ss"
        assert _convert(tmp_path / f"{name}.npz", out) == 0
        ds = ss.open(out)
        assert ds.fields == {"x": F.Array(dtype=np.uint8, shape=(4, 4, 3)), "y": F.Int(), "w": F.Float()}
        for i in range(6):
            np.testing.assert_array_equal(ds[i]["x"], x[i])
            assert ds[i]["y"] == y[i] and ds[i]["w"] == w[i]


def test_npz_with_unequal_lengths_names_the_keys_and_lengths(tmp_path: Path, capsys):
    np.savez(tmp_path / "bad.npz", images=np.zeros((5, 2)), labels=np.zeros(4))
    with pytest.raises(ConvertError, match=r"'images' has 5, 'labels' has 4"):
        open_source(tmp_path / "bad.npz")
    assert _convert(tmp_path / "bad.npz", tmp_path / "bad.ss") == 2
    err = capsys.readouterr().err
    assert "'images' has 5" in err and "'labels' has 4" in err and "Traceback" not in err
    assert not (tmp_path / "bad.ss").exists()


# -- Parquet -----------------------------------------------------------------------------------------
def _table(n: int) -> tuple[pa.Table, list[bytes]]:
    jpegs = [jpeg(i, 12, 16) for i in range(n)]
    table = pa.table(
        {
            "id": pa.array(range(n), pa.int32()),
            "score": pa.array([i / 4 for i in range(n)], pa.float32()),
            "ok": pa.array([i % 2 == 0 for i in range(n)]),
            "name": pa.array([f"s{i}" for i in range(n)], pa.large_string()),
            "blob": pa.array([bytes([i, 0, 1]) for i in range(n)], pa.binary()),
            "photo": pa.array(jpegs, pa.binary()),
            "hf_image": pa.array([{"bytes": _png(pixels(i, 6, 5)), "path": f"{i}.png"} for i in range(n)]),
            "tags": pa.array([[i, i + 1] for i in range(n)]),  # a list of integers: token ids
            "words": pa.array([[f"w{i}"] * (i % 3) for i in range(n)]),  # any other list: JSON
            "meta": pa.array([{"a": i, "b": str(i)} for i in range(n)]),
            "kind": pa.array(["x", "y"] * (n // 2)).dictionary_encode(),
        }
    )
    return table, jpegs


def test_parquet_columns_map_to_fields_and_read_back_equal(tmp_path: Path):
    table, jpegs = _table(12)
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=5)
    out = tmp_path / "t.ss"
    assert _convert(tmp_path / "t.parquet", out, "--codec", "png") == 0
    ds = ss.open(out)
    image = F.Image(codec="png")
    assert ds.fields == {
        "id": F.Int(), "score": F.Float(), "ok": F.Bool(), "name": F.Text(), "blob": F.Bytes(),
        "photo": image, "hf_image": image, "tags": F.Tokens(dtype="int64"), "words": F.JSON(), "meta": F.JSON(), "kind": F.Text(),
    }  # fmt: skip
    rows = table.to_pylist()
    for i, row in enumerate(rows):
        sample = ds[i]
        for name in ("id", "score", "ok", "name", "blob", "words", "meta", "kind"):
            assert sample[name] == row[name] and type(sample[name]) is type(row[name]), (i, name)
        assert sample["tags"].dtype == np.int64 and sample["tags"].tolist() == row["tags"]
        np.testing.assert_array_equal(sample["photo"], decode_jpeg(jpegs[i]))
        np.testing.assert_array_equal(sample["hf_image"], pixels(i, 6, 5))


def test_parquet_jpeg_bytes_pass_through_and_image_paths_are_read(tmp_path: Path):
    jpegs = [jpeg(i, 10, 10) for i in range(3)]
    (tmp_path / "on_disk.jpg").write_bytes(jpegs[2])
    images = pa.array([{"bytes": jpegs[0], "path": None}, {"bytes": jpegs[1], "path": "a.jpg"}, {"bytes": None, "path": "on_disk.jpg"}])
    pq.write_table(pa.table({"image": images, "label": [0, 1, 2]}), tmp_path / "t.parquet")
    out = tmp_path / "t.ss"
    assert _convert(tmp_path / "t.parquet", out) == 0
    ds = ss.open(out)
    assert [_stored(ds, "image", i) for i in range(3)] == [("jpeg", j) for j in jpegs]
    assert [ds[i]["label"] for i in range(3)] == [0, 1, 2]


def test_parquet_nulls_name_the_column_and_row(tmp_path: Path, capsys):
    pq.write_table(pa.table({"id": list(range(20)), "score": [float(i) if i != 13 else None for i in range(20)]}), tmp_path / "flat.parquet", row_group_size=6)
    with pytest.raises(ConvertError, match=r"column 'score' is null at row 13"):
        open_source(tmp_path / "flat.parquet")  # found up front from the column statistics
    assert _convert(tmp_path / "flat.parquet", tmp_path / "flat.ss") == 2
    assert "column 'score' is null at row 13" in capsys.readouterr().err
    # no statistics for a struct column: found while streaming, and nothing is left behind
    nested = pa.array([{"a": i} if i != 9 else None for i in range(12)])
    pq.write_table(pa.table({"id": list(range(12)), "meta": nested}), tmp_path / "nested.parquet", row_group_size=4)
    assert _convert(tmp_path / "nested.parquet", tmp_path / "nested.ss") == 2
    assert "column 'meta' is null at row 9" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["flat.parquet", "nested.parquet"]


# -- Hugging Face save_to_disk ---------------------------------------------------------------------------


def test_huggingface_saved_dataset_converts_by_its_features(tmp_path: Path):
    folder = tmp_path / "hf"
    save_to_disk(folder, [hf_table(0, 5), hf_table(5, 4)], HF_FEATURES)
    out = tmp_path / "hf.ss"
    assert _convert(folder, out) == 0
    ds = ss.open(out)
    assert ds.fields == {
        "img": F.Image(codec="jpeg"), "label": F.Int(), "text": F.Text(), "score": F.Float(), "tokens": F.Tokens(dtype="int64"),
        "emb": F.Array(dtype=np.float32, shape=(2, 2)),
    }  # fmt: skip
    assert len(ds) == 9
    for i in range(9):
        sample = ds[i]
        assert _stored(ds, "img", i) == ("jpeg", jpeg(i, 8, 12))
        assert (sample["label"], sample["text"], sample["score"], sample["tokens"].tolist()) == (i % 2, f"t{i}", i / 2, list(range(i % 3)))
        np.testing.assert_array_equal(sample["emb"], np.array([[i, 1.5], [2.0, -i]], np.float32))


def test_huggingface_without_dataset_info_uses_arrow_types_and_nulls_fail(tmp_path: Path):
    folder = tmp_path / "bare"
    save_to_disk(folder, [hf_table(0, 4)], None)
    assert _convert(folder, tmp_path / "bare.ss") == 0
    ds = ss.open(tmp_path / "bare.ss")
    assert ds.fields["img"] == F.Image(codec="jpeg") and ds.fields["emb"] == F.JSON() and ds[3]["emb"] == [[3.0, 1.5], [2.0, -3.0]]
    nulls = tmp_path / "nulls"
    save_to_disk(nulls, [pa.table({"text": ["a", "b", None]})], {"text": {"dtype": "string", "_type": "Value"}})
    with pytest.raises(ConvertError, match=r"column 'text' is null at row 2"):
        open_source(nulls)


def test_huggingface_dataset_dict_asks_for_a_split(tmp_path: Path):
    root = tmp_path / "dd"
    root.mkdir()
    (root / "dataset_dict.json").write_text(json.dumps({"splits": ["test", "train"]}))
    save_to_disk(root / "train", [hf_table(0, 2)], HF_FEATURES)
    save_to_disk(root / "test", [hf_table(0, 2)], HF_FEATURES)
    with pytest.raises(ConvertError, match=r"DatasetDict \(splits \['test', 'train'\]\); convert one split"):
        open_source(root)


# -- unknown sources -----------------------------------------------------------------------------------
def test_unknown_sources_say_what_is_supported(tmp_path: Path, capsys):
    (tmp_path / "table.csv").write_text("a,b\n1,2\n")
    (tmp_path / "flat").mkdir()
    (tmp_path / "flat" / "x.jpg").write_bytes(jpeg(0, 4, 4))
    for src in ("table.csv", "flat"):
        assert _convert(tmp_path / src, tmp_path / "out.ss") == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and ".npy or .npz" in err and ".parquet" in err and "save_to_disk" in err and "class" in err
    assert _convert(tmp_path / "missing.npy", tmp_path / "out.ss") == 2
    assert "no such file or folder" in capsys.readouterr().err
    with pytest.raises(ConvertError, match="0-d"):
        np.save(tmp_path / "scalar.npy", np.float32(1))
        open_source(tmp_path / "scalar.npy")
    assert not (tmp_path / "out.ss").exists()


# -- targets checked first, files named, class names kept ---------------------------------------------------
@pytest.fixture
def broken_tree(tree: Path) -> Path:
    """The tree with one file that is not a decodable JPEG (its header parses, its data is cut)."""
    (tree / "dog" / "1.jpg").write_bytes(jpeg(11, 25, 32)[:120])
    return tree


def test_a_file_that_fails_to_encode_is_named_by_its_path(broken_tree: Path, tmp_path: Path, capsys):
    assert _convert(broken_tree, tmp_path / "out.ss") == 2
    err = capsys.readouterr().err
    assert f"sample 5 (file {broken_tree / 'dog' / '1.jpg'}), field 'image':" in err
    assert not (tmp_path / "out.ss").exists()


def test_an_existing_output_is_refused_before_anything_is_encoded(broken_tree: Path, tmp_path: Path, capsys):
    existing = tmp_path / "existing.ss"
    existing.write_bytes(b"keep me")
    assert _convert(broken_tree, existing) == 2  # the broken image would fail the encoding: the target fails first
    err = capsys.readouterr().err
    assert "existing.ss: the output exists; pass --force" in err and "JPEG" not in err
    assert existing.read_bytes() == b"keep me"
    folder = tmp_path / "a_folder"
    folder.mkdir()
    assert _convert(broken_tree, folder) == 2
    err = capsys.readouterr().err
    assert "a_folder: the output is a folder" in err and "JPEG" not in err
    assert _convert(broken_tree, tmp_path / "missing" / "out.ss") == 2
    assert "does not exist; create it first" in capsys.readouterr().err
    assert _convert(broken_tree, existing, "--force") == 2  # now it is encoded, and fails on the image
    assert "JPEG" in capsys.readouterr().err and existing.read_bytes() == b"keep me"


def test_force_replaces_an_existing_output(tree: Path, tmp_path: Path):
    out = tmp_path / "out.ss"
    out.write_bytes(b"old")
    assert _convert(tree, out, "--force") == 0
    assert len(ss.open(out)) == 8


def test_class_names_survive_conversion(tree: Path, tmp_path: Path):
    assert _convert(tree, tmp_path / "folder.ss") == 0
    assert ss.open(tmp_path / "folder.ss").metadata == {"class_names": {"label": ["cat", "dog"]}}
    hf = tmp_path / "hf"
    save_to_disk(hf, [hf_table(0, 3)], HF_FEATURES)
    assert _convert(hf, tmp_path / "hf.ss") == 0
    assert ss.open(tmp_path / "hf.ss").metadata == {"class_names": {"label": ["cat", "dog"]}}
    table = hf_table(0, 3).replace_schema_metadata({b"huggingface": json.dumps({"info": {"features": HF_FEATURES}}).encode()})
    pq.write_table(table, tmp_path / "hf.parquet")
    assert _convert(tmp_path / "hf.parquet", tmp_path / "pq.ss") == 0
    assert ss.open(tmp_path / "pq.ss").metadata == {"class_names": {"label": ["cat", "dog"]}}
    bare = tmp_path / "bare"
    save_to_disk(bare, [hf_table(0, 3)], None)
    assert _convert(bare, tmp_path / "bare.ss") == 0
    assert ss.open(tmp_path / "bare.ss").metadata == {}


def test_convert_stores_the_users_metadata_with_the_class_names(tree: Path, tmp_path: Path):
    from slipstream.convert.sources import convert

    path, _ = convert(tree, tmp_path / "m.ss", progress=False, metadata={"license": "CC-BY-4.0"})
    assert ss.open(path).metadata == {"class_names": {"label": ["cat", "dog"]}, "license": "CC-BY-4.0"}


@pytest.mark.parametrize("flag, channels", [([], {3}), (["--channels", "keep"], {1, 3}), (["--channels", "1"], {1})])
def test_image_folders_convert_to_rgb_by_default_so_grayscale_files_batch(tree: Path, tmp_path: Path, flag, channels):
    """The tree holds grayscale JPEGs beside colour ones (as ImageNet does): by default every image is
    stored as RGB (torchvision's ImageFolder converts too), so batches never fail partway."""
    out = tmp_path / "out.arrow"
    assert main(["convert", str(tree), str(out), "--no-progress", *flag]) == 0
    ds = ss.open(out)
    assert {ds[i]["image"].shape[-1] for i in range(len(ds))} == channels
    if channels == {3}:
        pipeline = ds.map(image=[ss.ops.RandomResizedCrop(16), ss.ops.ToCHW()])
        assert [b["image"].shape for b in ss.DataLoader(pipeline, 4, workers=2)] == [(4, 3, 16, 16), (4, 3, 16, 16)]


def test_shard_size_writes_a_sharded_folder_of_the_same_samples(tree: Path, tmp_path: Path, capsys):
    single, folder = tmp_path / "one.ss", tmp_path / "shards"
    assert _convert(tree, single) == 0
    capsys.readouterr()
    assert _convert(tree, folder, "--shard-size", "1k", "--page-size", "1k") == 0
    said = capsys.readouterr().out
    ds, one = ss.open(folder), ss.open(single)
    assert f"in {len(ds.shards)} shards" in said
    assert isinstance(ds, ss.ShardedDataset) and len(ds.shards) > 1 and (folder / "index.json").exists()
    assert [ds[i]["path"] for i in range(len(ds))] == [one[i]["path"] for i in range(len(one))]
    assert ds.metadata == one.metadata and ds.metadata["class_names"] == {"label": ["cat", "dog"]}
    # an existing non-empty folder is refused before anything is encoded (never deleted, even with --force)
    assert _convert(tree, folder, "--shard-size", "1M", "--force") == 2
    assert "exists and is not an empty folder" in capsys.readouterr().err
    assert len(ss.open(folder)) == len(one)


def test_a_folder_holding_only_a_killed_writers_lock_file_is_an_empty_folder_to_convert(tree: Path, tmp_path: Path):
    from slipstream.write.writelock import LOCK

    folder = tmp_path / "shards"
    folder.mkdir()
    (folder / LOCK).write_text("4242 elsewhere\n")  # what a writer killed before its first shard leaves
    single = tmp_path / "one.ss"
    assert _convert(tree, single) == 0 and _convert(tree, folder, "--shard-size", "1k") == 0
    assert [s["path"] for s in ss.open(folder)] == [s["path"] for s in ss.open(single)]


# -- bad files skipped on request; what the JPEG codec does said ------------------------------------------
def test_skip_bad_writes_every_good_image_in_order_and_lists_each_bad_one(broken_tree: Path, tmp_path: Path, capsys):
    (broken_tree / "cat" / "3.jpg").write_bytes(b"GIF89a not really")
    out = tmp_path / "out.ss"
    assert _convert(broken_tree, out) == 2  # strict by default: the first bad file, and the way out
    err = capsys.readouterr().err
    assert f"sample 3 (file {broken_tree / 'cat' / '3.jpg'}), field 'image':" in err and "pass --skip-bad" in err and not out.exists()
    assert _convert(broken_tree, out, "--skip-bad") == 0
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if "skipped" in line]
    assert lines == [
        f"slipstream convert: skipped sample 3 (file {broken_tree / 'cat' / '3.jpg'}), field 'image': ValueError: bytes that are not an image Pillow can read (starting b'GIF89a n')",
        f"slipstream convert: skipped sample 6 (file {broken_tree / 'dog' / '1.jpg'}), field 'image': ValueError: the JPEG bytes do not decode: "
        + lines[1].split("the JPEG bytes do not decode: ", 1)[1],
    ]
    assert "7 samples (2 skipped, listed in the metadata)" in captured.out
    ds = ss.open(out)
    assert [ds[i]["path"] for i in range(len(ds))] == ["cat/0.jpg", "cat/1.jpg", "cat/2.jpg", "cat/z.png", "dog/0.jpg", "dog/2.jpg", "dog/z.png"]
    assert [(e["sample"], e["origin"]) for e in ds.metadata["skipped"]] == [(3, f"file {broken_tree / 'cat' / '3.jpg'}"), (6, f"file {broken_tree / 'dog' / '1.jpg'}")]
    assert ds.metadata["class_names"] == {"label": ["cat", "dog"]}
    shards = tmp_path / "shards"
    assert _convert(broken_tree, shards, "--skip-bad", "--shard-size", "2kB") == 0
    assert ss.open(shards).metadata == ds.metadata and len(ss.open(shards)) == 7


def test_convert_says_when_images_are_re_encoded_as_lossy_jpeg(tree: Path, tmp_path: Path, capsys):
    assert _convert(tree, tmp_path / "a.ss") == 0
    assert "note: 2 of 8 images are not JPEG files (PNG): stored as JPEG (quality 90), which is lossy: --codec png" in capsys.readouterr().err
    assert _convert(tree, tmp_path / "b.ss", "--codec", "png") == 0
    assert "lossy" not in capsys.readouterr().err
    for png in tree.glob("*/z.png"):
        png.unlink()
    assert _convert(tree, tmp_path / "c.ss") == 0
    assert "lossy" not in capsys.readouterr().err  # JPEG files are kept as they are


def test_convert_of_a_parquet_column_of_png_images_says_it_is_lossy(tmp_path: Path, capsys):
    path = tmp_path / "png.parquet"
    pq.write_table(pa.table({"image": [_png(pixels(i, 8, 8)) for i in range(3)]}), path)
    assert _convert(path, tmp_path / "png.ss") == 0
    assert "note: image column 'image' holds PNG images (its first row): stored as JPEG" in capsys.readouterr().err


def test_a_hugging_face_json_column_converts_to_its_values(tmp_path: Path):
    folder = tmp_path / "hfjson"
    texts = pa.array(['{"a":1,"b":[0.13436424411240122]}', '"x"', "null"])
    save_to_disk(folder, [pa.table({"j": pa.ExtensionArray.from_storage(pa.json_(), texts)})], {"j": {"_type": "Json"}})
    assert _convert(folder, tmp_path / "j.ss") == 0
    ds = ss.open(tmp_path / "j.ss")
    assert ds.fields == {"j": F.JSON()} and [ds[i]["j"] for i in range(3)] == [{"a": 1, "b": [0.13436424411240122]}, "x", None]
