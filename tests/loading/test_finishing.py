"""loading.finishing: a container's batch finisher runs on every batch in its own thread, a bounded
number of batches ahead, with errors at their batch and a state that counts only what was handed out."""

from __future__ import annotations

import threading

import pytest
from finishdata import Data, Finisher
from helpers import run_python

import slipstream as ss


@pytest.mark.parametrize("workers", [0, 2])
def test_every_batch_is_finished_in_order_off_the_consumers_thread_and_at_most_prefetch_ahead(workers):
    finisher = Finisher()
    loader = ss.DataLoader(Data(50, finisher), batch_size=4, workers=workers, prefetch=3)
    batches = [b["x"].tolist() for b in loader]
    assert batches == [[1000 + i for i in range(k, min(k + 4, 50))] for k in range(0, 50, 4)]
    assert finisher.threads and threading.current_thread().name not in finisher.threads
    assert finisher.handoff_threads == {threading.current_thread().name}
    assert 1 <= finisher.most_ahead <= 3


def test_the_state_counts_only_batches_handed_out_not_those_finished_ahead():
    finisher = Finisher()
    loader = ss.DataLoader(Data(40, finisher), batch_size=4, workers=2, prefetch=3)
    it = iter(loader)
    got = [next(it)["x"].tolist() for _ in range(2)]
    assert finisher.finished > 2  # the finisher ran ahead
    state = loader.state_dict()
    it.close()
    resumed = ss.DataLoader(Data(40, Finisher()), batch_size=4, workers=2, prefetch=3)
    resumed.load_state_dict(state)
    rest = [b["x"].tolist() for b in resumed]
    assert got + rest == [[1000 + i for i in range(k, k + 4)] for k in range(0, 40, 4)]


def test_a_finish_error_is_its_batchs_own_and_keep_going_goes_on():
    loader = ss.DataLoader(Data(20, Finisher(fail_at={8})), batch_size=4, workers=2)
    it = iter(loader)
    assert [next(it)["x"][0] for _ in range(2)] == [1000, 1004]
    with pytest.raises(ValueError, match="finish failed at 8"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)
    it = loader.__iter__(keep_going=True)
    seen = []
    for k in range(5):
        try:
            seen.append(int(next(it)["x"][0]))
        except ValueError:
            seen.append(-1)
        if k == 2:
            assert (loader.state_dict()["epoch"], loader.state_dict()["batch"]) == (1, 3)  # the failed batch counts
    assert seen == [1000, 1004, -1, 1012, 1016]
    with pytest.raises(StopIteration):
        next(it)


def test_a_loading_error_arrives_at_its_batch_after_the_finished_ones_before_it():
    loader = ss.DataLoader(Data(24, Finisher(), bad_sample=13), batch_size=4, workers=2, prefetch=4)
    it = loader.__iter__(keep_going=True)
    out = []
    for _ in range(6):
        try:
            out.append(int(next(it)["x"][0]))
        except KeyError as exc:
            assert "sample 13" in str(exc)
            out.append(-1)
    assert out == [1000, 1004, 1008, -1, 1016, 1020]


def test_closing_while_a_finish_waits_returns_and_the_process_exits():
    code = """
    import threading, numpy as np, slipstream as ss
    from finishdata import Data, Finisher
    gate = threading.Event()
    loader = ss.DataLoader(Data(100, Finisher(gate=gate)), batch_size=2, workers=2)
    it = iter(loader)
    threading.Timer(0.2, gate.set).start()   # the first finish waits until then
    first = next(it)
    it.close()
    print("closed", int(first["x"][0]))
    """
    result = run_python(code, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "closed 1000" in result.stdout


def test_a_finisher_is_found_through_an_obsview():
    finisher = Finisher()
    view = ss.obsview(Data(12, finisher), [3, 5, 7])
    assert [b["x"].tolist() for b in ss.DataLoader(view, batch_size=2)] == [[1003, 1005], [1007]]
