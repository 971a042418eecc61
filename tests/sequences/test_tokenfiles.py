"""ss.token_file (nanoGPT .bin) and ss.megatron_file (MMIDIDX .bin/.idx) as containers of token documents."""

import os
import pickle
import struct
import subprocess
import sys

import numpy as np
import pytest

import slipstream as ss
from slipstream import fields as F
from slipstream.sequences import tokenfiles
from slipstream.sequences.documents import Documents, documents_of

# -- a Megatron writer, from the format (Megatron-LM megatron/core/datasets/indexed_dataset.py) -------------
MEGATRON_CODES = {np.uint8: 1, np.int8: 2, np.int16: 3, np.int32: 4, np.int64: 5, np.float64: 6, np.float32: 7, np.uint16: 8}


def write_megatron(prefix, seqs, dtype=np.uint16, doc_starts=None, modes=False, **forged):
    """``prefix.bin`` (the sequences end to end) and ``prefix.idx``: header, int32 lengths, int64 byte
    pointers, int64 document indices (0, ..., S), optional int8 modes; ``forged`` overrides fields."""
    arrays = [np.asarray(s, dtype=dtype) for s in seqs]
    with open(f"{prefix}.bin", "wb") as out:
        out.writelines(a.tobytes() for a in arrays)
    lengths = np.array([a.size for a in arrays], np.int32)
    pointers = np.zeros(len(arrays), np.int64)
    pointers[1:] = np.cumsum(lengths[:-1].astype(np.int64) * np.dtype(dtype).itemsize)
    doc_index = np.arange(len(arrays) + 1, dtype=np.int64) if doc_starts is None else np.asarray(doc_starts, np.int64)
    lengths, pointers, doc_index = forged.get("lengths", lengths), forged.get("pointers", pointers), forged.get("doc_index", doc_index)
    header = forged.get("magic", b"MMIDIDX\x00\x00") + struct.pack("<Q", forged.get("version", 1))
    header += struct.pack("<B", forged.get("code", MEGATRON_CODES[dtype]))
    header += struct.pack("<QQ", forged.get("sequences", len(lengths)), forged.get("documents", len(doc_index)))
    body = np.asarray(lengths, np.int32).tobytes() + np.asarray(pointers, np.int64).tobytes() + np.asarray(doc_index, np.int64).tobytes()
    if modes:
        body += np.zeros(len(lengths), np.int8).tobytes()
    with open(f"{prefix}.idx", "wb") as out:
        out.write(header + body)


def _bin(path, tokens, dtype=np.uint16):
    np.asarray(tokens, dtype=dtype).tofile(path)
    return path


# -- token_file ------------------------------------------------------------------------------------------
def test_eod_splits_documents_and_stays_at_their_end(tmp_path):
    tokens = [5, 6, 0, 7, 0, 0, 8, 9, 10]
    data = ss.token_file(_bin(tmp_path / "train.bin", tokens), eod=0)
    assert len(data) == 4 and [data[i]["tokens"].tolist() for i in range(4)] == [[5, 6, 0], [7, 0], [0], [8, 9, 10]]
    assert data[-1]["tokens"].tolist() == [8, 9, 10] and data.lengths().tolist() == [3, 2, 1, 3]
    item = data[0]["tokens"]
    assert item.dtype == np.uint16 and not item.flags.writeable
    ends_with_eod = ss.token_file(_bin(tmp_path / "e.bin", [1, 0, 2, 0]), eod=0)
    assert [ends_with_eod[i]["tokens"].tolist() for i in range(len(ends_with_eod))] == [[1, 0], [2, 0]]
    with pytest.raises(IndexError, match="document 4 is out of range for 4 documents"):
        data[4]
    with pytest.raises(TypeError, match="document index must be an integer"):
        data[1.0]


def test_without_eod_the_file_is_one_document_and_an_empty_file_none(tmp_path):
    data = ss.token_file(_bin(tmp_path / "a.bin", range(100)))
    assert len(data) == 1 and data[0]["tokens"].tolist() == list(range(100))
    assert len(ss.token_file(_bin(tmp_path / "empty.bin", []), eod=3)) == 0 and len(ss.token_file(tmp_path / "empty.bin")) == 0


def test_uint32_tokens_and_the_scan_across_chunk_boundaries(tmp_path, monkeypatch):
    rng = np.random.default_rng(0)
    tokens = rng.integers(0, 200_000, size=5000).astype(np.uint32)
    tokens[rng.choice(5000, 300, replace=False)] = 100_000
    tokens[[63, 64, 127]] = 100_000  # on and next to the chunk edges below
    monkeypatch.setattr(tokenfiles, "_SCAN_TOKENS", 64)
    data = ss.token_file(_bin(tmp_path / "t.bin", tokens, np.uint32), dtype="uint32", eod=100_000)
    cuts = np.flatnonzero(tokens == 100_000) + 1
    expected = np.split(tokens, cuts)
    expected = expected[:-1] if expected[-1].size == 0 else expected
    assert len(data) == len(expected) and all(data[i]["tokens"].tolist() == e.tolist() for i, e in enumerate(expected))
    assert data[0]["tokens"].dtype == np.uint32


