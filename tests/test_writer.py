import filecmp
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import slipstream as ss
from helpers import SRC, run_python
from packed import photo_like
from slipstream import fields as F


def samples(n=120):
    return [{"image": photo_like(24, 20 + k % 5, seed=k), "label": k % 7, "name": f"s{k}", "vec": np.arange(k % 4, dtype=np.float32)} for k in range(n)]


FIELDS = {"image": F.Image(codec="jpeg", quality=85), "label": F.Int(), "name": F.Text(), "vec": F.Array(shape=None)}


def test_the_same_input_gives_a_byte_identical_file_with_any_worker_count(tmp_path):
    data = samples()
    ss.write(tmp_path / "a.arrow", data, FIELDS, workers=1, page_size=4096)
    ss.write(tmp_path / "b.arrow", data, FIELDS, workers=4, page_size=4096)
    ss.write(tmp_path / "c.arrow", iter(data), FIELDS, workers=2, page_size=4096)  # a one-pass iterable
    assert filecmp.cmp(tmp_path / "a.arrow", tmp_path / "b.arrow", shallow=False)
    assert filecmp.cmp(tmp_path / "a.arrow", tmp_path / "c.arrow", shallow=False)


def test_pages_hold_whole_samples_and_fill_to_about_the_page_size(tmp_path):
    path = ss.write(tmp_path / "p.arrow", samples(), FIELDS, page_size=4096)
    ds = ss.open(path)
    starts = ds.page_starts().tolist()
    assert starts[0] == 0 and starts == sorted(starts) and len(starts) > 3
    sizes = []
    for p in range(ds.num_pages):
        column = ds._page(p)["image"]
        sizes.append(int(column.offsets[-1] - column.offsets[0]))
    assert all(size >= 4096 - 2000 for size in sizes[:-1])  # full pages, less the small fields
    assert [ds[k]["label"] for k in range(len(ds))] == [k % 7 for k in range(120)]


def test_fields_are_inferred_from_the_first_sample_when_not_given(tmp_path):
    data = [{"i": k, "f": k / 2, "b": bool(k % 2), "s": "x" * k, "raw": b"\x00" * k, "a": np.zeros((2, 2), np.int8), "j": [k]} for k in range(5)]
    ds = ss.open(ss.write(tmp_path / "i.arrow", data))
    kinds = {name: field.kind for name, field in ds.fields.items()}
    assert kinds == {"i": "int", "f": "float", "b": "bool", "s": "text", "raw": "bytes", "a": "array", "j": "json"}
    assert ds[3]["j"] == [3] and ds[4]["s"] == "xxxx"


def test_an_empty_dataset_writes_a_valid_file_with_no_samples(tmp_path):
    ds = ss.open(ss.write(tmp_path / "e.arrow", [], {"x": F.Int()}))
    assert len(ds) == 0 and ds.num_pages == 0
    ds.validate()
    with pytest.raises(ValueError, match="cannot infer fields from an empty dataset"):
        ss.write(tmp_path / "f.arrow", [])


def test_a_failing_write_leaves_no_file_and_no_partial_file(tmp_path):
    def broken():
        yield from samples(30)
        raise RuntimeError("the source failed")

    with pytest.raises(RuntimeError, match="the source failed"):
        ss.write(tmp_path / "x.arrow", broken(), FIELDS, page_size=1024)
    assert list(tmp_path.iterdir()) == []


def test_a_failing_rewrite_keeps_the_previous_complete_file(tmp_path):
    path = ss.write(tmp_path / "keep.arrow", samples(10), FIELDS)
    before = path.read_bytes()
    with pytest.raises(ValueError, match="lacks field"):
        ss.write(path, [{"label": 1}], FIELDS)
    assert path.read_bytes() == before


def test_a_write_killed_mid_way_leaves_nothing_that_looks_complete(tmp_path):
    target = tmp_path / "killed.arrow"
    code = textwrap.dedent(
        f"""
        import sys, numpy as np, slipstream as ss
        from slipstream import fields as F
        def stream():
            for k in range(10**9):
                if k == 200:
                    print("WRITING", flush=True)
                yield {{"x": np.full(1000, k % 256, np.uint8)}}
        ss.write({str(target)!r}, stream(), {{"x": F.Array(shape=(1000,))}}, page_size=20_000, progress=False)
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env={"PYTHONPATH": SRC})
    try:
        assert proc.stdout.readline().strip() == "WRITING"
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        proc.kill()
    assert not target.exists()
    leftovers = list(tmp_path.iterdir())
    assert all(p.name.endswith(".partial") for p in leftovers)
    for partial in leftovers:  # a partial file is never mistaken for a complete one
        with pytest.raises(ss.PackedFileError):
            ss.open(partial)


def test_memory_stays_bounded_while_writing_a_stream_larger_than_the_bound():
    result = run_python(
        """
        import resource, tempfile, os, numpy as np, slipstream as ss
        from slipstream import fields as F
        def stream():
            for k in range(400):  # 400 MB of samples, never held at once
                yield {"x": np.full(1 << 20, k % 256, np.uint8)}
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        with tempfile.TemporaryDirectory() as tmp:
            path = ss.write(os.path.join(tmp, "big.arrow"), stream(), {"x": F.Array(shape=(1 << 20,))}, workers=2, page_size=8 << 20, progress=False)
            size = os.path.getsize(path)
        grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
        print("SIZE_MB", size >> 20, "GROWN_MB", int(grown))
        """,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    size_mb, grown_mb = int(result.stdout.split()[1]), int(result.stdout.split()[3])
    assert size_mb >= 400
    assert grown_mb < 100, result.stdout  # pages of 8 MB, a few samples in flight per worker


def test_progress_shows_a_bar_when_asked(tmp_path, capsys):
    ss.write(tmp_path / "bar.arrow", samples(5), FIELDS, progress=True)
    assert "5/5" in capsys.readouterr().err


def test_bad_arguments_are_refused(tmp_path):
    with pytest.raises(TypeError, match="must be a slipstream.fields.Field"):
        ss.write(tmp_path / "a.arrow", [{"x": 1}], {"x": int})
    with pytest.raises(ValueError, match="page_size must be >= 1"):
        ss.write(tmp_path / "a.arrow", [{"x": 1}], {"x": F.Int()}, page_size=0)
    with pytest.raises(TypeError, match="expected a dict of field values"):
        ss.write(tmp_path / "a.arrow", [1, 2], {"x": F.Int()})
