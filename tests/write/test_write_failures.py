"""``ss.write`` and a sample that fails: by default a short error naming the sample, its file and
field; with ``on_error="skip"`` every good sample written in order and the bad ones listed."""

from __future__ import annotations

import filecmp
import traceback
from pathlib import Path

import numpy as np
import pytest
from jpegs import encode_jpeg
from packed import photo_like

import slipstream as ss
from slipstream import fields as F
from slipstream.write.failures import SkippedSamplesWarning

BAD = {3: b"not an image at all", 8: None, 11: "cut"}  # sample -> what its file holds (None: a grayscale PNG, fine)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """Two classes of 7 images (varied sizes); sample 3's file is not an image, sample 11's JPEG is cut short."""
    root = tmp_path / "tree"
    for label, cls in enumerate(["cat", "dog"]):
        (root / cls).mkdir(parents=True)
        for k in range(7):
            index = 7 * label + k
            data = encode_jpeg(photo_like(20 + k, 24 + 2 * k, seed=index), quality=85)
            if BAD.get(index) == "cut":
                data = data[:150]
            elif isinstance(BAD.get(index), bytes):
                data = BAD[index]
            (root / cls / f"{k}.jpg").write_bytes(data)
    return root


def _paths(ds) -> list[str]:
    return [ds[i]["path"] for i in range(len(ds))]


def _good_paths(tree: Path) -> list[str]:
    folder = ss.imagefolder(tree)
    return [folder.samples[i][0] for i in range(len(folder)) if i not in (3, 11)]


def test_the_default_stops_at_the_first_bad_sample_with_a_short_error_naming_its_file_and_field(tree, tmp_path):
    out = tmp_path / "out.arrow"
    with pytest.raises(ValueError) as caught:
        ss.write(out, ss.imagefolder(tree), progress=False)
    first_line = str(caught.value).splitlines()[0]
    assert first_line.startswith(f"sample 3 (file {tree / 'cat' / '3.jpg'}), field 'image': bytes that are not an image"), first_line
    notes = getattr(caught.value, "__notes__", [])
    assert any("on_error='skip'" in note for note in notes) and not any("loadparallel" in note for note in notes), notes
    frames = traceback.extract_tb(caught.value.__traceback__)
    inside = [f for f in frames if "/slipstream/" in f.filename.replace("\\", "/") and "/tests/" not in f.filename]
    assert [f.name for f in inside] == ["write"], [(f.filename, f.name) for f in frames]  # no threads, no encoders
    assert not out.exists() and not list(tmp_path.glob(".out.arrow.*"))


def test_a_containers_own_error_keeps_its_frames_and_says_which_sample(tmp_path):
    class Data:
        def __len__(self):
            return 6

        def __getitem__(self, i):
            if i == 4:
                raise KeyError(f"no record {i}")
            return {"x": i}

    with pytest.raises(KeyError) as caught:
        ss.write(tmp_path / "d.arrow", Data(), progress=False)
    assert [f.name for f in traceback.extract_tb(caught.value.__traceback__)][-1] == "__getitem__"
    assert "while reading sample 4" in caught.value.__notes__


def test_skip_writes_every_good_sample_in_order_and_lists_each_bad_one_with_why(tree, tmp_path):
    out = tmp_path / "out.arrow"
    with pytest.warns(SkippedSamplesWarning, match=r"left out 2 of 14 samples .*sample 3 \(file .*3\.jpg\), field 'image'"):
        ss.write(out, ss.imagefolder(tree), progress=False, on_error="skip")
    ds = ss.open(out)
    ds.validate()
    assert _paths(ds) == _good_paths(tree)
    assert [ds[i]["label"] for i in range(len(ds))] == [0] * 6 + [1] * 6
    skipped = ds.metadata["skipped"]
    assert [(e["sample"], e["origin"], e["field"]) for e in skipped] == [
        (3, f"file {tree / 'cat' / '3.jpg'}", "image"),
        (11, f"file {tree / 'dog' / '4.jpg'}", "image"),
    ]
    assert skipped[0]["error"].startswith("ValueError: bytes that are not an image Pillow can read")
    assert skipped[1]["error"].startswith("ValueError: the JPEG bytes do not decode")
    assert ds.metadata["class_names"] == {"label": ["cat", "dog"]}
    reference = tmp_path / "ref.arrow"  # the good samples alone give the same pages
    good = ss.imagefolder(tree)
    good.samples = [s for i, s in enumerate(good.samples) if i not in (3, 11)]
    ss.write(reference, good, progress=False)
    ref = ss.open(reference)
    for i in range(len(ds)):
        assert ds.encoded(i, "image")[1].tobytes() == ref.encoded(i, "image")[1].tobytes()


def test_skip_with_nothing_bad_records_an_empty_list_and_warns_nothing(tmp_path, recwarn):
    out = ss.write(tmp_path / "ok.arrow", [{"x": i} for i in range(5)], progress=False, on_error="skip")
    assert ss.open(out).metadata == {"skipped": []} and [ss.open(out)[i]["x"] for i in range(5)] == list(range(5))
    assert not [w for w in recwarn if issubclass(w.category, SkippedSamplesWarning)]


