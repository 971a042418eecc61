"""backend="helper": the loader's worker threads in one helper process, writing into shared memory.

The guarantees every backend keeps are also run on it in ``test_loader_processes.py`` (parametrized
over the two process-based backends); here: the same batches as the thread backend for a seed, what
is particular to one process of threads (worker_info, worker_init per thread, one message per
batch, busy share), and faults, those that could hang each in a child interpreter with a timeout.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from helpers import assert_same, snapshot
from procchild import assert_gone, child
from procdata import Custom, Faulty, Records

import slipstream as ss
from slipstream.core.errors import Cancelled
from slipstream.workers.crew import Run
from slipstream.workers.pool import WorkerPool

BACKENDS = ["thread", "process", "helper"]


class Rows:
    """A plain container (no batched read): one ``__getitem__`` per sample, drawing from sample_rng()."""

    def __init__(self, n: int):
        self.rows = np.arange(n * 6, dtype=np.float32).reshape(n, 6)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> dict:
        return {"row": self.rows[i] + ss.sample_rng().random(), "id": i, "tag": f"s{i}"}


def batches(data, backend, workers, epochs=2, **kwargs):
    kwargs.setdefault("batch_size", 8)
    with ss.DataLoader(data, shuffle=True, seed=3, workers=workers, backend=backend, mp_context="fork", **kwargs) as loader:
        return [snapshot(b) for _ in range(epochs) for b in loader]


def assert_all_same(got, want):
    assert len(got) == len(want)
    for k, (g, w) in enumerate(zip(got, want)):
        assert_same(g, w, f"batch {k}")


# -- the same batches as the other backends -----------------------------------------------------


@pytest.mark.parametrize("workers", [1, 4])
def test_arrays_give_the_same_batches_as_threads_and_processes(workers):
    data = {"x": np.arange(300 * 3, dtype=np.int64).reshape(300, 3), "y": np.linspace(0, 1, 300)}
    want = batches(data, "thread", workers)
    for backend in ("process", "helper"):
        assert_all_same(batches(data, backend, workers), want)


@pytest.mark.parametrize("workers", [1, 4])
def test_a_python_container_gives_the_same_batches_as_threads_and_processes(workers):
    want = batches(Rows(90), "thread", workers)
    for backend in ("process", "helper"):
        assert_all_same(batches(Rows(90), backend, workers), want)


@pytest.mark.parametrize("workers", [1, 4])
def test_a_packed_jpeg_pipeline_gives_the_same_batches_as_threads_and_processes(tmp_path, workers):
    from packed import photo_like

    from slipstream import fields as F
    from slipstream import ops

    path = str(tmp_path / "images.arrow")
    images = [photo_like(50 + 3 * k, 64, seed=k) for k in range(20)]
    fields = {"image": F.Image(codec="jpeg", quality=90), "label": F.Int()}
    ss.write(path, [{"image": im, "label": k} for k, im in enumerate(images)], fields, progress=False)
    data = ss.open(path).map(image=[ops.RandomResizedCrop(24), ops.RandomHorizontalFlip(), ops.ToCHW()])
    want = batches(data, "thread", workers, batch_size=6)
    assert len(want) == 8
    for backend in ("process", "helper"):
        assert_all_same(batches(data, backend, workers, batch_size=6), want)


def test_a_user_collate_and_out_of_order_output_give_the_same_batches():
    from procdata import shifted_collate

    want = batches(Records(60), "thread", 3, collate=shifted_collate)
    assert_all_same(batches(Records(60), "helper", 3, collate=shifted_collate), want)
    unordered = batches(Records(60), "helper", 3, in_order=False)
    assert sorted(tuple(b["x"][:, 0]) for b in unordered) == sorted(
        tuple(b["x"][:, 0]) for b in batches(Records(60), "thread", 3)
    )


# -- one process of threads -----------------------------------------------------------------------


class WhoLoads:
    """Each sample says which worker loaded it, in which process, and what its thread's init left."""

    local = threading.local()

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> dict:
        import os

        info = ss.worker_info()
        return {"id": info.id, "of": info.num_workers, "backend": info.backend, "pid": os.getpid(), "init": WhoLoads.local.tag}


def tag_thread(worker_id: int) -> None:
    WhoLoads.local.tag = 1000 + worker_id  # thread-local: an AttributeError in a thread it did not run in


def test_four_workers_are_threads_of_one_process_that_persists_and_each_ran_worker_init():
    with ss.DataLoader(WhoLoads(), 4, workers=4, backend="helper", worker_init=tag_thread) as loader:
        first = [b for b in loader]
        pids = loader.worker_pids
        second = [b for b in loader]
        assert loader.worker_pids == pids and len(pids) == 1
    assert_gone(pids)
    rows = [(int(i), int(of), str(be), int(pid), int(tag)) for b in first + second for i, of, be, pid, tag in zip(*b.values())]
    assert {pid for *_, pid, _ in rows} == set(pids)
    assert {(of, be) for _, of, be, _, _ in rows} == {(4, "helper")}
    assert all(tag == 1000 + i for i, *_, tag in rows)  # each thread's own worker_init ran in it
    assert {i for i, *_ in rows} <= {0, 1, 2, 3}
    assert ss.worker_info() is None


