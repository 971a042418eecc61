"""WebDataset tar shards read in place (``inplace.webdataset``, ``inplace.tarindex``, ``inplace.tarcache``): the samples
Python's tarfile and WebDataset's grouping give, the same batches through every backend as a
packed file of the same bytes, ranks and resume, the index cache, and hostile tars refused."""

from __future__ import annotations

import io
import os
import pickle
import stat
import tarfile
import tempfile
from pathlib import Path

import numpy as np
import pytest
from helpers import assert_resumes_exactly, assert_same, snapshot
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from packed import photo_like
from tardata import image_shards, jpeg, write_tar

import slipstream as ss
from slipstream import fields as F
from slipstream import ops
from slipstream.core.errors import ChecksumError, CorruptFileError, MissingFieldError, ShardMismatchError
from slipstream.inplace import tarcache, tarindex
from slipstream.inplace.tarcache import tar_index
from slipstream.inplace.tarindex import BLOCK
from slipstream.inplace.webdataset import expand_braces, is_webdataset, open_webdataset, tar_files


def webdataset_samples(path: Path) -> list[dict]:
    """What WebDataset's own reader (tarfile underneath) gives for the shard, without ``__url__``."""
    from webdataset.tariterators import tarfile_samples

    return [{k: v for k, v in s.items() if k != "__url__"} for s in tarfile_samples([{"url": str(path)}])]


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SLIPSTREAM_CACHE_DIR", str(tmp_path / "cache"))


# -- the samples WebDataset gives --------------------------------------------------------------------

_NAME = st.text(st.sampled_from("abcXYZ09_-é"), min_size=1, max_size=12).filter(lambda s: not s.startswith("__"))
_FOLDER = st.one_of(
    st.just(""), st.lists(_NAME, min_size=1, max_size=3).map(lambda p: "/".join(p) + "/"), st.just("d" * 120 + "/")
)
_EXTENSIONS = ["bin", "dat", "seg.raw", "X", "blob.v2"]  # all read as bytes (their values compared as they are)


@st.composite
def layouts(draw):
    keys = draw(st.lists(st.tuples(_FOLDER, _NAME), min_size=0, max_size=8, unique_by=lambda t: t[0] + t[1]))
    members: list[tuple[str, bytes | None]] = []
    for folder, name in keys:
        if draw(st.booleans()) and folder:
            members.append((folder, None))  # a folder entry: skipped
        for ext in draw(st.lists(st.sampled_from(_EXTENSIONS), min_size=1, max_size=4, unique=True)):
            ext = ext.upper() if draw(st.booleans()) else ext  # extensions are lowercased
            members.append((f"{folder}{name}.{ext}", draw(st.binary(max_size=1500))))
        if draw(st.integers(0, 5)) == 0:
            members.append((draw(st.sampled_from(["__meta__", "__info__/k.bin", "README", "notes/no-extension"])), b"skipped"))
    fmt = draw(st.sampled_from([tarfile.GNU_FORMAT, tarfile.PAX_FORMAT, tarfile.USTAR_FORMAT]))
    return members, fmt, draw(st.one_of(st.none(), st.integers(1, 4))), draw(st.integers(600, 6000))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layouts())
def test_the_samples_are_webdatasets_own_for_any_layout_of_members(layout):
    members, fmt, part_samples, part_bytes = layout
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "shard.tar"
        try:
            write_tar(path, members, fmt)
        except ValueError:  # a name ustar cannot hold
            assume(False)
        want = webdataset_samples(path)
        index = tar_index(path, cache_dir=Path(folder) / "cache")
        assert index.keys.tolist() == [s["__key__"] for s in want]
        raw = path.read_bytes()
        for s, sample in enumerate(want):
            members_of = range(int(index.starts[s]), int(index.starts[s + 1]))
            got = {
                index.extensions[index.codes[m]]: raw[index.offsets[m] : index.offsets[m] + index.sizes[m]] for m in members_of
            }
            assert got == {k: v for k, v in sample.items() if k != "__key__"}
        common = sorted(set.intersection(*(set(s) for s in want))) if want else ["__key__"]
        ds = open_webdataset(
            path, fields=common, part_samples=part_samples, part_bytes=part_bytes, cache_dir=Path(folder) / "cache"
        )
        assert len(ds) == len(want)
        for i in np.random.default_rng(len(want)).permutation(len(want)):  # random access, parts out of order
            assert ds[int(i)] == {k: want[i][k] for k in common}
        if any(set(s) != set(common) for s in want):
            with pytest.raises(CorruptFileError, match="has no .* member, which other samples have"):
                open_webdataset(path, cache_dir=Path(folder) / "cache")


