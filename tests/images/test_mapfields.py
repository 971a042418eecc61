"""``ss.open(p).map(image=[ops...])``: a mapped packed file gives fixed-size batches, bit-identical for a seed
with any worker count, close to Pillow's resize and crop; custom and Numba-compiled ops after the fused
geometry; decode options; errors naming the problem; strict checks remembered across epochs and workers."""

import numpy as np
import pytest
from helpers import assert_same, snapshot
from jpegs import decode_jpeg, encode_jpeg
from packed import photo_like
from PIL import Image

import slipstream as ss
from slipstream import fields as F
from slipstream import ops


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    """A small packed file of photo-like JPEGs of varied sizes, and the images themselves."""
    images = [photo_like(60 + 7 * (k % 5), 80 - 5 * (k % 4), seed=k) for k in range(24)]
    path = tmp_path_factory.mktemp("mapfields") / "train.arrow"
    ss.write(path, [{"image": im, "label": k} for k, im in enumerate(images)], {"image": F.Image(codec="jpeg", quality=95), "label": F.Int()}, progress=False)
    return path, images


def train_pipeline(size=32):
    return [ops.RandomResizedCrop(size), ops.RandomHorizontalFlip(), ops.ToCHW()]


def test_a_mapped_packed_file_gives_fixed_size_chw_batches(jpegs):
    path, _ = jpegs
    train = ss.open(path).map(image=train_pipeline())
    batch = next(iter(ss.DataLoader(train, 8, shuffle=True, seed=0, workers=2)))
    assert batch["image"].shape == (8, 3, 32, 32) and batch["image"].dtype == np.uint8
    assert batch["label"].shape == (8,)


@pytest.mark.parametrize("workers", [1, 8])
def test_the_same_seed_gives_bit_identical_batches_with_any_worker_count(jpegs, workers):
    path, _ = jpegs
    train = ss.open(path).map(image=train_pipeline())
    reference = [snapshot(b) for b in ss.DataLoader(train, 6, shuffle=True, seed=3, workers=0)]
    got = [snapshot(b) for b in ss.DataLoader(train, 6, shuffle=True, seed=3, workers=workers)]
    for x, y in zip(got, reference):
        assert_same(x, y)
    other = [snapshot(b) for b in ss.DataLoader(train, 6, shuffle=True, seed=4, workers=0)]
    assert not np.array_equal(other[0]["image"], reference[0]["image"])


def test_center_crop_matches_pillows_resize_then_crop_closely(jpegs):
    path, images = jpegs
    val = ss.open(path).map(image=[ops.CenterCrop(48, resize=56)])
    got = val[3]["image"]
    decoded = decode_jpeg(encode_jpeg(images[3], quality=95, colorsubsampling="420"))
    pil = Image.fromarray(decoded)
    w, h = pil.size
    new = (56, int(56 * h / w)) if w <= h else (int(56 * w / h), 56)
    resized = np.asarray(pil.resize(new, Image.Resampling.BILINEAR))
    top, left = int(round((resized.shape[0] - 48) / 2)), int(round((resized.shape[1] - 48) / 2))
    reference = resized[top : top + 48, left : left + 48]
    assert got.shape == (48, 48, 3)
    assert np.abs(got.astype(int) - reference).mean() < 3  # one resampling pass instead of two


def test_normalize_to_float16_chw_in_the_same_pass(jpegs):
    path, _ = jpegs
    mean, std = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
    plain = ss.open(path).map(image=[ops.CenterCrop(40, resize=48), ops.ToCHW()])[5]["image"]
    normed = ss.open(path).map(image=[ops.CenterCrop(40, resize=48), ops.Normalize(mean, std, dtype="float16"), ops.ToCHW()])[5]["image"]
    assert normed.dtype == np.float16 and normed.shape == (3, 40, 40)
    expected = ((plain.astype(np.float32) / 255 - np.array(mean, np.float32)[:, None, None]) / np.array(std, np.float32)[:, None, None])
    np.testing.assert_allclose(normed.astype(np.float32), expected, atol=2e-3)


def test_any_container_with_encoded_bytes_or_arrays_can_be_mapped():
    images = [photo_like(40, 50, seed=k) for k in range(4)]
    encoded = [{"image": encode_jpeg(im, quality=90), "label": k} for k, im in enumerate(images)]
    arrays = [{"image": im, "label": k} for k, im in enumerate(images)]
    for data in (encoded, arrays):
        mapped = ss.mapfields(data, image=[ops.Resize((20, 25))])
        sample = mapped[2]
        assert sample["image"].shape == (20, 25, 3) and sample["label"] == 2
        batch = next(iter(ss.DataLoader(mapped, 4, workers=2)))
        assert batch["image"].shape == (4, 20, 25, 3)
    exact = np.asarray(Image.fromarray(images[1]).resize((25, 20), Image.Resampling.BILINEAR))
    np.testing.assert_array_equal(ss.mapfields(arrays, image=[ops.Resize((20, 25))])[1]["image"], exact)