def test_each_batch_is_one_message_to_the_helper_and_its_busy_share_is_reported():
    with ss.DataLoader(Records(200), 8, workers=4, backend="helper") as loader:
        assert len(list(loader)) == 25
        pool = loader._backend._pool
        assert pool._next_ticket == 25  # one job per batch, its 4 x 4 tasks shared by the threads there
        stats = loader.stats()
    assert stats["batches"] == 25 and 0 < stats["worker_busy"] <= 1


@pytest.mark.parametrize("workers", [1, 3])
def test_the_helpers_time_per_sample_is_split_into_stages_as_the_threads_is(tmp_path, workers):
    from packed import photo_like

    from slipstream import fields as F
    from slipstream import ops

    images = [{"image": photo_like(60, 50, seed=k), "label": k} for k in range(24)]
    path = ss.write(tmp_path / "d.arrow", images, {"image": F.Image(codec="jpeg"), "label": F.Int()}, progress=False)
    data = ss.open(path).map(image=[ops.RandomResizedCrop(32), ops.ToCHW()])
    with ss.DataLoader(data, 8, workers=workers) as threads, ss.DataLoader(data, 8, workers=workers, backend="helper") as helper:
        list(threads), list(helper)
        want, got = threads.stats()["us_per_sample"], helper.stats()["us_per_sample"]
    assert set(got) == set(want) and "read" in got, (got, want)
    assert all(value >= 0 for value in got.values())


def test_batches_live_in_shared_memory_and_kept_ones_are_never_overwritten():
    with ss.DataLoader(Records(160), 16, workers=3, backend="helper", prefetch=2) as loader:
        kept = list(loader)
    for k, batch in enumerate(kept):
        np.testing.assert_array_equal(batch["x"][:, 0], np.arange(16 * k, 16 * k + 16))
    assert type(kept[0]["x"].base).__name__ == "_Window"


# -- errors and leaving early ---------------------------------------------------------------------


def test_a_sample_error_names_the_sample_and_keeps_the_helper_threads_traceback():
    with ss.DataLoader(Faulty("raise", at=37, n=80), 8, workers=3, backend="helper") as loader:
        with pytest.raises(Custom) as caught:
            list(loader)
        pids = loader.worker_pids
        assert next(iter(loader))["x"][0, 0] == 0 and loader.worker_pids == pids  # the same helper serves the next epoch
    notes = "\n".join(caught.value.__notes__)
    assert caught.value.args == ("bad sample 37", 37)
    assert (
        "sample 37 (batch 4 of epoch 0)" in notes and "raised in worker thread" in notes and "of helper process 0 (pid" in notes
    )
    assert "__getitem__" in notes


def test_keep_going_skips_only_the_failed_batch():
    with ss.DataLoader(Faulty("raise", at=13, n=40), 8, workers=2, backend="helper") as loader:
        it, got, errors = loader.__iter__(keep_going=True), [], 0
        while True:
            try:
                got.append(int(next(it)["x"][0, 0]))
            except StopIteration:
                break
            except Custom:
                errors += 1
    assert got == [0, 16, 24, 32] and errors == 1


def test_breaking_out_mid_epoch_cancels_it_and_the_next_epoch_is_whole():
    with ss.DataLoader(Records(400, work=2000), 8, workers=2, backend="helper", prefetch=4) as loader:
        for k, _ in enumerate(loader):
            if k == 2:
                break
        state = loader.state_dict()
        assert (state["epoch"], state["batch"]) == (0, 3)
        again = [int(b["x"][0, 0]) for b in loader]
    assert again == list(range(0, 400, 8))


def test_resume_mid_epoch_gives_the_rest_of_the_run_exactly():
    from helpers import assert_resumes_exactly

    assert assert_resumes_exactly(lambda: ss.DataLoader(Records(40), 8, shuffle=True, seed=9, workers=2, backend="helper")) > 10


def test_an_error_in_a_threads_worker_init_reaches_the_consumer():
    from procdata import failing_init

    loader = ss.DataLoader(Records(16), 4, workers=2, backend="helper", worker_init=failing_init)
    with pytest.raises(Custom, match="init failed in") as caught:
        list(loader)
    assert "worker_init in worker thread" in "\n".join(caught.value.__notes__)
    loader.close()