def test_fields_follow_the_extensions_and_values_are_read_as_webdataset_decodes_them(tmp_path):
    image = photo_like(20, 30, seed=1)
    from PIL import Image

    png = io.BytesIO()
    Image.fromarray(image).save(png, "PNG")
    big = np.random.default_rng(0).bytes(3 * tarcache.WINDOW + 5)  # more than the pass over the headers reads at a time
    members = [
        ("a.seg.PNG", png.getvalue()),
        ("a.npy", big),
        ("a.cls", b" 7\n"),
        ("a.txt", "héllo".encode()),
        ("a.json", b'{"x": [1, 2]}'),
    ]
    ds = open_webdataset(write_tar(tmp_path / "one.tar", members))
    assert {n: type(f) for n, f in ds.fields.items()} == {
        "__key__": F.Text, "cls": F.Int, "json": F.JSON, "npy": F.Bytes, "seg.png": F.Image, "txt": F.Text,
    }  # fmt: skip
    sample = ds[0]
    np.testing.assert_array_equal(sample.pop("seg.png"), image)
    assert sample == {"__key__": "a", "cls": 7, "json": {"x": [1, 2]}, "npy": big, "txt": "héllo"}
    assert list(open_webdataset(tmp_path / "one.tar", fields=["txt", "cls"]).fields) == ["txt", "cls"]
    with pytest.raises(MissingFieldError, match="'jpg'"):
        open_webdataset(tmp_path / "one.tar", fields=["jpg"])


# -- the loader --------------------------------------------------------------------------------------


def batches(data, backend, workers, **kwargs):
    kwargs.setdefault("shuffle", "order" not in kwargs)
    with ss.DataLoader(data, 6, seed=3, workers=workers, backend=backend, mp_context="fork", **kwargs) as loader:
        return [snapshot(b) for _ in range(2) for b in loader]


def test_a_jpeg_pipeline_gives_a_packed_files_batches_with_every_backend_and_worker_count(tmp_path):
    paths = image_shards(tmp_path)
    data = open_webdataset(tmp_path, part_samples=5)  # the folder, in name order
    assert [s.path for s in data.shards] == paths and len(data) == 28 and data.num_pages == 6
    same = [{"__key__": s["__key__"], "cls": int(s["cls"]), "jpg": s["jpg"]} for path in paths for s in webdataset_samples(path)]
    packed = ss.write(
        tmp_path / "same.arrow", same, {"__key__": F.Text(), "cls": F.Int(), "jpg": F.Image(codec="jpeg")}, progress=False
    )
    pipeline = [ops.RandomResizedCrop(32), ops.ToCHW()]
    want = batches(ss.open(packed).map(jpg=pipeline), "thread", 1)
    mapped = data.map(jpg=pipeline)
    assert want[0]["jpg"].shape == (6, 3, 32, 32) and len(want) == 10
    for backend, workers in [("thread", 1), ("thread", 3), ("process", 2), ("helper", 3)]:
        got = batches(mapped, backend, workers)
        assert len(got) == len(want)
        for k, (g, w) in enumerate(zip(got, want)):
            assert_same(g, w, f"{backend}, {workers} workers, batch {k}")
    quasi = batches(mapped, "thread", 2, order="quasi_random")
    assert sorted(k for b in quasi[:5] for k in b["__key__"]) == sorted(data[i]["__key__"] for i in range(len(data)))