def test_skip_leaves_out_an_iterables_samples_that_fail_to_encode(tmp_path):
    samples = ({"x": "five" if i == 5 else i, "y": np.full(2, i)} for i in range(9))
    with pytest.warns(SkippedSamplesWarning):
        ss.write(tmp_path / "it.arrow", samples, {"x": F.Int(), "y": F.Array()}, progress=False, on_error="skip")
    ds = ss.open(tmp_path / "it.arrow")
    assert [ds[i]["x"] for i in range(len(ds))] == [0, 1, 2, 3, 4, 6, 7, 8]
    assert ds.metadata["skipped"] == [{"sample": 5, "field": "x", "error": "TypeError: int field expects an integer, got str 'five'"}]


@pytest.mark.parametrize("engine", [None, "processes"])
def test_skip_into_shards_lists_the_bad_ones_in_every_shard_and_the_index(tree, tmp_path, engine):
    one = tmp_path / "one.arrow"
    with pytest.warns(SkippedSamplesWarning):
        ss.write(one, ss.imagefolder(tree), progress=False, on_error="skip")
    folder = tmp_path / f"shards-{engine}"
    with pytest.warns(SkippedSamplesWarning):
        ss.write(folder, ss.imagefolder(tree), progress=False, on_error="skip", shard_size="3kB", page_size=1000, engine=engine, workers=2)
    ds = ss.open(folder)
    ds.validate()
    assert len(ds.shards) > 2 and _paths(ds) == _paths(ss.open(one))
    assert all(shard.metadata["skipped"] == ss.open(one).metadata["skipped"] for shard in ds.shards)
    assert ds.metadata == ss.open(one).metadata
    if engine == "processes":  # the same bytes as one process
        here = tmp_path / "shards-None"
        with pytest.warns(SkippedSamplesWarning):
            ss.write(here, ss.imagefolder(tree), progress=False, on_error="skip", shard_size="3kB", page_size=1000)
        names = sorted(p.name for p in here.iterdir() if not p.name.startswith("."))
        assert names == sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))
        assert all(filecmp.cmp(here / n, folder / n, shallow=False) for n in names)


def test_a_write_in_which_every_sample_fails_raises_and_leaves_nothing(tmp_path):
    samples = [{"image": b"junk"} for _ in range(4)]
    with pytest.raises(ValueError, match=r"every sample failed \(4\).*sample 0, field 'image'"):
        ss.write(tmp_path / "none.arrow", samples, {"image": F.Image()}, progress=False, on_error="skip")
    with pytest.raises(ValueError, match="every one of the 4 samples probed"):
        ss.write(tmp_path / "none", samples, {"image": F.Image()}, progress=False, on_error="skip", shard_size="1MB")
    assert not (tmp_path / "none.arrow").exists() and not (tmp_path / "none").exists()


def test_what_the_skip_policy_cannot_do_is_refused_before_any_work(tmp_path):
    samples = [{"x": i} for i in range(4)]
    with pytest.raises(ValueError, match="on_error must be 'raise'"):
        ss.write(tmp_path / "a.arrow", samples, on_error="ignore")
    with pytest.raises(ValueError, match=r"metadata\['skipped'\] is where on_error='skip' lists"):
        ss.write(tmp_path / "a.arrow", samples, metadata={"skipped": 1}, on_error="skip")
    with pytest.raises(TypeError, match="on_error='skip' with shard_size= needs a container"):
        ss.write(tmp_path / "b", iter(samples), shard_size="1MB", on_error="skip")
    folder = ss.write(tmp_path / "c", samples, shard_size="1MB", progress=False)
    with pytest.raises(ValueError, match="append=True keeps as it is"):
        ss.write(folder, samples, shard_size="1MB", append=True, on_error="skip")
    assert not (tmp_path / "a.arrow").exists() and not (tmp_path / "b").exists()


class _AllBad:
    def __len__(self) -> int:
        return 5

    def __getitem__(self, i: int):
        if not 0 <= i < 5:
            raise IndexError(i)
        raise ValueError(f"broken sample {i}")


@pytest.mark.parametrize("shard_size", [None, 300], ids=["file", "shards"])
def test_a_skip_write_in_which_every_sample_fails_says_so_and_does_not_suggest_skip(tmp_path, shard_size):
    """A skip write of a container none of whose samples reads says that every sample failed (and
    the first's error), not the first's error with advice to pass the policy it was given."""
    path = tmp_path / ("out" if shard_size else "out.arrow")
    with pytest.raises(Exception) as caught:
        ss.write(path, _AllBad(), {"x": F.Int()}, on_error="skip", shard_size=shard_size, progress=False)
    text = "\n".join([str(caught.value), *getattr(caught.value, "__notes__", [])])
    assert "pass on_error='skip'" not in text, text
    assert "every sample failed" in text, text
