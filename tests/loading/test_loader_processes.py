"""The process backend: same batches as workers=0, and every fault ends cleanly and quickly.

Tests marked with ``BACKENDS`` run on the helper backend as well (the same machinery: one process
of threads instead of processes of one thread; ``test_backend_helper.py`` has its own).

Fault scenarios run in a fresh interpreter with a timeout (a hang fails one test, never CI); the
child prints one JSON line with what it saw, and the test checks it, the child's exit, and that no
worker process and no shared-memory file is left.
"""

from __future__ import annotations

import os
import pickle
import signal
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest
from helpers import SRC, SUPPORT, assert_resumes_exactly, assert_same, snapshot
from procchild import assert_gone, child
from procdata import Faulty, InitSeen, Records, Seeds, TaggedInit, remember_init, shifted_collate

import slipstream as ss

psutil = pytest.importorskip("psutil")

METHODS = ["fork", "spawn", "forkserver"]
BACKENDS = ["process", "helper"]  # the backends whose workers are processes writing into shared memory


def shm_files() -> set[str]:
    return {name for name in os.listdir("/dev/shm") if name.startswith("slipstream")} if os.path.isdir("/dev/shm") else set()


def open_segments(pid: int | None = None) -> list[str]:
    """Shared-memory files the process still holds open (deleted ones show as '(deleted)')."""
    fds = f"/proc/{pid or os.getpid()}/fd"
    found = []
    for fd in os.listdir(fds):
        try:
            target = os.readlink(os.path.join(fds, fd))
        except OSError:
            continue
        if "slipstream-" in target:
            found.append(target)
    return found


def loader(data, method="fork", backend="process", **kwargs):
    kwargs.setdefault("workers", 2)
    return ss.DataLoader(data, backend=backend, mp_context=method, **kwargs)


