"""core/closing.py: the closing-iterator base and the one exit registry."""

import gc
import textwrap

import pytest
from helpers import run_python

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
