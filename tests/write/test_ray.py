"""write.engine_ray: ``ss.write(..., engine="ray")`` writes the same shards and index as one process,
with any number of tasks in flight; a killed task is retried and leaves nothing partial; an error
in a task is raised here naming its shard and sample.

One local Ray (2 CPUs, no dashboard, every server on loopback: ``raytasks.start_local``) serves
every test of this module, and is shut down after them, its processes checked gone. The test
modules the data come from are not on its workers' path: the engine sends them by value.
Skipped without Ray.
"""

from __future__ import annotations

import ipaddress
import json
import os
import sys
import textwrap
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any

import pytest

ray = pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

from enginedata import (  # noqa: E402
    IMAGE_FIELDS,
    Dies,
    DiesOnce,
    Labels,
    Refuses,
    Unsendable,
    assert_reads_back,
    files_of,
    image_tree,
    parquet_set,
)
from helpers import SRC, run_python  # noqa: E402

import slipstream as ss  # noqa: E402
from slipstream.cli.main import main  # noqa: E402
from slipstream.convert.sources import convert  # noqa: E402
from slipstream.write import engine_ray as raytasks  # noqa: E402
from slipstream.write.shardplan import probe_runs  # noqa: E402
from slipstream.write.shardwrite import ShardJob  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    before = {p.pid for p in psutil.Process().children(recursive=True)}
    raytasks.start_local(num_cpus=2, log_to_driver=False)  # every server on loopback (see test_every_ray_server_listens_on_loopback_only)
    try:
        yield
    finally:
        ray.shutdown()
        started = [p for p in psutil.Process().children(recursive=True) if p.pid not in before]
        _, alive = psutil.wait_procs(started, timeout=30)
        for process in alive:  # a leak fails the test run below, after being cleaned up
            process.kill()
        assert not alive, f"Ray left processes running: {[p.pid for p in alive]}"


def _listening(processes: list[Any]) -> set[tuple[str, str]]:
    """(process name, address) of every socket ``processes`` listen on (TCP) or are bound to (UDP)."""
    found = set()
    for process in processes:
        try:
            for conn in process.net_connections(kind="inet"):
                if conn.laddr and (conn.status == psutil.CONN_LISTEN or conn.type == 2):
                    found.add((process.name(), conn.laddr.ip))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return found


def _loopback(ip: str) -> bool:
    address = ipaddress.ip_address(ip)
    return address.is_loopback or (isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None and address.ipv4_mapped.is_loopback)


def test_every_ray_server_listens_on_loopback_only():
    ray.get(ray.remote(lambda: 1).remote())  # a worker started too
    servers = _listening([psutil.Process(), *psutil.Process().children(recursive=True)])
    assert {name for name, _ in servers} >= {"gcs_server", "raylet"}, servers
    assert all(_loopback(ip) for _, ip in servers), servers
    assert ray.util.get_node_ip_address() == raytasks.LOOPBACK


def _unprobed(n: int, near: int) -> int:
    probed = {i for run in probe_runs(n) for i in run}
    return next(i for i in range(near, n) if i not in probed)


def test_an_image_folder_gives_the_same_bytes_on_ray_as_in_one_process_with_any_tasks_in_flight(tmp_path):
    folder = ss.imagefolder(image_tree(tmp_path / "tree"))
    settings = {"progress": False, "page_size": 3_000, "shard_size": "8kB"}
    expected = files_of(ss.write(tmp_path / "one", folder, IMAGE_FIELDS, **settings))
    assert len(expected) > 3
    for workers in (None, 1):
        out = ss.write(tmp_path / f"ray{workers}", folder, IMAGE_FIELDS, engine="ray", workers=workers, **settings)
        assert files_of(out) == expected, f"{workers} in flight"
    assert ray.is_initialized()  # the module's connection is used and left open
    assert_reads_back(tmp_path / "rayNone", folder)


