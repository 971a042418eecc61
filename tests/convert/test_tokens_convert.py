"""Integer-list columns of Parquet files and Hugging Face datasets become F.Tokens; other lists stay JSON."""

import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import overwrite_offsets

import slipstream as ss
from slipstream import fields as F
from slipstream.convert.columns import TokenValues
from slipstream.convert.source import ConvertError
from slipstream.convert.sources import convert, open_source


def _docs(n=200, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 50000, size=int(rng.integers(0, 40))).tolist() for _ in range(n)]


def test_parquet_integer_lists_become_tokens_of_their_type(tmp_path):
    docs = _docs()
    table = pa.table(
        {
            "ids": pa.array(docs, pa.list_(pa.int32())),
            "big": pa.array(docs, pa.large_list(pa.uint16())),
            "wide": pa.array(docs, pa.list_(pa.int64())),
            "words": pa.array([[str(t) for t in d[:2]] for d in docs]),
            "nested": pa.array([[d[:1]] for d in docs], pa.list_(pa.list_(pa.int32()))),
        }
    )
    pq.write_table(table, tmp_path / "t.parquet", row_group_size=70)
    convert(tmp_path / "t.parquet", tmp_path / "t.ss")
    ds = ss.open(tmp_path / "t.ss")
    assert ds.fields == {
        "ids": F.Tokens(dtype="int32"), "big": F.Tokens(dtype="uint16", large=True), "wide": F.Tokens(dtype="int64"),
        "words": F.JSON(), "nested": F.JSON(),
    }  # fmt: skip
    for i, doc in enumerate(docs):
        row = ds[i]
        assert row["ids"].tolist() == row["big"].tolist() == row["wide"].tolist() == doc and row["big"].dtype == np.uint16
        assert row["nested"] == [doc[:1]]


def test_token_values_are_views_of_each_batchs_buffers_even_when_sliced():
    docs = _docs(20, seed=1)
    array = pa.array(docs, pa.list_(pa.int32())).slice(5, 10)
    rows = TokenValues(None, "ids", np.dtype(np.int32))(array, 5)
    assert [r.tolist() for r in rows] == docs[5:15]
    stored = np.frombuffer(array.values.buffers()[1], np.int32)
    assert all(np.shares_memory(r, stored) for r in rows if r.size)  # views of the batch's buffer, no copies


def test_a_null_token_inside_a_list_names_the_column_and_row(tmp_path):
    lists = pa.array([[1, 2], [3], [4, None, 5], [6]], pa.list_(pa.int32()))
    pq.write_table(pa.table({"ids": lists}), tmp_path / "n.parquet")
    source = open_source(tmp_path / "n.parquet")
    with pytest.raises(ConvertError, match=r"column 'ids' is null at row 2.*\(a null token inside its list\)"):
        list(source.data)


def test_hugging_face_dataset_token_columns_write_as_tokens(tmp_path):
    datasets = pytest.importorskip("datasets")
    docs = _docs(40, seed=2)
    hf = datasets.Dataset.from_dict({"input_ids": docs, "label": [i % 3 for i in range(40)]})
    hf = hf.cast_column("input_ids", datasets.Sequence(datasets.Value("uint16")))
    ss.write(tmp_path / "hf.ss", hf, progress=False)
    ds = ss.open(tmp_path / "hf.ss")
    assert ds.fields == {"input_ids": F.Tokens(dtype="uint16"), "label": F.Int()}
    assert [ds[i]["input_ids"].tolist() for i in range(40)] == docs
    shuffled = hf.shuffle(seed=0).select(range(10))  # an indices mapping: read through Arrow as well
    ss.write(tmp_path / "sel.ss", shuffled, {"input_ids": F.Tokens(dtype="uint16")}, progress=False)
    assert [row["input_ids"].tolist() for row in ss.open(tmp_path / "sel.ss")] == shuffled["input_ids"]
    back = ss.to_huggingface(tmp_path / "hf.ss")
    assert back.features["input_ids"] == datasets.Sequence(datasets.Value("uint16")) and back["input_ids"] == docs


def _damaged_tokens(path, offsets):
    """A packed file of three token documents whose stored offsets (0, 1000, 4000, 9000) are overwritten."""
    ss.write(path, [np.full(n, 9, np.int32) for n in (1000, 3000, 5000)], {"tokens": F.Tokens()}, progress=False)
    overwrite_offsets(path, [0, 1000, 4000, 9000], offsets, np.int32)
    return path


def test_to_huggingface_refuses_damaged_token_offsets_before_datasets_reads_through_them(tmp_path):
    pytest.importorskip("datasets")
    decreasing = _damaged_tokens(tmp_path / "d.ss", [0, 1000, 500, 9000])  # passes Arrow's cheap validation
    with pytest.raises(ss.CorruptFileError, match=r"field 'tokens', samples 0\.\.2: the offsets of 3 token rows do not fit"):
        ss.to_huggingface(decreasing)
    far = _damaged_tokens(tmp_path / "far.ss", [0, 300_000_000, 4000, 9000])  # datasets would read far past the page
    code = "import sys, slipstream as ss\ntry:\n    ss.to_huggingface(sys.argv[1])['tokens']\nexcept ss.CorruptFileError as exc:\n    print('refused:', exc)"
    run = subprocess.run([sys.executable, "-c", code, str(far)], check=False, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and "refused:" in run.stdout and "do not fit" in run.stdout, (run.returncode, run.stderr[-2000:])
