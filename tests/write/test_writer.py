"""``ss.write``: byte-identical files with any worker count, whole samples per page, inferred fields, atomic
replacement (a failed or killed write leaves no partial file; racing writers leave one whole file),
bounded memory, iterables that reuse one buffer, the user's metadata, and bad arguments refused."""

import filecmp
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from helpers import SRC, run_python
from packed import photo_like

import slipstream as ss
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
        column = ds.page(p)["image"]
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
        ss.write(tmp_path / "a.arrow", [1, 2], {"x": F.Int(), "y": F.Int()})
    # with one field, a bare sample is that field's value
    assert [s["x"] for s in ss.open(ss.write(tmp_path / "b.arrow", [1, 2], {"x": F.Int()}, progress=False))] == [1, 2]


@pytest.mark.parametrize(
    ("engine", "message"),
    [
        (None, r"a number >= 0 of encoding threads \(or None: the usable cores, at most 8\), got str 'auto'"),
        ("processes", r"a positive number of processes \(or None: every usable core\), got str 'auto'"),
        ("ray", r"a positive number of tasks in flight \(or None: all\), got str 'auto'"),
    ],
)
def test_workers_take_the_engines_rule_before_any_work(tmp_path, engine, message):
    """No "auto" (None is the default) and no bool, whatever the engine, refused before a sample is read."""
    read = []

    class Recorded:
        def __len__(self):
            return 4

        def __getitem__(self, i):
            read.append(i)
            return {"x": i}

    shard_size = None if engine is None else "1MB"
    for bad in ("auto", True):
        with pytest.raises(TypeError, match="^workers must be " + (message if bad == "auto" else "")):
            ss.write(tmp_path / "w", Recorded(), {"x": F.Int()}, workers=bad, engine=engine, shard_size=shard_size, progress=False)
    assert read == [] and not (tmp_path / "w").exists()
    with pytest.raises(ValueError, match="^workers must be .*, got -1$"):
        ss.write(tmp_path / "w", Recorded(), {"x": F.Int()}, workers=-1, engine=engine, shard_size=shard_size, progress=False)
    assert read == []


# -- writers racing to one path ---------------------------------------------------------------------
def _racing_stream(tag: int, after_first=None, n: int = 40):
    """Samples of writer ``tag`` (distinct bytes per writer); ``after_first()`` runs once the writer has
    read its first sample, i.e. once its file is open, so two writers are certain to overlap."""
    for k in range(n):
        if k == 1 and after_first is not None:
            after_first()
        yield {"x": np.full(500, (tag * 100 + k) % 256, np.uint8), "tag": tag}


RACE_FIELDS = {"x": F.Array(shape=(500,)), "tag": F.Int()}


def _reference(tmp_path, tag: int) -> bytes:
    return ss.write(tmp_path / f"ref{tag}.arrow", _racing_stream(tag), RACE_FIELDS, page_size=2048, progress=False).read_bytes()


def _leftovers(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.endswith(".partial"))


