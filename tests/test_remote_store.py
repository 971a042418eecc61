"""remote.store: any fsspec URL and any pyarrow or fsspec filesystem reads a sharded dataset, with no server."""

from __future__ import annotations

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
    return ss.write(tmp_path / "ds", samples, _FIELDS, progress=False, page_size=600, shard_size=2_000)


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
