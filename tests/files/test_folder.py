"""files.folder: ``ss.write(folder, data, shard_size=...)`` writes shards and their index; ``ss.open(folder)`` reads them."""

from __future__ import annotations

import json
import os
from typing import Any

import numpy as np
import pytest
from helpers import assert_same
from hypothesis import given, settings
from hypothesis import strategies as st
from packed import photo_like

import slipstream as ss
from slipstream import fields as F
from slipstream.files import folder as _folder
from slipstream.files.format import page_checksum

_FIELDS = {"image": F.Image(codec="jpeg"), "label": F.Int(), "x": F.Array("float32", (64,))}


def _samples(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {"image": photo_like(30 + 5 * (k % 3), 40 - 4 * (k % 2), seed=k), "label": k, "x": np.full(64, k, np.float32)} for k in range(start, start + n)
    ]


def test_a_sharded_write_reads_back_as_the_single_file(tmp_path):
    samples = _samples(60)
    whole = ss.open(ss.write(tmp_path / "whole.arrow", samples, _FIELDS, progress=False))
    folder = ss.write(tmp_path / "ds", samples, _FIELDS, progress=False, page_size=4_000, shard_size="12kB")
    names = sorted(os.listdir(folder))
    assert names[0] == "index.json" and names[1] == "shard-00000.arrow" and len(names) > 3
    ds = ss.open(folder)
    assert isinstance(ds, ss.ShardedDataset) and len(ds) == 60 and len(ds.shards) == len(names) - 1
    for i in (0, 1, 17, 33, 59, -1):
        assert_same(ds[i], whole[i], f"sample {i}")
    ds.validate()
    # each shard is a complete packed file of whole pages, of about shard_size (write.shardplan: equal runs of samples)
    index = json.loads((folder / "index.json").read_text())
    assert index["samples"] == 60 and [e["samples"] for e in index["shards"]] == [len(s) for s in ds.shards]
    for entry, shard in zip(index["shards"], ds.shards):
        assert entry["bytes"] == os.path.getsize(folder / entry["file"]) and len(entry["pages"]) == shard.num_pages
        assert [p[3] for p in entry["pages"]] == np.diff(np.append(shard.page_starts(), len(shard))).tolist()
    assert all(9_000 <= e["bytes"] <= 15_000 for e in index["shards"])  # alike samples: within a sample or two of 12 kB
    counts = [e["samples"] for e in index["shards"]]
    assert max(counts) - min(counts) <= 1


def test_the_index_locates_every_page_by_its_bytes(tmp_path):
    """What a remote reader relies on: each page's byte range parses to the page, and its checksum is the page's."""
    import pyarrow as pa

    folder = ss.write(tmp_path / "ds", _samples(30), _FIELDS, progress=False, page_size=3_000, shard_size=10_000)
    index = _folder.read_local_index(folder)
    for entry in index["shards"]:
        raw = (folder / entry["file"]).read_bytes()
        reader = pa.ipc.open_file(pa.py_buffer(raw))
        for p, (offset, length, header, rows, crc) in enumerate(entry["pages"]):
            batch = pa.ipc.read_record_batch(pa.ipc.read_message(pa.py_buffer(raw[offset : offset + length])), index["schema"])
            assert batch.equals(reader.get_batch(p)) and batch.num_rows == rows and 0 < header < length
            assert page_checksum(batch) == crc


def test_append_adds_shards_and_keeps_what_was_there(tmp_path):
    first, more = _samples(25), _samples(14, start=25)
    folder = ss.write(tmp_path / "ds", first, _FIELDS, progress=False, page_size=4_000, shard_size="10kB", metadata={"source": "a"})
    before = sorted(os.listdir(folder))
    stamps = {name: os.stat(folder / name).st_mtime_ns for name in before if name.startswith("shard-")}
    ss.write(folder, more, progress=False, shard_size="10kB", append=True)
    ds = ss.open(folder)
    assert len(ds) == 39 and ds.metadata == {"source": "a"}
    for i in (0, 24, 25, 38):
        assert ds[i]["label"] == i
    assert all(os.stat(folder / name).st_mtime_ns == stamp for name, stamp in stamps.items())  # old shards untouched
    new = sorted(set(os.listdir(folder)) - set(before))
    assert new and new[0] == f"shard-{len(stamps):05d}.arrow"