KILLED = """
import psutil, signal
dl = ss.DataLoader(Records(100000, work=20000), 16, workers=3, backend="helper", mp_context=os.environ["METHOD"])
it = iter(dl)
next(it)
pids = dl.worker_pids
os.kill(pids[0], signal.SIGKILL)
t0 = time.monotonic()
try:
    for batch in it:
        pass
    out = {"error": None}
except Exception as exc:
    out = {"error": type(exc).__name__, "message": str(exc), "after": time.monotonic() - t0}
batch = None
again = int(next(iter(dl))["x"][0, 0])  # a new helper replaces the dead one
fresh = dl.worker_pids
out["fresh"] = fresh != pids
dl.close()
gc.collect()
out["pids"] = pids + fresh
out["children"] = [p.pid for p in psutil.Process().children(recursive=True) if p.status() != psutil.STATUS_ZOMBIE and p.pid in out["pids"]]
out["again"] = again
print(json.dumps(out))
"""


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_a_killed_helper_is_a_worker_error_at_once_and_the_next_epoch_starts_a_new_one(method):
    result, out = child(KILLED, env={"METHOD": method})
    assert result.returncode == 0, result.stderr
    assert out["error"] == "WorkerError" and out["after"] < 2.0, out
    assert "helper process 0 (pid" in out["message"] and "was killed by SIGKILL (9)" in out["message"], out["message"]
    assert out["again"] == 0 and out["fresh"] and out["children"] == [], out
    assert_gone(out["pids"])


def test_closing_the_loader_or_the_interpreter_exiting_leaves_no_process_behind():
    result, out = child(
        """
        import psutil
        dl = ss.DataLoader(Records(2000, work=20000), 16, workers=4, backend="helper")
        it = iter(dl)
        next(it)
        first = dl.worker_pids
        dl.close()
        left = [p for p in first if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        second = iter(dl)  # open at exit: the exit registry stops it
        next(second)
        print(json.dumps({"first": first, "left": left, "second": dl.worker_pids}), flush=True)
        """
    )
    assert result.returncode == 0, result.stderr
    assert out["left"] == [] and out["first"] != out["second"]
    assert_gone(out["second"])


# -- the pieces: a pool of threaded workers, and one run ---------------------------------------------


def add(state, a, b, generation):
    return a + b


def fail(state, message, generation):
    raise ValueError(message)


def thread_name(state, generation):
    return threading.current_thread().name


def test_a_job_is_shared_by_a_workers_threads_and_answered_once_in_part_order():
    pool = WorkerPool(None, 1, context="fork", threads=3, backend="helper")
    try:
        generation = pool.open_generation()
        ticket = pool.submit_job(0, [(add, (k, 10)) for k in range(7)], generation)
        got, ok, (results, seconds, spent) = pool.wait({ticket}, timeout=30)
        assert got == ticket and ok and results == list(range(10, 17)) and seconds >= 0 and spent == {}
        ticket = pool.submit_job(0, [(thread_name, ())] * 30, generation)
        names = set(pool.wait({ticket}, timeout=30)[2][0])
        assert names <= {"slipstream-helper-0", "slipstream-helper-1", "slipstream-helper-2"} and names
        ticket = pool.submit_job(0, [(add, (1, 1)), (fail, ("second",)), (fail, ("third",))], generation)
        _, ok, error = pool.wait({ticket}, timeout=30)
        assert not ok and type(error) is ValueError and str(error) == "second"  # the earliest failed part's
    finally:
        pool.close()


def test_a_one_thread_worker_runs_a_job_too():
    pool = WorkerPool(None, 1, context="fork")
    try:
        ticket = pool.submit_job(0, [(add, (k, 1)) for k in range(3)], pool.open_generation())
        assert pool.wait({ticket}, timeout=30)[2][0] == [1, 2, 3]
    finally:
        pool.close()


class _State:
    def __init__(self, cancelled=False):
        self._cancelled = cancelled

    def cancelled(self, generation):
        return self._cancelled


def test_a_run_keeps_the_earliest_real_error_and_skips_parts_once_failed_or_cancelled():
    run = Run(1, [(add, (1, 2)), (fail, ("a",)), (fail, ("b",))], (0, 1))
    earlier = run.part(_State(), 1)  # two threads run the failing parts; the later one settles first
    run.settle(2, *run.part(_State(), 2), "t2")
    skipped = run.part(_State(), 0)  # the job failed: the rest is skipped
    assert isinstance(skipped[1], Cancelled)
    run.settle(0, *skipped, "t0")
    assert str(run.error) == "b" and run.error_where == "t2"  # a skipped part never replaces a real error
    assert run.settle(1, *earlier, "t1")
    assert str(run.error) == "a" and run.error_where == "t1"  # the earliest part's error is the job's
    assert isinstance(Run(2, [(add, (1, 2))], (0, 1)).part(_State(cancelled=True), 0)[1], Cancelled)