def test_a_parquet_set_gives_the_same_bytes_on_ray_and_from_the_command_line(tmp_path, capsys):
    source = parquet_set(tmp_path / "pq")
    one, _ = convert(source, tmp_path / "one", shard_size="6KiB", page_size=2_000, progress=False)
    expected = files_of(one)
    assert len(expected) > 3
    assert main(["convert", str(source), str(tmp_path / "cli"), "--shard-size", "6KiB", "--page-size", "2000", "--ray", "--no-progress"]) == 0, capsys.readouterr().err
    assert files_of(tmp_path / "cli") == expected
    import pyarrow.parquet as pq

    ds, rows = ss.open(tmp_path / "cli"), [row for f in sorted(source.iterdir()) for row in pq.read_table(f).to_pylist()]
    assert [ds[i]["id"] for i in range(len(ds))] == [r["id"] for r in rows] and [ds[i]["tags"].tolist() for i in range(len(ds))] == [r["tags"] for r in rows]


def test_a_task_killed_mid_shard_is_retried_and_leaves_nothing_partial(tmp_path):
    n = 300
    marker = tmp_path / "killed-once"
    settings = {"progress": False, "page_size": 500, "shard_size": "4kB"}
    expected = files_of(ss.write(tmp_path / "one", Labels(n), Labels.fields, **settings))
    kill = _unprobed(n, 150)
    out = ss.write(tmp_path / "ray", DiesOnce(Labels(n), kill, marker), Labels.fields, engine="ray", **settings)
    assert marker.exists()  # the first attempt did die, partway through its shard
    assert files_of(out) == expected  # the retry's shard is whole, no temporary file is left


def test_an_error_in_a_task_is_raised_as_itself_naming_its_shard_and_sample(tmp_path):
    n = 300
    bad = _unprobed(n, 150)
    with pytest.raises(KeyError, match=f"no record {bad}") as info:
        ss.write(tmp_path / "ds", Refuses(Labels(n), bad), Labels.fields, progress=False, shard_size="4kB", engine="ray")
    notes = " | ".join(info.value.__notes__)
    assert f"while reading sample {bad}" in notes and "while writing shard-000" in notes
    assert isinstance(info.value.__cause__, ray.exceptions.RayTaskError)
    names = os.listdir(tmp_path / "ds")
    assert "index.json" not in names and not [name for name in names if name.startswith(".")]


def test_a_task_that_dies_every_time_is_a_worker_error_naming_its_shard(tmp_path, monkeypatch):
    monkeypatch.setattr(raytasks, "MAX_RETRIES", 0)
    n = 300
    with pytest.raises(ss.WorkerError, match=r"engine='ray': the task writing shard-\d{5}\.arrow \(samples \d+\.\.\d+\) failed after 0 retries"):
        ss.write(tmp_path / "ds", Dies(Labels(n), _unprobed(n, 150)), Labels.fields, progress=False, shard_size="4kB", engine="ray")
    names = os.listdir(tmp_path / "ds")
    assert "index.json" not in names and not [name for name in names if name.startswith(".")]


