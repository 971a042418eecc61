"""Concurrent sharded writes of one folder (``write.writelock``, ``write.folderwrite.writing``): two
appends are serialized and both kept; of two writes of a new folder one wins and the other fails
clearly, removing nothing of the winner's; a writer killed while it holds the lock does not stop the
next one.

Each writer is its own process. They meet at a synchronization point (stdout "READY", stdin "GO")
reached once both have checked the folder and read their first sample, before either has written
anything: the race is set up the same way every run, without sleeps.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import SRC, run_python

import slipstream as ss
from slipstream import fields as F
from slipstream.write import writelock
from slipstream.write.shardplan import probe_runs
from slipstream.write.writelock import LOCK

_WRITER = textwrap.dedent(
    """
    import sys, slipstream as ss
    from slipstream import fields as F
    folder, how, tag, n, bad, append, wait_at = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6] == "1", int(sys.argv[7])
    waited = False

    def meet(i):  # the synchronization point: once, at sample wait_at
        global waited
        if i == wait_at and not waited:
            waited = True
            print("READY", flush=True)
            assert sys.stdin.readline().strip() == "GO"

    class Data:
        def __len__(self):
            return n

        def __getitem__(self, i):
            if not 0 <= i < n:
                raise IndexError(i)
            meet(i)
            if i == bad:
                raise ValueError(f"broken sample {i}")
            return {"x": tag * 1000 + i}

    data = Data() if how == "container" else (Data()[i] for i in range(n))
    try:
        ss.write(folder, data, {"x": F.Int()}, shard_size=300, page_size=100, workers=1, progress=False, append=append)
    except Exception as exc:
        print("FAILED", type(exc).__name__, str(exc).replace(chr(10), " "), flush=True)
        sys.exit(3)
    print("DONE", flush=True)
    """
)


class _Writer:
    """A writer process (``_WRITER``) and its synchronization point."""

    def __init__(self, folder: Path, how: str, tag: int, n: int, *, bad: int = -1, append: bool = False, wait_at: int = 0):
        self.tag, self.n = tag, n
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(folder), how, str(tag), str(n), str(bad), "1" if append else "0", str(wait_at)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": SRC},
        )  # fmt: skip
        self.out = ""

    def ready(self) -> None:
        line = self.proc.stdout.readline().strip()  # (a writer that dies first gives "": the assertion says so)
        assert line == "READY", f"writer {self.tag}: {line!r} {self.proc.poll()} {self.proc.stderr.read() if self.proc.poll() is not None else ''}"

    def go(self) -> None:
        self.proc.stdin.write("GO\n")
        self.proc.stdin.flush()

    def finish(self) -> int:
        out, err = self.proc.communicate(timeout=120)  # a deadline for a hang only
        self.out = out + err
        return self.proc.returncode

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(timeout=30)


def _values(folder: Path) -> list[int]:
    ds = ss.open(folder)
    return [int(ds[i]["x"]) for i in range(len(ds))]  # every sample read, every page checked


def _late_bad(n: int) -> int:
    """A sample past the middle that the planned write's probe does not read: it fails in a shard job,
    after shards were written."""
    probed = {i for run in probe_runs(n) for i in run}
    return next(i for i in range(n * 3 // 4, n) if i not in probed)


def _base(folder: Path, n: int = 10) -> Path:
    return ss.write(folder, [{"x": i} for i in range(n)], {"x": F.Int()}, shard_size=300, page_size=100, progress=False)


@pytest.mark.parametrize("how", ["container", "iterable"])
def test_two_appends_at_once_are_serialized_and_both_kept(tmp_path, how):
    folder = _base(tmp_path / "ds")
    writers = [_Writer(folder, how, tag, 20, append=True) for tag in (1, 2)]
    try:
        for writer in writers:
            writer.ready()  # both have read the dataset's index and are about to write their shards
        for writer in writers:
            writer.go()
        codes = [writer.finish() for writer in writers]
    finally:
        for writer in writers:
            writer.kill()
    assert codes == [0, 0], [writer.out for writer in writers]
    one, two = [[tag * 1000 + i for i in range(20)] for tag in (1, 2)]
    assert _values(folder) in (list(range(10)) + one + two, list(range(10)) + two + one)  # nothing lost, each append whole
    assert sorted(os.listdir(folder)) == ["index.json"] + [f"shard-{k:05d}.arrow" for k in range(len(ss.open(folder).shards))]


@pytest.mark.parametrize("how", ["container", "iterable"])
def test_a_second_write_of_a_new_folder_fails_clearly_and_removes_none_of_the_firsts_shards(tmp_path, how):
    folder = tmp_path / "new"
    good = _Writer(folder, how, 1, 200)
    bad = _Writer(folder, how, 2, 200, bad=_late_bad(200))  # would fail after writing shards of its own
    try:
        good.ready()
        bad.ready()  # both found the folder new
        good.go()
        assert good.finish() == 0, good.out
        bad.go()
        assert bad.finish() == 3, bad.out
    finally:
        good.kill()
        bad.kill()
    assert _values(folder) == [1000 + i for i in range(200)]  # the winner's dataset, whole
    assert "FAILED FileExistsError" in bad.out and "Another write of this folder may have filled it" in bad.out, bad.out
    assert not [name for name in os.listdir(folder) if name.startswith(".")]


@pytest.mark.parametrize("how", ["container", "iterable"])
def test_of_two_writes_of_a_new_folder_at_once_the_good_one_is_kept_whichever_goes_first(tmp_path, how):
    folder = tmp_path / "new"
    good = _Writer(folder, how, 1, 200)
    bad = _Writer(folder, how, 2, 200, bad=_late_bad(200))
    try:
        good.ready()
        bad.ready()
        good.go()
        bad.go()
        codes = good.finish(), bad.finish()
    finally:
        good.kill()
        bad.kill()
    assert _values(folder) == [1000 + i for i in range(200)]
    assert codes == (0, 3), (good.out, bad.out)
    # first, the bad one failed on its sample and removed its own shards; second, it found the folder taken
    assert f"FAILED ValueError broken sample {_late_bad(200)}" in bad.out or "FAILED FileExistsError" in bad.out, bad.out


def test_a_writer_killed_while_it_holds_the_lock_does_not_stop_the_next(tmp_path):
    folder = _base(tmp_path / "ds")
    killed = _Writer(folder, "iterable", 1, 20, append=True, wait_at=5)  # sample 5 is read under the lock, shards being written
    try:
        killed.ready()
        assert (folder / LOCK).read_text().split()[0] == str(killed.proc.pid)
        killed.proc.send_signal(signal.SIGKILL)
        killed.proc.wait(timeout=30)
    finally:
        killed.kill()
    assert (folder / LOCK).exists()  # left behind, but no longer locked
    out = run_python(
        f"""
        import slipstream as ss
        from slipstream import fields as F
        ss.write({str(folder)!r}, [{{"x": 2000 + i}} for i in range(20)], {{"x": F.Int()}}, shard_size=300, append=True, progress=False)
        """,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert _values(folder) == list(range(10)) + [2000 + i for i in range(20)]
    assert not (folder / LOCK).exists()


def test_threads_of_one_process_appending_at_once_are_serialized_too(tmp_path):
    folder = _base(tmp_path / "ds")
    both = threading.Barrier(2, timeout=60)
    errors: list[BaseException] = []

    def samples(tag: int) -> Any:
        for i in range(20):
            if i == 0:
                both.wait()  # both threads have read the index, neither has the folder's lock yet
            yield {"x": tag * 1000 + i}

    def append(tag: int) -> None:
        try:
            ss.write(folder, samples(tag), None, shard_size=300, append=True, workers=1, progress=False)
        except BaseException as exc:  # noqa: BLE001 - checked below
            errors.append(exc)
            both.abort()

    threads = [threading.Thread(target=append, args=(tag,)) for tag in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == [] and not any(thread.is_alive() for thread in threads)
    values = _values(folder)
    assert len(values) == 50 and sorted(values) == list(range(10)) + [1000 + i for i in range(20)] + [2000 + i for i in range(20)]


def test_the_lock_waits_for_its_holder_then_is_taken_again_and_removed(tmp_path):
    folder = tmp_path / "f"
    folder.mkdir()
    holder = subprocess.Popen(
        [sys.executable, "-c", f"import sys\nfrom pathlib import Path\nfrom slipstream.write.writelock import locked\nwith locked(Path({str(folder)!r})):\n    print('HELD', flush=True)\n    sys.stdin.readline()\n"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": SRC},
    )  # fmt: skip
    got = threading.Event()

    def take() -> None:
        with writelock.locked(folder):
            got.set()
            assert (folder / LOCK).read_text().split()[0] == str(os.getpid())

    try:
        assert holder.stdout.readline().strip() == "HELD"
        waiter = threading.Thread(target=take)
        waiter.start()
        assert not got.wait(timeout=1)  # (a bounded look that it waits; the order is what the test checks)
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.wait(timeout=60) == 0
        waiter.join(timeout=60)
        assert got.is_set()  # the holder removed its file as it let go: the waiter locked the new one
    finally:
        holder.kill()
    assert os.listdir(folder) == []


def test_a_file_system_without_locks_is_warned_about_and_the_write_goes_ahead(tmp_path, monkeypatch):
    def refuse(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(writelock.fcntl, "lockf", refuse)
    with pytest.warns(RuntimeWarning, match="this file system refuses file locks"):
        folder = _base(tmp_path / "ds")
    assert _values(folder) == list(range(10))
    # the lock file is left as it is (it may be another writer's); every later write takes it as empty
    assert [name for name in os.listdir(folder) if name.startswith(".")] == [LOCK]


def _blocked_lock_waiters(path: Path) -> int:
    """How many lock requests on ``path``'s inode are blocked now (``/proc/locks`` lines with ``->``)."""
    inode = os.stat(path).st_ino
    count = 0
    for line in Path("/proc/locks").read_text().splitlines():
        parts = line.split()
        if "->" in parts and parts[parts.index("->") + 5].endswith(f":{inode}"):
            count += 1
    return count


