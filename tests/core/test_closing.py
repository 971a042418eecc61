"""core/closing.py: the closing-iterator base and the one exit registry."""

import gc
import os
import subprocess
import sys
import textwrap

import pytest
from helpers import SRC, run_python

from slipstream.core.closing import ClosingIterator


class Counting(ClosingIterator):
    """Counts up to ``stop``; ``fail_at`` raises there (``ValueError`` an item's own error)."""

    def __init__(self, log, stop=3, fail_at=None, error=ValueError):
        super().__init__(log.append, "closed")
        self.k, self.stop, self.fail_at, self.error = 0, stop, fail_at, error

    def _next(self):
        if self.closed:
            raise StopIteration
        self.k += 1
        if self.k == self.fail_at:
            raise self.error(self.k)
        if self.k > self.stop:
            raise StopIteration
        return self.k

    def _keeps_going(self, error):
        return isinstance(error, ValueError)


def test_exhaustion_closes_once_and_later_next_stops():
    log = []
    it = Counting(log)
    assert list(it) == [1, 2, 3]
    assert log == ["closed"] and it.closed
    with pytest.raises(StopIteration):
        next(it)
    it.close()
    assert log == ["closed"]


def test_an_items_own_error_goes_on_and_any_other_error_closes():
    log = []
    it = Counting(log, fail_at=2)
    assert next(it) == 1
    with pytest.raises(ValueError):
        next(it)
    assert not log and next(it) == 3  # kept going
    log2 = []
    it2 = Counting(log2, fail_at=1, error=KeyError)
    with pytest.raises(KeyError):
        next(it2)
    assert log2 == ["closed"]


def test_break_then_drop_and_with_exit_close():
    log = []
    for value in Counting(log):
        break
    gc.collect()
    assert log == ["closed"]
    with Counting(log) as it:
        next(it)
    assert log == ["closed", "closed"]


def test_the_exit_registry_closes_what_is_still_open_within_its_deadline():
    code = textwrap.dedent(
        """
        import threading, time
        from slipstream.core.closing import close_at_exit

        class Slow:
            closes_with_timeout = True
            def close(self, timeout=None):
                print(f"closed within {timeout:.2f}", flush=True)

        class Plain:
            def close(self):
                print("plain closed", flush=True)

        kept = [close_at_exit(Slow()), close_at_exit(Plain())]
        gone = close_at_exit(Plain()); del gone
        """
    )
    result = run_python(code, timeout=30)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("plain closed") == 1  # the collected one is not closed at exit
    assert "closed within" in result.stdout and float(result.stdout.split("closed within ")[1].split()[0]) <= 0.2


def run_script(code, timeout=60, env=None):
    """``code`` in a fresh interpreter on this slipstream (a hang fails, never freezes)."""
    full = dict(os.environ, PYTHONPATH=SRC)
    full.pop("PYTHONUNBUFFERED", None)
    full.update(env or {})
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout, env=full, cwd="/tmp")


def test_exit_closes_workers_politely_before_multiprocessing_terminates_them():
    """A script that exits with a process loader's iterator still open: slipstream's exit hook
    closes the pool before multiprocessing's own atexit SIGTERMs the daemonic workers (a CLOSE
    message: the worker returns and flushes its stdout), so what the workers printed (and any
    child-side finalizer) is not lost."""
    r = run_script(
        """
        import numpy as np, slipstream as ss
        def init(k):
            print(f"init-{k}")  # block-buffered (stdout is a pipe): flushed when the worker exits normally
        dl = ss.DataLoader(np.zeros((100, 2)), batch_size=4, workers=2, backend="process", mp_context="fork", worker_init=init)
        it = iter(dl)
        next(it)
        """
    )
    assert r.returncode == 0, r.stderr
    assert sorted(r.stdout.split()) == ["init-0", "init-1"], (r.stdout, r.stderr)


def test_exit_lets_spawned_workers_run_their_atexit_handlers(tmp_path):
    """The same order problem seen from a "spawn" worker: a polite CLOSE lets the worker's
    interpreter exit normally, running its atexit handlers (log handlers, user clean-up registered
    in worker_init); a SIGTERM from multiprocessing's atexit skips them."""
    (tmp_path / "atexit_winit.py").write_text(
        textwrap.dedent(
            """
            import atexit, os
            def init(k):
                marker = os.path.join(os.environ["ATEXIT_MARKERS"], f"worker-{k}")
                atexit.register(lambda: open(marker, "w").write("bye"))
            """
        )
    )
    markers = tmp_path / "markers"
    markers.mkdir()
    r = run_script(
        """
        import numpy as np, slipstream as ss
        from atexit_winit import init
        if __name__ == "__main__":
            dl = ss.DataLoader(np.zeros((100, 2)), batch_size=4, workers=2, backend="process", mp_context="spawn", worker_init=init)
            it = iter(dl)
            next(it)
        """,
        env={"PYTHONPATH": f"{SRC}{os.pathsep}{tmp_path}", "ATEXIT_MARKERS": str(markers)},
    )
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in markers.iterdir()) == ["worker-0", "worker-1"], r.stderr
