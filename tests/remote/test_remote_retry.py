"""remote.retry: ``retrying`` retries transient failures with full-jitter backoff within a time
budget, raises permanent ones at once as themselves, and names the range when the budget runs out.

The module's ``time`` and ``random`` are replaced by a fake clock (``sleep`` advances it and records
the wait) and a recorder of ``uniform``'s bounds, so these tests neither sleep nor depend on chance;
one test runs on the real clock with a small budget.
"""

from __future__ import annotations

import random
import threading
import time
import types
from typing import Any

import pytest

from slipstream.core.errors import ChecksumError, MissingShardError, RemoteReadError
from slipstream.remote import retry as retry_module
from slipstream.remote.retry import PERMANENT, retrying

URL = "s3://bucket/data/shard-00000.arrow"


class Clock:
    """A fake ``time`` for the retry module: ``monotonic`` reads it, ``sleep`` records the wait and advances it.

    Only for the thread that made it: the module is patched for the whole process, and a reader an
    earlier test left retrying on a daemon thread must neither record its waits here nor spin on a
    clock that never moves, so other threads get the real clock."""

    def __init__(self, now: float = 1000.0) -> None:
        self.now = now
        self.waits: list[float] = []
        self.owner = threading.get_ident()

    def monotonic(self) -> float:
        if threading.get_ident() != self.owner:
            return time.monotonic()
        return self.now

    def sleep(self, seconds: float) -> None:
        if threading.get_ident() != self.owner:
            time.sleep(seconds)
            return
        assert seconds >= 0
        self.waits.append(seconds)
        self.now += seconds


class Jitter:
    """A fake ``random``: records each ``uniform(a, b)`` and answers ``a + fraction * (b - a)``."""

    def __init__(self, fraction: float = 1.0) -> None:
        self.fraction = fraction
        self.bounds: list[tuple[float, float]] = []
        self.owner = threading.get_ident()

    def uniform(self, a: float, b: float) -> float:
        if threading.get_ident() != self.owner:  # (another test's thread: as Clock)
            return random.uniform(a, b)
        self.bounds.append((a, b))
        return a + self.fraction * (b - a)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(retry_module, "time", types.SimpleNamespace(monotonic=fake.monotonic, sleep=fake.sleep))
    return fake


@pytest.fixture
def jitter(monkeypatch: pytest.MonkeyPatch) -> Jitter:
    fake = Jitter()
    monkeypatch.setattr(retry_module, "random", fake)
    return fake


def failing(errors: list[BaseException], result: Any = "ok", clock: Clock | None = None, takes: float = 0.0) -> Any:
    """An attempt that raises ``errors`` in turn (each call taking ``takes`` seconds on ``clock``), then returns ``result``."""
    calls: list[int] = []

    def attempt() -> Any:
        calls.append(1)
        if clock is not None:
            clock.now += takes
        if len(calls) <= len(errors):
            raise errors[len(calls) - 1]
        return result

    attempt.calls = calls  # type: ignore[attr-defined]
    return attempt


def test_returns_the_result_after_transient_failures(clock: Clock, jitter: Jitter) -> None:
    errors = [
        ConnectionResetError("reset"),
        TimeoutError("timed out"),
        OSError("503 SlowDown"),
        RuntimeError("botocore: throttled"),
    ]
    attempt = failing(errors, result=b"page")
    assert retrying(attempt, URL, 0, 100, budget=60.0, base=0.05, cap=2.0) == b"page"
    assert len(attempt.calls) == 5
    # one wait before each retry, the full-jitter bound doubling from base * 2
    assert jitter.bounds == [(0, 0.1), (0, 0.2), (0, 0.4), (0, 0.8)]
    assert clock.waits == pytest.approx([0.1, 0.2, 0.4, 0.8])


def test_no_wait_when_the_first_attempt_succeeds(clock: Clock, jitter: Jitter) -> None:
    assert retrying(lambda: 42, URL, 0, 10, budget=0.0) == 42
    assert clock.waits == [] and jitter.bounds == []