def test_spawned_workers_reopen_the_shards_from_the_cached_index(tmp_path):
    image_shards(tmp_path, n=6)
    data = open_webdataset(tmp_path, part_samples=4).map(jpg=[ops.RandomResizedCrop(16), ops.ToCHW()])
    want = batches(data, "thread", 1)
    with ss.DataLoader(data, 6, shuffle=True, seed=3, workers=2, backend="process", mp_context="spawn", timeout=120) as loader:
        got = [snapshot(b) for _ in range(2) for b in loader]
    assert len(got) == len(want) == 4
    for k, (g, w) in enumerate(zip(got, want)):
        assert_same(g, w, f"spawned, batch {k}")


def test_ranks_split_the_shards_and_a_saved_state_resumes_exactly(tmp_path):
    image_shards(tmp_path, n=9)
    data = open_webdataset(sorted(tmp_path.glob("*.tar")), part_samples=4).map(jpg=[ops.RandomResizedCrop(16), ops.ToCHW()])
    seen = []
    for rank in range(2):
        with ss.DataLoader(data, 4, shuffle=True, seed=5, rank=rank, world_size=2, drop_last=False) as loader:
            seen.append([k for b in loader for k in b["__key__"]])
    assert not set(seen[0]) & set(seen[1]) and len(set(seen[0]) | set(seen[1])) == 18
    assert assert_resumes_exactly(lambda: ss.DataLoader(data, 4, shuffle=True, seed=5, workers=2, rank=1, world_size=2)) > 4


def test_a_brace_pattern_names_the_shards_in_order_and_shards_must_agree(tmp_path):
    image_shards(tmp_path, shards=3, n=2)
    data = open_webdataset(str(tmp_path / "shard-{0002,0000}.tar"))
    assert [data[i]["__key__"] for i in range(len(data))] == ["part2/00000", "part2/00001", "part0/00000", "part0/00001"]
    with pytest.raises(FileNotFoundError, match="shard-0003.tar"):
        open_webdataset(str(tmp_path / "shard-{0000..0009}.tar"))
    write_tar(tmp_path / "other.tar", [("k.jpg", jpeg(photo_like(8, 8))), ("k.txt", b"t"), ("k.cls", b"1")])
    with pytest.raises(ShardMismatchError, match="other.tar"):
        open_webdataset([tmp_path / "shard-0000.tar", tmp_path / "other.tar"])


def test_brace_patterns_expand_as_webdataset_expands_them_and_malformed_ones_are_refused():
    import braceexpand

    for pattern in [
        "s-{0000..0012}.tar",
        "s-{8..11}.tar",
        "{a,b}/x-{000..002}.tar",
        "s{3..1}.tar",
        "s{0..10..5}.tar",
        "plain.tar",
        "s{,x}.tar",
    ]:
        assert expand_braces(pattern) == list(braceexpand.braceexpand(pattern)), pattern
    for bad, why in [("s-{0..3.tar", "never closed"), ("s-0..3}.tar", "closes no"), ("s{{a,b}}.tar", "nested"),
                     ("s{a..c}.tar", "not of integers"), ("s{7}.tar", "neither a range"), ("s{0..9999999}.tar", "more than")]:  # fmt: skip
        with pytest.raises(ValueError, match=why):
            expand_braces(bad)


def test_is_webdataset_tells_tar_shards_from_other_data(tmp_path):
    write_tar(tmp_path / "a.tar", [("k.bin", b"1")])
    (tmp_path / "packed").mkdir()
    (tmp_path / "packed" / "index.json").write_text("{}")
    (tmp_path / "packed" / "x.tar").write_bytes(b"")
    (tmp_path / "empty").mkdir()
    assert is_webdataset(tmp_path / "a.tar") and is_webdataset(str(tmp_path)) and is_webdataset("s3://b/shard-{0..9}.tar")
    assert not is_webdataset(tmp_path / "packed") and not is_webdataset(tmp_path / "empty") and not is_webdataset("d.arrow")
    assert is_webdataset("s-{0..3}.tar") and not is_webdataset("x-{0..3}.arrow")
    assert not is_webdataset(["a.tar"])  # lists are the caller's to check item by item
    assert tar_files(tmp_path) == [tmp_path / "a.tar"]


# -- the index cache ---------------------------------------------------------------------------------


@pytest.fixture
def scans(monkeypatch):
    count = []
    real = tarcache._scan_file
    monkeypatch.setattr(tarcache, "_scan_file", lambda *a: count.append(a[0]) or real(*a))
    return count


