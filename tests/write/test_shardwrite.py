"""write.shardwrite: one shard of a planned write, written atomically; a write's stray temporary files swept."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pyarrow as pa
import pytest
from enginedata import Labels, Refuses

import slipstream as ss
from slipstream.files import folder as _folder
from slipstream.files import format as _format
from slipstream.write.shardwrite import ShardJob, ShardSpec, is_splittable, sweep, write_shard


def _spec(folder: Path, token: str = "tok123", page_size: int = 1_000) -> ShardSpec:
    fields = copy.deepcopy(Labels.fields)
    first = Labels(1)[0]
    for name, field in fields.items():
        field.prepare(first[name], name)
    schema = pa.schema([(n, f.arrow_type()) for n, f in fields.items()])
    schema = schema.with_metadata(_format.schema_metadata({n: f.spec() for n, f in fields.items()}, page_size))
    return ShardSpec(folder, token, schema, fields, page_size)


def test_a_shard_holds_its_samples_numbered_as_in_the_dataset_and_is_written_whole(tmp_path):
    spec = _spec(tmp_path)
    entry = write_shard(Labels(50), spec, ShardJob(2, 20, 35))
    assert sorted(os.listdir(tmp_path)) == ["shard-00002.arrow"]  # no temporary file left
    shard = ss.open(tmp_path / "shard-00002.arrow")
    assert [shard[i]["label"] for i in range(len(shard))] == list(range(20, 35)) and shard.num_pages > 1
    described, _ = _folder.describe("shard-00002.arrow", os.path.getsize(tmp_path / "shard-00002.arrow"), _folder.read_local(tmp_path / "shard-00002.arrow"))
    assert entry == described and entry["samples"] == 15
    before = (tmp_path / "shard-00002.arrow").read_bytes()
    assert write_shard(Labels(50), spec, ShardJob(2, 20, 35), threads=3) == entry  # a retry, with threads: replaced by the same bytes
    assert (tmp_path / "shard-00002.arrow").read_bytes() == before and os.listdir(tmp_path) == ["shard-00002.arrow"]


def test_an_error_names_the_shard_and_sample_and_leaves_nothing(tmp_path):
    with pytest.raises(KeyError, match="no record 27") as info:
        write_shard(Refuses(Labels(50), 27), _spec(tmp_path), ShardJob(1, 20, 35))
    notes = " | ".join(info.value.__notes__)
    assert "while reading sample 27" in notes and "shard-00001.arrow (samples 20..34)" in notes
    assert os.listdir(tmp_path) == []
    with pytest.raises(IndexError, match=r"samples 40\.\.60 are not within the 50 samples"):
        write_shard(Labels(50), _spec(tmp_path), ShardJob(0, 40, 60))


def test_sweep_removes_only_the_writes_own_temporary_files(tmp_path):
    own = [tmp_path / ".shard-00003.arrow.tok123.abc.partial", tmp_path / ".index.json.tok123.x.partial"]
    others = [tmp_path / ".shard-00003.arrow.other9.abc.partial", tmp_path / "shard-00003.arrow", tmp_path / ".shard-00001.arrow.q.partial"]
    for path in own + others:
        path.write_bytes(b"half a shard")
    assert sorted(sweep(tmp_path, "tok123")) == sorted(own)
    assert sorted(tmp_path.iterdir()) == sorted(others)
    assert sweep(tmp_path, "") == [] and sweep(tmp_path / "missing", "tok123") == []


class _Rows:
    """A file set that gives one sample too few."""

    def __len__(self) -> int:
        return 10

    def read_rows(self, start: int, stop: int):
        return iter(Labels(10)[i] for i in range(start, stop - 1))


def test_what_can_be_split_and_a_file_set_that_miscounts(tmp_path):
    assert is_splittable(Labels(3)) and is_splittable([{"a": 1}]) and is_splittable(_Rows())
    assert not is_splittable(iter([{"a": 1}])) and not is_splittable("text")
    with pytest.raises(ValueError, match=r"_Rows.read_rows\(0, 10\) gave 9 samples, expected 10"):
        write_shard(_Rows(), _spec(tmp_path), ShardJob(0, 0, 10))
    assert os.listdir(tmp_path) == []
