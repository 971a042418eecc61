"""The inline and thread executors (loading.backends.inline, .threads): results in job order, a job split
over workers and finished once, errors at their position (or a failed job's error and ``keep_going``),
at most ``prefetch`` jobs taken ahead, and close waking idle workers."""

import threading

import pytest

from slipstream.loading.backends.inline import InlineExecutor
from slipstream.loading.backends.threads import ThreadExecutor
from slipstream.loading.work.jobs import Job


def value_job(value, log=None, gate=None):
    box = {}

    def task():
        if gate is not None:
            assert gate.wait(timeout=10)
        if log is not None:
            log.append(value)
        box["v"] = value

    return Job([task], lambda results: box["v"])


def test_results_come_out_in_job_order_even_when_later_jobs_finish_first():
    gate = threading.Event()
    finished = []

    def jobs():
        yield value_job(0, finished, gate)  # held back until job 3 has run
        yield value_job(1, finished)
        yield value_job(2, finished)
        box = {}

        def last():
            finished.append(3)
            gate.set()
            box["v"] = 3

        yield Job([last], lambda results: box["v"])

    executor = ThreadExecutor(jobs(), workers=3, prefetch=4)
    assert list(executor) == [0, 1, 2, 3]
    assert finished.index(3) < finished.index(0)


def test_a_job_is_split_over_workers_and_finished_once():
    done = []
    lock = threading.Lock()

    def part(k):
        def run():
            with lock:
                done.append(k)

        return run

    job = Job([part(k) for k in range(10)], lambda results: sorted(done))
    executor = ThreadExecutor(iter([job]), workers=4, prefetch=1)
    assert next(executor) == list(range(10))
    with pytest.raises(StopIteration):
        next(executor)


def test_the_first_failing_task_of_a_job_is_raised_and_the_executor_closes():
    def fail(message):
        def run():
            raise KeyError(message)

        return run

    jobs = iter([value_job("ok"), Job([lambda: None, fail("second"), fail("third")], lambda results: None), value_job("never")])
    executor = ThreadExecutor(jobs, workers=1, prefetch=2)
    assert next(executor) == "ok"
    with pytest.raises(KeyError, match="second"):
        next(executor)
    with pytest.raises(StopIteration):
        next(executor)
    assert not any(t.is_alive() for t in executor.threads)


def test_an_exception_from_the_source_arrives_at_its_position():
    def jobs():
        yield value_job(1)
        raise ValueError("bad source")

    for executor in (ThreadExecutor(jobs(), workers=2, prefetch=3), InlineExecutor(jobs())):
        assert next(executor) == 1
        with pytest.raises(ValueError, match="bad source"):
            next(executor)


def test_close_wakes_and_joins_idle_workers():
    executor = ThreadExecutor(iter([value_job(1), value_job(2)]), workers=3, prefetch=1)
    assert next(executor) == 1
    executor.close()
    executor.close()  # idempotent
    assert not any(t.is_alive() for t in executor.threads)
    with pytest.raises(StopIteration):
        next(executor)


def test_at_most_prefetch_jobs_are_taken_from_the_source():
    pulled = []
    consumed = []

    def jobs():
        for k in range(20):
            pulled.append((k, len(consumed)))
            yield value_job(k)

    for value in ThreadExecutor(jobs(), workers=4, prefetch=3):
        consumed.append(value)
    assert consumed == list(range(20))
    # job k may be taken once k < consumed + prefetch; the consumer's count lags the executor's by at most one
    assert all(k < seen + 3 + 1 for k, seen in pulled)


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="workers >= 1 and prefetch >= 1"):
        ThreadExecutor(iter([]), workers=0, prefetch=1)


@pytest.mark.parametrize("make", [lambda jobs: InlineExecutor(jobs, keep_going=True), lambda jobs: ThreadExecutor(jobs, 2, 2, keep_going=True)])
def test_keep_going_raises_a_failed_jobs_error_then_goes_on_with_the_next_jobs(make):
    def job(k):
        def task():
            if k == 2:
                raise KeyError(k)

        return Job([task], lambda results: k, tag=k)

    executor = make(job(k) for k in range(5))
    got = []
    while True:
        try:
            got.append(next(executor))
        except KeyError:
            got.append(("failed", executor.failed_tag))
        except StopIteration:
            break
    assert got == [0, 1, ("failed", 2), 3, 4]