def entries(cache: Path) -> list[Path]:
    return sorted((cache / "tarindex").glob("*.idx"))


def test_the_index_is_cached_privately_and_reused_without_a_second_pass(tmp_path, scans):
    path = write_tar(tmp_path / "s.tar", [(f"{k}.bin", bytes([k]) * k) for k in range(30)])
    first = open_webdataset(path, part_samples=7)
    again = open_webdataset(path, part_samples=7)
    pickled = pickle.dumps(first)  # (how a spawned worker gets it: without the index, read from the cache there)
    unpickled = pickle.loads(pickled)
    assert len(scans) == 1 and len(entries(tmp_path / "cache")) == 1 and b"29.bin" not in pickled
    two = pickle.loads(pickle.dumps(open_webdataset([path, path], keep=3)))
    assert two.shards[0]._source.recent is two.shards[1]._source.recent and two.shards[0]._source.recent.keep == 3  # one bound
    assert [again[i] for i in range(30)] == [unpickled[i] for i in range(30)] == [first[i] for i in range(30)]
    assert stat.S_IMODE((tmp_path / "cache" / "tarindex").stat().st_mode) == 0o700
    assert stat.S_IMODE(entries(tmp_path / "cache")[0].stat().st_mode) == 0o600
    write_tar(path, [(f"{k}.bin", b"new") for k in range(3)])  # rewritten: another identity
    assert [open_webdataset(path)[i]["bin"] for i in range(3)] == [b"new"] * 3 and len(scans) == 2


def test_an_index_that_could_not_be_cached_travels_with_the_pickled_dataset(tmp_path, scans, monkeypatch):
    monkeypatch.setattr(tarcache, "_store", lambda *args: False)  # (a full or read-only cache folder)
    path = write_tar(tmp_path / "s.tar", [(f"{k}.bin", bytes([k])) for k in range(30)])
    pickled = pickle.dumps(open_webdataset(path))
    assert b"29.bin" in pickled and pickle.loads(pickled)[29]["bin"] == bytes([29]) and len(scans) == 1
    assert not entries(tmp_path / "cache")


@pytest.mark.parametrize("damage", ["flip", "truncate", "another files", "forged offset", "forged size"])
def test_a_damaged_or_mismatched_cache_entry_is_rebuilt_never_trusted(tmp_path, scans, damage):
    path = write_tar(tmp_path / "s.tar", [(f"{k}.bin", bytes([65 + k]) * 700) for k in range(6)])
    want = [open_webdataset(path)[i] for i in range(6)]
    (entry,) = entries(tmp_path / "cache")
    raw = entry.read_bytes()
    if damage == "flip":  # a sample's key, 5 -> 9: still a consistent index, but not this file's
        at = raw.index(b"012345") + 5
        entry.write_bytes(raw[:at] + b"9" + raw[at + 1 :])
    elif damage == "truncate":
        entry.write_bytes(raw[:-40])
    elif damage == "another files":
        other = write_tar(tmp_path / "o.tar", [(f"{k}.bin", b"o" * 700) for k in range(6)])
        tar_index(other)
        entry.write_bytes(next(e for e in entries(tmp_path / "cache") if e != entry).read_bytes())
    else:  # a valid digest over the last member's offset one block on, or its size one less: loaded, caught by the header check
        index = tarcache._decode(raw, str(path.absolute()), tuple(tar_index(path).identity))
        if damage == "forged offset":
            index.offsets[-1] += BLOCK
        else:
            index.sizes[-1] -= 1
        entry.write_bytes(tarcache._encode(index))
    before = len(scans)
    if damage.startswith("forged"):
        with pytest.raises(CorruptFileError, match="its header says it holds 700 bytes, the index 699|are no tar header"):
            [open_webdataset(path, part_samples=2)[i] for i in range(6)]
        return
    assert [open_webdataset(path)[i] for i in range(6)] == want and len(scans) == before + 1


# -- hostile and damaged tars ----------------------------------------------------------------------


def fix_checksum(raw: bytearray, at: int) -> None:
    block = raw[at : at + BLOCK]
    block[148:156] = b" " * 8
    raw[at + 148 : at + 156] = b"%06o\0 " % sum(block)


