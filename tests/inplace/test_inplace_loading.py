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
