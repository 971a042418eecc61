"""ProcessExecutor: a close() from another thread while the consumer waits for an answer ends the wait with
StopIteration, also when the answer arrives as the executor closes (close discards it)."""

import pytest

from slipstream.loading.backends.process_executor import ProcessExecutor
from slipstream.loading.work.jobs import Job, Task


class ClosingPool:
    """A stand-in WorkerPool whose answer to ``wait`` comes just as another thread closes the executor."""

    workers, threads, closed = 1, 1, False

    def __init__(self):
        self.executor = None
        self.sent = []

    def open_generation(self):
        return (0, 0)

    def attach(self):
        pass

    def detach(self):
        pass

    def load(self, worker):
        return 0

    def submit_job(self, worker, parts, generation, keep=None, **extras):
        self.sent.append(parts)
        return len(self.sent)

    def cancel(self, generation):
        pass

    def discard(self, tickets):
        pass

    def wait(self, tickets, timeout=None):
        ticket = min(tickets)
        self.executor.close()  # the other thread's close(), between the answer and its collection
        return ticket, True, ([7], 0.0, {})


def test_an_answer_that_arrives_as_another_thread_closes_the_executor_ends_the_wait_with_stop_iteration():
    pool = ClosingPool()
    jobs = iter([Job([Task(int, ())], lambda results: results[0], tag=0)])
    executor = pool.executor = ProcessExecutor(pool, jobs, prefetch=1)
    with pytest.raises(StopIteration):
        next(executor)
    assert pool.sent and executor._closed
