"""The process backend's lifecycle as training scripts drive it: iterators of one loader that live at
once or come by the thousand, datasets that only work in workers, a Ctrl-C in the middle of a message,
kept batches and file descriptors, a file descriptor that cannot be sent, workers that fail while
booting, and shared memory released at close while another loader's workers live.

Every scenario runs in a fresh interpreter in its own session with a timeout, so a hang fails one
test and the whole process group (workers included) is killed; nothing is left behind. The child
prints one JSON line last with what it saw; the test checks it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from helpers import SRC, SUPPORT

pytest.importorskip("psutil")

# Module-level helpers for the children (spawn/forkserver workers must import them by name).
HELPERS = '''
import os, time
import numpy as np

class LazyFile:
    """Reads 16 int64 per record from a file it opens on first use, in whichever process reads
    (the usual way to keep a dataset picklable and fork-safe)."""

    def __init__(self, path, n):
        self.path, self.n, self.f = path, n, None

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if self.f is None:
            self.f = open(self.path, "rb", buffering=0)
        self.f.seek(i * 128)
        time.sleep(0.001)
        return {"id": i, "rec": np.frombuffer(self.f.read(128), dtype=np.int64).copy()}


HANDLE = None

def open_handle(worker_id):
    global HANDLE
    HANDLE = {"worker": worker_id}

class NeedsInit:
    """Reads through a per-worker handle that worker_init opens (torch's worker_init_fn idiom)."""

    def __len__(self):
        return 16

    def __getitem__(self, i):
        return {"i": i, "worker": HANDLE["worker"]}


class Ints:
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return i

def big_collate(samples):
    return {"ids": [int(s) for s in samples], "blob": b"\\x01" * (8 * 2**20)}


class Big:
    """A picklable dataset whose pickle is larger than a socket buffer."""

    def __init__(self, nbytes):
        self.blob = np.zeros(nbytes, np.uint8)

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return i
'''


@pytest.fixture
def helpers_dir(tmp_path):
    (tmp_path / "lifecycledata.py").write_text(HELPERS)
    return tmp_path


def child(code: str, timeout: float = 60, env: dict | None = None, script: Path | None = None, path: Path | None = None):
    """Run ``code`` (or ``script``) in a fresh interpreter in its own session; kill the whole group on timeout.

    Returns ``(returncode, stdout, stderr, last JSON line as dict or None)``; a timeout returns rc None."""
    extra = [SRC, SUPPORT] + ([str(path)] if path else [])
    full = {**os.environ, "PYTHONPATH": os.pathsep.join(extra + [os.environ.get("PYTHONPATH", "")]), **(env or {})}
    if script is None:
        prelude = "import json, os, sys, time, gc\nimport numpy as np\nimport slipstream as ss\nfrom procdata import *\n"
        argv = [sys.executable, "-c", prelude + textwrap.dedent(code)]
    else:
        argv = [sys.executable, str(script)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
        rc = proc.returncode
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        rc = None
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # workers the child left behind
        except ProcessLookupError:
            pass
    lines = [line for line in out.splitlines() if line.startswith("{")]
    return rc, out, err, (json.loads(lines[-1]) if lines else None)


def test_closing_one_iterator_does_not_cancel_another_iterator_of_the_same_loader():
    """Closing (or garbage-collecting) an iterator with tasks in flight cancels its own tasks only:
    every other live iterator of the loader goes on to the end of its epoch (the DataLoader promises
    that several iterators, even at once, are independent), never raising the internal
    ``slipstream.core.errors.Cancelled``.

    The everyday case is ``it = iter(dl)`` after a partial epoch: the new iterator is made before the
    old one is dropped, and the old one's finalizer must not end the new epoch. Both scenarios yield
    the full remaining epoch."""
    rc, out, err, res = child(
        """
        data = Records(97)
        want = list(range(97))
        res = {}
        with ss.DataLoader(data, 8, workers=3, backend="process", mp_context="fork") as dl:
            it = iter(dl)
            next(it); next(it)
            it = iter(dl)  # the usual "start the next epoch" rebinding: the old iterator dies after this
            try:
                res["rebind"] = [int(v) for b in it for v in b["x"][:, 0]]
            except BaseException as exc:
                res["rebind"] = f"{type(exc).__module__}.{type(exc).__name__}: {exc!r}"
            a, b = iter(dl), iter(dl)
            next(a); first = [int(v) for v in next(b)["x"][:, 0]]
            a.close()
            try:
                res["two"] = first + [int(v) for y in b for v in y["x"][:, 0]]
            except BaseException as exc:
                res["two"] = f"{type(exc).__module__}.{type(exc).__name__}: {exc!r}"
        res["want"] = want
        print(json.dumps(res))
        """
    )
    assert res is not None, f"rc {rc}\n{out}\n{err}"
    assert res["rebind"] == res["want"], f"new epoch after rebinding the iterator: {res['rebind']!r}"[:400]
    assert res["two"] == res["want"], f"second iterator after closing the first: {res['two']!r}"[:400]


@pytest.mark.parametrize("case", ["worker_init-handle/fork", "lazy-file/spawn", "lazy-file/fork"])
def test_the_parent_process_does_not_read_samples_of_a_process_backed_loader(case, helpers_dir):
    """With backend="process" the parent reads no sample: sample 0, which shapes the batch buffers, is
    read in a worker, so ``worker_init`` runs in each worker before it loads anything. The two usual
    ways of writing a process-safe dataset then give exactly the records of workers=0:

    * a dataset reading through a handle that ``worker_init`` opens (read in the parent, it fails on
      the handle's ``None``);
    * a dataset that opens its file lazily on first access (opened in the parent, the file would not
      pickle for spawn/forkserver, and with fork every worker would share one file description and
      race on its offset, giving wrong or short records)."""
    rc, out, err, res = child(
        f"""
        import lifecycledata
        case = {case!r}
        kind, method = case.split("/")
        res = {{}}
        if __name__ == "__main__":
            try:
                if kind == "worker_init-handle":
                    with ss.DataLoader(lifecycledata.NeedsInit(), 4, workers=2, backend="process", mp_context=method,
                                       worker_init=lifecycledata.open_handle) as dl:
                        rows = [int(i) for b in dl for i in b["i"]]
                    res["ok"] = rows == list(range(16))
                else:
                    path = {str(helpers_dir / "records.bin")!r}
                    with open(path, "wb") as f:
                        f.write(np.arange(400 * 16, dtype=np.int64).tobytes())
                    with ss.DataLoader(lifecycledata.LazyFile(path, 400), 8, workers=4, backend="process",
                                       mp_context=method) as dl:
                        bad = sum(int((b["rec"][:, 0] != b["id"] * 16).sum()) for b in dl)
                    res["ok"] = bad == 0
                    res["bad"] = bad
            except BaseException as exc:
                res["error"] = f"{{type(exc).__name__}}: {{exc}} {{getattr(exc, '__notes__', '')}}"[:400]
            print(json.dumps(res))
        """,
        path=helpers_dir,
        timeout=90,
    )
    assert res is not None, f"rc {rc}\n{out}\n{err}"
    assert "error" not in res, res["error"]
    assert res["ok"], res


def test_an_interrupt_in_the_middle_of_a_message_does_not_poison_the_next_epoch(helpers_dir):
    """An exception that escapes while the parent is part-way through reading or writing a message on
    a worker's pipe (length-prefixed streams) leaves that pipe out of step, so the pool is not used
    again: the interrupted epoch raises KeyboardInterrupt and the next ``iter(dl)`` works (a reused
    pool would start reading in the middle of the old message: ``UnpicklingError: invalid load key``,
    or a read that never completes).

    A Ctrl-C while a large result (a user collate returning a big object) is received is the
    realistic case: ``Connection._recv`` loops over ``os.read`` and Python runs the SIGINT handler
    between two reads. The test raises KeyboardInterrupt after half of a large message has been read,
    deterministically (a real SIGINT does the same with the right timing)."""
    rc, out, err, res = child(
        """
        import lifecycledata
        from multiprocessing import connection
        original = connection.Connection._recv
        armed = [True]

        def interrupted(self, size, *args):
            if armed[0] and size > 2**20:  # SIGINT lands between two os.read calls of a large message
                armed[0] = False
                original(self, size // 2, *args)
                raise KeyboardInterrupt
            return original(self, size, *args)

        connection.Connection._recv = interrupted
        res = {}
        dl = ss.DataLoader(lifecycledata.Ints(), 4, workers=1, backend="process", mp_context="fork",
                           collate=lifecycledata.big_collate, prefetch=1)
        try:
            list(dl)
            res["first"] = "no interrupt"
        except KeyboardInterrupt:
            res["first"] = "KeyboardInterrupt"
        print(json.dumps(res), flush=True)  # what the interrupted epoch did, in case the next one hangs
        try:
            res["second"] = [i for b in dl for i in b["ids"]] == list(range(64))
        except BaseException as exc:
            res["second"] = f"{type(exc).__name__}: {exc}"[:300]
        dl.close()
        print(json.dumps(res))
        """,
        path=helpers_dir,
        timeout=30,
    )
    assert res is not None, f"rc {rc}\n{out}\n{err}"
    assert res["first"] == "KeyboardInterrupt", res
    assert rc is not None, "the epoch after the interrupted read hung (it read a length from the middle of a message)"
    assert res["second"] is True, f"the epoch after the interrupt failed: {res['second']}"


def test_keeping_many_batches_does_not_exhaust_file_descriptors():
    """Kept batches hold no file descriptors: ``list(loader)`` of 600 batches (the SlotPool lets kept
    batches leave the pool) works under a 256-fd limit, as it does with workers=0 or threads.

    A shared-memory slot mapped with ``mmap.mmap(fd, size)`` would keep a dup of its fd for as long
    as any batch of it lives: a few hundred kept batches would reach RLIMIT_NOFILE (a soft limit of
    1024 on most distributions), and the failure would be a WorkerError "exited with code 1" naming
    no cause (see the next test)."""
    rc, out, err, res = child(
        """
        import resource
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
        res = {}
        with ss.DataLoader(Records(2400, work=10), 4, workers=2, backend="process", mp_context="fork") as dl:
            try:
                kept = list(dl)
                res["kept"] = len(kept)
                res["ok"] = all(int(b["x"][0, 0]) == 4 * k for k, b in enumerate(kept))
            except BaseException as exc:
                res["error"] = f"{type(exc).__name__}: {exc}"[:300]
        print(json.dumps(res))
        """,
        timeout=120,
    )
    assert res is not None, f"rc {rc}\n{out}\n{err[-2000:]}"
    assert "error" not in res, res["error"]
    assert res["kept"] == 600 and res["ok"], res


def test_a_failed_fd_send_is_reported_as_itself_not_as_a_worker_crash():
    """An OSError sending a worker a file descriptor is reported as itself, not as a worker crash:
    ``send_handle`` fails in the parent when the parent is out of fds (``socket.fromfd`` dups the
    socket: EMFILE), as in the previous test, after the "attach" header has gone out; the worker,
    reading the next task's bytes as its fd, would die ("received 0 items of ancdata") and the user
    would see ``WorkerError: worker 0 ... exited with code 1`` with the cause hidden.

    Here ``send_handle`` raises EMFILE once (as a real fd shortage does): the consumer gets an error
    naming the cause (an OSError with errno EMFILE / "Too many open files", the pool closed), not a
    WorkerError about a worker that exited."""
    rc, out, err, res = child(
        """
        import errno
        from multiprocessing import reduction
        original = reduction.send_handle
        calls = [0]

        def out_of_fds(conn, handle, pid):
            calls[0] += 1
            if calls[0] == 1:
                raise OSError(errno.EMFILE, "Too many open files")
            return original(conn, handle, pid)

        reduction.send_handle = out_of_fds
        res = {}
        with ss.DataLoader(Records(64), 8, workers=1, backend="process", mp_context="fork") as dl:
            try:
                list(dl)
                res["error"] = None
            except BaseException as exc:
                res["error"] = type(exc).__name__
                res["message"] = str(exc)
                res["errno"] = getattr(exc, "errno", None)
        print(json.dumps(res))
        """,
        timeout=60,
    )
    assert res is not None, f"rc {rc}\n{out}\n{err[-2000:]}"
    assert res["error"] is not None, "the fd that never reached the worker went unnoticed"
    assert res["error"] != "WorkerError", f"the fd failure was reported as a worker crash: {res['message']}"
    assert res["errno"] == 24 or "Too many open files" in res["message"], res


@pytest.mark.parametrize("how", ["dies", "hangs"])
def test_a_spawned_worker_that_fails_while_booting_is_reported_even_with_a_large_dataset(how, helpers_dir):
    """With spawn/forkserver, a worker whose payload (the pickled dataset) is larger than the socket
    buffer and that fails while booting is reported as with a small dataset, the parent's sends
    watching the worker and ``timeout``:

    * a worker that dies while booting (here: exit code 7 while importing the main module; in real
      life a failing import, the OOM killer, a missing ``if __name__ == "__main__"``) is a WorkerError
      naming its pid and "exited with code 7", not a bare ``BrokenPipeError``;
    * a worker that hangs while booting is a TimeoutError (or WorkerError) within a few seconds of
      ``timeout=2``, not an ``iter(dl)`` blocked forever."""
    script = helpers_dir / "bootfail.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os, sys, time, json
            if __name__ == "__mp_main__":  # in the spawned worker, while it boots
                if {how!r} == "dies":
                    os._exit(7)
                time.sleep(3600)
            import slipstream as ss
            import lifecycledata
            if __name__ == "__main__":
                res = {{}}
                start = time.monotonic()
                try:
                    with ss.DataLoader(lifecycledata.Big(2**24), 4, workers=2, backend="process", mp_context="spawn",
                                       timeout=2) as dl:
                        list(dl)
                    res["error"] = None
                except BaseException as exc:
                    res["error"] = type(exc).__name__
                    res["message"] = str(exc)[:300]
                res["after"] = time.monotonic() - start
                print(json.dumps(res), flush=True)
            """
        )
    )
    rc, out, err, res = child("", script=script, path=helpers_dir, timeout=30)
    assert rc is not None, "iter(dl) blocked forever sending the dataset to a worker stuck at start-up (timeout=2)"
    assert res is not None, f"rc {rc}\n{out}\n{err[-2000:]}"
    if how == "dies":
        assert res["error"] == "WorkerError" and "exited with code 7" in res["message"], res
    else:
        assert res["error"] in ("TimeoutError", "WorkerError") and res["after"] < 20, res


def test_closing_a_loader_frees_its_shared_memory_even_if_another_loader_forked_workers_later():
    """``a.close()`` releases a's shared batch buffers even while a loader forked afterwards lives:
    with the fork start method a worker inherits all of the parent's open fds and mappings, the
    shared-memory slots (and pipe ends) of other loaders included, and must drop them. After
    ``a.close()`` (no batch of a's held), no worker of ``b`` (a validation loader, say) maps or holds
    any of a's segments, so none of a's 5 slots of 32 MiB stays allocated in /dev/shm."""
    rc, out, err, res = child(
        """
        def held(pid):
            names = set()
            for line in open(f"/proc/{pid}/maps"):
                if "slipstream-" in line:
                    names.add(line.split()[-2] if line.rstrip().endswith("(deleted)") else line.split()[-1])
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if "slipstream-" in target:
                    names.add(target.split()[0])
            return names

        a = ss.DataLoader(Huge(2**24), 2, workers=1, backend="process", mp_context="fork")
        for batch in a:
            pass
        del batch
        mine = held(os.getpid())  # a's segments (b does not exist yet)
        b = ss.DataLoader(Records(64), 8, workers=1, backend="process", mp_context="fork")
        next(iter(b))
        a.close()
        del a
        gc.collect()
        time.sleep(0.2)
        worker = b.worker_pids[0]
        print(json.dumps({"a_segments": len(mine), "still_held_by_b": sorted(held(worker) & mine)}))
        b.close()
        """,
        timeout=60,
    )
    assert res is not None, f"rc {rc}\n{out}\n{err[-2000:]}"
    assert res["a_segments"] > 0
    assert res["still_held_by_b"] == [], f"{len(res['still_held_by_b'])} of a's segments outlive a.close() in b's worker"


def test_an_iterator_survives_a_thousand_later_iterators_of_its_loader():
    """A live iterator is never cancelled by its loader's later iterators, however many: after 1024
    more iterators have been made and dropped (``next(iter(dl))`` to peek at a batch for logging,
    say), an older iterator still yields the rest of its epoch instead of raising the internal
    ``slipstream.core.errors.Cancelled()``."""
    rc, out, err, res = child(
        """
        with ss.DataLoader(Records(200), 8, workers=2, backend="process", mp_context="fork") as dl:
            first = iter(dl)
            next(first)
            for _ in range(1024):
                iter(dl)  # made and dropped at once (each would be a new epoch)
            try:
                res = {"rest": [int(b["x"][0, 0]) for b in first]}
            except BaseException as exc:
                res = {"error": f"{type(exc).__module__}.{type(exc).__name__}: {exc!r}"}
        print(json.dumps(res))
        """,
        timeout=90,
    )
    assert res is not None, f"rc {rc}\n{out}\n{err[-2000:]}"
    assert "error" not in res, res["error"]
    assert res["rest"] == list(range(8, 200, 8)), res