@pytest.mark.parametrize(
    "error",
    [
        FileNotFoundError("no such key"),
        PermissionError("access denied"),
        NotADirectoryError("not a folder"),
        IsADirectoryError("a folder"),
        ValueError("bad url"),
        TypeError("bad argument"),
        ImportError("no s3fs"),
        NotImplementedError("no ranged reads"),
        AttributeError("misconfigured client"),
        MissingShardError(URL, "gone"),  # subclasses of the permanent kinds are permanent too
    ],
    ids=lambda e: type(e).__name__,
)
def test_permanent_errors_are_raised_at_once_as_themselves(clock: Clock, jitter: Jitter, error: BaseException) -> None:
    assert isinstance(error, PERMANENT)
    attempt = failing([error, error])
    with pytest.raises(type(error)) as caught:
        retrying(attempt, URL, 0, 100, budget=60.0)
    assert caught.value is error
    assert len(attempt.calls) == 1 and clock.waits == [] and jitter.bounds == []


def _marked_permanent() -> Exception:
    error = ConnectionError("the object changed")
    error.permanent = True  # type: ignore[attr-defined]
    return error


@pytest.mark.parametrize("make", [lambda: ChecksumError(URL, "the object changed", -1, range(0)), _marked_permanent], ids=["checksum", "marked"])
def test_a_checksum_error_or_one_marked_permanent_is_raised_at_once(clock: Clock, jitter: Jitter, make: Any) -> None:
    error = make()
    attempt = failing([error])
    with pytest.raises(type(error)) as caught:
        retrying(attempt, URL, 0, 100, budget=60.0)
    assert caught.value is error and len(attempt.calls) == 1 and clock.waits == []


def test_an_error_marked_not_permanent_is_retried(clock: Clock, jitter: Jitter) -> None:
    unmarked = ConnectionError("flaky")
    unmarked.permanent = False  # type: ignore[attr-defined]
    attempt = failing([unmarked])
    assert retrying(attempt, URL, 0, 100, budget=60.0) == "ok"
    assert len(attempt.calls) == 2 and len(clock.waits) == 1


def test_base_exceptions_are_not_retried(clock: Clock, jitter: Jitter) -> None:
    attempt = failing([KeyboardInterrupt()])
    with pytest.raises(KeyboardInterrupt):
        retrying(attempt, URL, 0, 100, budget=60.0)
    assert len(attempt.calls) == 1 and clock.waits == []


def test_an_exhausted_budget_raises_remote_read_error_naming_the_range(clock: Clock, jitter: Jitter) -> None:
    errors = [ConnectionResetError(f"reset {k}") for k in range(100)]
    attempt = failing(errors, clock=clock, takes=0.1)  # every attempt takes 0.1 s
    began = clock.now
    with pytest.raises(RemoteReadError) as caught:
        retrying(attempt, URL, 4096, 8192, budget=1.0, base=0.05, cap=0.3)
    error = caught.value
    calls = len(attempt.calls)
    assert (error.url, error.start, error.stop, error.attempts) == (URL, 4096, 8192, calls)
    assert error.__cause__ is errors[calls - 1]  # the last failure, chained
    assert isinstance(error, OSError)
    text = str(error)
    assert URL in text and "bytes 4096..8192" in text and f"in {calls} attempts" in text and "budget is 1 s" in text
    assert f"ConnectionResetError: reset {calls - 1}" in text
    # waits of (at most) 0.1, 0.2, 0.3, 0.3, ... between attempts of 0.1 s; no wait would have crossed the deadline
    assert clock.waits == pytest.approx([0.1, 0.2, 0.3][: len(clock.waits)] + [0.3] * max(0, len(clock.waits) - 3))
    assert len(clock.waits) == calls - 1
    elapsed = clock.now - began
    assert elapsed <= 1.0 + 0.1  # the budget plus one attempt's own time
    assert elapsed + 0.3 >= 1.0  # it stopped because the next wait would not fit, not early
    assert calls == 4  # 0.1 + 0.1 + 0.1 + 0.2 + 0.1 + 0.3 + 0.1 = 1.0 s; a 0.3 s wait would end at 1.3 s


