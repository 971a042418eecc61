"""Damaged, unvalidated packed files: every read gives data or raises ``ss.PackedFileError`` naming
the file (and the sample, page and field where known) -- never another exception, never a crash,
never a buffer sized from a damaged header."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.ipc
import pytest
from helpers import run_python

import slipstream as ss
from slipstream import fields as F

FUZZ = """
import collections, random, resource, sys
import numpy as np, slipstream as ss
from slipstream import fields as F

path, out, seed, trials, headroom_mb = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
samples = [{"x": np.full(5, k, np.int32), "r": np.arange(3, dtype=np.float32) + k, "t": f"t{k}", "j": {"k": [k, "a"]}, "n": k,
            "f": k / 3, "raw": np.full((3, 2, 3), k, np.uint8), "png": np.full((4, 4, 3), 3 * k, np.uint8),
            "jpeg": np.full((8, 8, 1), 5 * k, np.uint8)} for k in range(24)]
fields = {"x": F.Array(shape=(5,)), "r": F.Array(shape=None), "t": F.Text(), "j": F.JSON(), "n": F.Int(), "f": F.Float(),
          "raw": F.Image(codec="raw"), "png": F.Image(codec="png"), "jpeg": F.Image(codec="jpeg")}
ss.write(path, samples, fields, page_size=400, progress=False)
good = open(path, "rb").read()

def same_type_error(loader_error, batch):
    # whether default_collate refuses the batch (values that damage changed, a JSON key say) the same way
    try:
        ss.default_collate(batch)
    except (ValueError, TypeError) as exc:
        return type(exc) is type(loader_error)
    return False

def read_everything(p):
    # every sample, then batches, which may fail only as default_collate of those samples does
    # (damage may change a value's structure, and unvalidated reads cannot know)
    ds = ss.open(p)
    values = [ds[k] for k in range(len(ds))]
    for k in range(len(ds)):
        ds.encoded(k, "png")
    for batch_size, workers in ((5, 0), (4, 2)):
        loader = iter(ss.DataLoader(ds, batch_size=batch_size, workers=workers))
        for a in range(0, len(ds), batch_size):
            try:
                next(loader)
            except ss.PackedFileError:
                raise
            except Exception as exc:
                if not same_type_error(exc, values[a : a + batch_size]):
                    raise
                break

def vm_size():
    return next(int(line.split()[1]) << 10 for line in open("/proc/self/status") if line.startswith("VmSize:"))

read_everything(path)  # warm: imports, worker threads; then cap what damage could make us allocate
resource.setrlimit(resource.RLIMIT_AS, (vm_size() + (headroom_mb << 20), resource.RLIM_INFINITY))
rng = random.Random(seed)
results = collections.Counter()
for trial in range(trials):
    bad = bytearray(good)
    for _ in range(rng.choice([1, 1, 2, 4])):
        at = rng.randrange(len(bad))
        bad[at] = rng.randrange(256) if rng.random() < 0.5 else bad[at] ^ (1 << rng.randrange(8))
    with open(out, "wb") as f:
        f.write(bad)
    try:
        read_everything(out)
        results["read"] += 1  # unvalidated: the data may be wrong (validate() is what finds that)
    except ss.PackedFileError as exc:
        assert out in str(exc), exc
        results["PackedFileError"] += 1
    except BaseException as exc:
        print("UNCLEAR", trial, type(exc).__name__, str(exc)[:300])
        results[type(exc).__name__] += 1
print("RESULTS", dict(results))
"""


@pytest.mark.timeout(900)  # its child may take 600 s on a busy machine
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_damage_to_an_unvalidated_file_reads_or_raises_packed_file_error(tmp_path, seed):
    result = run_python(
        FUZZ, timeout=600, env={"MALLOC_ARENA_MAX": "2"}, argv=[str(tmp_path / "good.arrow"), str(tmp_path / "bad.arrow"), str(seed), "1000", "200"]
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]  # no crash, no MemoryError
    assert "UNCLEAR" not in result.stdout, result.stdout[-3000:]
    counts = eval(result.stdout.split("RESULTS", 1)[1])
    assert counts.get("PackedFileError", 0) > 200 and sum(counts.values()) == 1000, counts


WIDTH = """
import resource, sys
import numpy as np, pyarrow as pa, pyarrow.ipc, slipstream as ss
from slipstream import fields as F

