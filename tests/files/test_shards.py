"""files.shards: ``ss.open([...])`` reads several packed files as one dataset, in list order."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from helpers import assert_same, snapshot
from packed import photo_like

import slipstream as ss
from slipstream import fields as F
from slipstream import ops

_FIELDS = {"image": F.Image(codec="jpeg"), "label": F.Int(), "x": F.Array("float32", (2,))}


def _samples(n: int) -> list[dict[str, Any]]:
    return [{"image": photo_like(40 + 7 * (k % 4), 52 - 5 * (k % 3), seed=k), "label": k, "x": np.full(2, k, np.float32)} for k in range(n)]


def _shards_and_whole(tmp_path: Any, sizes: tuple[int, ...] = (7, 12, 5)) -> tuple[Any, Any]:
    samples = _samples(sum(sizes))
    paths, start = [], 0
    for k, size in enumerate(sizes):
        paths.append(ss.write(tmp_path / f"shard-{k}.arrow", samples[start : start + size], _FIELDS, progress=False, page_size=12_000))
        start += size
    whole = ss.write(tmp_path / "whole.arrow", samples, _FIELDS, progress=False)
    return ss.open(paths), ss.open(whole)


def test_shards_read_as_the_file_of_all_their_samples(tmp_path):
    shards, whole = _shards_and_whole(tmp_path)
    assert isinstance(shards, ss.ShardedDataset) and len(shards) == len(whole) == 24
    for i in (0, 6, 7, 18, 19, 23, -1, -24):
        assert_same(shards[i], whole[i], f"sample {i}")
    # each shard's pages, numbered after the samples of the shards before it
    expected = np.concatenate([s.page_starts() + off for s, off in zip(shards.shards, (0, 7, 19))])
    assert shards.num_pages == len(expected) > 3 and (shards.page_starts() == expected).all()
    assert shards.source_of(8).name == "shard-1.arrow"
    with pytest.raises(IndexError, match="sample index 24 is out of range for 24 samples in 3 shards"):
        shards[24]


@pytest.mark.parametrize(("workers", "backend"), [(0, "thread"), (3, "thread"), (2, "process"), (2, "helper")])
def test_a_loader_gives_the_same_batches_from_shards_as_from_one_file(tmp_path, workers, backend):
    shards, whole = _shards_and_whole(tmp_path)
    pipeline = [ops.RandomResizedCrop(16), ops.RandomHorizontalFlip(), ops.ToCHW()]

    def epochs(ds: Any, **kwargs: Any) -> list[Any]:
        with ss.DataLoader(ds.map(image=pipeline), 5, shuffle=True, seed=3, workers=workers, backend=backend, **kwargs) as loader:
            return [[snapshot(b) for b in loader] for _ in range(2)]

    assert_same(epochs(shards), epochs(whole), "shuffled")
    for rank in range(2):
        assert_same(epochs(shards, rank=rank, world_size=2), epochs(whole, rank=rank, world_size=2), f"rank {rank}")


def test_quasi_random_order_covers_every_sample_of_every_shard_once_per_epoch(tmp_path):
    shards, _ = _shards_and_whole(tmp_path)
    labels_only = ss.open([shard.path for shard in shards.shards], fields=["label", "x"])
    loader = ss.DataLoader(labels_only, 4, order="quasi_random", seed=5, workers=2)
    for _ in range(2):
        labels = np.concatenate([b["label"] for b in loader])
        assert sorted(labels.tolist()) == list(range(24))
    assert not np.array_equal(labels, np.arange(24))


def test_shards_with_other_fields_are_refused_naming_the_shard(tmp_path):
    a = ss.write(tmp_path / "a.arrow", [{"label": 1}], {"label": F.Int()}, progress=False)
    b = ss.write(tmp_path / "b.arrow", [{"label": 1.5}], {"label": F.Float()}, progress=False)
    with pytest.raises(ss.ShardMismatchError, match=r"b\.arrow: holds fields .*Float.* but the first shard .*a\.arrow.* holds"):
        ss.open([a, b])
    with pytest.raises(ValueError, match="at least one packed file"):
        ss.open([])


def test_shards_whose_class_names_differ_are_refused_naming_the_shard_and_both_lists(tmp_path):
    def shard(name: str, names: list[str] | None) -> Any:
        metadata = None if names is None else {"class_names": {"label": names}, "note": name}
        return ss.write(tmp_path / f"{name}.arrow", [{"label": 0}, {"label": 1}], {"label": F.Int()}, progress=False, metadata=metadata)

    a, b, same, bare = shard("a", ["cat", "dog"]), shard("b", ["dog", "cat"]), shard("same", ["cat", "dog"]), shard("bare", None)
    with pytest.raises(ss.ShardMismatchError, match=r"b\.arrow: .*'label'.*\['dog', 'cat'\].*a\.arrow.*\['cat', 'dog'\]") as caught:
        ss.open([a, same, b])
    assert str(caught.value.path) == str(b)
    # the same names (other metadata may differ), and shards that name no classes, are one dataset
    assert ss.open([a, same]).metadata["class_names"] == {"label": ["cat", "dog"]}
    assert len(ss.open([a, bare, same])) == 6


def test_a_damaged_jpeg_in_a_later_shard_names_that_shard(tmp_path):
    shards, _ = _shards_and_whole(tmp_path)
    path = shards.shards[1].path
    data = shards.shards[1].encoded(3, "image")[1].tobytes()
    raw = bytearray(path.read_bytes())
    start = raw.find(data)
    cut = start + len(data) * 2 // 3
    raw[cut : start + len(data)] = b"\xff\xd9" + bytes(start + len(data) - cut - 2)
    path.write_bytes(bytes(raw))
    damaged = ss.open([s.path for s in shards.shards]).map(image=[ops.CenterCrop(8)])
    with pytest.raises(ss.CorruptFileError, match=r"shard-1\.arrow: sample 10, field 'image': cannot decode jpeg image"):
        list(ss.DataLoader(damaged, 24))
    with pytest.raises(ss.ChecksumError, match=r"shard-1\.arrow: page 0"):
        ss.open([s.path for s in shards.shards]).validate()


def test_a_checksum_error_locates_its_page_and_samples_in_the_dataset(tmp_path):
    shards, _ = _shards_and_whole(tmp_path)
    shard = shards.shards[1]
    starts = shard.page_starts()
    assert shard.num_pages >= 2
    starts = [*starts.tolist(), len(shard)][:3]
    data = shard.encoded(int(starts[1]), "image")[1].tobytes()  # a JPEG of the shard's page 1
    raw = bytearray(shard.path.read_bytes())
    at = raw.find(data)
    raw[at + len(data) // 2] ^= 0xFF
    shard.path.write_bytes(bytes(raw))
    with pytest.raises(ss.ChecksumError) as e:
        ss.open([s.path for s in shards.shards]).validate()
    first, pages_before = len(shards.shards[0]), shards.shards[0].num_pages  # shard 1 starts at sample 7
    own = range(int(starts[1]), int(starts[2]))
    assert e.value.samples == range(first + own.start, first + own.stop) and e.value.page == pages_before + 1
    assert e.value.path == str(shard.path)
    assert f"page 1 (samples {own.start}..{own.stop - 1})" in str(e.value)  # the shard's own numbers, named
    assert f"in the dataset: page {pages_before + 1}, samples {first + own.start}..{first + own.stop - 1}" in str(e.value)


def _folder(tmp_path: Any) -> Any:
    samples = [{"label": k, "x": np.full(2, k, np.float32)} for k in range(60)]
    return ss.write(tmp_path / "ds", samples, {"label": F.Int(), "x": F.Array("float32", (2,))}, progress=False, page_size=300, shard_size=900)


def test_an_index_that_lists_one_shard_twice_is_refused(tmp_path):
    import json

    folder = _folder(tmp_path)
    index = json.loads((folder / "index.json").read_text())
    assert len(index["shards"]) >= 2
    index["shards"].append(index["shards"][0])
    index["samples"] += index["shards"][0]["samples"]  # consistent otherwise: only the repeat is wrong
    (folder / "index.json").write_text(json.dumps(index))
    with pytest.raises(ss.CorruptFileError, match=r"index\.json: not a valid sharded-dataset index: it lists shard 'shard-00000\.arrow' twice"):
        ss.open(folder)


@pytest.mark.parametrize("depth", [100_000, 3_000])
def test_a_deeply_nested_index_is_a_corrupt_file_error(tmp_path, depth):
    folder = _folder(tmp_path)
    (folder / "index.json").write_text('{"format": "slipstream.shards", "x": ' + "[" * depth + "]" * depth + "}")
    with pytest.raises(ss.CorruptFileError, match=r"index\.json: not a valid sharded-dataset index"):
        ss.open(folder)
