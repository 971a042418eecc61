"""Local Parquet read in place (``inplace.parquet``): the same samples and batches as the same file
converted to a packed file (``convert``), sets of files as one dataset, the loader's promises
(quasi-random order over row groups, ranks, exact resume, any worker count), and hostile files
refused with errors naming the file: cut, garbled or forged footers (before anything is sized by
them), every single-byte flip of a footer, nulls, damaged or foreign image bytes, files changed
after opening, flipped bytes under page checksums, and datasets pickled to a process after their
file was replaced.

Files are small (a few dozen small JPEGs): the expected values come from pyarrow's own reads or
from the converted file, never written down. Footers are edited through a small Thrift compact
codec (``Thrift``) so that a forged claim is exact. What could hang or crash the interpreter (byte
flips, forged footers, spawned workers) runs in a child interpreter with a timeout.
"""

from __future__ import annotations

import io
import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from helpers import assert_resumes_exactly, assert_same, run_python, snapshot
from hfdata import jpeg
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import slipstream as ss
from slipstream import ops
from slipstream.convert.sources import convert
from slipstream.core.errors import ChecksumError, CorruptFileError, MissingFieldError, ShardMismatchError
from slipstream.files import field_kinds as F
from slipstream.files.packed import PackedDataset
from slipstream.files.shards import ShardedDataset

N = 24  # rows of the mixed file
GROUP = 5  # its row groups: 5, 5, 5, 5, 4
CLASSES = ["cat", "dog", "eel"]
IMAGE_STRUCT = pa.struct([("bytes", pa.binary()), ("path", pa.string())])
HF_METADATA = {
    b"huggingface": json.dumps(
        {"info": {"features": {"image": {"_type": "Image"}, "label": {"_type": "ClassLabel", "names": CLASSES}}}}
    ).encode()
}  # what datasets' to_parquet writes
BATCHED = ["image", "label"]  # the fields the mapped batches hold
TIMEOUT = 120  # a child interpreter's limit (they take a few seconds)


def rgb(i: int) -> bytes:
    return jpeg(i, 18 + i % 5, 22 + i % 7)


def gray(i: int) -> bytes:
    return jpeg(i, 16 + i % 3, 20 + i % 4, channels=1)


def mixed_table(rows: range) -> pa.Table:
    """Every kind of column read in place: an HF image struct, a ClassLabel, scalars, text, bytes,
    int32 token lists and a binary column of JPEGs (every fourth gray), with HF features metadata."""
    return pa.table(
        {
            "image": pa.array([{"bytes": rgb(i), "path": f"img/{i}.jpg"} for i in rows], IMAGE_STRUCT),
            "label": pa.array([i % 3 for i in rows], pa.int64()),
            "score": pa.array([i / 4 for i in rows], pa.float32()),
            "flag": [i % 2 == 0 for i in rows],
            "text": [f"row {i} " + "é" * (i % 3) for i in rows],
            "blob": pa.array([bytes(range(i % 7)) for i in rows], pa.binary()),
            "tokens": pa.array([list(range(i, i + i % 5)) for i in rows], pa.list_(pa.int32())),
            "photo": pa.array([gray(i) if i % 4 == 0 else rgb(i + 100) for i in rows], pa.binary()),
        }
    ).replace_schema_metadata(HF_METADATA)


def write_groups(path: Path, table: pa.Table, sizes: list[int], **options: Any) -> Path:
    """``table`` written with row groups of exactly ``sizes`` rows."""
    assert sum(sizes) == table.num_rows
    with pq.ParquetWriter(path, table.schema, **options) as writer:
        start = 0
        for size in sizes:
            writer.write_table(table.slice(start, size), row_group_size=max(1, size))
            start += size
    return path


def numbered(path: Path, start: int, n: int, group: int = 4, **options: Any) -> Path:
    """A small file of ``n`` rows numbered from ``start`` (column ``i``) with a label and a word."""
    table = pa.table(
        {
            "i": pa.array(range(start, start + n), pa.int64()),
            "label": [k % 3 for k in range(n)],
            "word": [f"w{k}" for k in range(n)],
        }
    )
    pq.write_table(table, path, row_group_size=group, **options)
    return path


def pipeline() -> list[Any]:
    return [ops.RandomResizedCrop(16), ops.ToCHW()]