def test_append_refuses_other_fields_and_folders_that_are_not_datasets(tmp_path):
    folder = ss.write(tmp_path / "ds", _samples(5), _FIELDS, progress=False, shard_size="1MB")
    with pytest.raises(ValueError, match="append=True must write the dataset's fields"):
        ss.write(folder, [{"label": 1}], {"label": F.Int()}, progress=False, shard_size="1MB", append=True)
    with pytest.raises(ValueError, match="keeps the dataset's metadata"):
        ss.write(folder, _samples(2), progress=False, shard_size="1MB", append=True, metadata={"other": 1})
    with pytest.raises(FileExistsError, match="not an empty folder"):
        ss.write(folder, _samples(2), _FIELDS, progress=False, shard_size="1MB")
    (tmp_path / "plain").mkdir()
    with pytest.raises(ss.MissingShardError, match="without index.json"):
        ss.write(tmp_path / "plain", _samples(2), _FIELDS, progress=False, shard_size="1MB", append=True)
    with pytest.raises(ValueError, match="pass shard_size"):
        ss.write(tmp_path / "x.arrow", _samples(2), _FIELDS, progress=False, append=True)
    with pytest.raises(ValueError, match="shard_size must be"):
        ss.write(tmp_path / "y", _samples(2), _FIELDS, progress=False, shard_size="12 parsecs")


def test_an_interrupted_write_leaves_no_index_and_no_temporary_files(tmp_path):
    def samples():
        yield from _samples(20)
        raise RuntimeError("the source failed")

    with pytest.raises(RuntimeError, match="the source failed"):
        ss.write(tmp_path / "ds", samples(), _FIELDS, progress=False, page_size=2_000, shard_size=5_000)
    names = os.listdir(tmp_path / "ds")
    assert "index.json" not in names and not [n for n in names if n.startswith(".")]
    with pytest.raises(ss.MissingShardError, match="not a sharded dataset"):
        ss.open(tmp_path / "ds")


def test_shards_that_changed_since_the_index_are_named(tmp_path):
    folder = ss.write(tmp_path / "ds", _samples(30), _FIELDS, progress=False, page_size=3_000, shard_size=10_000)
    (folder / "shard-00001.arrow").rename(tmp_path / "moved.arrow")
    with pytest.raises(ss.MissingShardError, match="shard-00001.arrow: listed in .*index.json but missing"):
        ss.open(folder)
    other = ss.write(tmp_path / "other.arrow", _samples(3), _FIELDS, progress=False)
    os.replace(other, folder / "shard-00001.arrow")
    with pytest.raises(ss.ShardMismatchError, match="shard-00001.arrow: is .* bytes but the index says"):
        ss.open(folder)
    index = json.loads((folder / "index.json").read_text())
    index["shards"][1]["bytes"] = os.path.getsize(folder / "shard-00001.arrow")  # same size, other samples
    (folder / "index.json").write_text(json.dumps(index))
    with pytest.raises((ss.ShardMismatchError, ss.CorruptFileError), match="shard-00001.arrow"):
        ss.open(folder)


def test_a_damaged_index_is_named(tmp_path):
    folder = ss.write(tmp_path / "ds", _samples(4), _FIELDS, progress=False, shard_size="1MB")
    (folder / "index.json").write_text('{"format": "something else"}')
    with pytest.raises(ss.CorruptFileError, match="index.json: not a valid sharded-dataset index"):
        ss.open(folder)


@settings(max_examples=15, deadline=None)
@given(n=st.integers(0, 40), page=st.integers(500, 6_000), shard=st.integers(1, 30_000))
def test_any_shard_and_page_size_keeps_every_sample_in_order(tmp_path_factory, n, page, shard):
    folder = tmp_path_factory.mktemp("ds") / "ds"
    samples = [{"label": k, "x": np.full(64, k, np.float32)} for k in range(n)]
    ss.write(folder, samples, {"label": F.Int(), "x": F.Array("float32", (64,))}, progress=False, page_size=page, shard_size=shard)
    ds = ss.open(folder)
    assert len(ds) == n and [ds[i]["label"] for i in range(n)] == list(range(n))
    assert all(len(s) for s in ds.shards) or n == 0