folder, codec = sys.argv[1], sys.argv[2]
samples = [{"im": np.full((6, 5, 3), k, np.uint8), "n": k} for k in range(4)]
path = ss.write(folder + "/good.arrow", samples, {"im": F.Image(codec=codec), "n": F.Int()}, progress=False)
bad = folder + "/bad.arrow"
reader = pa.ipc.open_file(pa.memory_map(str(path)))
with pa.OSFile(bad, "wb") as sink, pa.ipc.new_file(sink, reader.schema) as writer:  # page metadata kept
    batch, meta = reader.get_batch_with_custom_metadata(0)
    column = batch.column("im")
    children = {f.name: column.field(f.name) for f in column.type}
    widths = children["width"].to_numpy().copy()
    widths[0] = 1 << 30  # a 6 x 2**30 x 3 image: 18 GiB a sample
    children["width"] = pa.array(widths, type=pa.int32())
    struct = pa.StructArray.from_arrays(list(children.values()), names=list(children))
    writer.write_batch(batch.set_column(batch.schema.get_field_index("im"), "im", struct), custom_metadata=meta)
vm = next(int(line.split()[1]) << 10 for line in open("/proc/self/status") if line.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (vm + (300 << 20), resource.RLIM_INFINITY))
ds = ss.open(bad)
for read in (lambda: next(iter(ss.DataLoader(ds, batch_size=4))), lambda: ds[0]):
    try:
        read()
        print("READ")
    except ss.CorruptFileError as exc:
        print("CORRUPT", exc)
    except BaseException as exc:
        print("UNCLEAR", type(exc).__name__, exc)
print("n1", ds[1]["n"])
"""


@pytest.mark.parametrize("codec", ["raw", "png", "jpeg"])
def test_a_damaged_image_width_is_refused_before_any_buffer_is_sized_from_it(tmp_path, codec):
    result = run_python(WIDTH, timeout=120, argv=[str(tmp_path), codec])
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.splitlines()
    assert len(lines) == 3 and lines[2] == "n1 1", result.stdout
    for line in lines[:2]:  # the loader, then ds[0]
        assert line.startswith(f"CORRUPT {tmp_path}/bad.arrow: sample 0 (page 0, row 0), field 'im': "), line
        assert "(6, 1073741824, 3)" in line, line


def test_a_damaged_ragged_shape_is_refused_before_any_buffer_is_sized_from_it(tmp_path):
    samples = [{"r": np.arange(3, dtype=np.int16)} for _ in range(4)]
    path = ss.write(tmp_path / "good.arrow", samples, {"r": F.Array(shape=None)}, progress=False)
    reader = pa.ipc.open_file(pa.memory_map(str(path)))
    bad = tmp_path / "bad.arrow"
    with pa.OSFile(str(bad), "wb") as sink, pa.ipc.new_file(sink, reader.schema) as writer:
        batch, meta = reader.get_batch_with_custom_metadata(0)
        column = batch.column("r")
        shapes = column.field("shape").flatten().to_numpy().copy()
        shapes[0] = -(1 << 40)  # with another negative dimension it could pass a product check
        shape = pa.FixedSizeListArray.from_arrays(pa.array(shapes), 1)
        struct = pa.StructArray.from_arrays([shape, column.field("data")], names=["shape", "data"])
        writer.write_batch(batch.set_column(0, "r", struct), custom_metadata=meta)
    with pytest.raises(ss.CorruptFileError, match=r"sample 0 \(page 0, row 0\), field 'r'"):
        ss.open(bad)[0]
    with pytest.raises(ss.CorruptFileError, match="field 'r'"):
        list(ss.DataLoader(ss.open(bad), batch_size=2))


REPLACED = """
import os, shutil, sys
import numpy as np, slipstream as ss
from slipstream import fields as F

folder, how = sys.argv[1], sys.argv[2]
big = ss.write(folder + "/big.arrow", [{"x": np.full(4000, k, np.int64)} for k in range(64)], {"x": F.Array(shape=(4000,))}, page_size=1 << 16, progress=False)
small = ss.write(folder + "/small.arrow", [{"x": np.full(4000, -1, np.int64)}], {"x": F.Array(shape=(4000,))}, progress=False)
ds = ss.open(big)
first = [int(ds[k]["x"][0]) for k in range(len(ds))]  # every page mapped and loaded
if how == "copy":
    shutil.copyfile(small, big)  # in place: the same inode, truncated and rewritten