def hostile(tmp_path: Path, how: str) -> Path:
    members = [("a.jpg", b"j" * 600), ("a.cls", b"1"), ("b.jpg", b"k" * 700), ("b.cls", b"2")]
    raw = bytearray(write_tar(tmp_path / "ok.tar", members).read_bytes())
    last = 5 * BLOCK  # the header of b.jpg (a.jpg: 1 + 2 blocks, a.cls: 1 + 1)
    if how == "size past the end":
        raw[last + 124 : last + 136] = b"%011o\0" % (len(raw) * 2)
        fix_checksum(raw, last)
    elif how == "huge base-256 size":
        raw[last + 124 : last + 136] = b"\x80" + (2**80).to_bytes(11, "big")
        fix_checksum(raw, last)
    elif how == "non-octal size":
        raw[last + 124 : last + 136] = b"0000000012x\0"
        fix_checksum(raw, last)
    elif how == "bad checksum":
        raw[last] ^= 0x20
    elif how == "truncated member":
        raw = raw[: last + BLOCK + 300]
    elif how == "no end block":
        raw = raw[: last + BLOCK + 2 * BLOCK + 2 * BLOCK]
    elif how == "key repeated":
        raw = bytearray(write_tar(tmp_path / "r.tar", [("a.jpg", b"1"), ("b.jpg", b"2"), ("a.cls", b"3")]).read_bytes())
    elif how == "extension twice":
        raw = bytearray(write_tar(tmp_path / "r.tar", [("a.txt", b"1"), ("a.TXT", b"2")]).read_bytes())
    elif how == "symbolic link":
        with tarfile.open(tmp_path / "r.tar", "w") as tar:
            info = tarfile.TarInfo("a.jpg")
            info.type, info.linkname = tarfile.SYMTYPE, "/etc/passwd"
            tar.addfile(info)
        raw = bytearray((tmp_path / "r.tar").read_bytes())
    elif how == "name not utf-8":
        raw = bytearray(write_tar(tmp_path / "r.tar", [("caf\xe9.jpg", b"1")], encoding="latin-1").read_bytes())
    elif how == "huge pax record":
        header = tarfile.TarInfo("././@PaxHeader")
        header.type, header.size = tarfile.XHDTYPE, tarindex.MAX_RECORD + 1
        raw = bytearray(header.tobuf(tarfile.USTAR_FORMAT) + b"9" * (tarindex.MAX_RECORD + BLOCK) + bytes(2 * BLOCK))
    elif how == "bad pax record":
        header = tarfile.TarInfo("././@PaxHeader")
        header.type, header.size = tarfile.XHDTYPE, 12
        raw = bytearray(header.tobuf(tarfile.USTAR_FORMAT) + b"99 path=a.j\n".ljust(BLOCK, b"\0") + raw)
    elif how == "gzip":
        import gzip

        raw = bytearray(gzip.compress(bytes(raw)))
    elif how == "empty":
        raw = bytearray()
    elif how == "zeroed header":  # (a hole, a bad sector, a partial copy)
        raw[last : last + BLOCK] = bytes(BLOCK)
    elif how == "zeroed header and data":  # two zero blocks and more, then b.cls's header
        raw[last : last + 3 * BLOCK] = bytes(3 * BLOCK)
    elif how == "bytes after the end":
        raw[-1] = 1
    elif how == "lone zero block":
        raw = raw[: last + 5 * BLOCK] + bytes(BLOCK)
    elif how == "long zero tail":
        raw += bytes(tarindex.MAX_TAIL + BLOCK)
    elif how == "pax size disagrees":
        with tarfile.open(tmp_path / "r.tar", "w", format=tarfile.PAX_FORMAT) as tar:
            info = tarfile.TarInfo("a.jpg")
            info.size, info.pax_headers = 4, {"size": "0"}
            tar.addfile(info, io.BytesIO(b"abcd"))
        raw = bytearray((tmp_path / "r.tar").read_bytes())
    path = tmp_path / "hostile.tar"
    path.write_bytes(bytes(raw))
    return path