def test_without_a_connection_a_local_ray_is_started_for_the_write_on_loopback_and_shut_down_after(tmp_path: Any):
    out = run_python(
        f"""
        import json, psutil, ray, slipstream as ss
        from slipstream import fields as F
        seen = []
        shutdown = ray.shutdown
        def looking_first():  # what the Ray started for the write listens on, just before the write stops it
            for process in [psutil.Process(), *psutil.Process().children(recursive=True)]:
                try:
                    seen.extend([process.name(), c.laddr.ip] for c in process.net_connections(kind="inet") if c.laddr and (c.status == psutil.CONN_LISTEN or c.type == 2))
                except psutil.Error:
                    pass
            shutdown()
        ray.shutdown = looking_first
        folder = ss.write({str(tmp_path / "ds")!r}, [{{"a": k}} for k in range(50)], {{"a": F.Int()}}, shard_size=200, engine="ray", progress=False)
        assert not ray.is_initialized()
        print(len(ss.open(folder)), len(ss.open(folder).shards), json.dumps(seen))
        """,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    count, shards, seen = out.stdout.split(maxsplit=2)
    assert int(count) == 50 and int(shards) > 1
    servers = {tuple(pair) for pair in json.loads(seen)}
    assert {name for name, _ in servers} >= {"gcs_server", "raylet"} and all(_loopback(ip) for _, ip in servers), servers


def test_a_relative_output_folder_is_the_callers_not_the_ray_workers(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the Ray workers run where Ray started (this module's fixture), not here
    name = f"out-{tmp_path.name}"  # relative, and in no other folder
    folder = ss.write(name, Labels(20), Labels.fields, progress=False, shard_size=0, engine="ray")
    assert str(folder) == name and len(ss.open(tmp_path / name)) == 20 and len(ss.open(tmp_path / name).shards) == 20


def test_relative_source_paths_are_read_from_the_callers_folder(tmp_path, monkeypatch):
    import numpy as np

    image_tree(tmp_path / "tree", per_class=3)
    parquet_set(tmp_path / "pq", files=2, rows=8)
    np.save(tmp_path / "arr.npy", np.arange(800, dtype=np.int64).reshape(400, 2))
    monkeypatch.chdir(tmp_path)
    for source in ("tree", "pq", "arr.npy"):
        one, _ = convert(source, f"one-{source}", shard_size="2kB", progress=False, codec="png")
        on_ray, _ = convert(source, f"ray-{source}", shard_size="2kB", progress=False, codec="png", engine="ray")
        assert files_of(on_ray) == files_of(one) and len(ss.open(on_ray).shards) > 1, source
    folder = ss.imagefolder("tree")  # listed relative to this folder; its samples' paths stay relative
    settings = {"progress": False, "shard_size": "2kB"}
    one, on_ray = ss.write("one", folder, IMAGE_FIELDS, **settings), ss.write("ray", folder, IMAGE_FIELDS, engine="ray", **settings)
    assert files_of(on_ray) == files_of(one) and ss.open(on_ray)[0]["path"].startswith("tree/")


@pytest.mark.parametrize("kind", ["init", "lock"])
def test_an_exception_that_cannot_cross_to_the_driver_arrives_as_a_faithful_stand_in(tmp_path, kind):
    n = 300
    bad = _unprobed(n, 150)
    with pytest.raises(RuntimeError) as info:
        ss.write(tmp_path / "ds", Unsendable(Labels(n), bad, kind), Labels.fields, progress=False, shard_size="4kB", engine="ray")
    assert not isinstance(info.value, ss.WorkerError)
    assert str(info.value).startswith(f"enginedata.LabelError: img{bad}.jpg: bad label" if kind == "init" else "ValueError: bad sample")
    notes = "\n".join(info.value.__notes__)
    assert f"while reading sample {bad}" in notes and "while writing shard-000" in notes and "Traceback" in notes
    assert os.listdir(tmp_path / "ds") == []


def test_a_task_error_ray_cannot_rebuild_is_not_called_retried():
    def get(ref: Any) -> Any:
        raise ray.exceptions.RaySystemError("Failed to deserialize exception")

    stub = SimpleNamespace(get=get, exceptions=ray.exceptions)
    with pytest.raises(ss.WorkerError) as info:
        raytasks._result(stub, None, ShardJob(3, 30, 40))
    message = str(info.value)
    assert "shard-00003.arrow (samples 30..39)" in message and "Failed to deserialize" in message and "retr" not in message, message


def _package(root: Any, name: str) -> None:
    """``root/name``: a package whose container's samples come from a function of another of its modules."""
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text("")
    (root / name / "util.py").write_text("def square(i):\n    return {'x': i * i, 'name': f'n{i}'}\n")
    (root / name / "data.py").write_text(
        textwrap.dedent(
            """
            from . import util

            class Squares:
                def __init__(self, n):
                    self.n = n

                def __len__(self):
                    return self.n

                def __getitem__(self, i):
                    if not 0 <= i < self.n:
                        raise IndexError(i)
                    return util.square(i)
            """
        )
    )


def test_data_from_a_module_the_workers_cannot_import_is_sent_by_value(tmp_path, monkeypatch):
    name = f"squares_{os.getpid()}_{tmp_path.name.replace('-', '_')}"
    _package(tmp_path / "mods", name)
    monkeypatch.syspath_prepend(str(tmp_path / "mods"))  # on this process's path only, as a script's sys.path.insert
    import importlib

    module = importlib.import_module(f"{name}.data")
    try:
        data, fields = module.Squares(60), {"x": ss.fields.Int(), "name": ss.fields.Text()}
        settings = {"progress": False, "shard_size": 400}
        expected = files_of(ss.write(tmp_path / "one", data, fields, **settings))
        assert len(expected) > 2
        assert files_of(ss.write(tmp_path / "ray", data, fields, engine="ray", **settings)) == expected
        assert name not in ray.cloudpickle.list_registry_pickle_by_value()  # for the write only
    finally:
        for loaded in [m for m in sys.modules if m == name or m.startswith(name + ".")]:
            del sys.modules[loaded]


def test_a_module_the_workers_have_but_cannot_import_is_named_with_what_to_do(tmp_path):
    (tmp_path / "mods").mkdir()
    (tmp_path / "mods" / "licensed_x.py").write_text(
        textwrap.dedent(
            """
            import os
            if os.getpid() != int(os.environ["DRIVER_PID"]):
                raise ImportError("the licence server cannot be reached from here")

            class Items:
                def __len__(self):
                    return 30

                def __getitem__(self, i):
                    if not 0 <= i < 30:
                        raise IndexError(i)
                    return {"x": i}
            """
        )
    )
    out = run_python(
        f"""
        import os
        os.environ["DRIVER_PID"] = str(os.getpid())  # (the Ray started for the write, and its workers, inherit it)
        import slipstream as ss
        from slipstream import fields as F
        from licensed_x import Items
        try:
            ss.write({str(tmp_path / "ds")!r}, Items(), {{"x": F.Int()}}, shard_size=200, engine="ray", progress=False)
        except ss.WorkerError as exc:
            print(exc)
        print(sorted(os.listdir({str(tmp_path / "ds")!r})))
        """,
        timeout=120,
        env={"PYTHONPATH": f"{SRC}{os.pathsep}{tmp_path / 'mods'}"},
    )
    assert out.returncode == 0, out.stderr[-3000:]
    message, listing = out.stdout.strip().rsplit("\n", 1)
    assert "the Ray workers cannot import 'licensed_x'" in message and "the licence server cannot be reached from here" in message, message
    assert "install 'licensed_x' on every node" in message and "runtime_env={'py_modules': [" in message and "licensed_x.py" in message, message
    assert listing == "[]"  # refused before any shard was written


def test_a_worker_that_cannot_load_the_data_says_what_to_do_and_other_ray_errors_stay_as_they_are(monkeypatch):
    class Ref:
        def hex(self) -> str:
            return "ref-of-a-test"

    def failing(error: BaseException) -> Any:
        def get(ref: Any) -> Any:
            raise error

        return SimpleNamespace(get=get)

    monkeypatch.setattr(raytasks, "_held", {})
    monkeypatch.setattr(raytasks, "_ray", lambda: failing(ray.exceptions.RaySystemError("No module named 'elsewhere_x'")))
    with pytest.raises(ss.WorkerError, match=r"could not load the data it was sent \(RaySystemError: System error: No module named 'elsewhere_x'\)") as info:
        raytasks._data([Ref()])
    assert "runtime_env={'py_modules':" in str(info.value)
    lost = ray.exceptions.ObjectLostError("ref-of-a-test", "owner", "")
    monkeypatch.setattr(raytasks, "_ray", lambda: failing(lost))
    with pytest.raises(ray.exceptions.ObjectLostError):
        raytasks._data([Ref()])