def test_a_lock_file_that_is_a_symlink_is_not_followed_and_its_target_is_not_truncated(tmp_path):
    """A link (or FIFO, or folder) planted under the lock's name by whoever can write a shared
    dataset folder is refused, naming it, and never written through."""
    folder = _base(tmp_path / "ds")
    victim = tmp_path / "precious.txt"
    victim.write_text("precious\n")
    os.symlink(victim, folder / LOCK)
    with pytest.raises(FileExistsError, match="not a regular file"):
        ss.write(folder, [{"x": i} for i in range(10, 20)], {"x": F.Int()}, shard_size=300, page_size=100, progress=False, append=True)
    assert victim.read_text() == "precious\n", f"the lock's symlink target was overwritten with {victim.read_text()!r}"
    os.unlink(folder / LOCK)
    os.mkfifo(folder / LOCK)
    with pytest.raises(FileExistsError, match="not a regular file"):
        ss.write(folder, [{"x": i} for i in range(10, 20)], {"x": F.Int()}, shard_size=300, page_size=100, progress=False, append=True)
    assert _values(folder) == list(range(10))


def test_a_writer_whose_file_system_refuses_locks_does_not_remove_the_holders_lock_file(tmp_path):
    """A writer that gets ENOLCK (an NFS mount whose lock daemon is briefly unreachable) leaves the
    lock file another writer holds, so a third writer still finds it held."""
    folder = tmp_path / "f"
    folder.mkdir()
    refused = textwrap.dedent(
        f"""
        import errno, warnings
        from pathlib import Path
        from slipstream.write import writelock
        def refuse(fd, op):
            raise OSError(errno.ENOLCK, "No locks available")
        writelock.fcntl.lockf = refuse
        warnings.simplefilter("ignore")
        with writelock.locked(Path({str(folder)!r})):
            pass
        """
    )
    third = textwrap.dedent(
        f"""
        import fcntl, os
        fd = os.open({str(folder / LOCK)!r}, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            print("LOCKED")
        except OSError:
            print("BUSY")
        """
    )
    env = {**os.environ, "PYTHONPATH": SRC}
    with writelock.locked(folder):  # this process is the holder
        out = subprocess.run([sys.executable, "-c", refused], env=env, capture_output=True, text=True, timeout=120, check=False)
        assert out.returncode == 0, out.stderr
        assert (folder / LOCK).exists(), "the refused writer removed the lock file the holder holds"
        got = subprocess.run([sys.executable, "-c", third], env=env, capture_output=True, text=True, timeout=120, check=False)
        assert got.stdout.strip() == "BUSY", "a third writer took the folder's lock while its holder still held it"