@pytest.mark.parametrize(
    "how, why",
    [
        ("size past the end", "past the file's end"), ("huge base-256 size", "past the file's end"), ("non-octal size", "not octal"),
        ("bad checksum", "fails its checksum"), ("truncated member", "past the file's end"), ("no end block", "without its end-of-archive"),
        ("key repeated", "key 'a' comes back"), ("extension twice", "extension 'txt' twice"), ("symbolic link", "is a symbolic link"),
        ("name not utf-8", "not UTF-8"), ("huge pax record", "more than the 1048576"), ("bad pax record", "does not parse"),
        ("gzip", "gzip-compressed"), ("empty", "empty"), ("zeroed header", "zero block at byte 2560 is followed by"),
        ("zeroed header and data", "bytes after the end-of-archive marker at byte 2560 are not zeros .*byte 4096"),
        ("bytes after the end", "not zeros .*byte 10239"), ("lone zero block", "one zero block at byte 5120 ends the file"),
        ("long zero tail", "more than the 1048576 bytes"), ("pax size disagrees", "pax header says it holds 0 bytes, its own header 4"),
    ],
)  # fmt: skip
def test_a_hostile_tar_is_refused_naming_the_file(tmp_path, how, why):
    path = hostile(tmp_path, how)
    with pytest.raises(CorruptFileError, match=why) as caught:
        open_webdataset(path)
    assert str(caught.value.path) == str(path)


@pytest.mark.parametrize(
    "member, data, why",
    [("cls", b"x1", "not an integer"), ("cls", b"99999999999999999999", "not an integer"), ("txt", b"\xff\xfe", "not UTF-8"),
     ("json", b"{nope", "not JSON"), ("jpg", b"GIF89a....", "neither JPEG nor PNG")],
)  # fmt: skip
def test_a_bad_value_is_an_error_naming_the_file_and_sample(tmp_path, member, data, why):
    good = {"cls": b"3", "txt": b"t", "json": b"{}", "jpg": jpeg(photo_like(8, 8))}
    members = [(f"k{i}.{ext}", data if (i, ext) == (5, member) else value) for i in range(8) for ext, value in good.items()]
    ds = open_webdataset(write_tar(tmp_path / "v.tar", members), part_samples=3)
    assert ds[0]["cls"] == 3 and ds[7]["txt"] == "t"  # other parts read
    with pytest.raises(CorruptFileError, match=why) as caught:
        ds[5]
    assert str(caught.value.path) == str(tmp_path / "v.tar") and ("'k5" in str(caught.value) or "row 5" in str(caught.value))
    with pytest.raises(ChecksumError, match="part 1") as checked:
        open_webdataset(tmp_path / "v.tar", part_samples=3).validate()
    assert checked.value.samples == range(3, 6)


def test_a_file_changed_after_opening_is_an_error_not_other_data(tmp_path):
    path = write_tar(tmp_path / "s.tar", [(f"{k}.bin", bytes([k]) * 600) for k in range(6)])
    ds = open_webdataset(path, part_samples=2)
    assert ds[0]["bin"] == bytes([0]) * 600
    raw = bytearray(path.read_bytes())
    raw[2 * 3 * BLOCK] ^= 1  # member 2's name (2.bin -> 3.bin), its checksum fixed, in place, with the size and times kept
    fix_checksum(raw, 2 * 3 * BLOCK)
    rewrite_in_place(path, bytes(raw))
    with pytest.raises(CorruptFileError, match=r"changed in place since it was opened \(size 10240 -> 10240 bytes"):
        ds[2]
    with open(path, "ab") as f:
        f.write(bytes(BLOCK))
    with pytest.raises(CorruptFileError, match=r"changed in place since it was opened \(size 10240 -> 10752 bytes"):
        ds[4]
    fresh = [(f"{k}.bin", bytes([k]) * 600) for k in range(6)]
    os.replace(write_tar(tmp_path / "new.tar", fresh), path)
    ds = open_webdataset(path, part_samples=2)
    os.replace(write_tar(tmp_path / "new.tar", fresh), path)  # another file renamed over it
    with pytest.raises(CorruptFileError, match="the file was replaced since it was opened") as caught:
        ds[0]
    assert "in place" not in str(caught.value)


