"""remote.store: any fsspec URL and any pyarrow or fsspec filesystem reads a sharded dataset, with no server."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import assert_same

import slipstream as ss
from slipstream import fields as F

fsspec = pytest.importorskip("fsspec")
pafs = pytest.importorskip("pyarrow.fs")

_FIELDS = {"label": F.Int(), "x": F.Array("float32", (16,)), "t": F.Text()}


def _folder(tmp_path):
    samples = [{"label": k, "x": np.full(16, k, np.float32), "t": f"s{k}"} for k in range(40)]
    return ss.write(tmp_path / "ds", samples, _FIELDS, progress=False, page_size=600, shard_size=3_000)


def _same(remote, local):
    assert len(remote) == len(local) and remote.remote and not local.remote
    for i in range(len(local)):
        assert_same(remote[i], local[i], f"sample {i}")
    with ss.DataLoader(remote, 8, order="quasi_random", seed=1, workers=2) as a, ss.DataLoader(local, 8, order="quasi_random", seed=1) as b:
        for x, y in zip(a, b):
            assert_same(x, y)


def test_an_fsspec_url_memory_filesystem(tmp_path):
    folder = _folder(tmp_path)
    memory = fsspec.filesystem("memory")
    for path in sorted(folder.iterdir()):
        memory.pipe_file(f"/slipstream-test/ds/{path.name}", path.read_bytes())
    remote = ss.open("memory://slipstream-test/ds/", cache_dir=tmp_path / "cache")
    _same(remote, ss.open(folder))
    assert remote.remote_stats()["downloads"] >= sum(s.num_pages for s in remote.shards)


def test_a_pyarrow_filesystem_given(tmp_path):
    folder = _folder(tmp_path)
    remote = ss.open(str(folder), filesystem=pafs.LocalFileSystem(), cache_dir=tmp_path / "cache")
    _same(remote, ss.open(folder))
    single = ss.open(str(folder / "shard-00001.arrow"), filesystem=pafs.LocalFileSystem(), cache_dir=tmp_path / "cache")
    assert_same(single[0], ss.open(folder / "shard-00001.arrow")[0])


def test_an_fsspec_filesystem_given_and_a_missing_object(tmp_path):
    folder = _folder(tmp_path)
    local_fs = fsspec.filesystem("file")
    remote = ss.open(str(folder), filesystem=local_fs, cache_dir=tmp_path / "cache")
    _same(remote, ss.open(folder))
    with pytest.raises(ss.MissingShardError, match="no such object"):
        ss.open(str(tmp_path / "nothing.arrow"), filesystem=local_fs, cache_dir=tmp_path / "cache")


def _upload(memory, folder, prefix, index=None):
    for path in sorted(folder.iterdir()):
        body = path.read_bytes() if path.name != "index.json" or index is None else json.dumps(index).encode()
        memory.pipe_file(f"/{prefix}/{path.name}", body)
    return f"memory://{prefix}/"


def test_an_index_that_does_not_match_its_objects_is_named_not_read_wrong(tmp_path):
    folder = _folder(tmp_path)
    memory = fsspec.filesystem("memory")
    index = json.loads((folder / "index.json").read_text())
    pages = index["shards"][0]["pages"]
    assert len(pages) >= 2
    pages[0][3] -= 1  # a row moved from page 0 to page 1: counts and checksums still add up
    pages[1][3] += 1
    remote = ss.open(_upload(memory, folder, "rows", index), cache_dir=tmp_path / "c1")
    with pytest.raises(ss.CorruptFileError, match="page 0 holds .* samples but its index entry says"):
        remote[0]
    for damage, match in [
        (lambda ix: ix["shards"][0]["pages"][-1].__setitem__(0, 10**12), "does not lie in order inside"),
        (lambda ix: ix["shards"][0].pop("bytes"), "must be integers"),
        (lambda ix: ix["shards"][0].__setitem__("file", "../../etc/passwd"), "not a plain file name"),
        (lambda ix: ix.__setitem__("shards", []), "lists no shards"),
        (lambda ix: (ix["shards"].append(ix["shards"][0]), ix.__setitem__("samples", ix["samples"] + ix["shards"][0]["samples"])), "twice"),
    ]:
        bad = json.loads((folder / "index.json").read_text())
        damage(bad)
        with pytest.raises(ss.CorruptFileError, match=match):
            ss.open(_upload(memory, folder, f"bad{abs(hash(match))}", bad), cache_dir=tmp_path / "c2")
    url = _upload(memory, folder, "deep")
    memory.pipe_file("/deep/index.json", b'{"format": "slipstream.shards", "x": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    with pytest.raises(ss.CorruptFileError, match="nested too deeply"):
        ss.open(url, cache_dir=tmp_path / "c3")


def test_a_remote_file_whose_footer_points_outside_it_fails_at_once(tmp_path):
    from slipstream.files import layout

    folder = _folder(tmp_path)
    raw = bytearray((folder / "shard-00000.arrow").read_bytes())
    footer_len = layout.footer_length(bytes(raw[-layout.TAIL :]))
    footer = bytes(raw[-layout.TAIL - footer_len : -layout.TAIL])
    first_offset = layout.page_blocks(footer)[0][0]
    at = bytes(raw).rindex(first_offset.to_bytes(8, "little"), len(raw) - layout.TAIL - footer_len)
    raw[at : at + 8] = (len(raw) * 3).to_bytes(8, "little")  # the first page's offset, past the end
    memory = fsspec.filesystem("memory")
    memory.pipe_file("/damaged/one.arrow", bytes(raw))
    with pytest.raises(ss.CorruptFileError, match="lies outside the file"):
        ss.open("memory://damaged/one.arrow", cache_dir=tmp_path / "c", retry_budget=30)
    with pytest.raises(ss.MissingShardError, match="no index.json here"):
        ss.open("memory://damaged/", cache_dir=tmp_path / "c")


def test_keep_bounds_the_decoded_pages_of_a_process_over_all_shards(tmp_path):
    folder = _folder(tmp_path)
    memory = fsspec.filesystem("memory")
    remote = ss.open(_upload(memory, folder, "keep"), cache_dir=tmp_path / "c", keep=2)
    assert len(remote.shards) > 2
    for i in range(len(remote)):
        remote[i]
    held = sum(shard._pages.has(p) for shard in remote.shards for p in range(shard.num_pages))
    assert held == 2  # not 2 per shard
