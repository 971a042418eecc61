"""Work ahead of the consumer: a finisher run a bounded number of items ahead over any iterator.

``Lookahead(source, finisher, depth)`` is an iterator over ``source``'s items, each passed
through ``finisher``, which has two methods and two optional ones:

* ``finish(item)``: the work on one item, done ahead of the consumer. With ``thread=`` (a thread
  name prefix) it runs in one background thread; without, in the consumer's thread as the item
  is taken (for work that only queues asynchronous device work: a copy on a side stream,
  ``jax.device_put``);
* ``handoff(finished)``: in the consumer's thread, just before the item is handed out; what it
  returns is what the consumer gets (a device finisher: the consumer's stream waits for the
  finish's work there);
* ``settle(finished)``, optional: in the consumer's thread after the handoff (with
  ``take_after_handoff``, after the next item was taken too), before the item is handed out: e.g.
  wait until the copy out of a host batch is done, so that its memory may be reused;
* ``discard(finished)``, optional: for each item finished ahead that ``close()`` drops (a finish
  still running in the background thread is left to end on its own), and for an item whose inline
  finish ended after ``close()`` came from another thread. It must not raise.

Taking: ``next()`` takes items from ``source`` in the consumer's thread (so ``source`` keeps a
one-consumer contract) until ``depth`` are taken ahead (finishing or finished), then hands out the
oldest once it is finished: at most ``depth`` items are finished or being finished ahead of the
consumer, which bounds the memory they hold. With ``take_after_handoff`` the source is topped up
again right after the oldest item's handoff, before it is handed out (its handoff, e.g. a stream
wait, then comes before the work on the following items is queued): when the consumer receives
item ``k``, items ``k+1 .. k+depth`` have been taken; without it, ``k+1 .. k+depth-1``.

Each item taken has a tag: ``tag()`` called right after it was taken (or after the source raised
in its place); by default its position, 0, 1, ... ``last_tag`` is the tag of the item handed out
last, ``failed_tag`` the tag of the error raised last (the consumer may reset it).

Errors come out where their item would have:

* an ``Exception`` of ``source``, or of an inline ``finish``, is raised at that item's position,
  after the items taken before it; nothing more is taken until the consumer has received it
  (then taking goes on: ``source`` decides whether it has more);
* an ``Exception`` of a background ``finish``, of ``handoff`` or of ``settle`` is that item's own;
  the items after it go on. So is any ``BaseException`` a background ``finish`` raises itself
  (``SystemExit``; a ``TimeoutError`` of its own, too): raised once, at its item;
* an interrupt (a ``BaseException`` that is not an ``Exception``: ``KeyboardInterrupt``) is
  raised at once and is nobody's error: raised while the consumer waits for a background finish,
  that item stays next; raised by ``source``, nothing was taken; raised by an inline ``finish``,
  its item (taken from ``source``) is lost, and the items before and after it come as usual (a
  finish is never run twice on one item);
* a background finish that takes longer than ``timeout`` seconds, counted from when the consumer
  starts waiting for that item, raises ``TimeoutError`` and closes the iterator.

The end of ``source`` closes the iterator (after the items taken before it). ``close()`` drops the
items finished ahead and closes ``source`` (its ``close()``, when it has one); it is idempotent
and safe from any thread (a second call returns once the first is done). ``closed``: closed
here, or ``source`` closed itself. ``len()``: the items taken ahead (errors not counted) plus,
while the source may give more, ``len(source)``; ``bool()`` is always True (an iterator).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

__all__ = ["Lookahead"]


class _Entry:
    """One item taken ahead: its finish (a future: done at once for an inline finish) and its tag,
    or the error raised in its place."""

    __slots__ = ("error", "future", "tag")

    def __init__(self, tag: Any, future: Future[Any] | None = None, error: BaseException | None = None):
        self.tag, self.future, self.error = tag, future, error


def _raised_by(future: Future[Any], error: BaseException) -> bool:
    """Whether ``error`` is the one ``future``'s own call raised (not one of the wait for it)."""
    return future.done() and not future.cancelled() and future.exception() is error


