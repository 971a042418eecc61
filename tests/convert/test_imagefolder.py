"""Image folders that mix grayscale, colour and RGBA files train with three channels throughout."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from helpers import assert_same, snapshot
from jpegs import encode_jpeg
from packed import photo_like
from PIL import Image

import slipstream as ss
from slipstream import fields as F
from slipstream import ops
from slipstream.images import pipeline as _pipeline


def _save(path: Path, image: np.ndarray, kind: str) -> None:
    if kind == "jpeg":
        gray = image.shape[2] == 1
        path.write_bytes(encode_jpeg(image, quality=90, colorspace="GRAY" if gray else "RGB", colorsubsampling="Gray" if gray else "420"))
        return
    buffer = io.BytesIO()
    pil = Image.fromarray(image[:, :, 0] if image.shape[2] == 1 else image)
    pil.save(buffer, format="PNG")
    path.write_bytes(buffer.getvalue())


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """Two classes of RGB and grayscale JPEGs and PNGs and RGBA PNGs, in varied sizes; the first
    grayscale file is the 3rd sample, so a batch of 4 breaks at once without a channel policy."""
    root = tmp_path_factory.mktemp("folder")
    kinds = [("rgb", "jpeg"), ("rgb", "png"), ("gray", "jpeg"), ("rgba", "png"), ("gray", "png"), ("rgb", "jpeg")]
    for label in ("cat", "dog"):
        (root / label).mkdir()
        for k, (colour, codec) in enumerate(kinds):
            image = photo_like(48 + 5 * k, 60 - 3 * k, seed=k + 10 * len(label), channels=1 if colour == "gray" else 3)
            if colour == "rgba":
                image = np.concatenate([image, np.full(image.shape[:2] + (1,), 200, np.uint8)], axis=2)
            _save(root / label / f"{k}.{'jpg' if codec == 'jpeg' else 'png'}", image, codec)
    return root


def _train(data, workers: int = 0) -> list:
    mapped = data.map(image=[ops.RandomResizedCrop(32), ops.RandomHorizontalFlip(), ops.ToCHW()])
    return [snapshot(b) for b in ss.DataLoader(mapped, 4, shuffle=True, seed=1, workers=workers)]


def test_a_mixed_folder_packed_with_channels_3_trains_with_rgb_batches(folder, tmp_path, monkeypatch):
    path = ss.write(tmp_path / "f.arrow", ss.imagefolder(folder), {"image": F.Image(codec="jpeg", channels=3), "label": F.Int(), "path": F.Text()}, progress=False)
    batches = _train(ss.open(path), workers=2)
    assert len(batches) == 3 and all(b["image"].shape == (4, 3, 32, 32) for b in batches)
    monkeypatch.setattr(_pipeline, "_roi", None)  # whole-image decoding: the same batches
    for a, b in zip(batches, _train(ss.open(path))):
        assert_same(a, b)


def test_a_mixed_packed_file_trains_with_to_rgb_as_if_packed_with_channels_3(folder, tmp_path):
    mixed = ss.write(tmp_path / "mixed.arrow", ss.imagefolder(folder), {"image": F.Image(codec="jpeg"), "label": F.Int()}, progress=False)
    rgb = ss.write(tmp_path / "rgb.arrow", ss.imagefolder(folder), {"image": F.Image(codec="jpeg", channels=3), "label": F.Int()}, progress=False)
    assert {ss.open(mixed)[k]["image"].shape[2] for k in range(12)} == {1, 3}
    pipe = [ops.ToRGB(), ops.RandomResizedCrop(32), ops.Normalize((0.5, 0.4, 0.3), (0.2, 0.2, 0.2)), ops.ToCHW()]
    with_op = [snapshot(b) for b in ss.DataLoader(ss.open(mixed).map(image=pipe), 4, shuffle=True, seed=2)]
    packed = [snapshot(b) for b in ss.DataLoader(ss.open(rgb).map(image=pipe[1:]), 4, shuffle=True, seed=2)]
    for a, b in zip(with_op, packed):
        assert a["image"].shape == (4, 3, 32, 32)
        assert_same(a, b)


def test_without_a_channel_policy_the_first_grayscale_sample_names_the_fix(folder, tmp_path):
    mixed = ss.write(tmp_path / "mixed.arrow", ss.imagefolder(folder), {"image": F.Image(codec="png"), "label": F.Int()}, progress=False)
    mapped = ss.open(mixed).map(image=[ops.RandomResizedCrop(32), ops.ToCHW()])
    with pytest.raises(ValueError, match=r"row 1 of the batch, field \['image'\], .*\(3, 32, 32\).*\(1, 32, 32\).*ops\.ToRGB\(\)"):
        list(ss.DataLoader(mapped, 2))  # the second batch: gray sample 2, then RGB sample 3 (as default_collate says)


def test_an_unpacked_folder_trains_through_to_rgb(folder):
    mapped = ss.mapfields(ss.imagefolder(folder), image=[ops.ToRGB(), ops.RandomResizedCrop(32), ops.ToCHW()])
    batches = [snapshot(b) for b in ss.DataLoader(mapped, 4, shuffle=True, seed=3, workers=2)]
    assert len(batches) == 3 and all(b["image"].shape == (4, 3, 32, 32) for b in batches)


def test_decoded_folder_images_are_rgb_by_default(folder):
    shapes = {ss.imagefolder(folder, decode=True)[k]["image"].shape[2] for k in range(12)}
    assert shapes == {3}
    assert {ss.imagefolder(folder, decode=True, channels=None)[k]["image"].shape[2] for k in range(12)} == {1, 3}
    with pytest.raises(ValueError, match="channels must be None"):
        ss.imagefolder(folder, channels=2)


def test_to_rgb_after_a_custom_op_converts_what_the_op_returns():
    data = [{"image": photo_like(20, 20, seed=1, channels=1)}]
    out = ss.mapfields(data, image=[ops.Resize((10, 10)), ops.Apply(lambda im: im[:, :, 0]), ops.ToRGB()])[0]["image"]
    plain = ss.mapfields(data, image=[ops.Resize((10, 10))])[0]["image"]
    np.testing.assert_array_equal(out, np.repeat(plain, 3, axis=2))
    with pytest.raises(TypeError, match="ops.ToRGB after a custom op"):
        ss.mapfields(data, image=[ops.Apply(lambda im: im[None]), ops.ToRGB()])[0]


def test_ss_write_of_an_image_folder_names_the_file_that_fails(tmp_path):
    from slipstream import fields as F

    root = tmp_path / "tree"
    (root / "cat").mkdir(parents=True)
    image = np.zeros((16, 16, 3), np.uint8)
    (root / "cat" / "a.jpg").write_bytes(encode_jpeg(image))
    (root / "cat" / "b.jpg").write_bytes(encode_jpeg(image)[:100])  # cut short
    with pytest.raises(ValueError, match=r"sample 1 \(file .*b\.jpg\), field 'image'"):
        ss.write(tmp_path / "out.arrow", ss.imagefolder(root), fields={"image": F.Image(codec="png"), "label": F.Int()})


# -- what a newcomer writes first ------------------------------------------------------------------
def test_ss_write_of_an_image_folder_stores_what_convert_stores_class_names_included(folder, tmp_path):
    from slipstream.convert.sources import convert

    plain = ss.open(ss.write(tmp_path / "plain.arrow", ss.imagefolder(folder), progress=False))
    converted, _ = convert(folder, tmp_path / "converted.arrow", progress=False)
    assert plain.fields == ss.open(converted).fields == {"image": F.Image(codec="jpeg", channels=3), "label": F.Int(), "path": F.Text()}
    assert plain.metadata == ss.open(converted).metadata == {"class_names": {"label": ["cat", "dog"]}}
    assert all(plain.encoded(k, "image")[1].tobytes() == ss.open(converted).encoded(k, "image")[1].tobytes() for k in range(12))
    chosen = ss.open(ss.write(tmp_path / "chosen.arrow", ss.imagefolder(folder), {"image": F.Image(codec="png"), "label": F.Int()}, progress=False))
    assert chosen.metadata == {"class_names": {"label": ["cat", "dog"]}}  # fields= keeps them too
    no_label = ss.write(tmp_path / "nolabel.arrow", ss.imagefolder(folder), {"path": F.Text()}, progress=False)
    assert ss.open(no_label).metadata == {}


def test_the_readmes_packed_file_snippet_trains_on_a_folder_of_mixed_size_photos(folder, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "train").symlink_to(folder, target_is_directory=True)
    ss.write("train.arrow", ss.imagefolder("train/"), fields={"image": F.Image(codec="jpeg", quality=90, max_side=512, channels=3), "label": F.Int()})
    ds = ss.open("train.arrow")
    ds.validate()
    assert ds.metadata["class_names"]["label"] == ["cat", "dog"]
    assert len({ds[k]["image"].shape for k in range(12)}) > 1  # photos of several sizes
    train = ds.map(image=[ops.RandomResizedCrop(224), ops.RandomHorizontalFlip(), ops.ToCHW()])
    loader = ss.DataLoader(train, batch_size=256, order="quasi_random", seed=0, workers=2, rank=0, world_size=1)
    batches = list(loader)
    assert [b["image"].shape for b in batches] == [(12, 3, 224, 224)] and batches[0]["image"].dtype == np.uint8
    with pytest.raises(ValueError, match=r"crop them to one: ds\.map"):
        list(ss.DataLoader(ds, batch_size=256))  # without the pipeline: the error says what to add


def test_mapped_folder_errors_name_the_file_and_the_fix(folder, tmp_path):
    broken = tmp_path / "broken"
    for cls in ("cat", "dog"):
        (broken / cls).mkdir(parents=True)
        for k in range(3):
            (broken / cls / f"{k}.jpg").write_bytes((folder / cls / "0.jpg").read_bytes())
    (broken / "dog" / "1.jpg").write_bytes(b"not a jpeg")
    mapped = ss.mapfields(ss.imagefolder(broken), image=[ops.CenterCrop(8)])
    with pytest.raises(ValueError, match=rf"sample 4 \(file {broken / 'dog' / '1.jpg'}\), field 'image': .*damaged .*--skip-bad"):
        mapped[4]
    with pytest.raises(ValueError, match=rf"sample 0 \(file {broken / 'cat' / '0.jpg'}\), field 'image': CenterCrop of \(80, 80\)"):
        ss.mapfields(ss.imagefolder(broken), image=[ops.CenterCrop(80)])[0]
    gray = ss.mapfields(ss.imagefolder(folder), image=[ops.CenterCrop(16)])  # sample 2 is a grayscale JPEG
    with pytest.raises(ValueError, match=r"sample 2 .*\(16, 16, 1\).*\(16, 16, 3\).*put ops\.ToRGB\(\) in the pipeline"):
        list(ss.DataLoader(gray, batch_size=4))


def test_a_loaders_shape_mismatch_names_the_file_of_the_sample(folder):
    with pytest.raises(ValueError) as caught:  # sample 1 is another size than sample 0
        list(ss.DataLoader(ss.imagefolder(folder, decode=True), batch_size=4))
    shown = "\n".join([str(caught.value), *getattr(caught.value, "__notes__", [])])
    assert f"sample 1 (file {folder / 'cat' / '1.png'})" in shown, shown
    gray = ss.mapfields(ss.imagefolder(folder), image=[ops.CenterCrop(16)])  # sample 2 is a grayscale JPEG
    for workers in (0, 2):
        with pytest.raises(ValueError) as caught:
            list(ss.DataLoader(gray, batch_size=4, workers=workers))
        shown = "\n".join([str(caught.value), *getattr(caught.value, "__notes__", [])])
        assert f"sample 2 (file {folder / 'cat' / '2.jpg'})" in shown and "ops.ToRGB()" in shown, shown