def test_a_custom_op_runs_after_the_fused_geometry():
    def invert(image):
        return 255 - image

    data = [{"image": photo_like(30, 30, seed=1)}]
    plain = ss.mapfields(data, image=[ops.Resize((10, 10))])[0]["image"]
    custom = ss.mapfields(data, image=[ops.Resize((10, 10)), ops.Apply(invert), ops.ToCHW()])[0]["image"]
    np.testing.assert_array_equal(custom, (255 - plain).transpose(2, 0, 1))


def test_a_numba_compiled_op_runs_in_the_pipeline():
    numba = pytest.importorskip("numba")

    @numba.njit(nogil=True, cache=False)
    def darken(image):
        out = np.empty_like(image)
        for i in range(image.shape[0]):
            for j in range(image.shape[1]):
                for c in range(image.shape[2]):
                    out[i, j, c] = image[i, j, c] // 2
        return out

    data = [{"image": photo_like(30, 30, seed=2)}]
    plain = ss.mapfields(data, image=[ops.Resize((12, 12))])[0]["image"]
    np.testing.assert_array_equal(ss.mapfields(data, image=[ops.Resize((12, 12)), darken])[0]["image"], plain // 2)


def test_mapping_errors_name_the_problem(jpegs):
    path, _ = jpegs
    with pytest.raises(KeyError, match="no field 'photo' to map"):
        ss.open(path).map(photo=[ops.ToCHW()])
    with pytest.raises(TypeError, match="list of slipstream.ops"):
        ss.open(path).map(image=[3])
    with pytest.raises(TypeError, match="needs dict samples"):
        ss.mapfields([np.zeros((4, 4, 3), np.uint8)], image=[ops.ToCHW()])[0]
    with pytest.raises(ValueError, match="mapped already"):
        ss.open(path).map(image=[ops.ToCHW()]).map(image=[ops.ToCHW()])


def test_decode_options_trade_exactness_for_speed_and_stay_deterministic(jpegs):
    path, _ = jpegs
    crop = [ops.CenterCrop(16, resize=20)]
    default = ss.open(path).map(image=crop)[2]["image"]
    exact = ss.open(path).map(image=[ops.Decode(exact=True), *crop])[2]["image"]
    fast = ss.open(path).map(image=[ops.Decode(fast=True), *crop])
    assert np.abs(default.astype(int) - exact).mean() < 4  # a reduced DCT scale vs a full decode
    np.testing.assert_array_equal(fast[2]["image"], fast[2]["image"])
    assert np.abs(fast[2]["image"].astype(int) - default).mean() < 4
    with pytest.raises(ValueError, match="at most one Decode"):
        ss.open(path).map(image=[ops.Decode(), ops.Decode()])


def test_a_custom_op_whose_dtype_widens_later_is_refused_like_default_collate_not_cast():
    """The first batch's float32 output shapes the batch; a later float64 result was copied in with
    same_kind casting (silently rounded) where default_collate refuses the unsafe cast."""

    def widen(image):
        return image.astype(np.float32 if image[0, 0, 0] < 4 else np.float64)

    data = [{"image": np.full((8, 8, 3), i, np.uint8)} for i in range(8)]
    mapped = ss.mapfields(data, image=[ops.Apply(widen)])
    with pytest.raises(TypeError, match="float64.*float32"):
        list(ss.DataLoader(mapped, 4))
    with pytest.raises(TypeError, match="float64.*float32"):
        ss.default_collate([mapped[i] for i in (0, 4)])


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_samples_checked_strictly_once_are_remembered_across_epochs_and_worker_processes(tmp_path, backend):
    """The strict JPEG check (the rows below the crop) is paid once per sample: marks made in forked
    worker processes land in shared memory, so the parent and later epochs' workers see them."""
    import pickle

    from slipstream.images import pipeline as _pipeline

    marked = b"\x01" * 12 if _pipeline._roi is not None else bytes(12)  # whole decodes need no marks
    images = [np.full((40, 48, 3), 10 * k, np.uint8) for k in range(12)]
    path = ss.write(tmp_path / "m.arrow", [{"image": im} for im in images], {"image": F.Image(codec="jpeg")}, progress=False)
    mapped = ss.open(path).map(image=[ops.RandomResizedCrop(16), ops.ToCHW()])
    with ss.DataLoader(mapped, 4, shuffle=True, seed=0, workers=2, backend=backend, mp_context="fork") as loader:
        first = [b["image"].copy() for b in loader]
        assert bytes(mapped._checked["image"]) == marked  # every sample marked: decoded by region
        again = [b["image"].copy() for b in loader]
    fresh = ss.DataLoader(ss.open(path).map(image=[ops.RandomResizedCrop(16), ops.ToCHW()]), 4, shuffle=True, seed=0)
    next(iter(fresh))  # epoch 0 of a fresh loader, then its epoch 1: the same batches as the marked run's
    np.testing.assert_array_equal(np.concatenate(again), np.concatenate([b["image"] for b in fresh]))
    assert len(first) == 3
    copy = pickle.loads(pickle.dumps(mapped))  # spawned workers: the marks travel as a copy
    assert bytes(copy._checked["image"]) == marked and copy[3]["image"].shape == (3, 16, 16)
