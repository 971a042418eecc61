"""F.Tokens: integer token documents stored as Arrow list<int>, read as offsets + values."""

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from packed import roundtrip

import slipstream as ss
from slipstream import fields as F
from slipstream.files.field_tokens import TOKEN_DTYPES, TokensColumn, list_views
from slipstream.files.inferred import infer_fields

DTYPES = [d.name for d in TOKEN_DTYPES]


def _docs(dtype, n=40, seed=0):
    rng = np.random.default_rng(seed)
    info = np.iinfo(dtype)
    high = min(int(info.max), 60000)
    return [rng.integers(max(int(info.min), 0), high + 1, size=int(rng.integers(0, 30)), dtype=dtype) for _ in range(n)]


def _table(path):
    return pa.ipc.open_file(pa.memory_map(str(path))).read_all()


@pytest.mark.parametrize("large", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_every_dtype_round_trips_and_pyarrow_reads_a_list_of_it(tmp_path, dtype, large):
    docs = _docs(dtype)
    ds = roundtrip(tmp_path, [{"tokens": d} for d in docs], {"tokens": F.Tokens(dtype=dtype, large=large)}, page_size=256)
    assert ds.fields == {"tokens": F.Tokens(dtype=dtype, large=large)} and ds.num_pages > 1
    for i, doc in enumerate(docs):
        got = ds[i]["tokens"]
        assert got.dtype == np.dtype(dtype) and got.tolist() == doc.tolist() and not got.flags.writeable
    column = _table(tmp_path / "data.arrow").column("tokens")
    item = pa.from_numpy_dtype(np.dtype(dtype))
    assert column.type == (pa.large_list(item) if large else pa.list_(item))
    assert column.to_pylist() == [d.tolist() for d in docs]


def test_column_offsets_come_from_the_lengths_and_values_are_views_of_the_page(tmp_path):
    docs = _docs(np.uint16, n=30, seed=1)
    ds = roundtrip(tmp_path, docs, {"tokens": F.Tokens("uint16")}, page_size=200)
    starts = list(ds.page_starts()) + [len(ds)]
    seen = 0
    for p in range(ds.num_pages):
        column = ds.page(p)["tokens"]
        assert isinstance(column, TokensColumn) and column.offsets.dtype == np.int64
        page_docs = docs[starts[p] : starts[p + 1]]
        lengths = [d.size for d in page_docs]
        assert column.offsets[0] == 0 and np.diff(column.offsets).tolist() == lengths == column.lengths().tolist()
        assert column.values.tolist() == np.concatenate(page_docs).tolist() and not column.values.flags.writeable
        assert np.shares_memory(column.get(0), column.values) if lengths[0] else True
        seen += len(page_docs)
    assert seen == len(docs)


def test_dtype_is_the_first_arrays_else_int32_for_python_lists_and_large_is_false(tmp_path):
    ds = roundtrip(tmp_path, [[1, 2, 3], [], [2**31 - 1]], {"tokens": F.Tokens()})
    assert ds.fields["tokens"] == F.Tokens(dtype="int32", large=False) and ds[1]["tokens"].size == 0
    ds = roundtrip(tmp_path, [np.array([7], np.uint16), [65535]], {"tokens": F.Tokens()}, name="u.arrow")
    assert ds.fields["tokens"] == F.Tokens(dtype="uint16") and ds[1]["tokens"].tolist() == [65535]
    ds = roundtrip(tmp_path, [np.array([1, 2], np.int64)], {"tokens": F.Tokens(dtype="uint32")}, name="c.arrow")
    assert ds[0]["tokens"].dtype == np.uint32  # ids that fit are cast


@pytest.mark.parametrize(
    "bad, kind, message",
    [
        ([1.0, 2.0], TypeError, "got dtype float64 (floats and bools are refused"),
        (np.array([1, 2], np.float32), TypeError, "got dtype float32"),
        ([True, False], TypeError, "got dtype bool"),
        (np.zeros((2, 3), np.int32), ValueError, "1-d array of token ids, got shape (2, 3)"),
        (np.array(5, np.int32), ValueError, "got shape ()"),
        (np.int32(5), TypeError, "got int32"),
        (5, TypeError, "got int 5"),
        ("hello", TypeError, "got str 'hello'"),
        ([2**70], TypeError, "Python ints beyond int64"),
        ([1, 70000, 80000], ValueError, "dtype uint16 holds 0..65535, got the token id 80000 (2 of 3 ids outside; the first at position 1)"),
        (np.array([-1], np.int64), ValueError, "got the token id -1"),
    ],
)
def test_bad_token_values_raise_naming_sample_and_field(tmp_path, bad, kind, message):
    with pytest.raises(kind) as caught:
        ss.write(tmp_path / "x.arrow", [[1, 2], bad], {"tokens": F.Tokens(dtype="uint16")}, progress=False)
    assert str(caught.value).startswith("sample 1, field 'tokens': ") and message in str(caught.value)
    assert not (tmp_path / "x.arrow").exists()


def test_field_settings_are_checked():
    with pytest.raises(TypeError, match="integer token ids"):
        F.Tokens(dtype="float32")
    with pytest.raises(TypeError, match="large"):
        F.Tokens(large="yes")


def _forged_list(offsets):
    """A list<int32> column read back from an IPC stream whose offsets were overwritten (not validated)."""
    good = pa.ListArray.from_arrays(pa.array(np.array([0, 2, 6], np.int32)), pa.array(np.arange(6, dtype=np.int32)))
    batch = pa.record_batch([good], names=["t"])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    raw = bytearray(sink.getvalue().to_pybytes())
    at = raw.find(np.array([0, 2, 6], np.int32).tobytes())
    raw[at : at + 12] = np.array(offsets, np.int32).tobytes()
    return pa.ipc.open_stream(pa.py_buffer(bytes(raw))).read_next_batch().column(0)


def test_damaged_offsets_raise_never_read_outside_the_values():
    offsets, values = list_views(_forged_list([0, 2, 6]), np.dtype(np.int32))
    assert offsets.tolist() == [0, 2, 6] and values.tolist() == list(range(6))
    for forged in ([0, 2, 7], [0, 4, 2], [-1, 2, 6], [0, 2, 2**30]):  # [0, 4, 2] passes Arrow's own cheap validation
        with pytest.raises(ValueError, match="offsets of 2 token rows do not fit their 6 values"):
            TokensColumn(_forged_list(forged), np.dtype(np.int32))


def test_a_damaged_file_raises_when_its_page_is_read(tmp_path):
    docs = [np.full(n, 9, np.int32) for n in (1000, 3000, 5000)]
    path = tmp_path / "data.arrow"
    ss.write(path, docs, {"tokens": F.Tokens()}, progress=False)
    raw = bytearray(path.read_bytes())
    stored = np.array([0, 1000, 4000, 9000], np.int32).tobytes()
    at = raw.find(stored)
    assert at > 0
    raw[at + 8 : at + 12] = np.array([500], np.int32).tobytes()  # offsets 0, 1000, 500, 9000: Arrow's cheap checks pass it
    path.write_bytes(bytes(raw))
    with pytest.raises(ss.CorruptFileError, match="page 0 cannot be read: the offsets of 3 token rows do not fit"):
        ss.open(path)[1]


def test_getobs_into_and_batches_stack_equal_lengths_only(tmp_path):
    docs = [np.arange(4, dtype=np.int32) + i for i in range(6)] + [np.arange(3, dtype=np.int32)]
    ds = roundtrip(tmp_path, docs, {"tokens": F.Tokens()})
    buffer = {"tokens": np.zeros(4, np.int32)}
    out = ss.getobs_into(buffer, ds, 2)
    assert out["tokens"] is buffer["tokens"] and out["tokens"].tolist() == [2, 3, 4, 5]
    assert ss.getobs_into({"tokens": np.zeros(9, np.int32)}, ds, 6)["tokens"].tolist() == [0, 1, 2]  # does not fit: the view
    batches = list(ss.DataLoader(ss.obsview(ds, range(6)), batch_size=3))
    assert [b["tokens"].shape for b in batches] == [(3, 4), (3, 4)] and batches[1]["tokens"][0].tolist() == [3, 4, 5, 6]
    with pytest.raises(ValueError, match=r"token documents vary in length: pack them into fixed-length rows \(ss.pack\)"):
        list(ss.DataLoader(ds, batch_size=7))
    ragged = list(ss.DataLoader(ds, batch_size=4, workers=2, collate=lambda rows: [r["tokens"].tolist() for r in rows]))
    assert [row for batch in ragged for row in batch] == [d.tolist() for d in docs]


def test_write_takes_containers_iterables_of_arrays_lists_or_dicts_and_shards(tmp_path):
    docs = _docs(np.int32, n=25, seed=3)
    fields = {"tokens": F.Tokens()}
    sources = {
        "container.arrow": docs,
        "iterable.arrow": (d.tolist() for d in docs),
        "dicts.arrow": [{"tokens": d, "other": 1} for d in docs],
        "array2d.arrow": None,
    }
    for name, data in sources.items():
        if data is None:
            square = np.arange(20, dtype=np.int32).reshape(5, 4)
            assert [r["tokens"].tolist() for r in roundtrip(tmp_path, square, fields, name=name)] == square.tolist()
            continue
        ds = roundtrip(tmp_path, data, fields, name=name)
        assert [ds[i]["tokens"].tolist() for i in range(len(ds))] == [d.tolist() for d in docs], name
    sharded = roundtrip(tmp_path, docs, fields, name="shards", shard_size=300)
    assert len(sharded.shards) > 1 and [sharded[i]["tokens"].tolist() for i in range(25)] == [d.tolist() for d in docs]
    with pytest.raises(TypeError, match="expected a dict"):  # two fields: a bare sample names neither
        ss.write(tmp_path / "two.arrow", docs, {"tokens": F.Tokens(), "x": F.Int()}, progress=False)


def test_inferred_fields_keep_1d_integer_arrays_as_fixed_shape_arrays_and_the_error_names_tokens(tmp_path):
    assert infer_fields({"ids": np.arange(3)}) == {"ids": F.Array(dtype=np.int64, shape=(3,))}
    with pytest.raises(ValueError, match=r"F.Tokens\(\) for token ids"):
        ss.write(tmp_path / "x.arrow", [{"ids": np.arange(3)}, {"ids": np.arange(2)}], progress=False)


def test_hugging_face_datasets_reads_the_file_as_a_list_of_ints(tmp_path):
    datasets = pytest.importorskip("datasets")
    docs = _docs(np.int32, n=12, seed=4)
    roundtrip(tmp_path, docs, {"tokens": F.Tokens()})
    table = _table(tmp_path / "data.arrow")
    hf = datasets.Dataset(table)
    assert hf.features["tokens"] in (datasets.Sequence(datasets.Value("int32")), datasets.List(datasets.Value("int32")))
    assert [row["tokens"] for row in hf] == [d.tolist() for d in docs]
    viewed = ss.to_huggingface(tmp_path / "data.arrow")
    assert viewed.features["tokens"] == datasets.Sequence(datasets.Value("int32")) and viewed[5]["tokens"] == docs[5].tolist()
    roundtrip(tmp_path, docs, {"tokens": F.Tokens(dtype="uint16", large=True)}, name="large.arrow")
    assert ss.to_huggingface(tmp_path / "large.arrow").features["tokens"] == datasets.LargeList(datasets.Value("uint16"))


def test_polars_reads_the_file_as_a_list_of_ints(tmp_path):
    pl = pytest.importorskip("polars")
    docs = _docs(np.uint16, n=10, seed=5)
    roundtrip(tmp_path, docs, {"tokens": F.Tokens("uint16")})
    frame = pl.read_ipc(tmp_path / "data.arrow", memory_map=True)
    assert frame.schema["tokens"] == pl.List(pl.UInt16) and frame["tokens"].to_list() == [d.tolist() for d in docs]


@st.composite
def _documents(draw):
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    info = np.iinfo(dtype)
    ids = st.integers(int(info.min), int(info.max))
    docs = draw(st.lists(st.lists(ids, max_size=20), max_size=25))
    return dtype, docs, draw(st.booleans()), draw(st.sampled_from([64, 1 << 20]))


@given(_documents())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_any_documents_round_trip_exactly(tmp_path, case):
    dtype, docs, large, page_size = case
    path = tmp_path / "h.arrow"
    ss.write(path, [np.array(d, dtype=dtype) for d in docs], {"tokens": F.Tokens(dtype=dtype, large=large)}, progress=False, page_size=page_size)
    ds = ss.open(path)
    assert len(ds) == len(docs) and [ds[i]["tokens"].tolist() for i in range(len(ds))] == docs
    lengths = [np.diff(ds.page(p)["tokens"].offsets) for p in range(ds.num_pages)]
    assert (np.concatenate(lengths).tolist() if lengths else []) == [len(d) for d in docs]


def test_a_write_of_no_documents_stores_lists_of_int32_and_takes_documents_appended(tmp_path):
    path = ss.write(tmp_path / "none.ss", [], {"tokens": F.Tokens()}, progress=False)
    assert _table(path).schema.field("tokens").type == pa.list_(pa.int32())  # integer lists to every Arrow reader, not list<double>
    assert len(ss.open(path)) == 0
    folder = ss.write(tmp_path / "shards", [], {"tokens": F.Tokens()}, shard_size="1MB", progress=False)
    ss.write(folder, [[1, 2, 3], [4]], {"tokens": F.Tokens()}, shard_size="1MB", append=True, progress=False)
    assert [row["tokens"].tolist() for row in ss.open(folder)] == [[1, 2, 3], [4]]
    datasets = pytest.importorskip("datasets")
    assert ss.to_huggingface(path).features["tokens"] == datasets.Sequence(datasets.Value("int32"))


@pytest.mark.parametrize("first", [[1.5, 2.0], "a text", np.zeros((2, 2), np.int32)])
def test_on_error_skip_leaves_out_a_first_sample_that_is_not_token_ids(tmp_path, first):
    from slipstream.write.failures import SkippedSamplesWarning

    samples = [first, np.array([3, 4], np.uint16), [5]]
    with pytest.warns(SkippedSamplesWarning, match="left out 1 of 3 samples"):
        path = ss.write(tmp_path / "s.ss", samples, {"tokens": F.Tokens()}, on_error="skip", progress=False)
    ds = ss.open(path)
    assert [row["tokens"].tolist() for row in ds] == [[3, 4], [5]] and ds.fields == {"tokens": F.Tokens(dtype="int32")}
    assert [entry["sample"] for entry in ds.metadata["skipped"]] == [0]
    with pytest.raises((TypeError, ValueError), match="sample 0, field 'tokens': tokens field expects"):
        ss.write(tmp_path / "r.ss", samples, {"tokens": F.Tokens()}, progress=False)
