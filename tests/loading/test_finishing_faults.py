"""loading.finishing under faults: interrupts while a finish runs, close() from another thread, handoff
errors, dying workers, stats."""

from __future__ import annotations

import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from finishdata import AddFinisher, SlowData  # noqa: E402
from helpers import run_python  # noqa: E402

import slipstream as ss  # noqa: E402


def test_close_from_another_thread_while_the_consumer_tops_up():
    """ClosingIterator's contract: close() is safe from any thread. The consumer is inside next(),
    in FinishingExecutor._top_up, blocked on the inner executor for a batch ahead; another thread
    closes the iterator. The consumer must get a batch or StopIteration, not an error of the
    executor's own (pool shut down: 'cannot schedule new futures after shutdown'; deque mutated)."""
    code = """
    import sys, threading, numpy as np, slipstream as ss
    from finishdata import SlowData
    outcomes = {}
    for trial in range(6):
        loader = ss.DataLoader(SlowData(60, slow_from=6, delay=0.4), batch_size=2, workers=2, backend="thread", prefetch=2)
        it = iter(loader)
        next(it)
        threading.Timer(0.2 + 0.05 * trial, it.close).start()
        try:
            while True:
                next(it)
        except StopIteration:
            outcome = "StopIteration"
        except BaseException as exc:
            outcome = f"{type(exc).__name__}: {exc}"
        outcomes[outcome] = outcomes.get(outcome, 0) + 1
    print(outcomes)
    """
    result = run_python(code, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "StopIteration" in result.stdout and "Error" not in result.stdout, result.stdout


def test_keyboard_interrupt_while_a_finish_runs_loses_no_batch_in_the_dropin_state():
    """Ctrl-C while the consumer waits on a running finish: the drop-in iterates with keep_going=True,
    yet the interrupt is nobody's error, so the interrupted batch is not counted as handed out, and a
    checkpoint saved in the KeyboardInterrupt handler resumes with that batch (none is lost)."""
    code = """
    import os, signal, sys, threading, time, json, numpy as np, torch
    import slipstream as ss
    from slipstream.torch import DataLoader
    from finishdata import SlowData, AddFinisher

    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C raises even if started from a background job
    release = threading.Event()

    class Gate(AddFinisher):
        def __init__(self):
            super().__init__()
            self.calls = 0
        def finish(self, batch):
            self.calls += 1
            if int(batch["x"][0]) == 6:
                release.wait(30)   # batch 3's finish runs until the consumer, waiting for it, was interrupted
            return {"x": batch["x"] + 1000}

    def make(finisher):
        return DataLoader(SlowData(16, finisher=finisher), batch_size=2, num_workers=2, backend="thread", seed=1)

    loader = make(Gate())
    got = []
    it = iter(loader)
    for _ in range(3):
        got.append(next(it)["x"].tolist())
    main = threading.main_thread().ident
    threading.Timer(0.3, lambda: signal.pthread_kill(main, signal.SIGINT)).start()
    try:
        got.append(next(it)["x"].tolist())
        raise AssertionError("the interrupt did not reach the consumer")
    except KeyboardInterrupt:
        pass
    release.set()
    state = json.loads(json.dumps(loader.state_dict()))
    print("state batch", state["batch"], "core", state["loader"]["batch"] if state["loader"] else None)
    again = make(AddFinisher())
    again.load_state_dict(state)
    rest = [b["x"].tolist() for b in again]
    seen = [v for b in got + rest for v in b]
    print("seen", seen)
    assert seen == [1000 + i for i in range(16)], seen
    """
    result = run_python(code, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]


def test_keyboard_interrupt_core_loader_keep_going():
    """The same with ss.DataLoader(..., workers=2).__iter__(keep_going=True): an interrupt while the consumer
    waits on a running finish ends the epoch (keep_going is for a batch's own errors), and the interrupted
    batch is not counted as handed out (state 3: three batches received)."""
    code = """
    import signal, sys, threading, time, numpy as np
    import slipstream as ss
    from finishdata import SlowData, AddFinisher

    signal.signal(signal.SIGINT, signal.default_int_handler)  # Ctrl-C raises even if started from a background job
    entered, release = threading.Event(), threading.Event()

    class Slow(AddFinisher):
        def finish(self, batch):
            if int(batch["x"][0]) == 6:
                entered.set()
                release.wait(30)  # batch 3's finish runs until the consumer, waiting for it, was interrupted
            return {"x": batch["x"] + 1000}

    # batch 3 is the last: the consumer's next() has nothing else to wait for than its finish
    loader = ss.DataLoader(SlowData(8, finisher=Slow()), batch_size=2, seed=1, workers=2)
    it = loader.__iter__(keep_going=True)
    got = [next(it)["x"].tolist() for _ in range(3)]
    main = threading.main_thread().ident

    def interrupt():
        entered.wait(30)  # batch 3 is in its finish; the consumer is (or is about to be) waiting for it
        time.sleep(0.3)
        signal.pthread_kill(main, signal.SIGINT)

    threading.Thread(target=interrupt, daemon=True).start()
    try:
        next(it)
        raise AssertionError("the interrupt did not reach the consumer")
    except KeyboardInterrupt:
        pass
    release.set()
    print("closed", it.closed, "state", loader.state_dict()["batch"])
    assert it.closed, "an interrupt ends the epoch"
    assert loader.state_dict()["batch"] == 3, loader.state_dict()
    """
    result = run_python(code, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]


def test_handoff_error_is_the_batchs_own_and_keep_going_goes_on():
    loader = ss.DataLoader(SlowData(12, finisher=AddFinisher(handoff_fail_at=1004)), batch_size=2, workers=2, prefetch=3)
    it = loader.__iter__(keep_going=True)
    out = []
    for _ in range(6):
        try:
            out.append(int(next(it)["x"][0]))
        except RuntimeError:
            out.append(-1)
            assert loader.state_dict()["batch"] == 3
    assert out == [1000, 1002, -1, 1006, 1008, 1010]


def test_a_dying_worker_arrives_after_the_batches_finished_ahead(tmp_path):
    """The worker reading sample 9 (batch 4) dies only once the finisher has finished batch 3 ahead
    of the consumer (a marker file: the order of events is fixed, not left to timing): the four
    finished batches are handed out, then the WorkerError, and the state counts four."""
    code = f"""
    import os, sys, time, numpy as np
    import slipstream as ss
    from slipstream.workers.pool import WorkerError
    from finishdata import AddFinisher, SlowData

    MARKER = {str(tmp_path / "batch-3-finished")!r}

    class Marking(AddFinisher):
        def finish(self, batch):
            out = super().finish(batch)
            if int(batch["x"][0]) == 6:
                open(MARKER, "w").close()
            return out

    class Dying(SlowData):
        def __getitem__(self, i):
            if i == 9:
                deadline = time.monotonic() + 60
                while not os.path.exists(MARKER) and time.monotonic() < deadline:
                    time.sleep(0.01)
                os._exit(3)
            return super().__getitem__(i)

    loader = ss.DataLoader(Dying(20, finisher=Marking()), batch_size=2, workers=2, backend="process", prefetch=3)
    it = iter(loader)
    got = []
    try:
        for b in it:
            got.append(int(b["x"][0]))
    except WorkerError as exc:
        print("WorkerError", got)
    print(loader.state_dict()["batch"])
    """
    result = run_python(code, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr[-3000:]
    assert "WorkerError" in result.stdout, result.stdout
    handed = result.stdout.split("WorkerError ")[1].splitlines()[0]
    assert eval(handed) == [1000, 1002, 1004, 1006], handed  # noqa: S307
    assert result.stdout.strip().splitlines()[-1] == "4"


def test_stats_with_a_finisher():
    loader = ss.DataLoader(SlowData(20), batch_size=2, workers=2)
    list(loader)
    stats = loader.stats()
    assert stats["batches"] == 10 and stats["samples"] == 20, stats


def test_close_from_another_thread_between_inner_next_and_submit():
    """The window of the race above, made deterministic: another thread's close() lands after the
    inner executor returned a batch and before FinishingExecutor._top_up submits it. The consumer's
    next() then raises the pool's 'cannot schedule new futures after shutdown' RuntimeError (the
    closing thread may also hit 'deque mutated during iteration' in close())."""
    from slipstream.loading.finishing import FinishingExecutor

    class Inner:
        last_tag = None
        failed_tag = None

        def __init__(self):
            self.k, self.outer = 0, None

        def __next__(self):
            self.k += 1
            self.last_tag = self.k
            if self.k == 3:  # the consumer got its batch back; close() lands now, from another thread
                closer = threading.Thread(target=self.outer.close)
                closer.start()
                closer.join()
            return {"x": np.int64(self.k)}

        def close(self):
            pass

    inner = Inner()
    fe = FinishingExecutor(inner, AddFinisher(), 2, lambda b: b)
    inner.outer = fe
    assert int(next(fe)["x"]) == 1001
    try:
        out = next(fe)
    except StopIteration:
        out = None
    assert out is None or int(out["x"]) == 1002


def test_dropin_finishes_at_most_a_few_batches_ahead_on_the_device():
    """How many finished (device) batches the drop-in holds ahead of the consumer: the core's
    finish depth is max(2, prefetch), and the drop-in passes prefetch = num_workers *
    prefetch_factor, so num_workers=8 keeps 16 finished batches on the GPU (a 256x3x224x224
    float32 batch is 154 MB: ~2.5 GB), and the first batch waits until 16 are loaded."""
    from slipstream.torch import DataLoader

    class Counting(AddFinisher):
        def __init__(self):
            super().__init__()
            self.finished = self.handed = self.most = 0
            self.lock = threading.Lock()

        def finish(self, batch):
            with self.lock:
                self.finished += 1
                self.most = max(self.most, self.finished - self.handed)
            return {"x": batch["x"] + 1000}

        def handoff(self, finished):
            with self.lock:
                self.handed += 1
            return finished

    finisher = Counting()
    loader = DataLoader(SlowData(400, finisher=finisher), batch_size=2, num_workers=8, backend="thread")
    for _ in loader:
        threading.Event().wait(0.002)
    print("most finished ahead:", finisher.most)
    assert finisher.most <= 4


def test_an_interrupt_inside_a_sample_with_inline_loading_is_not_counted_as_handed_out():
    """workers=0 loads in the consumer's thread, where Ctrl-C lands: the interrupted batch was not
    handed out, so the state must not count it (keep_going, as the drop-in always iterates)."""

    class Interrupting:
        fired = False

        def __len__(self):
            return 20

        def __getitem__(self, i):
            if i == 9 and not Interrupting.fired:
                Interrupting.fired = True
                raise KeyboardInterrupt
            return np.int64(i)

    loader = ss.DataLoader(Interrupting(), batch_size=4)
    it = loader.__iter__(keep_going=True)
    assert [next(it).tolist() for _ in range(2)] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    with pytest.raises(KeyboardInterrupt):
        next(it)
    state = loader.state_dict()
    assert state["batch"] == 2
    resumed = ss.DataLoader(Interrupting(), batch_size=4)
    resumed.load_state_dict(state)
    assert [b.tolist() for b in resumed][0] == [8, 9, 10, 11]
