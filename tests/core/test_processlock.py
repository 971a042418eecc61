"""core.processlock: a lock a forked child gets afresh, never held by a parent thread that is not there."""

from __future__ import annotations

import os
import pickle
import threading

import pytest
from helpers import run_python

from slipstream.core.processlock import ProcessLock


def test_it_excludes_threads_of_one_process():
    lock, inside, most = ProcessLock(), [0], [0]

    def work():
        for _ in range(2000):
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
                inside[0] -= 1

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most[0] == 1


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_child_forked_while_a_thread_holds_it_can_take_it():
    result = run_python(
        """
        import os, threading
        from slipstream.core.processlock import ProcessLock
        lock, plain = ProcessLock(), threading.Lock()
        held, release = threading.Event(), threading.Event()
        def hold():
            with lock, plain:
                held.set(); release.wait()
        t = threading.Thread(target=hold); t.start(); held.wait()
        pid = os.fork()
        if pid == 0:
            with lock:                                   # a plain Lock here would hang forever
                pass
            os._exit(0 if not plain.acquire(timeout=0.2) else 3)   # ...as the plain one shows
        _, status = os.waitpid(pid, 0)
        release.set(); t.join()
        print("child", os.waitstatus_to_exitcode(status))
        """,
        timeout=30,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "child 0"


def test_it_pickles_as_a_fresh_lock():
    lock = ProcessLock()
    with lock:
        copy = pickle.loads(pickle.dumps(lock))
        with copy:  # not held: the copy is another lock
            pass


def test_path_locks_give_one_lock_per_real_path(tmp_path):
    from slipstream.core.processlock import PathLocks

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "a")
    locks = PathLocks()
    assert locks.of(tmp_path / "a") is locks.of(str(tmp_path / "link")) is locks.of(tmp_path / "b" / ".." / "a")
    assert locks.of(tmp_path / "b") is not locks.of(tmp_path / "a")
    assert PathLocks().of(tmp_path / "a") is not locks.of(tmp_path / "a")  # each table its own namespace