class Lookahead(Iterator[Any]):
    """``source``'s items through ``finisher``, ``depth`` ahead of the consumer (module doc)."""

    def __init__(
        self,
        source: Iterator[Any],
        finisher: Any,
        depth: int,
        *,
        thread: str | None = None,
        timeout: float | None = None,
        take_after_handoff: bool = False,
        tag: Callable[[], Any] | None = None,
    ):
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self.source, self.finisher, self.depth, self.timeout = source, finisher, depth, timeout
        self.last_tag: Any = None
        self.failed_tag: Any = None
        self._take_after_handoff = take_after_handoff
        self._tag = tag
        self._taken = 0  # items taken (or raised in their place): the default tags
        self._settle = getattr(finisher, "settle", None)
        self._pending: deque[_Entry] = deque()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=thread) if thread is not None else None
        self._lock = threading.Lock()  # ``_pending`` and ``_closed``: ``close()`` may come from another thread
        self._closing = threading.RLock()  # held while ``close()`` drops and closes: a second call waits for it
        self._exhausted = self._blocked = self._closed = self._source_closed = False

    # -- taking ------------------------------------------------------------------------------
    def _next_tag(self) -> Any:
        position, self._taken = self._taken, self._taken + 1
        return position if self._tag is None else self._tag()

    def _queue(self, entry: _Entry, item: Any = None, finish: bool = False) -> None:
        """Append ``entry`` (submitting ``item``'s background finish when asked); StopIteration once closed."""
        with self._lock:
            if self._closed:
                raise StopIteration
            if finish:
                assert self._pool is not None
                entry.future = self._pool.submit(self.finisher.finish, item)
            self._pending.append(entry)

    def _top_up(self) -> None:
        """Take items from ``source`` until ``depth`` are pending (blocking on ``source``), not past
        its end or an error of it (or of an inline finish). An interrupt is raised at once."""
        while not (self._exhausted or self._blocked) and len(self._pending) < self.depth:
            try:
                item = next(self.source)
            except StopIteration:
                self._exhausted = True
                return
            except Exception as exc:  # noqa: BLE001 - raised at its position
                self._blocked = True
                self._queue(_Entry(self._next_tag(), error=exc))
                return
            tag = self._next_tag()
            if self._pool is not None:
                self._queue(_Entry(tag), item, finish=True)
                del item  # the finish thread holds it until it is finished
                continue
            try:
                finished = self.finisher.finish(item)
            except Exception as exc:  # noqa: BLE001 - the item's own error, at its position
                self._blocked = True
                self._queue(_Entry(tag, error=exc))
                return
            del item
            done: Future[Any] = Future()
            done.set_result(finished)
            try:
                self._queue(_Entry(tag, done))
            except StopIteration:  # closed from another thread during the finish: dropped as close() drops
                self._discard_late(finished)
                raise
            del finished

    def _discard_late(self, finished: Any) -> None:
        """``discard`` an item finished after ``close()`` (once that close is done: one discard at a time)."""
        discard = getattr(self.finisher, "discard", None)
        if discard is not None:
            with self._closing:
                discard(finished)

    # -- handing out -----------------------------------------------------------------------------
    def __iter__(self) -> Lookahead:
        return self

    def __next__(self) -> Any:
        if self._closed:
            raise StopIteration
        self._top_up()
        with self._lock:
            if self._closed:
                raise StopIteration
            entry = self._pending.popleft() if self._pending else None
        if entry is None:
            self.close()
            raise StopIteration
        if entry.error is not None:
            self._blocked = False
            self.failed_tag = entry.tag
            error, entry.error = entry.error, None
            try:
                raise error
            finally:
                del error  # (no reference cycle through this frame)
        finished = self._finished(entry)
        try:
            out = self.finisher.handoff(finished)
        except Exception:
            self.failed_tag = entry.tag  # the item's own error
            raise
        if self._take_after_handoff:
            try:
                self._top_up()
            except StopIteration:  # closed meanwhile, from another thread: this item is still handed out
                pass
        if self._settle is not None:
            try:
                self._settle(finished)
            except Exception:
                self.failed_tag = entry.tag
                raise
        self.last_tag = entry.tag
        return out

    def _finished(self, entry: _Entry) -> Any:
        """``entry``'s finished item, waited for (module doc: timeout, its own error, an interrupt)."""
        future = entry.future
        assert future is not None
        try:
            return future.result(self.timeout)
        except BaseException as exc:
            if _raised_by(future, exc) or (isinstance(exc, Exception) and not isinstance(exc, FutureTimeout)):
                self.failed_tag = entry.tag  # the item's own error (a TimeoutError or SystemExit too)
                raise
            if isinstance(exc, FutureTimeout):  # the wait for it timed out
                self.close()
                raise TimeoutError(f"slipstream: finishing the batch took longer than timeout={self.timeout} s") from None
            with self._lock:  # an interrupt while waiting: the item is not handed out, and stays next
                if not self._closed:
                    self._pending.appendleft(entry)
            raise

    def __bool__(self) -> bool:
        """True: an iterator is truthy, whatever ``len()`` says (or whether it has one)."""
        return True

    def __len__(self) -> int:
        ahead = sum(entry.error is None for entry in self._pending)
        if self._exhausted or self._blocked or self._closed:
            return ahead
        return ahead + len(self.source)  # type: ignore[arg-type]

    # -- closing -----------------------------------------------------------------------------
    @property
    def closed(self) -> bool:
        """Closed here, or ``source`` closed itself (an error that ended it)."""
        return self._closed or bool(getattr(self.source, "closed", False))

    def close(self) -> None:
        """Stop: drop the items finished ahead (``discard``), let a finish that is running end on
        its own, and close ``source``. Idempotent, and safe from any thread."""
        with self._closing:
            with self._lock:
                self._closed = True
                dropped = list(self._pending)
                self._pending.clear()
                for entry in dropped:
                    if entry.future is not None:
                        entry.future.cancel()
                if self._pool is not None:
                    self._pool.shutdown(wait=False, cancel_futures=True)
            if self._source_closed:
                return
            self._source_closed = True
            try:
                discard = getattr(self.finisher, "discard", None)
                if discard is not None:
                    for entry in dropped:
                        future = entry.future
                        if future is not None and future.done() and not future.cancelled() and future.exception() is None:
                            discard(future.result())
                del dropped
            finally:
                close = getattr(self.source, "close", None)
                if callable(close):
                    close()
