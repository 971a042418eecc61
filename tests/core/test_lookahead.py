"""core.lookahead: a finisher run a bounded number of items ahead over any iterator, with errors at
their item, interrupts raised at once, a timeout, and close() that closes the source once."""

from __future__ import annotations

import threading
import time

import pytest

from slipstream.core.lookahead import Lookahead


class Source:
    """Items 0..n-1, logging each take; ``fail`` maps a position to the exception raised there
    (the source goes on after it, as the loader's executor with ``keep_going`` does)."""

    def __init__(self, n: int, log: list, fail: dict | None = None):
        self.n, self.log, self.fail, self.k, self.closes = n, log, fail or {}, 0, 0

    def __iter__(self):
        return self

    def __next__(self):
        k = self.k
        if k >= self.n:
            raise StopIteration
        self.k += 1
        if k in self.fail:
            self.log.append(f"fail {k}")
            raise self.fail[k]
        self.log.append(f"take {k}")
        return k

    def __len__(self):
        return self.n - self.k

    def close(self):
        self.closes += 1
        self.log.append("close")


class Logged:
    """A finisher logging its calls; ``finish`` adds 100 (raising at ``fail_finish``)."""

    def __init__(self, log: list, fail_finish: int | None = None, fail_handoff: int | None = None):
        self.log, self.fail_finish, self.fail_handoff = log, fail_finish, fail_handoff
        self.threads: set[str] = set()

    def finish(self, item):
        self.threads.add(threading.current_thread().name)
        if item == self.fail_finish:
            raise ValueError(f"finish {item}")
        self.log.append(f"finish {item}")
        return item + 100

    def handoff(self, finished):
        if finished - 100 == self.fail_handoff:
            raise KeyError(f"handoff {finished - 100}")
        self.log.append(f"handoff {finished - 100}")
        return finished


class Settled(Logged):
    def settle(self, finished):
        self.log.append(f"settle {finished - 100}")

    def discard(self, finished):
        self.log.append(f"discard {finished - 100}")


def drain(it) -> list:
    out = []
    while True:
        try:
            out.append(next(it))
        except StopIteration:
            return out
        except Exception as exc:  # noqa: BLE001
            out.append(type(exc).__name__)


@pytest.mark.parametrize("depth", [1, 2, 3])
def test_inline_items_are_taken_depth_ahead_and_handed_out_in_order(depth):
    log: list = []
    source = Source(6, log)
    it = Lookahead(source, Logged(log), depth)
    assert log == []  # nothing happens before the first next()
    for k in range(6):
        assert next(it) == 100 + k
        assert source.k == min(6, k + depth), (k, source.k)
    with pytest.raises(StopIteration):
        next(it)
    assert source.closes == 1 and it.closed


def test_taking_after_the_handoff_hands_off_first_then_takes_then_settles():
    log: list = []
    it = Lookahead(Source(3, log), Settled(log), 1, take_after_handoff=True)
    assert drain(it) == [100, 101, 102]
    assert log == [
        "take 0", "finish 0", "handoff 0", "take 1", "finish 1", "settle 0",
        "handoff 1", "take 2", "finish 2", "settle 1",
        "handoff 2", "settle 2", "close",
    ]  # fmt: skip


def test_a_source_error_comes_after_the_items_before_it_and_taking_waits_for_it():
    log: list = []
    source = Source(6, log, fail={2: ZeroDivisionError("two")})
    it = Lookahead(source, Logged(log), 4)
    assert next(it) == 100
    assert source.k == 3  # stopped at the error: nothing past it is taken before it is raised
    assert next(it) == 101
    with pytest.raises(ZeroDivisionError, match="two"):
        next(it)
    assert it.failed_tag == 2 and it.last_tag == 1
    assert drain(it) == [103, 104, 105]  # the source goes on after it
    assert it.last_tag == 5


def test_an_inline_finish_error_is_its_items_own_at_its_position():
    log: list = []
    it = Lookahead(Source(5, log), Logged(log, fail_finish=2), 3)
    assert drain(it) == [100, 101, "ValueError", 103, 104]