def test_inspect_reads_a_sharded_folder(tmp_path):
    from helpers import run_python

    folder = ss.write(tmp_path / "ds", _samples(30), _FIELDS, progress=False, page_size=3_000, shard_size=10_000)
    n = len(ss.open(folder).shards)
    out = run_python(f"import sys; from slipstream.cli.main import main; sys.exit(main(['inspect', {str(folder)!r}, '--validate']))")
    assert out.returncode == 0, out.stderr
    assert f"({n} shards)" in out.stdout and "samples   30" in out.stdout and "checksums ok" in out.stdout


@pytest.mark.parametrize("how", ["list", "iterable"])
@pytest.mark.parametrize("given_fields", [False, True])
def test_appending_keeps_the_datasets_field_order_when_it_is_not_alphabetical(tmp_path, how, given_fields):
    fields = {"x": F.Int(), "a": F.Text()}  # stored in this order; its specs are JSON with sorted keys
    rows = [{"x": i, "a": str(i)} for i in range(7)]
    folder = ss.write(tmp_path / "ds", rows[:4], fields, shard_size=0, progress=False)
    more = rows[4:] if how == "list" else iter(rows[4:])
    ss.write(folder, more, dict(fields) if given_fields else None, shard_size=0, append=True, progress=False)
    ds = ss.open(folder)
    assert list(ds.fields) == ["x", "a"] and [ds[i] for i in range(len(ds))] == rows


def test_appending_the_same_fields_in_another_order_keeps_the_datasets_order(tmp_path):
    folder = ss.write(tmp_path / "ds", [{"x": 1, "a": "1"}], {"x": F.Int(), "a": F.Text()}, shard_size=0, progress=False)
    ss.write(folder, [{"x": 2, "a": "2"}], {"a": F.Text(), "x": F.Int()}, shard_size=0, append=True, progress=False)
    ds = ss.open(folder)
    assert list(ds.fields) == ["x", "a"] and [ds[i]["x"] for i in range(2)] == [1, 2]


class _BadAt:
    """200 samples ``{"x": i}``; sample ``bad`` cannot be read."""

    def __init__(self, bad: int, n: int = 200):
        self.bad, self.n = bad, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, Any]:
        if i == self.bad:
            raise ValueError("broken sample")
        return {"x": i}


@pytest.mark.parametrize("how", ["container", "iterable"])
def test_a_failed_write_into_a_new_folder_leaves_no_shards_and_can_be_run_again(tmp_path, how):
    def data(bad: int) -> Any:
        return _BadAt(bad) if how == "container" else (_BadAt(bad)[i] for i in range(200))

    out = tmp_path / "new"
    with pytest.raises(ValueError, match="broken sample"):
        ss.write(out, data(150), {"x": F.Int()}, shard_size=300, page_size=100, workers=1, progress=False)
    assert os.listdir(out) == []  # the shards written before the failure removed, no temporary file left
    ss.write(out, data(-1), {"x": F.Int()}, shard_size=300, workers=1, progress=False)
    assert len(ss.open(out)) == 200


@pytest.mark.parametrize("how", ["container", "iterable"])
def test_a_failed_append_removes_only_the_shards_it_added(tmp_path, how):
    out = ss.write(tmp_path / "ds", [{"x": i} for i in range(10)], {"x": F.Int()}, shard_size=300, page_size=100, progress=False)
    before = {name: (out / name).read_bytes() for name in os.listdir(out)}
    more = _BadAt(150) if how == "container" else (_BadAt(150)[i] for i in range(200))
    with pytest.raises(ValueError, match="broken sample"):
        ss.write(out, more, None, shard_size=300, page_size=100, append=True, workers=1, progress=False)
    assert {name: (out / name).read_bytes() for name in os.listdir(out)} == before
    assert len(ss.open(out)) == 10


@pytest.mark.parametrize("how", ["list", "iterable"])
def test_appending_nothing_adds_no_shard(tmp_path, how):
    out = ss.write(tmp_path / "ds", [{"x": 1}], {"x": F.Int()}, shard_size=0, progress=False)
    before = sorted(os.listdir(out))
    ss.write(out, [] if how == "list" else iter([]), {"x": F.Int()}, shard_size=0, append=True, progress=False)
    assert sorted(os.listdir(out)) == before and len(ss.open(out)) == 1