def epoch(data: Any, **kwargs: Any) -> list[Any]:
    kwargs.setdefault("seed", 11)
    kwargs.setdefault("batch_size", 5)
    with ss.DataLoader(data, **kwargs) as loader:
        return [snapshot(batch) for batch in loader]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(the mixed Parquet file, the same converted to a packed file)."""
    folder = tmp_path_factory.mktemp("mixed")
    parquet = folder / "mixed.parquet"
    pq.write_table(mixed_table(range(N)), parquet, row_group_size=GROUP)
    packed, _ = convert(parquet, folder / "mixed.arrow")
    return parquet, packed


# -- in place and converted: the same samples and batches ------------------------------------------------


def test_every_sample_and_the_class_names_are_the_converted_files(mixed: tuple[Path, Path]) -> None:
    ds, packed = ss.open(mixed[0]), ss.open(mixed[1])
    assert isinstance(ds, PackedDataset) and ds.remote
    assert (len(ds), ds.num_pages, list(ds.page_starts())) == (N, 5, [0, 5, 10, 15, 20])
    assert ds.fields == packed.fields
    assert (
        isinstance(ds.fields["image"], F.Image)
        and isinstance(ds.fields["photo"], F.Image)
        and isinstance(ds.fields["blob"], F.Bytes)
    )
    assert ds.fields["tokens"] == F.Tokens(dtype="int32")
    assert ds.metadata["class_names"] == packed.metadata["class_names"] == {"label": CLASSES}
    for i in range(N):
        assert_same(ds[i], packed[i], f"sample {i}")
        for name in ("image", "photo"):
            codec, data, shape = ds.encoded(i, name)
            want = packed.encoded(i, name)
            assert (codec, shape) == (want[0], want[2]) and bytes(data) == bytes(want[1]), f"sample {i}, {name}"
    assert ds[7]["text"] == "row 7 é" and ds[7]["label"] == 1 and ds[7]["blob"] == bytes(range(7 % 7))
    assert_same(ds[8]["tokens"], np.arange(8, 11, dtype=np.int32))
    assert ds[4]["photo"].shape[2] == 1 and ds[5]["photo"].shape[2] == 3  # each JPEG's own channels


@pytest.mark.parametrize(
    "backend, workers",
    [("thread", 0), ("thread", 1), ("thread", 3), ("process", 1), ("process", 2), ("helper", 1), ("helper", 2)],
)
def test_mapped_batches_are_the_converted_files_bit_for_bit(mixed: tuple[Path, Path], backend: str, workers: int) -> None:
    want = epoch(ss.open(mixed[1], fields=BATCHED).map(image=pipeline()), shuffle=True)
    got = epoch(ss.open(mixed[0], fields=BATCHED).map(image=pipeline()), shuffle=True, backend=backend, workers=workers)
    assert len(got) == 5 and got[0]["image"].shape == (5, 3, 16, 16)
    assert_same(got, want)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    sizes=st.lists(st.integers(0, 7), min_size=1, max_size=6).filter(lambda s: sum(s) > 0),
    batch_size=st.integers(1, 9),
    shuffle=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_any_row_groups_and_batches_read_what_pyarrow_reads(
    tmp_path_factory: pytest.TempPathFactory, sizes: list[int], batch_size: int, shuffle: bool, seed: int
) -> None:
    n = sum(sizes)
    rng = np.random.default_rng(seed)
    table = pa.table(
        {
            "i": pa.array(np.arange(n), pa.int64()),
            "x": pa.array(rng.normal(size=n)),
            "s": [f"{'ab' * int(k)}" for k in rng.integers(0, 4, n)],
            "tok": pa.array([rng.integers(-5, 5, int(k)).tolist() for k in rng.integers(0, 4, n)], pa.list_(pa.int64())),
            "b": pa.array([rng.bytes(int(k)) for k in rng.integers(0, 3, n)], pa.binary()),
        }
    )
    path = write_groups(tmp_path_factory.mktemp("groups") / "g.parquet", table, sizes)
    rows = pq.read_table(path).to_pylist()
    ds = ss.open(path)
    assert len(ds) == n and list(ds.page_starts()) == list(
        np.cumsum([0, *sizes])[:-1][np.array(sizes) > 0]
    )  # empty row groups: no pages
    for i, row in enumerate(rows):
        got = ds[i]
        assert got["tok"].dtype == np.int64 and got["tok"].tolist() == row["tok"], f"sample {i}"
        assert {k: v for k, v in got.items() if k != "tok"} == {k: v for k, v in row.items() if k != "tok"}, f"sample {i}"
    seen = []
    for batch in epoch(ds, batch_size=batch_size, shuffle=shuffle, seed=seed, collate=list):
        assert len(batch) <= batch_size
        for sample in batch:
            row = rows[sample["i"]]
            assert sample["s"] == row["s"] and sample["b"] == row["b"] and sample["tok"].tolist() == row["tok"]
            seen.append(sample["i"])
    assert sorted(seen) == list(range(n)) and (shuffle or seen == list(range(n)))


# -- sets of files --------------------------------------------------------------------------------------


def test_a_folder_is_one_dataset_of_its_files_in_path_order(tmp_path: Path) -> None:
    root = tmp_path / "data"
    (root / "a" / "y").mkdir(parents=True)
    numbered(root / "b.parquet", 100, 6)
    numbered(root / "a" / "z.parquet", 200, 5)
    numbered(root / "a" / "y" / "x.parquet", 300, 7)
    (root / "README.md").write_text("not data")
    ds = ss.open(root)
    assert isinstance(ds, ShardedDataset) and [s.path.relative_to(root).as_posix() for s in ds.shards] == [
        "a/y/x.parquet",
        "a/z.parquet",
        "b.parquet",
    ]
    assert [ds[k]["i"] for k in range(len(ds))] == [*range(300, 307), *range(200, 205), *range(100, 106)]
    assert list(ds.page_starts()) == [0, 4, 7, 11, 12, 16]  # every file's row groups of 4
    listed = ss.open([root / "b.parquet", root / "a" / "z.parquet"])  # a list: its order
    assert [listed[k]["i"] for k in range(len(listed))] == [*range(100, 106), *range(200, 205)]
    chosen = ss.open(root, fields=["word", "i"])
    assert list(chosen.fields) == ["word", "i"] and chosen[0] == {"word": "w0", "i": 300}


def test_files_of_other_columns_are_refused_naming_the_file(tmp_path: Path) -> None:
    numbered(tmp_path / "a.parquet", 0, 4)
    pq.write_table(pa.table({"i": [1], "label": [0], "word": ["w"], "extra": [1.5]}), tmp_path / "b.parquet")
    with pytest.raises(ShardMismatchError, match="b.parquet"):
        ss.open(tmp_path)
    (tmp_path / "b.parquet").unlink()
    pq.write_table(pa.table({"i": [1.5], "label": [0], "word": ["w"]}), tmp_path / "c.parquet")  # i holds floats there
    with pytest.raises(ShardMismatchError, match="c.parquet"):
        ss.open([tmp_path / "a.parquet", tmp_path / "c.parquet"])


def test_a_file_without_rows_takes_the_columns_of_the_first_file_with_rows(tmp_path: Path) -> None:
    """A binary column without features is told image bytes by its values, and a file without rows
    has none: wherever such files lie in the folder (first, last), ``photo`` is the images the file
    with rows holds, as that file alone reads, also once pickled; a folder of only files without
    rows opens (its binary column raw bytes, nothing to tell)."""
    root = tmp_path / "data"
    root.mkdir()
    write_groups(root / "a.parquet", mixed_table(range(N)).slice(0, 0), [0])
    write_groups(root / "b.parquet", mixed_table(range(N)), [GROUP] * 4 + [N - 4 * GROUP])
    write_groups(root / "c.parquet", mixed_table(range(N)).slice(0, 0), [0, 0])
    for fields in (None, ["photo", "label"]):
        ds, alone = ss.open(root, fields=fields), ss.open(root / "b.parquet", fields=fields)
        assert isinstance(alone.fields["photo"], F.Image)
        assert ds.fields == alone.fields and len(ds) == len(alone) == N
        assert_same([ds[i] for i in range(N)], [alone[i] for i in range(N)], "sample")
        assert pickle.loads(pickle.dumps(ds)).fields == alone.fields
    (root / "b.parquet").unlink()
    empty = ss.open(root)
    assert len(empty) == 0 and isinstance(empty.fields["photo"], F.Bytes)


def test_fields_choose_columns_and_an_absent_one_is_named(tmp_path: Path, mixed: tuple[Path, Path]) -> None:
    ds = ss.open(mixed[0], fields=["tokens", "label"])
    assert list(ds.fields) == ["tokens", "label"] and list(ds[3]) == ["tokens", "label"]
    assert ds.metadata["class_names"] == {"label": CLASSES}
    with pytest.raises(MissingFieldError, match=r"mixed\.parquet.*'nope'"):
        ss.open(mixed[0], fields=["label", "nope"])
    numbered(tmp_path / "a.parquet", 0, 4)
    with pytest.raises(MissingFieldError, match=r"a\.parquet.*'nope'"):
        ss.open(tmp_path, fields=["nope"])
    # a column no field holds is no obstacle when it is not chosen
    table = pa.table({"i": [1, 2], "when": pa.array([1, 2], pa.timestamp("ms"))})
    pq.write_table(table, tmp_path / "t.parquet")
    assert ss.open(tmp_path / "t.parquet", fields=["i"])[1] == {"i": 2}


def test_image_channels_3_reads_gray_jpegs_as_rgb(tmp_path: Path) -> None:
    path = tmp_path / "gray.parquet"
    pq.write_table(
        pa.table({"photo": pa.array([gray(i) if i % 2 else rgb(i) for i in range(8)], pa.binary())}), path, row_group_size=3
    )
    own, as_rgb = ss.open(path), ss.open(path, image=F.Image(channels=3))
    for i in range(8):
        image = as_rgb[i]["photo"]
        assert image.shape[2] == 3, f"sample {i}"
        if i % 2:
            assert own[i]["photo"].shape[2] == 1
            for c in range(3):
                assert_same(image[:, :, c], own[i]["photo"][:, :, 0], f"sample {i}, channel {c}")
    batches = epoch(as_rgb.map(photo=[ops.RandomResizedCrop(8), ops.ToCHW()]), batch_size=4)
    assert [b["photo"].shape for b in batches] == [(4, 3, 8, 8), (4, 3, 8, 8)]


# -- the loader's promises ----------------------------------------------------------------------------


def test_quasi_random_order_draws_each_batch_from_few_row_groups(tmp_path: Path) -> None:
    for k in range(4):
        numbered(tmp_path / f"part-{k}.parquet", 40 * k, 40, group=4)  # 10 row groups each: 40 in all
    ds = ss.open(tmp_path)
    assert ds.num_pages == 40
    for seed in (1, 2):
        order = [int(i) for b in epoch(ds, batch_size=8, order="quasi_random", seed=seed) for i in b["i"]]
        assert sorted(order) == list(range(160)) and order != list(range(160))
        groups = [{i // 4 for i in order[a : a + 8]} for a in range(0, 160, 8)]
        assert max(len(g) for g in groups) <= 8  # batches within one window of 8 row groups (32 rows)
        assert all(len({i // 4 for i in order[w : w + 32]}) == 8 for w in range(0, 160, 32))


@pytest.mark.parametrize("order", ["random", "quasi_random"])
def test_ranks_share_each_epoch_disjointly_and_completely(tmp_path: Path, order: str) -> None:
    for k in range(3):
        numbered(tmp_path / f"part-{k}.parquet", 10 * k, 10, group=3)
    ds = ss.open(tmp_path)
    shares = [[int(i) for b in epoch(ds, batch_size=4, order=order, rank=r, world_size=3) for i in b["i"]] for r in range(3)]
    assert [len(s) for s in shares] == [10, 10, 10]
    assert sorted(i for s in shares for i in s) == list(range(30))


def test_resume_mid_epoch_gives_exactly_the_remaining_batches(mixed: tuple[Path, Path], tmp_path: Path) -> None:
    data = ss.open(mixed[0], fields=BATCHED).map(image=pipeline())
    assert assert_resumes_exactly(lambda: ss.DataLoader(data, 5, shuffle=True, seed=3, workers=2)) == 12
    for k in range(2):
        numbered(tmp_path / f"p{k}.parquet", 10 * k, 10, group=3)
    folder = ss.open(tmp_path)
    assert assert_resumes_exactly(lambda: ss.DataLoader(folder, 3, order="quasi_random", seed=5, workers=1), epochs=1) == 8


def test_any_worker_count_and_backend_gives_the_same_batches(tmp_path: Path) -> None:
    for k in range(3):
        path = tmp_path / f"p{k}.parquet"
        table = mixed_table(range(8 * k, 8 * k + 8)).select(["image", "label"])
        pq.write_table(table, path, row_group_size=3)
    data = ss.open(tmp_path).map(image=pipeline())
    want = epoch(data, order="quasi_random", workers=0)
    assert len(want) == 5
    for backend, workers in [("thread", 1), ("thread", 3), ("process", 2)]:
        assert_same(epoch(data, order="quasi_random", backend=backend, workers=workers), want, f"{backend} x {workers}")


def test_files_opened_together_keep_one_bound_of_row_groups_also_when_pickled(tmp_path: Path) -> None:
    for k in range(3):
        numbered(tmp_path / f"p{k}.parquet", 10 * k, 10, group=2)
    ds = ss.open(tmp_path, keep=3)
    again = pickle.loads(pickle.dumps(ds))  # as a spawned worker gets it
    for data in (ds, again):
        recents = {id(shard._source.recent) for shard in data.shards}  # (the sources' shared bound)
        assert len(recents) == 1
        assert [data[k]["i"] for k in range(30)] == list(range(30))
        assert len(data.shards[0]._source.recent) == 3


# -- hostile files ----------------------------------------------------------------------------------


class Thrift:
    """Thrift's compact protocol, for editing Parquet footers: a struct as a list of [field id,
    type, value] (lists as ("list", element type, items)), decoded and encoded back byte for byte."""

    @staticmethod
    def footer(path: Path) -> tuple[bytes, list]:
        data = path.read_bytes()
        length = int.from_bytes(data[-8:-4], "little")
        tree, end = Thrift._struct(data[-8 - length : -8], 0)
        assert end == length and Thrift.encode(tree) == data[-8 - length : -8]
        return data[: -8 - length], tree

    @staticmethod
    def write(path: Path, head: bytes, tree: list) -> Path:
        footer = Thrift.encode(tree)
        path.write_bytes(head + footer + len(footer).to_bytes(4, "little") + b"PAR1")
        return path

    @staticmethod
    def field(struct: list, fid: int) -> list:
        return next(f for f in struct if f[0] == fid)

    @staticmethod
    def _varint(data: bytes, pos: int) -> tuple[int, int]:
        result = shift = 0
        while True:
            b = data[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return result, pos

    @staticmethod
    def _value(data: bytes, pos: int, t: int, element: bool = False) -> tuple[Any, int]:
        if t in (1, 2):
            return (data[pos] == 1, pos + 1) if element else (t == 1, pos)
        if t == 3:
            return data[pos], pos + 1
        if t in (4, 5, 6):
            v, pos = Thrift._varint(data, pos)
            return (v >> 1) ^ -(v & 1), pos
        if t == 7:
            return data[pos : pos + 8], pos + 8
        if t == 8:
            n, pos = Thrift._varint(data, pos)
            return data[pos : pos + n], pos + n
        if t in (9, 10):
            n, et = data[pos] >> 4, data[pos] & 0x0F
            pos += 1
            if n == 15:
                n, pos = Thrift._varint(data, pos)
            items = []
            for _ in range(n):
                v, pos = Thrift._value(data, pos, et, True)
                items.append(v)
            return ("list", et, items), pos
        assert t == 12, f"type {t}"
        return Thrift._struct(data, pos)

    @staticmethod
    def _struct(data: bytes, pos: int) -> tuple[list, int]:
        fields, last = [], 0
        while data[pos]:
            delta, t = data[pos] >> 4, data[pos] & 0x0F
            pos += 1
            if delta:
                fid = last + delta
            else:
                v, pos = Thrift._varint(data, pos)
                fid = (v >> 1) ^ -(v & 1)
            value, pos = Thrift._value(data, pos, t)
            fields.append([fid, t, value])
            last = fid
        return fields, pos + 1

    @staticmethod
    def _put_varint(n: int) -> bytes:
        out = bytearray()
        while n >= 0x80:
            out.append((n & 0x7F) | 0x80)
            n >>= 7
        return bytes([*out, n])

    @staticmethod
    def _encode_value(t: int, v: Any, element: bool = False) -> bytes:
        if t in (1, 2):
            return bytes([1 if v else 2]) if element else b""
        if t == 3:
            return bytes([v])
        if t in (4, 5, 6):
            return Thrift._put_varint((v << 1) ^ (v >> 63))
        if t == 7:
            return bytes(v)
        if t == 8:
            return Thrift._put_varint(len(v)) + bytes(v)
        if t in (9, 10):
            _, et, items = v
            head = bytes([(len(items) << 4) | et]) if len(items) < 15 else bytes([0xF0 | et]) + Thrift._put_varint(len(items))
            return head + b"".join(Thrift._encode_value(et, x, True) for x in items)
        return Thrift.encode(v)

    @staticmethod
    def encode(fields: list) -> bytes:
        out, last = bytearray(), 0
        for fid, t, v in fields:
            t = (1 if v else 2) if t in (1, 2) else t
            if 0 < fid - last <= 15:
                out.append(((fid - last) << 4) | t)
            else:
                out.append(t)
                out += Thrift._put_varint((fid << 1) ^ (fid >> 63))
            out += Thrift._encode_value(t, v)
            last = fid
        return bytes([*out, 0])


def _row_group(tree: list, g: int) -> list:
    return Thrift.field(tree, 4)[2][2][g]


def _chunk_meta(tree: list, g: int, column: int) -> list:
    return Thrift.field(Thrift.field(_row_group(tree, g), 1)[2][2][column], 3)[2]


def forged_footers(source: Path, folder: Path) -> dict[str, Path]:
    """Copies of ``source`` (2 row groups of 10 rows, columns i and word) whose footers claim what
    their bytes do not hold."""
    huge = 1 << 40
    out = {}

    def forge(name: str, edit: Any) -> None:
        head, tree = Thrift.footer(source)
        edit(tree)
        out[name] = Thrift.write(folder / f"{name}.parquet", head, tree)

    forge("file rows", lambda t: Thrift.field(t, 3).__setitem__(2, huge))
    forge(
        "group rows",
        lambda t: (Thrift.field(_row_group(t, 1), 3).__setitem__(2, huge), Thrift.field(t, 3).__setitem__(2, huge + 10)),
    )

    def consistent(t: list, rows: int) -> None:  # every count agrees: only the bytes tell
        Thrift.field(_row_group(t, 1), 3)[2] = rows
        Thrift.field(t, 3)[2] = rows + 10
        for column in range(2):
            Thrift.field(_chunk_meta(t, 1, column), 5)[2] = rows

    forge("consistent rows", lambda t: consistent(t, huge))
    forge("consistent 5M rows", lambda t: consistent(t, 5 << 20))
    forge("negative rows", lambda t: (Thrift.field(_row_group(t, 0), 3).__setitem__(2, -3), Thrift.field(t, 3).__setitem__(2, 7)))
    forge("values", lambda t: Thrift.field(_chunk_meta(t, 0, 1), 5).__setitem__(2, huge))
    forge("compressed size", lambda t: Thrift.field(_chunk_meta(t, 1, 0), 7).__setitem__(2, huge))
    forge("data page offset", lambda t: Thrift.field(_chunk_meta(t, 1, 0), 9).__setitem__(2, huge))
    forge("dictionary offset", lambda t: Thrift.field(_chunk_meta(t, 1, 1), 11).__setitem__(2, 4))  # onto row group 0's bytes
    return out


def test_forged_footers_are_refused_at_open_before_anything_is_sized_by_them(tmp_path: Path) -> None:
    source = numbered(tmp_path / "source.parquet", 0, 20, group=10)
    forged = forged_footers(source, tmp_path)
    assert ss.open(source)[19]["i"] == 19
    code = """
        import json, resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))  # a safety net: a forged size must not be allocated
        import slipstream as ss
        from slipstream.core.errors import CorruptFileError
        out = {}
        for name, path in json.loads(sys.argv[1]).items():
            try:
                ds = ss.open(path)
                out[name] = f"opened: {len(ds)} samples"
            except CorruptFileError as exc:
                out[name] = str(exc)
        print(json.dumps(out))
    """
    result = run_python(code, timeout=TIMEOUT, argv=[json.dumps({k: str(v) for k, v in forged.items()})])
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    for name, path in forged.items():
        assert found[name].startswith(f"{path}: "), f"{name}: {found[name]}"
        assert "damaged footer" in found[name], f"{name}: {found[name]}"
    assert (
        "row group 1" in found["group rows"]
        and "row group 1" in found["consistent rows"]
        and "column 'i'" in found["compressed size"]
    )


def test_cut_and_garbled_files_are_refused_naming_them(tmp_path: Path) -> None:
    source = numbered(tmp_path / "source.parquet", 0, 20, group=10)
    data = source.read_bytes()
    length = int.from_bytes(data[-8:-4], "little")
    rng = np.random.default_rng(0)
    cases = {f"cut at {n}": data[:n] for n in (0, 3, 11, len(data) // 2, len(data) - 1, len(data) - 5)}
    cases["garbage footer"] = data[: -8 - length] + rng.bytes(length) + data[-8:]
    cases["zeroed footer"] = data[: -8 - length] + bytes(length) + data[-8:]
    cases["footer longer than the file"] = data[:-8] + (len(data) * 2).to_bytes(4, "little") + b"PAR1"
    cases["encrypted footer"] = data[:-4] + b"PARE"
    cases["not parquet"] = b"PK\x03\x04" + rng.bytes(200)
    paths = {}
    for k, (name, content) in enumerate(cases.items()):
        paths[name] = tmp_path / f"case{k}.parquet"
        paths[name].write_bytes(content)
    code = """
        import json, sys
        import slipstream as ss
        from slipstream.core.errors import CorruptFileError
        out = {}
        for name, path in json.loads(sys.argv[1]).items():
            try:
                ds = ss.open(path)
                out[name] = f"opened: {[ds[i] for i in range(len(ds))]}"
            except CorruptFileError as exc:
                out[name] = str(exc)
        print(json.dumps(out))
    """
    result = run_python(code, timeout=TIMEOUT, argv=[json.dumps({k: str(v) for k, v in paths.items()})])
    assert result.returncode == 0, result.stderr
    found = json.loads(result.stdout)
    for name, path in paths.items():
        assert found[name].startswith(f"{path}: "), f"{name}: {found[name]}"
    assert "too short" in found["cut at 0"] and "too short" in found["cut at 11"] and "encrypted" in found["encrypted footer"]
    assert all("PAR1" in found[f"cut at {n}"] for n in (len(data) // 2, len(data) - 1, len(data) - 5))


def test_every_flipped_footer_byte_is_refused_or_reads_the_same_values(tmp_path: Path) -> None:
    """A flip in the footer (no checksum guards it) gives an error naming the file, or the same
    rows' values (a flipped name or annotation may rename a column, read its text as bytes or its
    lists as structs of lists: the values compared are the leaves, in order)."""
    source = tmp_path / "source.parquet"
    table = pa.table(
        {
            "label": [0, 1, 2, 0],
            "text": ["a", "bé", "", "c"],
            "tokens": pa.array([[1], [], [2, 3], [4]], pa.list_(pa.int32())),
            "photo": pa.array([jpeg(i, 8, 8) for i in range(4)], pa.binary()),
        }
    ).replace_schema_metadata(HF_METADATA)
    statistics = ["label", "text", "tokens.list.element"]  # (the photos' would be whole JPEGs: a long footer, a slow test)
    pq.write_table(table, source, row_group_size=2, write_page_checksum=True, store_schema=False, write_statistics=statistics)
    code = """
        import sys
        from pathlib import Path
        import numpy as np
        import slipstream as ss
        from slipstream.core.errors import CorruptFileError, ConvertError

        source, target = Path(sys.argv[1]), Path(sys.argv[2])
        data = source.read_bytes()
        start = len(data) - 8 - int.from_bytes(data[-8:-4], "little")

        from leafvalues import values

        want = values(source)
        outcomes = {"refused": 0, "same": 0}
        for pos in range(start, len(data)):
            flipped = bytearray(data)
            flipped[pos] ^= 0xFF
            target.write_bytes(flipped)
            try:
                got = values(target)
            except (CorruptFileError, ConvertError) as exc:
                assert str(exc).startswith(str(target)), (pos, exc)
                outcomes["refused"] += 1
                continue
            assert got == want, (pos - start, [r[:20] for r in got if r not in want][:1], [r[:20] for r in want if r not in got][:1])
            outcomes["same"] += 1
        print(outcomes)
    """
    result = run_python(code, timeout=TIMEOUT, argv=[str(source), str(tmp_path / "flipped.parquet")])
    assert result.returncode == 0, result.stderr[-3000:]
    assert "'refused'" in result.stdout


def test_a_null_is_refused_naming_the_column_and_row(tmp_path: Path) -> None:
    path = tmp_path / "nulls.parquet"
    table = pa.table(
        {
            "x": pa.array([None if i == 13 else i for i in range(20)], pa.int64()),
            "photo": pa.array([None if i == 6 else rgb(i) for i in range(20)], pa.binary()),
            "tokens": pa.array([[1, None] if i == 17 else [i] for i in range(20)], pa.list_(pa.int32())),
        }
    )
    pq.write_table(table, path, row_group_size=5)
    ds = ss.open(path)
    assert ds[0]["x"] == 0
    for row, column in ((13, "x"), (6, "photo"), (17, "tokens")):
        with pytest.raises(CorruptFileError, match=rf"{path}: row group {row // 5}: column '{column}' is null at row {row}"):
            ds[row]
    with (
        pytest.raises(CorruptFileError, match="is null at row 6"),
        ss.DataLoader(ss.open(path, fields=["photo"]), 4, collate=list) as loader,
    ):
        list(loader)


def test_damaged_image_headers_are_refused_naming_the_row(tmp_path: Path) -> None:
    from PIL import Image

    png = io.BytesIO()
    Image.new("RGB", (5, 4), (1, 2, 3)).save(png, "PNG")
    damaged = {
        7: rgb(7)[:20],  # a JPEG cut inside its header: no frame
        9: b"\x89PNG\r\n\x1a\n" + b"\x00" * 10,  # a PNG signature and no IHDR
        14: b"\xff\xd8\xff\xe0" + bytes(range(256)) * 4,  # a JPEG start and garbage
    }
    path = tmp_path / "damaged.parquet"
    photos = [damaged.get(i, png.getvalue() if i % 2 else rgb(i)) for i in range(16)]
    pq.write_table(pa.table({"photo": pa.array(photos, pa.binary())}), path, row_group_size=4)
    ds = ss.open(path)
    assert ds[1]["photo"].shape == (4, 5, 3) and ds[0]["photo"].shape[2] == 3
    for row in damaged:
        with pytest.raises(
            CorruptFileError,
            match=rf"{path}: row group {row // 4}: column 'photo', row {row}: the (JPEG|PNG) header cannot be read",
        ):
            ds[row]
    with (
        pytest.raises(CorruptFileError, match="row 7"),
        ss.DataLoader(ds.map(photo=[ops.CenterCrop(4), ops.ToCHW()]), 4) as loader,
    ):
        list(loader)


def test_images_neither_jpeg_nor_png_are_bytes_or_decoded_to_raw_pixels(tmp_path: Path) -> None:
    """A binary column of WEBP and GIF bytes alone is bytes (no image field claims them); in an image
    column (JPEGs first, or an Image feature) such a row is decoded and stored as raw pixels, its
    neighbours keeping their bytes; bytes no decoder reads are refused naming the row."""
    from PIL import Image

    def encoded(kind: str, i: int) -> bytes:
        out = io.BytesIO()
        Image.new("RGB", (6, 5), (i, 2 * i, 3)).save(out, kind, **({"lossless": True} if kind == "WEBP" else {}))
        return out.getvalue()

    foreign = tmp_path / "foreign.parquet"
    blobs = [encoded("WEBP" if i % 2 else "GIF", i) for i in range(6)]
    pq.write_table(pa.table({"data": pa.array(blobs, pa.binary())}), foreign, row_group_size=4)
    ds = ss.open(foreign)
    assert ds.fields["data"] == F.Bytes() and [ds[i]["data"] for i in range(6)] == blobs
    mixed = tmp_path / "mixed.parquet"  # JPEGs first (an image column), then a lossless WEBP
    pq.write_table(pa.table({"data": pa.array([rgb(i) for i in range(5)] + [blobs[1]], pa.binary())}), mixed, row_group_size=4)
    ds = ss.open(mixed)
    assert ds.encoded(4, "data")[0] == "jpeg" and ds.encoded(5, "data")[0] == "raw"
    assert (ds[5]["data"] == np.asarray(Image.open(io.BytesIO(blobs[1])).convert("RGB"))).all()
    hf = tmp_path / "hf.parquet"  # an Image feature holding a GIF, then bytes no decoder reads
    images = pa.array(
        [{"bytes": rgb(0), "path": None}, {"bytes": blobs[0], "path": "x.gif"}, {"bytes": b"not an image", "path": "x.bin"}], IMAGE_STRUCT
    )
    pq.write_table(pa.table({"image": images}).replace_schema_metadata(HF_METADATA), hf, row_group_size=1)
    ds = ss.open(hf)
    assert ds[0]["image"].shape[2] == 3
    assert ds.encoded(1, "image")[0] == "raw"
    assert (ds[1]["image"] == np.asarray(Image.open(io.BytesIO(blobs[0])).convert("RGB"))).all()
    with pytest.raises(CorruptFileError, match=rf"{hf}: row group 2: column 'image', row 2: "):
        ds[2]


def test_a_file_changed_after_opening_is_refused_on_the_next_read(tmp_path: Path) -> None:
    path = numbered(tmp_path / "a.parquet", 0, 12)
    copy = shutil.copy(path, tmp_path / "copy.parquet")
    ds = ss.open(path)
    assert ds[0]["i"] == 0  # row group 0 is read and kept
    with path.open("ab") as handle:
        handle.write(b"appended")
    for read in (lambda: ds[0], lambda: ds[11], lambda: list(ss.DataLoader(ds, 4)), ds.validate):
        with pytest.raises(CorruptFileError, match=rf"{path}: the file changed since it was opened"):
            read()
    ds = ss.open(copy)
    assert ds[5]["i"] == 5
    os.replace(numbered(tmp_path / "new.parquet", 100, 12), copy)  # another file renamed over it
    with pytest.raises(CorruptFileError, match=rf"{copy}: the file changed since it was opened"):
        ds[5]
    copy.unlink()
    with pytest.raises(CorruptFileError, match="removed"):
        ds[5]


def _flip_in_data_page(path: Path, group: int, column: int) -> None:
    """Flip the last byte of a column chunk (its data page's values: no dictionary, no compression)."""
    meta = pq.read_metadata(path).row_group(group).column(column)
    raw = bytearray(path.read_bytes())
    raw[meta.data_page_offset + meta.total_compressed_size - 1] ^= 0x40
    path.write_bytes(bytes(raw))


def test_validate_finds_a_flipped_byte_in_a_checksummed_page(tmp_path: Path) -> None:
    options = {"write_page_checksum": True, "compression": "none", "use_dictionary": False}
    path = numbered(tmp_path / "a.parquet", 0, 20, group=5, **options)
    ss.open(path).validate()
    _flip_in_data_page(path, 2, 0)
    ds = ss.open(path)
    with pytest.raises(ChecksumError, match=rf"{path}: row group 2 \(samples 10..14\) fails its checks: .*CRC") as caught:
        ds.validate()
    assert (caught.value.page, caught.value.samples) == (2, range(10, 15))
    assert ds[9]["i"] == 9
    with pytest.raises(CorruptFileError, match="row group 2"):
        ds[10]  # a read checks the CRC too
    numbered(tmp_path / "first.parquet", 100, 20, group=5, **options)  # in a set: the dataset's numbers
    with pytest.raises(ChecksumError, match=r"in the dataset: page 6, samples 30..34") as caught:
        ss.open([tmp_path / "first.parquet", path]).validate()
    assert (caught.value.page, caught.value.samples) == (6, range(30, 35))


def test_a_dataset_pickled_after_its_file_was_replaced_is_refused(tmp_path: Path) -> None:
    path = numbered(tmp_path / "a.parquet", 0, 12)
    ds = ss.open(tmp_path)
    (tmp_path / "ds.pickle").write_bytes(pickle.dumps(ds))
    other = tmp_path / "other"
    other.mkdir()
    pq.write_table(pa.table({"j": [1, 2]}), other / "new.parquet")  # other columns, even
    os.replace(other / "new.parquet", path)
    code = """
        import pickle, sys
        from slipstream.core.errors import CorruptFileError
        try:
            pickle.loads(open(sys.argv[1], "rb").read())
        except CorruptFileError as exc:
            print("refused:", exc)
    """
    result = run_python(code, timeout=TIMEOUT, argv=[str(tmp_path / "ds.pickle")])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"refused: {path}: was replaced or changed since the dataset was opened"), result.stdout


def test_a_spawned_worker_refuses_a_file_replaced_before_it_started(tmp_path: Path) -> None:
    path = numbered(tmp_path / "a.parquet", 0, 12)
    replacement = numbered(tmp_path / "b.parquet", 100, 12)
    code = """
        import os, sys
        import slipstream as ss
        from slipstream.core.errors import CorruptFileError
        path, replacement = sys.argv[1], sys.argv[2]
        ds = ss.open(path)
        loader = ss.DataLoader(ds, 4, workers=1, backend="process", mp_context="spawn")
        os.replace(replacement, path)
        try:
            print("read:", [b["i"].tolist() for b in loader])
        except CorruptFileError as exc:
            print("refused:", exc)
        finally:
            loader.close()
    """
    result = run_python(code, timeout=TIMEOUT, argv=[str(path), str(replacement)])
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"refused: {path}: "), result.stdout
