"""A batch finisher: work a container asks for on each whole batch, in the consumer's process.

A container may declare ``batch_finisher()``, returning an object with two methods (or None):
``finish(batch)``, run in one background thread per epoch on each batch the workers loaded (a
device stage decodes and resamples images on a GPU there, ``slipstream.gpu``), and
``handoff(finished)``, run in the consumer's thread just before the batch is handed out (for a
device: its stream waits for the finish's work). ``finisher_of(data)`` finds it (through an
``obsview`` too; under other views it raises ``TypeError``).

``FinishingExecutor`` wraps a backend's executor with it, ``depth`` batches ahead: the consumer's
``next()`` tops up the finisher with the batches that follow (taken from the executor in the
consumer's thread, as without a finisher, so the executor keeps its one-consumer contract) and
hands out the oldest once finished. At most ``depth`` batches are finished or being finished ahead
of the consumer, which bounds the memory they hold (device memory, for a device stage).

Errors come out where their batch would have: an error of the executor at its position (with its
``failed_tag``), after which nothing more is taken until the consumer has received it; an error
of ``finish`` as that batch's own (``failed_tag`` its tag: with ``keep_going`` it counts as handed
out, and the epoch goes on). An interrupt (``KeyboardInterrupt``) while the consumer waits is
raised at once and is nobody's error: the batch stays next, uncounted. A finish that takes longer than
``timeout`` raises ``TimeoutError`` and closes the executor. ``last_tag`` is the tag of the batch
handed out last (the loader's progress counts only batches handed out, never the ones finished
ahead). ``close()`` is safe from any thread.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any

from ..core.views import BatchView, JoinedObs, MappedObs, ObsView
from .buffers import Unshaped

__all__ = ["FinishingExecutor", "finisher_of"]


def finisher_of(data: Any) -> Any:
    """``data.batch_finisher()`` (looked up through ``obsview``s), or None. A finisher under another
    view (``joinobs``, ``mapobs``, ``batchview``) cannot be applied to the batches that view makes:
    ``TypeError`` rather than batches left unfinished."""
    while isinstance(data, ObsView):
        data = data.data
    make = getattr(data, "batch_finisher", None)
    if callable(make):
        return make()
    if _finishes_below(data):
        raise TypeError(
            f"a device-mapped view (ss.open(p).map(..., device=...)) under {type(data).__name__} cannot finish its "
            "batches there: read it directly or through ss.obsview / ss.splitobs (map device fields last)"
        )
    return None


def _finishes_below(data: Any, depth: int = 0) -> bool:
    """Whether a view of ``core.views`` holds, at any depth, data with a batch finisher."""
    if depth > 32 or not isinstance(data, (ObsView, MappedObs, BatchView, JoinedObs)):
        return False
    below = data.parts if isinstance(data, JoinedObs) else (data.data,)
    return any(callable(getattr(part, "batch_finisher", None)) or _finishes_below(part, depth + 1) for part in below)


class _Entry:
    __slots__ = ("error", "failed_tag", "future", "tag")

    def __init__(self, future: Future | None = None, tag: Any = None, error: BaseException | None = None, failed_tag: Any = None):
        self.future, self.tag, self.error, self.failed_tag = future, tag, error, failed_tag


class FinishingExecutor:
    """``inner``'s batches through ``finisher`` (module doc). Same consumer interface as an executor:
    ``next()``, ``close()``, ``last_tag``, ``failed_tag``, ``busy_meter``. ``shape``: the loader's
    ``shape_batch``, for batches read before the buffers had a shape (called in the consumer's
    thread, in order, before the batch is finished)."""

    def __init__(self, inner: Any, finisher: Any, depth: int, shape: Callable[[Unshaped], Any], timeout: float | None = None):
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self.inner, self.finisher, self.depth, self.shape, self.timeout = inner, finisher, depth, shape, timeout
        self.closes_with_timeout = getattr(inner, "closes_with_timeout", False)
        self.busy_meter = getattr(inner, "busy_meter", None)
        self.last_tag: Any = None
        self.failed_tag: Any = None
        self._pending: deque[_Entry] = deque()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="slipstream-finish")
        self._lock = threading.Lock()  # ``_pending`` and ``_closed``: ``close()`` may come from another thread
        self._exhausted = self._blocked = self._closed = False

    def _queue(self, entry: _Entry, batch: Any = None) -> None:
        """Append ``entry`` (submitting ``batch``'s finish when given); StopIteration once closed."""
        with self._lock:
            if self._closed:
                raise StopIteration
            if batch is not None:
                entry.future = self._pool.submit(self.finisher.finish, batch)
            self._pending.append(entry)

    def _top_up(self) -> None:
        """Take batches from ``inner`` until ``depth`` are pending (blocking on ``inner``), not past
        its end or an error of it. An interrupt (``KeyboardInterrupt``) is raised at once."""
        while not (self._exhausted or self._blocked) and len(self._pending) < self.depth:
            try:
                batch = next(self.inner)
            except StopIteration:
                self._exhausted = True
            except Exception as exc:  # noqa: BLE001 - raised at its position
                failed, self.inner.failed_tag = getattr(self.inner, "failed_tag", None), None
                self._blocked = True
                self._queue(_Entry(error=exc, failed_tag=failed))
            else:
                tag = self.inner.last_tag
                if type(batch) is Unshaped:  # samples read before the buffers had a shape: shaped here, in order
                    try:
                        batch = self.shape(batch)
                    except Exception as exc:  # noqa: BLE001 - that batch's own error
                        self._blocked = True
                        self._queue(_Entry(error=exc, failed_tag=tag))
                        continue
                self._queue(_Entry(tag=tag), batch)
                del batch  # the finish thread holds it until it is finished

    def __iter__(self) -> FinishingExecutor:
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
            self.failed_tag = entry.failed_tag
            raise entry.error
        try:
            finished = entry.future.result(self.timeout)  # type: ignore[union-attr]
        except FutureTimeout:
            self.close()
            raise TimeoutError(f"slipstream: finishing the batch took longer than timeout={self.timeout} s") from None
        except Exception:
            self.failed_tag = entry.tag  # the batch's own error
            raise
        except BaseException:  # an interrupt while waiting: the batch is not handed out, and stays next
            with self._lock:
                if not self._closed:
                    self._pending.appendleft(entry)
            raise
        try:
            batch = self.finisher.handoff(finished)
        except Exception:
            self.failed_tag = entry.tag
            raise
        self.last_tag = entry.tag
        return batch

    def close(self) -> None:
        """Stop: drop the batches finished ahead, let a finish that is running end on its own, and
        close ``inner``. Idempotent, and safe from any thread."""
        with self._lock:
            self._closed = True
            for entry in self._pending:
                if entry.future is not None:
                    entry.future.cancel()
            self._pending.clear()
            self._pool.shutdown(wait=False, cancel_futures=True)
        self.inner.close()