else:
    os.replace(small, big)  # a new inode renamed over the old
for read in (lambda: int(ds[63]["x"][-1]), lambda: int(next(iter(ss.DataLoader(ds, batch_size=64)))["x"][63, -1])):
    try:
        print("READ", read())
    except ss.CorruptFileError as exc:
        print("CORRUPT", exc)
"""


@pytest.mark.parametrize("how", ["copy", "rename"])
def test_a_file_changed_in_place_under_a_reader_is_reported_and_a_renamed_one_is_harmless(tmp_path, how):
    result = run_python(REPLACED, timeout=120, argv=[str(tmp_path), how])
    assert result.returncode == 0, f"killed by signal {-result.returncode}: {result.stderr[-2000:]}"
    lines = result.stdout.splitlines()
    if how == "rename":
        assert lines == ["READ 63", "READ 63"], result.stdout  # the old file, still mapped
    else:
        assert len(lines) == 2 and all(line.startswith(f"CORRUPT {tmp_path}/big.arrow: the file changed under the reader") for line in lines), result.stdout
        assert "renaming a new one over them" in lines[0]


ENCODED_AFTER_TRUNCATION = """
import os, sys
import numpy as np, slipstream as ss
from slipstream import fields as F

path = ss.write(sys.argv[1] + "/im.arrow", [{"image": np.full((64, 64, 3), k, np.uint8)} for k in range(64)],
                {"image": F.Image(codec="raw")}, page_size=1 << 15, progress=False)
ds = ss.open(path)
ds.encoded(60, "image")  # its page mapped and loaded
with open(path, "r+b") as f:
    f.truncate(os.path.getsize(path) // 8)  # changed in place
try:
    print("READ", int(np.asarray(ds.encoded(60, "image")[1]).sum()))
except ss.CorruptFileError as exc:
    print("CORRUPT", exc)
"""


def test_encoded_of_a_file_truncated_under_the_reader_is_reported_not_a_bus_error(tmp_path):
    """encoded() (a pipeline's read of the stored bytes) checks the file like every read does."""
    result = run_python(ENCODED_AFTER_TRUNCATION, timeout=120, argv=[str(tmp_path)])
    assert result.returncode == 0, f"killed by signal {-result.returncode}: {result.stderr[-2000:]}"
    assert result.stdout.startswith(f"CORRUPT {tmp_path}/im.arrow: the file changed under the reader"), result.stdout


def test_packed_file_errors_pickle_as_themselves_so_worker_processes_report_them():
    import pickle

    errors = [
        ss.CorruptFileError("/d/x.arrow", "damaged"),
        ss.ChecksumError("/d/x.arrow", "page 3 differs", 3, range(30, 40)),
        ss.TruncatedFileError("/d/x.arrow", "cut short"),
        ss.NotAPackedFileError("/d/x.arrow", "not arrow"),
        ss.MissingFieldError("/d/x.arrow", "no field 'y'"),
    ]
    errors[0].add_note("slipstream: raised while loading sample 4")
    for error in errors:
        back = pickle.loads(pickle.dumps(error))
        assert type(back) is type(error) and str(back) == str(error) and back.path == "/d/x.arrow"
        assert getattr(back, "__notes__", None) == getattr(error, "__notes__", None)
    assert (back_checksum := pickle.loads(pickle.dumps(errors[1]))).page == 3 and back_checksum.samples == range(30, 40)


def test_a_damaged_image_in_a_worker_process_arrives_as_corrupt_file_error(tmp_path):
    path = tmp_path / "bad.arrow"
    image = np.zeros((32, 32, 3), np.uint8)
    ss.write(path, [{"image": image}] * 4, fields={"image": F.Image(codec="png")})
    ds = ss.open(path)
    codec, data, shape = ds.encoded(1, "image")
    raw = bytearray(path.read_bytes())
    at = bytes(raw).find(bytes(data)) + len(data) // 2
    raw[at : at + 8] = b"\x00" * 8  # the first PNG damaged in place (its checksum would say so)
    path.write_bytes(bytes(raw))
    for backend in ("thread", "process"):
        with pytest.raises(ss.CorruptFileError, match=r"sample \d .*cannot decode png"):
            list(ss.DataLoader(ss.open(path), 2, workers=2, backend=backend))
