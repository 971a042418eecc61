"""Data read in place as a loader reads it: Parquet folders whose files name their classes in other
orders are refused, one part read by many threads at once is read once, and a global random order
(or a seeded ``ss.pack``) over more parts than a process keeps decoded is warned about, naming the
fix, while data that keeps every page (a packed local file) or a page-aware order is not.

Files are small Parquet files written with pyarrow; class names travel as the Hugging Face
features metadata ``datasets.to_parquet`` writes.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hfdata import jpeg

import slipstream as ss
from slipstream import ops
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


# -- a global random order over more pages than a process keeps ------------------------------------------


def trap_warnings(caught: list[warnings.WarningMessage]) -> list[str]:
    return [str(w.message) for w in caught if issubclass(w.category, UserWarning) and "pages" in str(w.message) and "keep" in str(w.message)]


def made(make: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, list[str]]:
    """What ``make(*args, **kwargs)`` returns and the trap warnings it gave (every one: no once-per-place filter)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = make(*args, **kwargs)
    return value, trap_warnings(caught)


def epochs_and_a_new_seed(loader: Any) -> None:
    list(loader)
    list(loader)
    loader.seed = 5
    list(loader)


def test_a_global_shuffle_over_more_row_groups_than_are_kept_warns_once_naming_the_fix(tmp_path: Path) -> None:
    path = numbered(tmp_path / "t.parquet", 600, 50)  # 12 row groups
    for kwargs in ({"shuffle": True}, {"order": "random"}, {"shuffle": True, "workers": 2, "rank": 1, "world_size": 2, "seed": 3}):
        loader, said = made(ss.DataLoader, ss.open(path, fields=["i"], keep=4), batch_size=8, **kwargs)
        assert len(said) == 1, (kwargs, said)
        assert str(path) in said[0] and "12 pages" in said[0] and "keeps 4" in said[0], said[0]
        assert "order=\"quasi_random\"" in said[0] and "keep=12" in said[0], said[0]
        _, again = made(epochs_and_a_new_seed, loader)  # once a loader
        assert again == []
    images = tmp_path / "images.parquet"  # a mapped view of the data: the data it maps is what is read
    pq.write_table(pa.table({"img": pa.array([jpeg(k, 8, 8) for k in range(24)], pa.binary())}), images, row_group_size=2)
    mapped = ss.open(images, keep=4).map(img=[ops.CenterCrop(4)])
    _, said = made(ss.DataLoader, mapped, batch_size=8, shuffle=True)
    assert len(said) == 1 and str(images) in said[0] and "12 pages" in said[0]


def test_the_torch_dropin_with_shuffle_warns_once_naming_the_fix_it_has(tmp_path: Path) -> None:
    """slipstream.torch.DataLoader(shuffle=True), with or without seed=, is warned about at construction
    (the fix it names is slipstream's own loader: the drop-in takes torch's arguments); a sampler the
    user gave is theirs to choose, and the core loader the drop-in makes does not warn again."""
    pytest.importorskip("torch")
    from slipstream.torch import DataLoader

    path = numbered(tmp_path / "t.parquet", 600, 50)  # 12 row groups
    for kwargs in ({}, {"seed": 3}, {"seed": 3, "num_workers": 2, "backend": "thread"}):
        loader, said = made(DataLoader, ss.open(path, fields=["i"], keep=4), batch_size=8, shuffle=True, **kwargs)
        assert len(said) == 1 and "12 pages" in said[0] and 'slipstream.DataLoader(..., order="quasi_random")' in said[0], said
        _, again = made(lambda: sum(len(b["i"]) for b in loader))
        assert again == [], again
    import torch

    ds = ss.open(path, fields=["i"], keep=4)
    _, said = made(DataLoader, ds, batch_size=8, sampler=torch.utils.data.RandomSampler(range(600)))
    assert said == []
    _, said = made(DataLoader, ds, batch_size=8, shuffle=False)
    assert said == []


