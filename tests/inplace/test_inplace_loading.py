"""Data read in place as a loader reads it: Parquet folders whose files name their classes in other
orders are refused, one part read by many threads at once is read once, and a global random order
(or a seeded ``ss.pack``) over more parts than a process keeps decoded is warned about, naming the
fix, while data that keeps every page (a packed local file) or a page-aware order is not.

Files are small Parquet files written with pyarrow; class names travel as the Hugging Face
features metadata ``datasets.to_parquet`` writes.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import slipstream as ss
from slipstream.core.errors import ShardMismatchError


def labelled(path: Path, names: list[str], rows: int = 4) -> Path:
    """A Parquet file whose ``label`` column is a ClassLabel of ``names`` (as ``datasets`` writes it)."""
    features = {"label": {"_type": "ClassLabel", "names": names}, "x": {"_type": "Value", "dtype": "int64"}}
    table = pa.table({"label": pa.array([k % len(names) for k in range(rows)], pa.int64()), "x": pa.array(range(rows), pa.int64())})
    pq.write_table(table.replace_schema_metadata({b"huggingface": json.dumps({"info": {"features": features}}).encode()}), path)
    return path


def test_a_parquet_folder_whose_files_order_their_class_names_differently_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    labelled(folder / "a.parquet", ["cat", "dog"])
    labelled(folder / "b.parquet", ["dog", "cat"])
    with pytest.raises(ShardMismatchError, match=r"b\.parquet: .*'label' \['dog', 'cat'\] but .*a\.parquet names them \['cat', 'dog'\]") as caught:
        ss.open(folder)
    assert str(caught.value.path).endswith("b.parquet")
    labelled(folder / "b.parquet", ["cat", "dog"])  # the same names: one dataset, label 0 is "cat" in both
    ds = ss.open(folder)
    assert ds.metadata["class_names"] == {"label": ["cat", "dog"]} and len(ds) == 8


def numbered(path: Path, rows: int, group: int) -> Path:
    pq.write_table(pa.table({"i": pa.array(range(rows), pa.int64()), "tokens": [list(range(k % 5 + 1)) for k in range(rows)]}), path, row_group_size=group)
    return path


def test_thread_workers_read_each_row_group_once_an_epoch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from slipstream.inplace.parquet import ParquetPages

    path = numbered(tmp_path / "t.parquet", 600, 50)  # 12 row groups, fewer than a process keeps
    reads: list[int] = []
    original = ParquetPages.read_part

    def counted(self: ParquetPages, p: int) -> object:
        reads.append(p)
        return original(self, p)

    monkeypatch.setattr(ParquetPages, "read_part", counted)
    loader = ss.DataLoader(ss.open(path, fields=["i"]), batch_size=16, workers=4, order="quasi_random", seed=0)
    seen = np.concatenate([batch["i"] for batch in loader])
    assert sorted(seen.tolist()) == list(range(600))
    assert sorted(reads) == list(range(12))  # every row group once, however many workers asked for it together