def test_taking_after_the_handoff_an_error_of_the_next_item_comes_after_the_one_held():
    log: list = []
    it = Lookahead(Source(4, log, fail={1: OSError("one")}), Settled(log), 1, take_after_handoff=True)
    assert next(it) == 100  # item 1's error was met taking it after item 0's handoff
    assert log[:4] == ["take 0", "finish 0", "handoff 0", "fail 1"]
    with pytest.raises(OSError, match="one"):
        next(it)
    assert drain(it) == [102, 103]


def test_a_handoff_error_is_its_items_own_and_the_rest_goes_on():
    log: list = []
    it = Lookahead(Source(4, log), Logged(log, fail_handoff=1), 2)
    assert drain(it) == [100, "KeyError", 102, 103]


def test_tags_come_from_the_tag_function_after_each_take():
    log: list = []
    source = Source(4, log, fail={1: ValueError("x")})
    it = Lookahead(source, Logged(log), 2, tag=lambda: f"t{source.k - 1}")
    next(it)
    assert it.last_tag == "t0"
    with pytest.raises(ValueError):
        next(it)
    assert it.failed_tag == "t1"


def test_an_interrupt_from_the_source_is_raised_at_once():
    log: list = []
    it = Lookahead(Source(5, log, fail={1: KeyboardInterrupt()}), Logged(log), 3)
    with pytest.raises(KeyboardInterrupt):
        next(it)
    assert next(it) == 100  # item 0 was taken before it, and is still next
    assert drain(it) == [102, 103, 104]


def test_background_finishes_run_in_the_named_thread_and_a_finish_error_does_not_stop_taking():
    log: list = []
    finisher = Logged(log, fail_finish=1)
    it = Lookahead(Source(4, log), finisher, 3, thread="test-lookahead")
    assert drain(it) == [100, "ValueError", 102, 103]
    assert all(name.startswith("test-lookahead") for name in finisher.threads)
    assert threading.current_thread().name not in finisher.threads


def test_a_background_finish_past_the_timeout_is_a_timeout_error_that_closes():
    gate = threading.Event()

    class Slow(Logged):
        def finish(self, item):
            gate.wait(10)
            return item

    log: list = []
    source = Source(4, log)
    it = Lookahead(source, Slow(log), 2, thread="test-lookahead", timeout=0.05)
    began = time.monotonic()
    with pytest.raises(TimeoutError, match="timeout=0.05"):
        next(it)
    gate.set()
    assert time.monotonic() - began < 5
    assert it.closed and source.closes == 1
    with pytest.raises(StopIteration):
        next(it)


def test_close_discards_what_was_finished_ahead_and_closes_the_source_once():
    log: list = []
    source = Source(9, log)
    it = Lookahead(source, Settled(log), 3)
    assert next(it) == 100
    it.close()
    it.close()
    assert source.closes == 1
    assert log[-3:] == ["discard 1", "discard 2", "close"]
    with pytest.raises(StopIteration):
        next(it)
    assert len(it) == 0


def test_len_counts_the_items_ahead_and_the_sources_rest():
    log: list = []
    it = Lookahead(Source(6, log, fail={4: ValueError("four")}), Logged(log), 3)
    assert len(it) == 6
    next(it)
    assert len(it) == 5  # two ahead, three in the source
    next(it)
    next(it)
    assert len(it) == 1  # item 3 ahead; the source's error waits: nothing counted past it


def test_depth_must_be_positive():
    with pytest.raises(ValueError, match="depth"):
        Lookahead(iter([]), Logged([]), 0)


class Interrupted(BaseException):
    """A ``BaseException`` that is not an ``Exception`` (as ``KeyboardInterrupt``, ``SystemExit``)."""