def test_bad_sizes_dtypes_and_eods_raise_naming_the_file(tmp_path):
    odd = tmp_path / "odd.bin"
    odd.write_bytes(b"\x01\x00\x02")
    with pytest.raises(ValueError, match=r"odd.bin: 3 bytes is not a whole number of uint16 tokens"):
        ss.token_file(odd)
    good = _bin(tmp_path / "g.bin", [1, 2])
    with pytest.raises(ValueError, match=r"g.bin: eod=70000 is not a uint16 token id \(0..65535\)"):
        ss.token_file(good, eod=70000)
    with pytest.raises(TypeError, match="little-endian integer ids"):
        ss.token_file(good, dtype="float32")
    with pytest.raises(TypeError, match="eod must be an integer"):
        ss.token_file(good, eod=1.5)
    with pytest.raises(FileNotFoundError, match="no such token file"):
        ss.token_file(tmp_path / "missing.bin")


def test_pickled_copies_remap_the_file_and_refuse_a_changed_one(tmp_path):
    path = _bin(tmp_path / "p.bin", [1, 2, 0, 3, 0])
    data = ss.token_file(path, eod=0, field="ids")
    copy = pickle.loads(pickle.dumps(data))
    assert len(pickle.dumps(data)) < 2000 and [copy[i]["ids"].tolist() for i in range(2)] == [[1, 2, 0], [3, 0]]
    with open(path, "r+b") as handle:
        handle.truncate(4)  # in place: reading the old map past the end would be SIGBUS
    with pytest.raises(ss.CorruptFileError, match="changed"):
        data[1]
    with pytest.raises(ss.CorruptFileError, match="changed"):
        pickle.loads(pickle.dumps(copy))


def test_written_without_naming_a_field_as_tokens(tmp_path):
    tokens = [5, 6, 0, 7, 0, 8]
    data = ss.token_file(_bin(tmp_path / "w.bin", tokens), eod=0)
    assert data.default_fields() == {"tokens": F.Tokens(dtype="uint16")}
    ss.write(tmp_path / "w.ss", data, progress=False)
    ds = ss.open(tmp_path / "w.ss")
    assert ds.fields == {"tokens": F.Tokens(dtype="uint16")} and [ds[i]["tokens"].tolist() for i in range(3)] == [[5, 6, 0], [7, 0], [8]]


def test_token_documents_give_one_page_of_offsets_over_the_map(tmp_path):
    data = ss.token_file(_bin(tmp_path / "d.bin", [5, 6, 0, 7, 0, 8]), eod=0)
    documents = documents_of(data, "tokens")
    assert isinstance(documents, Documents) and documents.page_first.tolist() == [0, 3] and documents.dtype == np.uint16
    assert documents.lengths.tolist() == [3, 2, 1]
    offsets, values = documents.page(0)
    assert offsets.tolist() == [0, 3, 5, 6] and values.tolist() == [5, 6, 0, 7, 0, 8] and np.shares_memory(values, data.values)
    again = pickle.loads(pickle.dumps(documents))
    assert again.lengths.tolist() == [3, 2, 1] and again.page(0)[1].tolist() == [5, 6, 0, 7, 0, 8]
    with pytest.raises(KeyError, match="no field 'ids'"):
        data.token_documents("ids")
    documents.check()
    with open(tmp_path / "d.bin", "ab") as handle:
        handle.write(b"\x01\x00")
    with pytest.raises(ss.CorruptFileError, match="changed"):
        documents.check()


def test_the_loader_reads_documents_with_workers(tmp_path):
    rng = np.random.default_rng(1)
    tokens = rng.integers(1, 1000, size=3000).astype(np.uint16)
    tokens[rng.choice(3000, 50, replace=False)] = 0
    data = ss.token_file(_bin(tmp_path / "l.bin", tokens), eod=0)
    batches = ss.DataLoader(data, batch_size=8, shuffle=True, seed=3, workers=2, collate=lambda rows: [r["tokens"].tolist() for r in rows])
    seen = sorted(tuple(row) for batch in batches for row in batch)
    assert seen == sorted(tuple(data[i]["tokens"].tolist()) for i in range(len(data)))