@pytest.mark.parametrize(
    "keep, kwargs",
    [(12, {"shuffle": True}), (32, {"shuffle": True}), (4, {"order": "quasi_random", "seed": 0}), (4, {}), (4, {"order": "sequential"})],
)
def test_no_warning_where_every_page_is_kept_or_the_order_reads_pages_whole(tmp_path: Path, keep: int, kwargs: dict) -> None:
    path = numbered(tmp_path / "t.parquet", 600, 50)
    ds = ss.open(path, keep=keep)
    assert ds.pages_kept() == keep and ds.num_pages == 12
    _, said = made(ss.DataLoader, ds, batch_size=8, **kwargs)
    assert said == []


def test_a_packed_local_file_keeps_every_page_and_is_not_warned_about(tmp_path: Path) -> None:
    samples = [{"i": k} for k in range(600)]
    path = ss.write(tmp_path / "t.arrow", samples, {"i": ss.fields.Int()}, progress=False, page_size=400)
    ds = ss.open(path)
    assert ds.num_pages > 4 and ds.pages_kept() is None and ss.open([path, path]).pages_kept() is None
    _, said = made(ss.DataLoader, ds, batch_size=8, shuffle=True)
    assert said == []
    documents = [{"tokens": np.arange(k % 7 + 1)} for k in range(600)]
    tokens = ss.open(ss.write(tmp_path / "k.arrow", documents, {"tokens": ss.fields.Tokens()}, progress=False, page_size=400))
    assert tokens.num_pages > 4
    _, said = made(ss.pack, tokens, 16, seed=0)
    assert said == []


def test_a_parquet_folder_is_warned_about_over_all_its_files_pages(tmp_path: Path) -> None:
    folder = tmp_path / "data"
    folder.mkdir()
    for k in range(3):
        numbered(folder / f"{k}.parquet", 100, 25)  # 4 row groups each, 12 in all, one bound for them all
    ds = ss.open(folder, keep=8)
    assert ds.pages_kept() == 8 and ds.num_pages == 12
    _, said = made(ss.DataLoader, ds, batch_size=8, shuffle=True)
    assert len(said) == 1 and str(folder / "0.parquet") in said[0] and "12 pages" in said[0]
    _, said = made(ss.DataLoader, ss.open(folder, keep=12), batch_size=8, shuffle=True)
    assert said == []


def test_a_seeded_pack_over_more_row_groups_than_are_kept_warns(tmp_path: Path) -> None:
    path = numbered(tmp_path / "t.parquet", 600, 50)
    rows, said = made(ss.pack, ss.open(path, keep=4), 16, seed=0)
    assert len(said) == 1 and str(path) in said[0] and "12 pages" in said[0] and "seed=None" in said[0] and "keep=12" in said[0], said
    assert len(rows) > 0
    for kept, seed in ((4, None), (12, 0)):
        _, said = made(ss.pack, ss.open(path, keep=kept), 16, seed=seed)
        assert said == [], (kept, seed)


def test_token_documents_of_parquet_are_resident_exactly_when_every_row_group_stays_decoded(tmp_path: Path) -> None:
    """ss.pack gathers rows from a table of every page when the documents are resident: for Parquet
    read in place that holds when all its row groups fit the pages kept decoded, and not otherwise;
    the rows packed are the same either way."""
    from slipstream.sequences.documents import documents_of

    docs = [np.arange(k % 7 + 1, dtype=np.int32) + k for k in range(40)]
    path = tmp_path / "tokens.parquet"
    pq.write_table(pa.table({"tokens": pa.array(docs, pa.list_(pa.int32()))}), path, row_group_size=8)  # 5 row groups
    fits, scarce = ss.open(path, keep=5), ss.open(path, keep=2)
    assert documents_of(fits).resident and not documents_of(scarce).resident
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (the scattered-reads warning of the scarce one)
        rows = [[ss.pack(ds, 16)[i]["tokens"].tolist() for i in range(len(ss.pack(ds, 16)))] for ds in (fits, scarce)]
    assert rows[0] == rows[1]
    assert sorted(t for row in rows[0] for t in row if t) == sorted(int(t) for d in docs for t in d if t)
