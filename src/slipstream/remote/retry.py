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
import time
from collections.abc import Callable
from typing import TypeVar

from ..core.errors import RemoteReadError

__all__ = ["PERMANENT", "retrying"]

T = TypeVar("T")
PERMANENT = (
    FileNotFoundError, PermissionError, NotADirectoryError, IsADirectoryError, ValueError, TypeError, ImportError, NotImplementedError, AttributeError,
)  # fmt: skip


def retrying(
    attempt: Callable[[], T], url: str, start: int, stop: int, budget: float, base: float = 0.05, cap: float = 2.0, on_retry: Callable[[], None] | None = None,
) -> T:  # fmt: skip
    """``attempt()``'s result, retried as the module doc says (``on_retry()`` before each retry)."""
    began = time.monotonic()
    deadline = began + budget
    k = 0
    while True:
        k += 1
        try:
            return attempt()
        except PERMANENT:
            raise
        except Exception as exc:  # noqa: BLE001 - anything else may pass: retry it within the budget
            if getattr(exc, "permanent", False):
                raise
            wait = random.uniform(0, min(cap, base * 2**k))
            if time.monotonic() + wait >= deadline:
                raise RemoteReadError(
                    url,
                    f"{f'bytes {start}..{stop}' if stop else 'its size'} could not be read in {k} attempts over {time.monotonic() - began:.1f} s "
                    f"(the retry budget is {budget:g} s); the last failure: {type(exc).__name__}: {exc}",
                    start,
                    stop,
                    k,
                ) from exc
            if on_retry is not None:
                on_retry()
            time.sleep(wait)  # backoff before the next attempt (a pause for the server, not a synchronization)
