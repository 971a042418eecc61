"""Retrying a remote read: transient failures again with backoff and jitter, within a time budget.

``retrying(attempt, url, start, stop, budget)`` calls ``attempt()`` until it returns. A
*permanent* failure (``FileNotFoundError``, ``PermissionError``, ``NotADirectoryError``,
``IsADirectoryError``; ``ValueError``, ``TypeError``, ``ImportError``, ``NotImplementedError`` and
``AttributeError``, which a misconfigured client or a bad URL raise; or an error marked
``permanent = True``) is raised at once as itself.
Anything else is transient (timeouts, resets, refused or dropped connections, 5xx and throttling
answers, short bodies, checksum mismatches): the next attempt follows after a random wait of up to
``min(cap, base * 2**k)`` seconds ("full jitter", so many readers that failed together do not
retry together), as long as the budget allows; then ``RemoteReadError`` names the object, the
range, the number of attempts and the time spent, with the last failure chained as its cause.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from ..core.errors import RemoteReadError

__all__ = ["PERMANENT", "retrying"]

T = TypeVar("T")
PERMANENT = (
    FileNotFoundError, PermissionError, NotADirectoryError, IsADirectoryError, ValueError, TypeError, ImportError, NotImplementedError, AttributeError,
)  # fmt: skip


def retrying(
    attempt: Callable[[], T], url: str, start: int, stop: int, budget: float, base: float = 0.05, cap: float = 2.0,
    on_retry: Callable[[], None] | None = None, attempt_timeout: float | None = None, what: str | None = None,
    prepare: Callable[[], object] | None = None,
) -> T:  # fmt: skip
    """``attempt()``'s result, retried as the module doc says (``on_retry()`` before each retry).
    With ``attempt_timeout``, an attempt that has not returned after that long (or after what is
    left of the budget) is abandoned as a ``TimeoutError``: a server that accepts a request and
    never answers, or trickles its answer, cannot hold a read past the budget whatever the client's
    own timeouts. ``what`` names what was read in the error (default: the byte range).
    ``prepare()`` runs first, outside the budget and unretried (making the client)."""
    if prepare is not None:
        prepare()  # (outside the budget: making a client is not a request)
    began = time.monotonic()
    deadline = began + budget
    k = 0
    while True:
        k += 1
        try:
            if attempt_timeout is None:
                return attempt()
            return _bounded(attempt, max(0.0, min(attempt_timeout, deadline - time.monotonic())))
        except PERMANENT:
            raise
        except Exception as exc:  # noqa: BLE001 - anything else may pass: retry it within the budget
            if getattr(exc, "permanent", False):
                raise
            wait = random.uniform(0, min(cap, base * 2**k))
            if time.monotonic() + wait >= deadline:
                raise RemoteReadError(
                    url,
                    f"{what or f'bytes {start}..{stop}'} could not be read in {k} attempts over {time.monotonic() - began:.1f} s "
                    f"(the retry budget is {budget:g} s); the last failure: {type(exc).__name__}: {exc}",
                    start,
                    stop,
                    k,
                ) from exc
            if on_retry is not None:
                on_retry()
            time.sleep(wait)  # backoff before the next attempt (a pause for the server, not a synchronization)


def _bounded(attempt: Callable[[], T], seconds: float) -> T:
    """``attempt()`` run on a daemon thread, waited for at most ``seconds``; ``TimeoutError`` after
    that (the thread is abandoned: the client's own timeout ends it later, and what it returns is
    dropped)."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["value"] = attempt()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name="slipstream-request", daemon=True).start()
    if not done.wait(seconds):  # (a time limit on the request, not a synchronization)
        raise TimeoutError(f"no complete answer within {seconds:.1f} s")
    if "error" in box:
        raise box["error"]
    return box["value"]