def test_two_writers_racing_to_one_path_leave_the_last_complete_file(tmp_path):
    import threading

    refs = {tag: _reference(tmp_path, tag) for tag in (1, 2)}
    target = tmp_path / "race" / "shared.arrow"
    target.parent.mkdir()
    both_open = threading.Barrier(2, timeout=30)
    second_done = threading.Event()
    seen_between: list[bytes] = []
    errors: list[BaseException] = []

    def first_waits():  # writer 1 opens its file, then finishes only after writer 2 has finished
        both_open.wait()
        assert second_done.wait(timeout=30)
        seen_between.append(target.read_bytes())

    def run(tag, hook):
        try:
            ss.write(target, _racing_stream(tag, hook), RACE_FIELDS, page_size=2048, workers=2, progress=False)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            if tag == 2:
                second_done.set()

    threads = [threading.Thread(target=run, args=(1, first_waits)), threading.Thread(target=run, args=(2, both_open.wait))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert errors == []
    assert seen_between == [refs[2]]  # the reader saw writer 2's complete file, untouched by writer 1
    assert target.read_bytes() == refs[1]  # writer 1 completed last: its file wins, whole
    assert _leftovers(target.parent) == []
    assert [ss.open(target)[k]["tag"] for k in (0, 39)] == [1, 1]


def test_a_failing_writer_leaves_a_racing_good_writer_alone(tmp_path):
    import threading

    good = _reference(tmp_path, 1)
    target = tmp_path / "race" / "shared.arrow"
    target.parent.mkdir()
    both_open = threading.Barrier(2, timeout=30)
    bad_failed = threading.Event()
    errors: dict[int, BaseException] = {}

    def good_waits():
        both_open.wait()
        assert bad_failed.wait(timeout=30)

    def bad_stream():
        yield from _racing_stream(2, both_open.wait, n=5)
        raise RuntimeError("the bad source failed")

    def run(tag, data):
        try:
            ss.write(target, data, RACE_FIELDS, page_size=2048, workers=2, progress=False)
        except BaseException as exc:  # noqa: BLE001 - checked below
            errors[tag] = exc
        finally:
            if tag == 2:
                bad_failed.set()

    threads = [threading.Thread(target=run, args=(1, _racing_stream(1, good_waits))), threading.Thread(target=run, args=(2, bad_stream()))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert list(errors) == [2] and "the bad source failed" in str(errors[2])
    assert target.read_bytes() == good
    assert _leftovers(target.parent) == []


def test_two_writer_processes_racing_to_one_path_leave_one_whole_file(tmp_path):
    refs = {tag: _reference(tmp_path, tag) for tag in (1, 2)}
    target = tmp_path / "race" / "shared.arrow"
    target.parent.mkdir()
    code = textwrap.dedent(
        f"""
        import sys, numpy as np, slipstream as ss
        from slipstream import fields as F
        tag = int(sys.argv[1])
        def wait_for_go():  # the file is open: say so, then wait until both writers are
            print("OPEN", flush=True)
            assert sys.stdin.readline().strip() == "GO"
        def stream():
            for k in range(40):
                if k == 1:
                    wait_for_go()
                yield {{"x": np.full(500, (tag * 100 + k) % 256, np.uint8), "tag": tag}}
        ss.write({str(target)!r}, stream(), {{"x": F.Array(shape=(500,)), "tag": F.Int()}}, page_size=2048, workers=2, progress=False)
        print("DONE", flush=True)
        """
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(tag)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={"PYTHONPATH": SRC})
        for tag in (1, 2)
    ]
    try:
        assert [proc.stdout.readline().strip() for proc in procs] == ["OPEN", "OPEN"]
        for proc in procs:
            proc.stdin.write("GO\n")
            proc.stdin.flush()
        outs = [proc.communicate(timeout=60)[0] for proc in procs]
    finally:
        for proc in procs:
            proc.kill()
    assert [proc.returncode for proc in procs] == [0, 0] and all("DONE" in out for out in outs)
    assert target.read_bytes() in (refs[1], refs[2])
    assert _leftovers(target.parent) == []


def test_the_written_file_gets_the_permissions_a_plain_open_would_give(tmp_path):
    import os

    plain = tmp_path / "plain"
    plain.write_bytes(b"")
    path = ss.write(tmp_path / "perm.arrow", samples(3), FIELDS, progress=False)
    assert oct(path.stat().st_mode & 0o777) == oct(plain.stat().st_mode & 0o777)
    assert os.access(path, os.R_OK)


# -- iterables that reuse one buffer ----------------------------------------------------------------
def _reusing_decoder(n: int = 50):
    """Yields the same array, bytearray and list objects every time, changed in place (as decoders do)."""
    frame = np.zeros((4, 6), np.int16)
    raw = bytearray(3)
    boxes: list = []
    for k in range(n):
        frame[...] = k
        raw[:] = bytes([k, k + 1, k + 2])
        boxes[:] = [k, [k, k]]
        yield {"frame": frame, "raw": raw, "view": memoryview(raw), "boxes": boxes}


def test_an_iterable_reusing_one_buffer_stores_each_sample_as_it_was_yielded(tmp_path):
    fields = {"frame": F.Array(shape=(4, 6)), "raw": F.Bytes(), "view": F.Bytes(), "boxes": F.JSON()}
    paths = [ss.write(tmp_path / f"w{w}.arrow", _reusing_decoder(), fields, workers=w, page_size=256, progress=False) for w in (1, 4)]
    assert filecmp.cmp(paths[0], paths[1], shallow=False)
    ds = ss.open(paths[0])
    for k in range(50):
        sample = ds[k]
        assert (sample["frame"] == k).all(), f"sample {k} holds {sample['frame'][0, 0]}"
        assert sample["raw"] == sample["view"] == bytes([k, k + 1, k + 2])
        assert sample["boxes"] == [k, [k, k]]


def test_inferred_fields_also_take_an_iterables_samples_as_yielded(tmp_path):
    ds = ss.open(ss.write(tmp_path / "inferred.arrow", _reusing_decoder(10), workers=3, progress=False))
    assert [int(ds[k]["frame"][0, 0]) for k in range(10)] == list(range(10))


# -- the user's metadata ----------------------------------------------------------------------------
def test_metadata_is_stored_and_read_back_as_json(tmp_path):
    metadata = {"class_names": {"label": ["cat", "dog"]}, "source": "photos", "version": (1, 2), "scale": 0.5, "ok": None}
    path = ss.write(tmp_path / "m.arrow", samples(3), FIELDS, metadata=metadata, progress=False)
    ds = ss.open(path)
    assert ds.metadata == {"class_names": {"label": ["cat", "dog"]}, "source": "photos", "version": [1, 2], "scale": 0.5, "ok": None}
    ds.metadata["source"] = "changed"  # a copy: the dataset's own stays
    assert ss.open(path).metadata["source"] == ds.metadata["source"] != "changed"
    ds.validate()  # the pages vouch for the schema metadata, the user's included
    assert ds.format_metadata["format"] == "slipstream.packed" and ds.format_metadata["metadata"]["source"] == "photos"


def test_a_file_without_metadata_reads_an_empty_dict(tmp_path):
    ds = ss.open(ss.write(tmp_path / "none.arrow", samples(2), FIELDS, progress=False))
    assert ds.metadata == {} and "metadata" not in ds.format_metadata  # as files written before metadata existed


def test_metadata_json_cannot_hold_is_refused_before_writing(tmp_path):
    for bad, message in [
        ({"x": {1, 2}}, "metadata must hold JSON values"),
        ({"x": float("nan")}, "metadata must hold JSON values"),
        ({1: "x"}, "metadata must be a dict with str keys"),
        (["x"], "metadata must be a dict with str keys"),
    ]:
        with pytest.raises(TypeError, match=message):
            ss.write(tmp_path / "bad.arrow", samples(2), FIELDS, metadata=bad, progress=False)
    assert list(tmp_path.iterdir()) == []


def test_a_folder_or_a_missing_folder_as_the_target_fails_before_encoding(tmp_path):
    taken = []

    def stream():
        for sample in samples(20):
            taken.append(1)
            yield sample

    (tmp_path / "folder.arrow").mkdir()
    with pytest.raises(IsADirectoryError, match="folder.arrow: is a folder"):
        ss.write(tmp_path / "folder.arrow", stream(), FIELDS, progress=False)
    assert len(taken) <= 1
    with pytest.raises(FileNotFoundError, match="the folder .*missing does not exist"):
        ss.write(tmp_path / "missing" / "x.arrow", stream(), FIELDS, progress=False)
    assert len(taken) <= 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder.arrow"]


def test_an_iterables_buffers_keep_their_type_dtype_and_shape_when_taken(tmp_path):
    def stream():
        frame = np.zeros((2, 3), np.float32)
        raw = bytearray(4)
        for k in range(6):
            frame[...] = k
            raw[:] = bytes([k] * 4)
            yield {"view": memoryview(frame), "raw_array": raw, "raw_bytes": raw}

    fields = {"view": F.Array(shape=(2, 3)), "raw_array": F.Array(shape=(4,)), "raw_bytes": F.Bytes()}
    ds = ss.open(ss.write(tmp_path / "buffers.arrow", stream(), fields, workers=2, progress=False))
    assert ds.fields["view"] == F.Array(dtype="float32", shape=(2, 3)) and ds.fields["raw_array"] == F.Array(dtype="uint8", shape=(4,))
    for k in range(6):
        assert (ds[k]["view"] == k).all() and (ds[k]["raw_array"] == k).all() and ds[k]["raw_bytes"] == bytes([k] * 4)


def test_an_iterables_sample_missing_a_field_is_reported_with_the_keys_it_has(tmp_path):
    fields = {"x": F.Int()}
    with pytest.raises(ValueError, match=r"sample 1 lacks field 'x' \(it has \['y'\]\)"):
        ss.write(tmp_path / "missing.arrow", iter([{"x": 1}, {"y": 2}]), fields, progress=False)


@pytest.mark.parametrize("workers", [1, 4])
def test_reused_pil_images_and_tensors_are_stored_as_they_were_when_yielded(tmp_path, workers):
    """GIF/TIFF frames from PIL's ImageSequence are one Image object, seeked; a decoder may fill one
    output tensor. Both were stored with their last state."""
    from PIL import Image, ImageSequence

    frames = [Image.fromarray(np.full((8, 8, 3), 40 * k, np.uint8)) for k in range(6)]
    frames[0].save(tmp_path / "anim.gif", save_all=True, append_images=frames[1:], duration=10)

    def gif_frames():
        with Image.open(tmp_path / "anim.gif") as image:
            for frame in ImageSequence.Iterator(image):
                yield {"image": frame}

    class Filled:  # a tensor-like a decoder refills (the __array__ protocol, as torch tensors have)
        def __init__(self):
            self.values = np.zeros(4, np.int64)

        def __array__(self, dtype=None, copy=None):
            return self.values

    def refilled():
        out = Filled()
        for k in range(6):
            out.values[:] = k
            yield {"x": out}

    gif = ss.open(ss.write(tmp_path / "gif.arrow", gif_frames(), {"image": F.Image(codec="png")}, workers=workers, progress=False))
    assert [int(gif[i]["image"][0, 0, 0]) for i in range(6)] == [0, 40, 80, 120, 160, 200]
    arrays = ss.open(ss.write(tmp_path / "x.arrow", refilled(), {"x": F.Array(np.int64, (4,))}, workers=workers, progress=False))
    assert [arrays[i]["x"].tolist() for i in range(6)] == [[k] * 4 for k in range(6)]


def test_the_default_encoding_threads_are_the_usable_cores_at_most_8(monkeypatch):
    from slipstream.write import writer

    monkeypatch.setattr(writer, "usable_cores", lambda: 3)  # the affinity mask and cgroup quota, not os.cpu_count()
    assert writer._default_workers() == 3
    monkeypatch.setattr(writer, "usable_cores", lambda: 64)
    assert writer._default_workers() == 8