# -- same batches as workers=0 ------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("method", METHODS)
def test_batches_equal_those_of_workers_0_for_the_same_seed_with_every_start_method(method, backend):
    data = Records(200)
    reference = ss.DataLoader(data, 32, shuffle=True, seed=5)
    want = [snapshot(b) for e in range(2) for b in reference]
    with loader(data, method, backend, batch_size=32, shuffle=True, seed=5) as processes:
        got = [snapshot(b) for e in range(2) for b in processes]
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_same(g, w, f"batch {k}")


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("workers", [1, 3])
def test_out_of_order_output_is_the_same_set_of_batches(workers, backend):
    data = Records(150)
    want = {tuple(b["x"][:, 0]) for b in ss.DataLoader(data, 16, shuffle=True, seed=1)}
    with loader(data, backend=backend, batch_size=16, shuffle=True, seed=1, workers=workers, in_order=False) as processes:
        got = [tuple(b["x"][:, 0]) for b in processes]
    assert len(got) == len(want) and set(got) == want


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_user_collate_runs_in_the_worker_and_its_result_comes_back(backend):
    data = Records(50)
    with loader(data, backend=backend, batch_size=8, collate=shifted_collate) as processes:
        got = list(processes)
    assert [b["ids"] for b in got] == [list(range(a, min(a + 8, 50))) for a in range(0, 50, 8)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_workers_persist_across_epochs_and_close_stops_them(backend):
    before = set(open_segments())  # (segments of loaders earlier tests left to the garbage collector are not this one's)
    with loader(Records(64), backend=backend, batch_size=16) as processes:
        list(processes)
        pids = processes.worker_pids
        list(processes)
        assert processes.worker_pids == pids  # the same processes served the second epoch
        assert set(open_segments()) - before  # its batches' shared memory, while it is open
    assert_gone(pids)
    assert not set(open_segments()) - before


def test_batches_live_in_shared_memory_and_kept_batches_are_never_overwritten():
    with loader(Records(160), batch_size=16, prefetch=2) as processes:
        kept = list(processes)  # every batch held: none may be reused under us
        for k, batch in enumerate(kept):
            np.testing.assert_array_equal(batch["x"][:, 0], np.arange(16 * k, 16 * k + 16))
        owner = kept[0]["x"].base  # a window on a shared mapping (see _rawmap)
        assert type(owner).__name__ == "_Window" and owner.mapping.size >= kept[0]["x"].nbytes


@pytest.mark.parametrize("backend", BACKENDS)
def test_steady_state_reuses_a_few_shared_buffers(backend):
    with loader(Records(640), backend=backend, batch_size=16, prefetch=2) as processes:
        addresses = {b["x"].__array_interface__["data"][0] for b in processes}
    assert len(addresses) <= 2 + 4


@pytest.mark.parametrize("backend", BACKENDS)
def test_resume_mid_epoch_gives_the_rest_of_the_run_exactly(backend):
    data = Records(40)
    assert assert_resumes_exactly(lambda: loader(data, backend=backend, batch_size=8, shuffle=True, seed=9)) > 10


def test_worker_init_runs_in_each_process_and_worker_info_names_it():
    with loader(InitSeen(), batch_size=4, worker_init=remember_init) as processes:
        seen = {int(v) for b in processes for v in b}
    assert seen == {0, 1}


def test_global_random_generators_are_seeded_per_worker_from_the_loader_seed():
    def states(seed):
        with loader(Seeds(), batch_size=4, seed=seed) as processes:
            rows = [(int(w), int(p), int(n)) for b in processes for w, p, n in zip(b["worker"], b["py"], b["np"])]
        return {w: (p, n) for w, p, n in rows}

    first, again, other = states(1), states(1), states(2)
    assert set(first) == {0, 1}
    assert first == again
    assert first[0] != first[1]
    assert first[0] != other[0] and first[1] != other[1]


def test_thread_workers_also_run_worker_init_and_report_worker_info():
    calls = []
    dl = ss.DataLoader(Seeds(), 4, workers=2, worker_init=calls.append)
    workers = {int(w) for b in dl for w in b["worker"]}
    # once per worker thread (nothing reads a sample before the workers start)
    assert sorted(calls) == [0, 1] and workers <= {0, 1} and workers
    assert ss.worker_info() is None


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_sample_exception_keeps_its_type_args_and_the_workers_traceback(backend):
    with loader(Faulty("raise", at=37), backend=backend, batch_size=8) as processes:
        with pytest.raises(Exception) as caught:
            list(processes)
    error = caught.value
    assert type(error).__name__ == "Custom" and error.args == ("bad sample 37", 37) and error.index == 37
    notes = "\n".join(getattr(error, "__notes__", []))
    assert "sample 37" in notes and "raised in worker" in notes and "__getitem__" in notes


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_error_in_worker_init_reaches_the_consumer(backend):
    from procdata import failing_init

    processes = loader(Records(16), backend=backend, batch_size=4, worker_init=failing_init)
    with pytest.raises(Exception, match="init failed in"):
        list(processes)
    processes.close()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_an_unpicklable_dataset_is_named_in_the_error(method, backend):
    class Local(Records):  # a local class cannot be pickled by reference
        pass

    processes = loader(Local(8), method, backend, batch_size=4)
    with pytest.raises(TypeError, match=r"the dataset .*test_an_unpicklable_dataset_is_named_in_the_error.<locals>.Local cannot be pickled"):
        next(iter(processes))
    processes.close()


def test_the_timeout_is_validated():
    with pytest.raises(ValueError, match="timeout"):
        ss.DataLoader(Records(4), timeout=0)
    with pytest.raises(ValueError, match="backend"):
        ss.DataLoader(Records(4), backend="gpu")


def test_thread_backend_timeout_raises_instead_of_hanging():
    class Stuck(Records):
        def __init__(self):
            super().__init__(8)
            self.release = threading.Event()

        def __getitem__(self, i):
            if i == 5:
                self.release.wait(30)
            return super().__getitem__(i)

    data = Stuck()
    dl = ss.DataLoader(data, 4, workers=2, timeout=0.5)
    start = time.monotonic()
    with pytest.raises(TimeoutError, match=r"batch 1 of epoch 0 was not ready within timeout=0.5"):
        list(dl)
    assert time.monotonic() - start < 5
    data.release.set()


# -- faults, each in a child interpreter --------------------------------------------------------

CRASH = """
import psutil
stamp = sys.argv[1] if len(sys.argv) > 1 else None
stamp = os.environ["STAMP"]
dl = ss.DataLoader(Faulty(os.environ["HOW"], at=37, stamp=stamp), 8, workers=3, backend=os.environ.get("BACKEND", "process"),
                   mp_context=os.environ["METHOD"])
pids = []
try:
    it = iter(dl)
    pids = dl.worker_pids
    for batch in it:
        pass
    out = {"error": None}
except Exception as exc:
    seen = time.time()
    crashed_at = float(open(stamp).read())
    out = {"error": type(exc).__name__, "message": str(exc), "delay": seen - crashed_at, "pid": getattr(exc, "pid", None),
           "exitcode": getattr(exc, "exitcode", None)}
out["pids"] = pids
batch = None  # the last good batch is the user's to keep; drop it
dl.close()
gc.collect()
out["children"] = [p.pid for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE and p.pid in pids]
out["segments"] = [l for l in (os.readlink(f"/proc/self/fd/{fd}") for fd in os.listdir("/proc/self/fd") if os.path.exists(f"/proc/self/fd/{fd}")) if "slipstream-" in l]
gc.collect()
print(json.dumps(out))
"""


@pytest.mark.parametrize(
    "how, method, expect, backend",
    [
        ("segv", "fork", "was killed by SIGSEGV (11)", "process"),
        ("kill", "fork", "was killed by SIGKILL (9)", "process"),
        ("exit", "fork", "exited with code 3", "process"),
        ("segv", "spawn", "was killed by SIGSEGV (11)", "process"),
        ("exit", "forkserver", "exited with code 3", "process"),
        ("segv", "fork", "was killed by SIGSEGV (11)", "helper"),
        ("exit", "spawn", "exited with code 3", "helper"),
    ],
)
def test_a_dead_worker_is_reported_within_two_seconds_with_its_pid_and_nothing_is_left(tmp_path, how, method, expect, backend):
    before = shm_files()
    result, out = child(CRASH, env={"HOW": how, "METHOD": method, "STAMP": str(tmp_path / "stamp"), "BACKEND": backend})
    assert result.returncode == 0, result.stderr
    assert out["error"] == "WorkerError", out
    assert expect in out["message"] and f"(pid {out['pid']})" in out["message"], out["message"]
    assert out["pid"] in out["pids"] and out["exitcode"] != 0
    assert out["delay"] < 2.0, f"reported {out['delay']:.2f} s after the crash"
    assert out["children"] == [], "other workers were left running"
    assert out["segments"] == [], "shared memory still open after the failure"
    assert shm_files() <= before
    assert_gone(out["pids"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_timeout_raises_names_the_batch_and_stops_the_workers(backend):
    result, out = child(
        """
        dl = ss.DataLoader(Faulty("hang", at=21), 8, workers=2, backend=os.environ["BACKEND"], timeout=1.0)
        batches = iter(dl)
        try:
            next(batches), next(batches)
            start = time.monotonic()  # batch 2 never comes: the wait for it starts here
            next(batches)
            out = {"error": None}
        except TimeoutError as exc:
            out = {"error": str(exc), "after": time.monotonic() - start}
        out["pids"] = dl.worker_pids
        import psutil
        out["alive"] = [p.pid for p in psutil.Process().children() if p.status() != psutil.STATUS_ZOMBIE]
        print(json.dumps(out))
        """,
        env={"BACKEND": backend},
    )
    assert out["error"] and "batch 2 of epoch 0 was not ready within timeout=1.0 s" in out["error"], out
    assert out["alive"] == []
    assert out["after"] < 1.6, f"raised {out['after']:.2f} s into a 1 s timeout (a stuck worker is not waited for politely)"


@pytest.mark.parametrize("how, backend", [("break", "process"), ("close", "process"), ("drop", "process"), ("drop", "helper")])
def test_leaving_early_cancels_and_closing_the_loader_leaves_no_process_or_segment(how, backend):
    result, out = child(
        f"""
        import psutil
        dl = ss.DataLoader(Records(2000, work=20000), 16, workers=2, backend={backend!r})
        for k, b in enumerate(dl):
            if k == 2:
                break
        pids = dl.worker_pids
        first = next(iter(dl))["x"][0, 0]  # the loader is usable again after the early break
        how = "{how}"
        del b
        if how == "close":
            dl.close()
        elif how == "drop":
            del dl
        else:
            dl.close()
        gc.collect()
        time.sleep(0)  # nothing to wait for: close() joins the workers
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        segs = [l for l in (os.readlink(f"/proc/self/fd/{{fd}}") for fd in os.listdir("/proc/self/fd") if os.path.exists(f"/proc/self/fd/{{fd}}")) if "slipstream-" in l]
        print(json.dumps({{"first": int(first), "alive": alive, "segments": segs, "pids": pids}}))
        """
    )
    assert result.returncode == 0, result.stderr
    assert out["first"] == 0 and out["alive"] == [] and out["segments"] == []


@pytest.mark.parametrize("backend", BACKENDS)
def test_workers_exit_on_their_own_when_the_parent_is_killed(tmp_path, backend):
    script = tmp_path / "victim.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os, sys, signal
            import slipstream as ss
            from procdata import Records
            dl = ss.DataLoader(Records(100000, work=20000), 16, workers=2, backend={backend!r})
            it = iter(dl)
            next(it)
            print(" ".join(map(str, dl.worker_pids)), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
            """
        )
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, SUPPORT])}
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env)
    assert result.returncode == -signal.SIGKILL
    pids = [int(p) for p in result.stdout.split()]
    assert len(pids) == (2 if backend == "process" else 1)
    assert_gone(pids, within=5.0)


def test_ctrl_c_while_waiting_for_a_batch_stops_the_workers_and_exits(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, SUPPORT])}
    stamp = tmp_path / "stamp"
    code = textwrap.dedent(
        f"""
        import signal
        import slipstream as ss
        from procdata import Faulty
        signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started from a background job (SIGINT ignored)
        dl = ss.DataLoader(Faulty("hang", at=3, stamp={str(stamp)!r}), 4, workers=2, backend="process")
        it = iter(dl)
        print(" ".join(map(str, dl.worker_pids)), flush=True)
        try:
            next(it)
        except KeyboardInterrupt:
            print("interrupted", flush=True)
            raise
        """
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        pids = [int(p) for p in proc.stdout.readline().split()]
        deadline = time.monotonic() + 30
        while not stamp.exists() and time.monotonic() < deadline:  # a worker is inside the hanging sample,
            psutil.wait_procs([psutil.Process(proc.pid)], timeout=0.05)  # so the parent waits in next()
        os.kill(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert "interrupted" in out and "KeyboardInterrupt" in err
    assert_gone(pids, within=5.0)


@pytest.fixture
def small_shm(tmp_path):
    """A tmpfs of 8 MiB for the batch buffers (``SLIPSTREAM_SHM_DIR``): a real shared-memory limit."""
    where = tmp_path / "shm"
    where.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(where)], capture_output=True).returncode:
        pytest.skip("mounting a small tmpfs needs root (CAP_SYS_ADMIN)")
    yield where
    subprocess.run(["umount", "-l", str(where)], check=True)


def _free(where) -> int:
    stats = os.statvfs(where)
    return stats.f_bavail * stats.f_frsize


def test_too_little_shared_memory_is_a_clear_error_not_a_bus_error(small_shm):
    result, out = child(
        """
        dl = ss.DataLoader(Huge(12 << 20), 1, workers=1, backend="process")  # 12 MiB batches, 8 MiB of shm
        try:
            next(iter(dl))
            out = {"error": None}
        except ss.SharedMemoryError as exc:
            out = {"error": str(exc)}
        print(json.dumps(out))
        """,
        env={"SLIPSTREAM_SHM_DIR": str(small_shm)},
    )
    assert result.returncode == 0, result.stderr
    message = out["error"]
    assert message and "need" in message and "MiB" in message and "--shm-size" in message and "backend='thread'" in message
    assert os.listdir(small_shm) == [] and _free(small_shm) == 8 << 20


def test_shared_memory_is_released_at_an_error_without_waiting_for_a_gc_pass(small_shm):
    """Retrying with the smaller batch the error suggests works at once: the failed loader's buffers
    are not kept by a reference cycle through the exception (gc is off in the child)."""
    result, out = child(
        """
        gc.disable()
        def train(batch_size):
            shapes = []
            for batch in ss.DataLoader(Huge(2 << 20, n=8), batch_size, workers=1, backend="process", prefetch=1):
                shapes.append(list(batch.shape))
            return shapes
        out = {}
        try:
            train(3)  # 6 MiB batches: a second one does not fit in 8 MiB
        except ss.SharedMemoryError as exc:
            out["error"] = str(exc)
        stats = os.statvfs(os.environ["SLIPSTREAM_SHM_DIR"])
        out["free_after_error"] = stats.f_bavail * stats.f_frsize
        out["retry"] = train(1)
        print(json.dumps(out))
        """,
        env={"SLIPSTREAM_SHM_DIR": str(small_shm)},
    )
    assert result.returncode == 0, result.stderr
    assert "need" in out.get("error", ""), out
    assert out["free_after_error"] == 8 << 20
    assert out["retry"] == [[1, 2 << 20]] * 8


def test_a_full_shm_directory_reported_by_fallocate_names_the_size_and_the_way_out(tmp_path, monkeypatch):
    import errno

    def full(fd, offset, size):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "posix_fallocate", full)
    monkeypatch.setenv("SLIPSTREAM_SHM_DIR", str(tmp_path))
    with pytest.raises(ss.SharedMemoryError, match=r"need 1\.0 MiB more of shared memory in " + str(tmp_path)):
        ss.workers.shm.Segment(2**20)
    assert list(tmp_path.iterdir()) == []  # the file was unlinked at once


def test_pickled_exceptions_that_cannot_be_rebuilt_become_runtime_errors_with_the_text():
    from slipstream.core.carried import rebuild_error as _rebuild
    from slipstream.core.carried import wrap_error as _wrap_error

    class Odd(Exception):
        def __init__(self, a, b):  # pickles as Odd(message) and cannot be rebuilt
            super().__init__(f"{a}-{b}")

    try:
        raise Odd(1, 2)
    except Odd as exc:
        wrapped = _wrap_error(exc, "raised in worker 0 (pid 1)")
    error = _rebuild(wrapped)
    assert isinstance(error, RuntimeError) and "Odd: 1-2" in str(error)
    assert "raised in worker 0" in error.__notes__[0]
    pickle.dumps(error)


def test_thread_workers_read_sample_0_after_worker_init_too():
    """A dataset reading through a per-thread handle that worker_init opens works with threads: the
    buffers are shaped from sample 0 read in a thread that ran worker_init(0), not in the caller."""
    local = threading.local()

    def open_handle(worker_id):
        local.offset = 1000

    class PerThread:
        def __len__(self):
            return 12

        def __getitem__(self, i):
            return np.int64(local.offset + i)  # AttributeError in a thread without worker_init

    dl = ss.DataLoader(PerThread(), 4, workers=2, worker_init=open_handle)
    assert [int(v) for b in dl for v in b] == [1000 + i for i in range(12)]


def test_a_dataset_class_spawned_workers_cannot_import_gets_a_hint():
    result, out = child(
        """
        class Local:  # defined in the __main__ of `python -c`: a spawned worker cannot import it
            def __len__(self):
                return 8
            def __getitem__(self, i):
                return np.int64(i)
        try:
            list(ss.DataLoader(Local(), 4, workers=1, backend="process", mp_context="spawn"))
            out = {"error": None}
        except AttributeError as exc:
            out = {"error": str(exc), "notes": getattr(exc, "__notes__", [])}
        print(json.dumps(out))
        """
    )
    assert "Local" in out["error"]
    assert any("importable in a fresh interpreter" in note and "mp_context='fork'" in note for note in out["notes"])


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_packed_image_pipeline_gives_the_same_batches_in_worker_processes(tmp_path, method, backend):
    """Packed files travel to spawned workers (reopened there) and their decode + augment pipeline
    draws from sample_rng(): the batches equal workers=0's, bit for bit."""
    from packed import photo_like

    from slipstream import fields as F
    from slipstream import ops

    path = str(tmp_path / "images.arrow")
    images = [photo_like(60 + 3 * k, 70, seed=k) for k in range(24)]
    ss.write(path, [{"image": im, "label": k} for k, im in enumerate(images)], {"image": F.Image(codec="jpeg", quality=90), "label": F.Int()}, progress=False)
    data = ss.open(path).map(image=[ops.RandomResizedCrop(32), ops.RandomHorizontalFlip(), ops.ToCHW()])
    want = [snapshot(b) for b in ss.DataLoader(data, 8, shuffle=True, seed=4)]
    with loader(data, method, backend, batch_size=8, shuffle=True, seed=4) as processes:
        got = [snapshot(b) for b in processes]
    assert len(got) == len(want) == 3
    for k, (g, w) in enumerate(zip(got, want)):
        assert_same(g, w, f"batch {k}")


@pytest.mark.parametrize("backend", ["thread", *BACKENDS])
def test_an_iterator_keeps_its_unnamed_loader_and_workers_alive_to_the_end(backend):
    """A loader nobody names (``for b in ss.DataLoader(...)``) lives as long as its iterator: its
    finalizer does not close the worker pool mid-epoch ("the worker pool is closed" after 9 of 10)."""
    result, out = child(
        f"""
        import gc
        n = 0
        for b in ss.DataLoader(np.arange(800).reshape(100, 8), batch_size=10, workers=2, backend={backend!r}):
            gc.collect()  # the loader object itself is unreachable but for the iterator
            n += int(b[:, 0].sum() >= 0)
        first = next(iter(ss.DataLoader(np.arange(800).reshape(100, 8), batch_size=10, workers=2, backend={backend!r})))
        print(json.dumps({{"batches": n, "first": first[:, 0].tolist()}}))
        """
    )
    assert result.returncode == 0, result.stderr
    assert out == {"batches": 10, "first": list(range(0, 80, 8))}


def test_process_workers_run_where_posix_fallocate_does_not_exist():
    """macOS has no os.posix_fallocate: segments are then sized with ftruncate (not reserved)."""
    result, out = child(
        """
        del os.posix_fallocate
        batches = [b.tolist() for b in ss.DataLoader(np.arange(12).reshape(6, 2), 3, workers=2, backend="process")]
        print(json.dumps({"batches": batches}))
        """
    )
    assert result.returncode == 0, result.stderr
    assert out["batches"] == [[[0, 1], [2, 3], [4, 5]], [[6, 7], [8, 9], [10, 11]]]


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_error_in_a_user_collate_names_the_batch_in_a_worker_process(backend):
    from procdata import failing_collate

    with pytest.raises(ValueError, match="cannot collate") as info:
        list(loader(list(range(10)), backend=backend, batch_size=3, collate=failing_collate))
    assert "raised by the collate function for batch 2 of epoch 0 (3 samples)" in "\n".join(info.value.__notes__)


@pytest.mark.parametrize("backend", BACKENDS)
def test_restart_workers_starts_fresh_processes_with_the_new_worker_init_and_lets_the_old_ones_finish(backend):
    with loader(InitSeen(), backend=backend, batch_size=4, worker_init=TaggedInit(100)) as processes:
        first = iter(processes)
        assert set(next(first).tolist()) <= {100, 101}
        old = processes.worker_pids
        processes.restart_workers(TaggedInit(200))
        assert processes.worker_pids == []  # retired: no longer the loader's
        rest = [b.tolist() for b in first]  # the old workers finish serving their iterator
        assert len(rest) == 3 and set(sum(rest, [])) <= {100, 101}
        assert_gone(old)
        seen = set(sum((b.tolist() for b in processes), []))
        new = processes.worker_pids
        assert seen <= {200, 201} and new and not set(new) & set(old)
    assert_gone(new)


@pytest.mark.parametrize("backend", BACKENDS)
def test_closing_an_iterator_from_another_thread_ends_the_consumers_wait(tmp_path, backend):
    """The consumer waits in next() for a batch a worker never finishes; another thread closes the
    iterator: the wait ends at once with StopIteration (it waited for answers close discarded)."""
    stamp = tmp_path / "reached"
    _, out = child(
        f"""
        import threading
        dl = ss.DataLoader(Faulty("hang", at=0, n=64, stamp={str(stamp)!r}), batch_size=8, workers=2, backend={backend!r}, mp_context="fork")
        it = iter(dl)
        out = {{}}
        def consume():
            try:
                next(it)
                out["got"] = "batch"
            except StopIteration:
                out["got"] = "stop"
            except BaseException as exc:
                out["got"] = repr(exc)
        consumer = threading.Thread(target=consume)
        consumer.start()
        while not os.path.exists({str(stamp)!r}):  # the worker is inside the sample that never returns
            time.sleep(0.01)
        t0 = time.monotonic()
        it.close()
        consumer.join(10)
        out["alive"], out["seconds"] = consumer.is_alive(), time.monotonic() - t0
        dl.close()
        print(json.dumps(out), flush=True)
        os._exit(0)
        """,
        timeout=60,
    )
    assert out["alive"] is False and out["got"] == "stop" and out["seconds"] < 3, out