_APPEND = textwrap.dedent(
    """
    import sys, slipstream as ss
    from slipstream import fields as F
    try:
        ss.write(sys.argv[1], [{"x": i} for i in range(100, 110)], {"x": F.Int()}, shard_size=300, page_size=100, progress=False, append=True)
    except Exception as exc:
        print("FAILED", type(exc).__name__, str(exc).replace(chr(10), " "), flush=True)
        sys.exit(3)
    print("DONE", flush=True)
    """
)


@pytest.mark.timeout(300)
def test_a_child_process_appending_while_its_parent_holds_the_lock_waits_its_turn(tmp_path):
    """A process the holder started (a launcher's ranks, a script's subprocess) waits for the lock as
    any writer does, and both appends land; only a worker process still starting is refused."""
    folder = _base(tmp_path / "ds")
    child = None
    try:
        with writelock.locked(folder):  # the parent's append, between its numbering and its index
            child = subprocess.Popen(
                [sys.executable, "-c", _APPEND, str(folder)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                env={**os.environ, "PYTHONPATH": SRC},
            )  # fmt: skip
            deadline = time.monotonic() + 240  # a deadline for a hang, not a speed check
            while child.poll() is None and not _blocked_lock_waiters(folder / LOCK):
                assert time.monotonic() < deadline, "the child neither waited for the lock nor finished"
                time.sleep(0.05)  # polling a condition (the child blocked in the kernel's lock queue)
            early = child.poll()
            if early is not None:
                out = child.stdout.read()
                pytest.fail(f"the child did not wait for the lock its parent held: exit {early}, {out.strip()}")
        assert child.wait(timeout=240) == 0, child.stdout.read()
    finally:
        if child is not None and child.poll() is None:
            child.kill()
    assert _values(folder) == list(range(10)) + list(range(100, 110))


def test_a_transient_enolck_while_waiting_for_a_held_lock_does_not_let_the_write_go_ahead(tmp_path):
    """A wait for a lock another writer holds (locks work here) that fails with ENOLCK (an NFS lock
    daemon briefly unreachable) is an error: the write never goes ahead beside the holder."""
    folder = tmp_path / "f"
    folder.mkdir()
    child = textwrap.dedent(
        f"""
        import errno, fcntl, warnings
        from pathlib import Path
        from slipstream.write import writelock
        real = fcntl.lockf
        def lockf(fd, op):
            if op & fcntl.LOCK_NB:
                return real(fd, op)  # (busy: the parent holds it)
            raise OSError(errno.ENOLCK, "No locks available")
        writelock.fcntl.lockf = lockf
        warnings.simplefilter("ignore")
        try:
            with writelock.locked(Path({str(folder)!r})):
                print("ENTERED while another writer holds the lock")
        except OSError as exc:
            print("REFUSED", exc)
        """
    )
    with writelock.locked(folder):
        out = run_python(child, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "ENTERED" not in out.stdout, out.stdout


def test_a_writer_that_made_the_lock_file_does_not_remove_it_when_another_writer_locked_it_first(tmp_path):
    """Writer A makes the lock file; before A's lockf, writer B opens that file and locks it; A's
    lockf then fails with ENOLCK: A leaves the file B holds."""
    folder = tmp_path / "f"
    folder.mkdir()
    path = folder / LOCK
    code = textwrap.dedent(
        f"""
        import errno, sys, warnings
        from pathlib import Path
        from slipstream.write import writelock
        def lockf(fd, op):
            print("CREATED", flush=True)
            sys.stdin.readline()  # the other writer has locked the file meanwhile
            raise OSError(errno.ENOLCK, "No locks available")
        writelock.fcntl.lockf = lockf
        warnings.simplefilter("ignore")
        with writelock.locked(Path({str(folder)!r})):
            pass
        print("DONE", flush=True)
        """
    )
    import fcntl

    a = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONPATH": SRC},
    )  # fmt: skip
    fd = None
    try:
        assert a.stdout.readline().strip() == "CREATED", a.stderr.read()
        fd = os.open(path, os.O_RDWR)  # writer B, as _open does for a file that is there
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        a.stdin.write("go\n")
        a.stdin.flush()
        assert a.wait(timeout=60) == 0, a.stderr.read()
        assert path.exists() and os.stat(path).st_ino == os.fstat(fd).st_ino, "writer A removed the lock file writer B holds"
    finally:
        if fd is not None:
            os.close(fd)
        if a.poll() is None:
            a.kill()


def test_a_missing_folder_is_a_clear_error_not_a_recursion_error(tmp_path):
    """A folder that is gone (removed between ``writing``'s mkdir and the lock) is a clear
    ``FileNotFoundError``."""
    with pytest.raises(FileNotFoundError), writelock.locked(Path(tmp_path / "gone")):
        pass
