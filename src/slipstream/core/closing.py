"""Closing: the one place that decides when background work stops.

* ``ClosingIterator``: the base of every iterator that owns background work (an epoch's workers, a
  prefetching thread). It stops that work on ``close()``, on ``with`` exit, when the iterator is
  exhausted or raises, and when it is garbage-collected (a ``break`` out of a loop that drops it);
  subclasses implement ``_next()`` and hand their closer to ``__init__``.
* ``close_at_exit``: the one exit registry. Objects registered there (thread executors, worker
  pools) are closed when the interpreter exits: thread executors first, within one short shared
  deadline (a task stuck in user code never holds up the exit), then worker pools, politely (each
  worker is asked to stop, so it flushes its output and runs its own exit handlers). The registry
  runs before ``multiprocessing``'s own exit hook, which would otherwise terminate the workers.

Contract: ``close()`` is idempotent and safe from any thread; the closer runs at most once.
"""

from __future__ import annotations

import atexit
import multiprocessing.util  # noqa: F401 - its exit hook is registered first, so it runs after ours (last in, first out)
import time
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["ClosingIterator", "close_at_exit", "forget_at_exit"]

_EXIT_DEADLINE = 0.2  # seconds for everything still running at exit, together
_at_exit: weakref.WeakSet[Any] = weakref.WeakSet()

T = TypeVar("T")


def close_at_exit(obj: T) -> T:
    """Close ``obj`` (``obj.close(timeout=...)`` when it takes one, else ``obj.close()``) at
    interpreter exit, unless it is closed or collected before. Returns ``obj``."""
    _at_exit.add(obj)
    return obj


def forget_at_exit(obj: Any) -> None:
    """``obj`` closed itself: nothing to do for it at exit."""
    _at_exit.discard(obj)


@atexit.register
def _close_all() -> None:
    """Close what is still open: the timed closes first (one deadline for all), then the others."""
    deadline = time.monotonic() + _EXIT_DEADLINE
    open_now = list(_at_exit)
    for timed in (True, False):
        for obj in open_now:
            if getattr(obj, "closes_with_timeout", False) is timed:
                try:
                    if timed:
                        obj.close(timeout=max(0.0, deadline - time.monotonic()))
                    else:
                        obj.close()
                except Exception:  # noqa: BLE001, S110 - at exit, one failure must not stop the others
                    pass


class ClosingIterator:
    """An iterator that stops its background work when done with, however it is done with.

    Subclasses call ``super().__init__(closer, *args)`` (``closer(*args)`` must not reference the
    iterator itself, or it would never be collected) and implement ``_next()``; an exception or
    the end of ``_next()`` closes the iterator, except where ``_keeps_going(error)`` says the error
    belongs to one item and the iteration may go on."""

    def __init__(self, closer: Callable[..., Any], *args: Any):
        self._closer = weakref.finalize(self, closer, *args)
        self._closer.atexit = False  # at exit the exit registry stops the work, without long waits

    def __iter__(self) -> ClosingIterator:
        return self

    def __next__(self) -> Any:
        try:
            return self._next()
        except StopIteration:
            self._ended()
            self.close()
            raise
        except BaseException as exc:
            if not self._keeps_going(exc):
                self.close()
            raise

    def _next(self) -> Any:
        raise NotImplementedError

    def _ended(self) -> None:
        """Hook: the iteration ran out (before the work is stopped)."""

    def _keeps_going(self, error: BaseException) -> bool:
        """Hook: True when ``error`` is one item's own and the next ``next()`` may go on."""
        return False

    @property
    def closed(self) -> bool:
        return not self._closer.alive

    def close(self) -> None:
        """Stop the background work now. Idempotent."""
        self._closer()

    def __enter__(self) -> ClosingIterator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