def rewrite_in_place(path: Path, raw: bytes) -> None:
    """``raw`` written over the file at ``path`` (its inode), its size and times as they were (what
    ``cp -p`` or ``rsync --inplace -t`` leave): only its status-change time moves."""
    before = path.stat()
    assert len(raw) == before.st_size
    with open(path, "r+b") as f:
        f.write(raw)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    while path.stat().st_ctime_ns == before.st_ctime_ns:  # (ctime has the kernel clock's granularity: wait out its tick)
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    now = path.stat()
    assert (now.st_ino, now.st_size, now.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)


def swapped(k: int, upper: bool = False) -> list[tuple[str, bytes]]:
    """Sample ``s<k>``: a .bin and a .dat member of 4 bytes each, .bin first (or .dat first, uppercase values)."""
    if upper:
        return [(f"s{k}.dat", b"D%03d" % k), (f"s{k}.bin", b"B%03d" % k)]
    return [(f"s{k}.bin", b"b%03d" % k), (f"s{k}.dat", b"d%03d" % k)]


def test_a_shard_rewritten_in_place_with_its_size_and_times_kept_is_indexed_anew(tmp_path, scans):
    path = write_tar(tmp_path / "s.tar", [m for k in range(6) for m in swapped(k)])
    ds = open_webdataset(path, part_samples=2)
    assert ds[0] == {"__key__": "s0", "bin": b"b000", "dat": b"d000"}
    rewrite_in_place(path, write_tar(tmp_path / "new.tar", [m for k in range(6) for m in swapped(k, True)]).read_bytes())
    again = open_webdataset(path, part_samples=2)
    assert [again[i] for i in range(6)] == [{"__key__": f"s{k}", "bin": b"B%03d" % k, "dat": b"D%03d" % k} for k in range(6)]
    assert len(scans) == 2 and len(entries(tmp_path / "cache")) == 2
    with pytest.raises(CorruptFileError, match="changed in place since it was opened"):
        ds[4]


@pytest.mark.parametrize("fmt, folder", [(tarfile.GNU_FORMAT, ""), (tarfile.USTAR_FORMAT, "f" * 110 + "/")])
def test_a_cached_index_of_other_member_names_is_refused_before_a_value_reaches_a_field(tmp_path, scans, fmt, folder):
    old = write_tar(tmp_path / "old.tar", [(folder + n, v) for k in range(6) for n, v in swapped(k)], fmt)
    path = write_tar(tmp_path / "s.tar", [(folder + n, v) for k in range(6) for n, v in swapped(k, True)], fmt)
    tar_index(old)
    (entry,) = entries(tmp_path / "cache")
    here, now = str(path.absolute()), tarindex.file_identity(os.stat(path))
    forged = tarcache._decode(entry.read_bytes(), str(old.absolute()), tarindex.file_identity(os.stat(old)))
    forged.path, forged.identity = here, now  # the same offsets and sizes, each sample's names the other way round
    (tmp_path / "cache" / "tarindex" / tarcache._entry_name(here, now)).write_bytes(tarcache._encode(forged))
    ds = open_webdataset(path, part_samples=2)
    assert len(scans) == 1  # (the forged entry was loaded)
    with pytest.raises(CorruptFileError, match=f"member '{folder}s2.bin': its header names '{folder}s2.dat'"):
        ds[2]


def test_a_pax_size_beyond_the_size_field_is_read_when_the_field_is_zero():
    huge = 8**11 + 5  # more than 11 octal digits hold: the pax record carries it, the header's field is 0
    info = tarfile.TarInfo("a.bin")
    info.size = huge
    raw = info.tobuf(tarfile.PAX_FORMAT)
    assert b"size=%d" % huge in raw and tarindex.header_size(raw[-BLOCK:]) == 0
    size = len(raw) + -(-huge // BLOCK) * BLOCK + 2 * BLOCK

    def read(offset: int, n: int) -> bytes:  # the file: these headers, then the member's data and the end as zeros
        return (raw[offset : offset + n] + bytes(n))[: max(0, min(n, size - offset))]

    assert tarindex.scan(read, size, Path("big.tar"))[:3] == (["a.bin"], [len(raw)], [huge])