# -- megatron_file ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [np.uint16, np.int32, np.uint8, np.int64])
def test_megatron_round_trip(tmp_path, dtype):
    rng = np.random.default_rng(2)
    sequences = [rng.integers(0, 120, size=int(rng.integers(0, 50))) for _ in range(30)]
    write_megatron(tmp_path / "corpus_text_document", sequences, dtype, doc_starts=[0, 10, 10, 30])
    data = ss.megatron_file(tmp_path / "corpus_text_document")
    assert len(data) == 30 and data.dtype == np.dtype(dtype) and data.documents() == 3
    assert all(data[i]["tokens"].tolist() == s.tolist() for i, s in enumerate(sequences))
    assert data.document_index.tolist() == [0, 10, 10, 30]
    assert documents_of(data).lengths.tolist() == [s.size for s in sequences]
    copy = pickle.loads(pickle.dumps(data))
    assert copy[7]["tokens"].tolist() == sequences[7].tolist()
    ss.write(tmp_path / "m.ss", data, progress=False)
    assert ss.open(tmp_path / "m.ss").fields == {"tokens": F.Tokens(dtype=dtype)}


def test_megatron_multimodal_modes_and_empty_datasets_are_read(tmp_path):
    write_megatron(tmp_path / "mm", [[1, 2], [3]], modes=True)
    assert [ss.megatron_file(tmp_path / "mm")[i]["tokens"].tolist() for i in range(2)] == [[1, 2], [3]]
    write_megatron(tmp_path / "empty", [])
    assert len(ss.megatron_file(tmp_path / "empty")) == 0


_SEQS = [[1, 2, 3], [4, 5], [6]]


@pytest.mark.parametrize(
    "forged, message",
    [
        ({"magic": b"MMIDIDY\x00\x00"}, "not a Megatron MMIDIDX index"),
        ({"version": 2}, "index version 2; this reader knows version 1"),
        ({"code": 7}, "the tokens are float32 (dtype code 7)"),
        ({"code": 99}, "unknown Megatron dtype code 99"),
        ({"sequences": 2**62}, "counts 4611686018427387904 sequences and 4 document indices, more than its"),
        ({"documents": 2**61}, "more than its"),
        ({"sequences": 4}, "the index is damaged or cut short"),
        ({"pointers": [0, 6, 9]}, "sequence 2 starts at byte 9 of"),
        ({"pointers": [0, 6, 10**12]}, "sequence 2 starts at byte 1000000000000 of"),
        ({"pointers": [0, -6, 10]}, "sequence 1 starts at byte -6 of"),
        ({"pointers": [0, 10, 6]}, "sequence 1 starts at byte 10 of"),
        ({"lengths": [3, 2, 2]}, "describes 7 uint16 tokens (14 bytes), but"),
        ({"lengths": [3, -2, 5]}, "sequence 1 has length -2"),
        ({"doc_index": [0, 2, 1, 3]}, "do not rise from 0 to the 3 sequences"),
        ({"doc_index": [1, 2, 3, 3]}, "do not rise from 0"),
        ({"doc_index": [0, 1, 2, 4]}, "do not rise from 0"),
    ],
)
def test_forged_megatron_indexes_raise_naming_the_file_before_allocating(tmp_path, forged, message):
    write_megatron(tmp_path / "f", _SEQS, doc_starts=[0, 1, 2, 3], **forged)
    with pytest.raises(ValueError) as caught:
        ss.megatron_file(tmp_path / "f")
    assert str(tmp_path / "f.idx") in str(caught.value) and message in str(caught.value)


def test_megatron_files_that_do_not_match_raise(tmp_path):
    write_megatron(tmp_path / "c", _SEQS)
    with open(tmp_path / "c.bin", "ab") as handle:
        handle.write(b"\x00\x00")  # one token more than the index describes
    with pytest.raises(ValueError, match=r"describes 6 uint16 tokens \(12 bytes\), but .*c.bin holds 14 bytes"):
        ss.megatron_file(tmp_path / "c")
    (tmp_path / "h.idx").write_bytes(b"MMIDIDX\x00\x00\x01")
    (tmp_path / "h.bin").write_bytes(b"")
    with pytest.raises(ValueError, match="shorter than a Megatron index header"):
        ss.megatron_file(tmp_path / "h")
    os.remove(tmp_path / "h.bin")
    with pytest.raises(FileNotFoundError, match=r"h.bin: no such file"):
        ss.megatron_file(tmp_path / "h")


def test_megatron_document_index_survives_the_index_cut_short_in_place(tmp_path):
    write_megatron(tmp_path / "cut", [[7, 8]] * 5000, doc_starts=np.arange(0, 5001, 2).tolist() + [5000])
    code = (
        "import os, sys, slipstream as ss\n"
        "data = ss.megatron_file(sys.argv[1])\n"
        "os.truncate(sys.argv[1] + '.idx', 40)\n"  # in place: a view of the old map would be SIGBUS
        "print(data.documents(), int(data.document_index[-1]), int(data.document_index[1]))\n"
        "try:\n    data[0]\nexcept ss.CorruptFileError as exc:\n    print('refused:', exc)\n"
    )
    run = subprocess.run([sys.executable, "-c", code, str(tmp_path / "cut")], check=False, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, (run.returncode, run.stderr[-2000:])
    assert run.stdout.splitlines()[0] == "2501 5000 2" and "refused:" in run.stdout and "changed" in run.stdout