def test_an_interrupt_from_an_inline_finish_is_raised_at_once_and_its_item_is_lost():
    log: list = []

    class Interrupting(Logged):
        def finish(self, item):
            if item == 2:
                raise KeyboardInterrupt
            return super().finish(item)

    source = Source(5, log)
    it = Lookahead(source, Interrupting(log), 3)
    with pytest.raises(KeyboardInterrupt):
        next(it)
    assert source.k == 3  # item 2 was taken from the source
    assert it.failed_tag is None  # nobody's error
    assert drain(it) == [100, 101, 103, 104]  # items 0 and 1 still come; item 2 is not retried


@pytest.mark.parametrize("timeout", [5, None])
def test_a_background_finishs_own_timeout_error_is_its_items_own_and_the_rest_goes_on(timeout):
    log: list = []

    class OwnTimeout(Logged):
        def finish(self, item):
            if item == 1:
                raise TimeoutError("the finish's own")
            return super().finish(item)

    source = Source(4, log)
    it = Lookahead(source, OwnTimeout(log), 2, thread="test-lookahead", timeout=timeout)
    assert next(it) == 100
    with pytest.raises(TimeoutError, match="the finish's own"):
        next(it)
    assert it.failed_tag == 1 and not it.closed
    assert drain(it) == [102, 103]


def test_a_background_finishs_own_base_exception_is_raised_once_at_its_item_and_the_rest_goes_on():
    log: list = []

    class Exiting(Logged):
        def finish(self, item):
            if item == 1:
                raise Interrupted("finish 1")
            return super().finish(item)

    it = Lookahead(Source(4, log), Exiting(log), 2, thread="test-lookahead")
    assert next(it) == 100
    with pytest.raises(Interrupted, match="finish 1"):
        next(it)
    assert it.failed_tag == 1
    assert drain(it) == [102, 103]  # raised once: the items after it go on


def test_an_interrupt_while_waiting_for_a_background_finish_keeps_its_item_next():
    gate = threading.Event()
    started = threading.Event()

    class Gated(Logged):
        def finish(self, item):
            if item == 0:
                started.set()
                gate.wait(10)
            return super().finish(item)

    class InterruptingFuture:
        """Stands in for the item's future: the consumer's wait is interrupted once, then waits for real."""

        def __init__(self, future):
            self.future, self.interrupted = future, False

        def result(self, timeout=None):
            if not self.interrupted:
                self.interrupted = True
                started.wait(10)
                raise KeyboardInterrupt
            gate.set()
            return self.future.result(timeout)

        def __getattr__(self, name):
            return getattr(self.future, name)

    log: list = []
    it = Lookahead(Source(3, log), Gated(log), 2, thread="test-lookahead", timeout=10)
    it._top_up()
    it._pending[0].future = InterruptingFuture(it._pending[0].future)
    with pytest.raises(KeyboardInterrupt):
        next(it)
    assert it.failed_tag is None
    assert drain(it) == [100, 101, 102]  # the item waited for stays next


def test_an_item_finished_inline_while_another_thread_closes_is_discarded():
    log: list = []
    holder: list = []

    class ClosedMeanwhile(Settled):
        def finish(self, item):
            out = super().finish(item)
            if item == 1:  # close() from another thread, once this finish is done, before it is queued
                closer = threading.Thread(target=holder[0].close)
                closer.start()
                closer.join(10)
                assert not closer.is_alive()
            return out

    source = Source(5, log)
    it = Lookahead(source, ClosedMeanwhile(log), 2)
    holder.append(it)
    with pytest.raises(StopIteration):
        next(it)
    assert log == ["take 0", "finish 0", "take 1", "finish 1", "discard 0", "close", "discard 1"]
    assert source.closes == 1


def test_bool_is_true_unsized_or_exhausted():
    unsized = Lookahead((k for k in range(2)), Logged([]), 1)
    assert bool(unsized)
    log: list = []
    sized = Lookahead(Source(1, log), Logged(log), 1)
    assert next(sized) == 100
    with pytest.raises(StopIteration):
        next(sized)
    assert len(sized) == 0 and bool(sized)