def test_no_sleep_ever_crosses_the_deadline(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(retry_module, "random", random.Random(7))  # real jitter, reproducible
    for budget in (0.0, 0.05, 0.5, 3.0, 10.0):
        clock.waits.clear()
        began = clock.now
        attempt = failing([TimeoutError("slow")] * 1000, clock=clock, takes=0.01)
        with pytest.raises(RemoteReadError) as caught:
            retrying(attempt, URL, 0, 10, budget=budget, base=0.05, cap=1.0)
        assert caught.value.attempts == len(attempt.calls) == len(clock.waits) + 1
        elapsed = clock.now - began
        assert elapsed <= budget + 0.01 + 1e-9, budget
        assert not clock.waits or elapsed - 0.01 < budget  # the last wait ended before the deadline


def test_a_zero_budget_allows_one_attempt(clock: Clock, jitter: Jitter) -> None:
    attempt = failing([ConnectionError("refused")])
    with pytest.raises(RemoteReadError) as caught:
        retrying(attempt, URL, 0, 0, budget=0.0, what="its size")
    assert caught.value.attempts == 1 and len(attempt.calls) == 1 and clock.waits == []
    assert "its size could not be read in 1 attempts" in str(caught.value)  # what= names what was read


def test_waits_are_full_jitter_and_capped(clock: Clock, monkeypatch: pytest.MonkeyPatch) -> None:
    bounds: list[tuple[float, float]] = []
    rng = random.Random(2024)

    def uniform(a: float, b: float) -> float:
        bounds.append((a, b))
        return rng.uniform(a, b)

    monkeypatch.setattr(retry_module, "random", types.SimpleNamespace(uniform=uniform))
    attempt = failing([OSError("503")] * 40)
    assert retrying(attempt, URL, 0, 10, budget=1e9, base=0.05, cap=2.0) == "ok"
    caps = [min(2.0, 0.05 * 2**k) for k in range(1, 41)]
    assert bounds == [(0, c) for c in caps]
    assert all(0 <= w <= c for w, c in zip(clock.waits, caps, strict=True))
    assert max(clock.waits) <= 2.0
    # jittered: from 0 up to the bound, not a fixed fraction of it
    late = [w / 2.0 for w in clock.waits[10:]]  # the capped ones
    assert len(set(clock.waits)) == len(clock.waits)
    assert min(late) < 0.25 and max(late) > 0.75


def test_real_clock_elapsed_time_stays_within_the_budget() -> None:
    calls = []

    def attempt() -> None:
        calls.append(time.monotonic())
        raise ConnectionResetError("reset")

    began = time.monotonic()
    with pytest.raises(RemoteReadError) as caught:
        retrying(attempt, URL, 0, 10, budget=0.3, base=0.01, cap=0.05)
    elapsed = time.monotonic() - began
    assert elapsed < 0.3 + 0.1  # the budget plus a margin for the scheduler
    assert caught.value.attempts == len(calls) > 1
    assert isinstance(caught.value.__cause__, ConnectionResetError)


def test_an_attempt_that_never_answers_is_abandoned_within_the_budget() -> None:
    """A server that accepts and never answers (or trickles): each attempt is bounded by
    ``attempt_timeout`` and by what is left of the budget, so the read fails within the budget."""
    import threading
    import time as real_time

    never = threading.Event()
    calls = []

    def hangs() -> bytes:
        calls.append(1)
        never.wait(30)
        return b""

    began = real_time.monotonic()
    with pytest.raises(RemoteReadError, match="TimeoutError") as caught:
        retrying(hangs, URL, 0, 10, budget=0.6, attempt_timeout=0.25)
    elapsed = real_time.monotonic() - began
    never.set()
    assert 0.5 <= elapsed < 1.5 and caught.value.attempts == len(calls) >= 2


def test_prepare_runs_once_outside_the_budget() -> None:
    """Making the client (imports, a session) is not a request: it may take longer than the budget."""
    import time as real_time

    made = []
    result = retrying(lambda: "ok", URL, 0, 10, budget=0.05, attempt_timeout=0.05, prepare=lambda: (made.append(1), real_time.sleep(0.2)))
    assert result == "ok" and made == [1]


# -- classified by cause: permanent failures are attempted once -----------------------------------


class ParamValidationError(Exception):
    """Named as botocore's client-side error (an invalid bucket name): matched by name."""


class _Answer(Exception):
    """An error carrying an HTTP answer, shaped as botocore's ``ClientError``."""

    def __init__(self, status: int, code: str = "") -> None:
        super().__init__(f"HTTP {status} {code}")
        self.response = {"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}


def _translated(status: int, code: str = "") -> OSError:
    """An ``OSError`` chained to its answer, as s3fs translates a ``ClientError``."""
    error = OSError(5, f"translated {status}")
    error.__cause__ = _Answer(status, code)
    return error


@pytest.mark.parametrize(
    "error",
    [ParamValidationError("Invalid bucket name"), _Answer(400, "InvalidArgument"), _translated(416, "InvalidRange"), _translated(403), _Answer(501)],
    ids=["client-side", "400", "416-translated", "403-translated", "501"],
)
def test_a_permanent_failure_of_another_kind_is_a_remote_read_error_after_one_attempt(clock: Clock, jitter: Jitter, error: BaseException) -> None:
    attempt = failing([error] * 5)
    with pytest.raises(RemoteReadError, match="a permanent failure, not retried") as caught:
        retrying(attempt, URL, 0, 100, budget=60.0)
    assert len(attempt.calls) == 1 and caught.value.attempts == 1 and clock.waits == []
    assert caught.value.__cause__ is error and caught.value.permanent


@pytest.mark.parametrize(
    "error",
    [_Answer(503, "SlowDown"), _Answer(500), _Answer(429), _Answer(408), _Answer(400, "RequestTimeout"), _translated(503, "SlowDown"), OSError("cut")],
    ids=["503", "500", "429", "408", "400-RequestTimeout", "503-translated", "plain"],
)
def test_transient_answers_are_still_retried(clock: Clock, jitter: Jitter, error: BaseException) -> None:
    attempt = failing([error, error])
    assert retrying(attempt, URL, 0, 100, budget=60.0) == "ok"
    assert len(attempt.calls) == 3 and len(clock.waits) == 2


def test_a_read_that_gave_up_within_a_larger_one_is_not_retried_again(clock: Clock, jitter: Jitter) -> None:
    def inner() -> None:
        retrying(failing([ConnectionResetError("reset")] * 100, clock=clock, takes=0.1), URL, 0, 10, budget=1.0)

    calls: list[int] = []

    def nested() -> None:
        calls.append(1)
        inner()

    with pytest.raises(RemoteReadError, match="could not be read in"):
        retrying(nested, URL, 0, 10, budget=60.0)
    assert len(calls) == 1  # the inner read's budget was spent: the outer one does not spend its own again


def test_credentials_never_reach_the_error_its_cause_or_a_permanent_error() -> None:
    import traceback

    secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYzz"
    url = f"https://user:{secret}@example.invalid/data/shard-00000.arrow"

    class Custom(Exception):
        def __str__(self) -> str:  # text that does not come from args: replaced by a stand-in
            return f"GET {url} failed"

    for error, kind in [(ConnectionError(f"cannot reach {url}"), RemoteReadError), (Custom(), RemoteReadError), (PermissionError(13, "denied", url), PermissionError)]:
        with pytest.raises(kind) as caught:
            retrying(failing([error] * 1000), url, 0, 10, budget=0.2, base=0.01, cap=0.02)
        shown = "".join(traceback.format_exception(caught.value)) + repr(caught.value) + repr(caught.value.__cause__)
        assert secret not in shown and "user:" not in shown, shown
        assert "https://***@example.invalid/data/shard-00000.arrow" in shown
