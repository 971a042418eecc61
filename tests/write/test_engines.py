"""write.planned with write.engine_inprocess and write.engine_processes: a container or file set written as
planned shards gives the same bytes in one process (any threads) and in worker processes (any count)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from enginedata import IMAGE_FIELDS, Dies, Labels, Refuses, Unsendable, assert_reads_back, files_of, image_tree, parquet_set
from helpers import SRC, SUPPORT, run_python

import slipstream as ss
from slipstream import fields as F
from slipstream.cli.main import main
from slipstream.convert.sources import convert, open_source
from slipstream.write.shardplan import probe_runs


def _unprobed(n: int, near: int) -> int:
    """An index at or after ``near`` the probe does not read (the probe runs in the driver)."""
    probed = {i for run in probe_runs(n) for i in run}
    return next(i for i in range(near, n) if i not in probed)


def test_an_image_folder_gives_the_same_shards_and_index_in_one_process_and_in_processes(tmp_path):
    folder = ss.imagefolder(image_tree(tmp_path / "tree"))
    settings = {"progress": False, "page_size": 3_000, "shard_size": "8kB"}
    one = ss.write(tmp_path / "one", folder, IMAGE_FIELDS, workers=1, **settings)
    expected = files_of(one)
    assert len(expected) > 3 and "index.json" in expected and not [n for n in expected if n.startswith(".")]
    assert files_of(ss.write(tmp_path / "threads", folder, IMAGE_FIELDS, workers=3, **settings)) == expected
    for workers in (1, 2):
        out = ss.write(tmp_path / f"processes{workers}", folder, IMAGE_FIELDS, engine="processes", workers=workers, **settings)
        assert files_of(out) == expected, f"{workers} processes"
    assert_reads_back(one, folder)
    ds = ss.open(one)
    for i, (file, _) in enumerate(folder.samples):  # JPEG files stored unchanged, in the shard that holds them
        if file.endswith(".jpg"):
            assert Path(file).read_bytes() in expected[ds.source_of(i).name]


def test_a_parquet_set_converts_to_the_same_shards_with_processes_and_from_the_command_line(tmp_path):
    source = parquet_set(tmp_path / "pq")
    one, _ = convert(source, tmp_path / "one", shard_size="6kB", page_size=2_000, progress=False, codec="png")
    expected = files_of(one)
    assert len(expected) > 3
    two, _ = convert(source, tmp_path / "two", shard_size="6kB", page_size=2_000, progress=False, codec="png", engine="processes", workers=2)
    assert files_of(two) == expected
    import pyarrow.parquet as pq

    rows = [row for f in sorted(source.iterdir()) for row in pq.read_table(f).to_pylist()]
    ds = ss.open(one)
    assert len(ds) == len(rows) == 120 and ds.fields["tags"].kind == "tokens"  # a list of integers
    for i in (0, 6, 7, 39, 40, 41, 119):
        got = ds[i]
        assert (got["id"], got["score"], got["name"], got["tags"].tolist()) == (rows[i]["id"], rows[i]["score"], rows[i]["name"], rows[i]["tags"])
    data = open_source(source).data
    assert [s["id"] for s in data.read_rows(5, 16)] == list(range(5, 16))  # a range across row groups and files reads only that


def test_the_command_line_flags(tmp_path, capsys):
    source = parquet_set(tmp_path / "pq", files=2, rows=10)
    one, _ = convert(source, tmp_path / "one", shard_size="3KiB", progress=False)
    assert main(["convert", str(source), str(tmp_path / "cli"), "--shard-size", "3KiB", "--processes", "2", "--no-progress"]) == 0
    assert files_of(tmp_path / "cli") == files_of(one) and "shards" in capsys.readouterr().out
    assert main(["convert", str(source), str(tmp_path / "x"), "--processes"]) == 2
    assert "--processes writes one shard per task: give --shard-size too" in capsys.readouterr().err
    assert main(["convert", str(source), str(tmp_path / "x"), "--shard-size", "1M", "--processes", "2", "--workers", "2"]) == 2
    assert "--workers sets encoding threads" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["convert", str(source), str(tmp_path / "x"), "--shard-size", "1M", "--processes", "--ray"])
    assert "not allowed with argument" in capsys.readouterr().err


def test_a_worker_process_that_dies_is_a_worker_error_at_once_and_leaves_no_index(tmp_path):
    n = 300
    data = Dies(Labels(n), _unprobed(n, 150))
    with pytest.raises(ss.WorkerError, match=r"a worker process died while writing shards into .*unfinished: .*shard-000"):
        ss.write(tmp_path / "ds", data, Labels.fields, progress=False, page_size=500, shard_size="4kB", engine="processes", workers=2)
    names = os.listdir(tmp_path / "ds")
    assert "index.json" not in names and not [name for name in names if name.startswith(".")]  # its temporary file swept
    with pytest.raises(ss.MissingShardError):
        ss.open(tmp_path / "ds")


def test_an_error_in_a_worker_process_is_raised_as_itself_naming_the_shard_and_sample(tmp_path):
    n = 300
    bad = _unprobed(n, 150)
    with pytest.raises(KeyError, match=f"no record {bad}") as info:
        ss.write(tmp_path / "ds", Refuses(Labels(n), bad), Labels.fields, progress=False, shard_size="4kB", engine="processes", workers=2)
    notes = " | ".join(info.value.__notes__)
    assert f"while reading sample {bad}" in notes and "shard-000" in notes and f"..{bad}" not in notes.split("while writing")[0]
    assert os.listdir(tmp_path / "ds") == []  # no index, no temporary file, and the shards finished before the error removed


def test_what_an_engine_cannot_write_is_refused_before_any_work(tmp_path):
    samples = Labels(20)
    with pytest.raises(ValueError, match="engine must be None .*'processes' or 'ray', got 'dask'"):
        ss.write(tmp_path / "a", samples, Labels.fields, shard_size="1MB", engine="dask")
    with pytest.raises(ValueError, match="engine='processes' writes a sharded folder, one job per shard: pass shard_size="):
        ss.write(tmp_path / "a.arrow", samples, Labels.fields, engine="processes")
    with pytest.raises(TypeError, match="needs a container .* or a file set .*got generator"):
        ss.write(tmp_path / "a", (samples[i] for i in range(20)), Labels.fields, shard_size="1MB", engine="processes")
    with pytest.raises(ValueError, match="ray_address= is for engine='ray'"):
        ss.write(tmp_path / "a", samples, Labels.fields, shard_size="1MB", ray_address="10.0.0.1:6379")
    local = [dict(samples[i], f=lambda: 0) for i in range(3)]
    with pytest.raises(TypeError, match="engine='processes' pickles the data once .* this list cannot be pickled"):
        ss.write(tmp_path / "b", local, Labels.fields, shard_size="1MB", engine="processes", progress=False)
    with pytest.raises(ValueError, match="workers must be a positive number of processes"):
        ss.write(tmp_path / "c", samples, Labels.fields, shard_size="1MB", engine="processes", workers=0, progress=False)


def test_an_iterable_still_streams_and_appending_keeps_numbering(tmp_path):
    folder = ss.write(tmp_path / "ds", Labels(100), Labels.fields, progress=False, shard_size="4kB", engine="processes", workers=2)
    shards = len(ss.open(folder).shards)
    ss.write(folder, (Labels(140)[i] for i in range(100, 140)), progress=False, shard_size="4kB", append=True)  # streamed
    ss.write(folder, [Labels(160)[i] for i in range(140, 160)], progress=False, shard_size="4kB", append=True, engine="processes")
    ds = ss.open(folder)
    assert [ds[i]["label"] for i in range(len(ds))] == list(range(160)) and len(ds.shards) > shards + 1
    assert [s.path.name for s in ds.shards] == [f"shard-{k:05d}.arrow" for k in range(len(ds.shards))]


def test_slipstream_imports_without_ray_and_engine_ray_says_how_to_install_it(tmp_path):
    out = run_python(
        f"""
        import sys
        sys.modules["ray"] = None  # as if it were not installed
        import slipstream as ss
        assert "ray" not in [m for m in sys.modules if sys.modules[m] is not None]
        try:
            ss.write({str(tmp_path / "ds")!r}, [{{"a": 1}}], shard_size="1MB", engine="ray", progress=False)
        except ImportError as exc:
            print(exc)
        """
    )
    assert out.returncode == 0, out.stderr
    assert "engine='ray' needs Ray: pip install 'slipstream[ray]' (or pip install ray)" in out.stdout


def test_a_hugging_face_folder_gives_the_same_shards_in_processes(tmp_path):
    from hfdata import HF_FEATURES, hf_table, save_to_disk  # here: pyarrow only for this test

    source = tmp_path / "hf"
    save_to_disk(source, [hf_table(0, 30), hf_table(30, 25)], HF_FEATURES)  # image structs, ClassLabel, Array2D: their readers pickle
    one, _ = convert(source, tmp_path / "one", shard_size="4kB", page_size=1_500, progress=False)
    two, _ = convert(source, tmp_path / "two", shard_size="4kB", page_size=1_500, progress=False, engine="processes", workers=2)
    assert files_of(two) == files_of(one) and len(ss.open(one).shards) > 2
    ds = ss.open(two)
    assert [ds[i]["text"] for i in range(len(ds))] == [f"t{i}" for i in range(55)] and ds.metadata["class_names"] == {"label": ["cat", "dog"]}


@pytest.mark.parametrize("kind", ["init", "lock"])
def test_an_exception_that_cannot_cross_processes_arrives_as_a_faithful_stand_in(tmp_path, kind):
    n = 300
    bad = _unprobed(n, 150)
    data = Unsendable(Labels(n), bad, kind)
    with pytest.raises(RuntimeError) as info:
        ss.write(tmp_path / "ds", data, Labels.fields, progress=False, shard_size="4kB", engine="processes", workers=2)
    assert not isinstance(info.value, ss.WorkerError)
    expected = f"enginedata.LabelError: img{bad}.jpg: bad label" if kind == "init" else "ValueError: bad sample"
    assert str(info.value).startswith(expected), str(info.value)
    notes = "\n".join(info.value.__notes__)
    assert f"while reading sample {bad}" in notes and "while writing shard-000" in notes and "Traceback" in notes and "__getitem__" in notes
    assert os.listdir(tmp_path / "ds") == []


def test_data_a_worker_cannot_unpickle_is_named_as_the_cause(tmp_path):
    out = run_python(
        f"""
        import slipstream as ss
        from slipstream import fields as F
        class Data:  # in __main__ of `python -c`: a spawned worker cannot import it
            def __len__(self): return 8
            def __getitem__(self, i): return {{"x": i}}
        try:
            ss.write({str(tmp_path / "ds")!r}, Data(), {{"x": F.Int()}}, shard_size=0, engine="processes", workers=2, progress=False)
        except ss.WorkerError as exc:
            print(exc)
        """,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert "could not unpickle the data" in out.stdout and "__main__" in out.stdout and "killed" not in out.stdout, out.stdout


def test_a_script_without_the_main_guard_is_told_about_it(tmp_path):
    script = tmp_path / "noguard.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import slipstream as ss
            from slipstream import fields as F
            ss.write({str(tmp_path / "ds")!r}, [{{"x": i}} for i in range(8)], {{"x": F.Int()}}, shard_size=0, engine="processes", workers=2, progress=False)
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    last = out.stderr.strip().splitlines()[-1]
    assert out.returncode != 0 and "WorkerError" in last and 'if __name__ == "__main__":' in last and "killed" not in last, last


def test_an_unpicklable_field_is_named(tmp_path):
    field = F.Int()
    field.hook = lambda value: value  # type: ignore[attr-defined]
    with pytest.raises(TypeError, match="field 'x' \\(Int\\) cannot be pickled"):
        ss.write(tmp_path / "ds", [{"x": 1}, {"x": 2}], {"x": field}, shard_size=0, engine="processes", progress=False)


def test_appending_with_processes_keeps_a_non_alphabetical_field_order(tmp_path):
    fields = {"x": F.Int(), "a": F.Text()}
    folder = ss.write(tmp_path / "ds", [{"x": 0, "a": "0"}], fields, shard_size=0, progress=False)
    ss.write(folder, [{"x": i, "a": str(i)} for i in (1, 2)], None, shard_size=0, append=True, engine="processes", workers=1, progress=False)
    ds = ss.open(folder)
    assert list(ds.fields) == ["x", "a"] and [ds[i]["a"] for i in range(3)] == ["0", "1", "2"]


def test_worker_processes_exit_when_the_driver_is_killed(tmp_path):
    psutil = pytest.importorskip("psutil")
    driver = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(
            f"""
            import sys
            sys.path.insert(0, {SUPPORT!r})
            import slipstream as ss
            from slipstream import fields as F
            from enginedata import Blocks
            if __name__ == "__main__":
                ss.write({str(tmp_path / "ds")!r}, Blocks({str(tmp_path)!r}), {{"x": F.Int()}}, shard_size=0, engine="processes", workers=2, progress=False)
            """
        )],
        env={**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")},
    )  # fmt: skip
    workers: list = []
    try:
        deadline = time.monotonic() + 90
        while len(list(tmp_path.glob("reading-*"))) < 2 and driver.poll() is None and time.monotonic() < deadline:
            psutil.wait_procs([psutil.Process(driver.pid)], timeout=0.2)  # wait for both workers to be reading a sample
        assert len(list(tmp_path.glob("reading-*"))) == 2, "the workers did not start"
        workers = [psutil.Process(int(p.name.split("-")[1])) for p in tmp_path.glob("reading-*")]
        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
        _, alive = psutil.wait_procs(workers, timeout=30)
        assert not alive, f"worker processes outlived their driver: {[p.pid for p in alive]}"
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
        for process in workers:
            if process.is_running():
                process.kill()


def test_the_engines_take_workers_by_the_one_rule_before_any_work():
    from slipstream.write import engine_processes as subprocesses
    from slipstream.write import engine_ray as raytasks

    with pytest.raises(TypeError, match=r"^workers must be a positive number of processes \(or None: every usable core\), got str 'auto'$"):
        subprocesses.run(None, None, [], workers="auto", advance=print)
    with pytest.raises(ValueError, match=r"^workers must be a positive number of tasks in flight, got 0$"):
        raytasks.run(None, None, [], workers=0, advance=print)
