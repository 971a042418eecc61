"""A batch finisher: work a container asks for on each whole batch, in the consumer's process.

A container may declare ``batch_finisher()``, returning an object with two methods (or None):
``finish(batch)``, run in one background thread per epoch on each batch the workers loaded (a
device stage decodes and resamples images on a GPU there, ``slipstream.gpu``), and
``handoff(finished)``, run in the consumer's thread just before the batch is handed out (for a
device: its stream waits for the finish's work). ``finisher_of(data)`` finds it (through an
``obsview`` too).

``FinishingExecutor`` wraps a backend's executor with it, ``depth`` batches ahead: the consumer's
``next()`` tops up the finisher with the batches that follow (taken from the executor in the
consumer's thread, as without a finisher, so the executor keeps its one-consumer contract) and
hands out the oldest once finished. At most ``depth`` batches are finished or being finished ahead
of the consumer, which bounds the memory they hold (device memory, for a device stage).

Errors come out where their batch would have: an error of the executor at its position (with its
``failed_tag``), after which nothing more is taken until the consumer has received it; an error
of ``finish`` as that batch's own (``failed_tag`` its tag: with ``keep_going`` it counts as handed
out, and the epoch goes on). ``last_tag`` is the tag of the batch handed out last (the loader's
progress counts only batches handed out, never the ones finished ahead).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from ..core.views import ObsView
from .buffers import Unshaped

__all__ = ["FinishingExecutor", "finisher_of"]


def finisher_of(data: Any) -> Any:
    """``data.batch_finisher()`` (looked up through an ``obsview``), or None."""
    if isinstance(data, ObsView):
        data = data.data
    make = getattr(data, "batch_finisher", None)
    return make() if callable(make) else None


class _Entry:
    __slots__ = ("error", "failed_tag", "future", "tag")

    def __init__(self, future: Future | None = None, tag: Any = None, error: BaseException | None = None, failed_tag: Any = None):
        self.future, self.tag, self.error, self.failed_tag = future, tag, error, failed_tag


class FinishingExecutor:
    """``inner``'s batches through ``finisher`` (module doc). Same consumer interface as an executor:
    ``next()``, ``close()``, ``last_tag``, ``failed_tag``, ``busy_meter``. ``shape``: the loader's
    ``shape_batch``, for batches read before the buffers had a shape (called in the consumer's
    thread, in order, before the batch is finished)."""

    def __init__(self, inner: Any, finisher: Any, depth: int, shape: Callable[[Unshaped], Any]):
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self.inner, self.finisher, self.depth, self.shape = inner, finisher, depth, shape
        self.closes_with_timeout = getattr(inner, "closes_with_timeout", False)
        self.busy_meter = getattr(inner, "busy_meter", None)
        self.last_tag: Any = None
        self.failed_tag: Any = None
        self._pending: deque[_Entry] = deque()
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="slipstream-finish")
        self._exhausted = self._blocked = self._closed = False

    def _top_up(self) -> None:
        """Take batches from ``inner`` until ``depth`` are pending (blocking on ``inner``), not past
        its end or an error of it."""
        while not (self._exhausted or self._blocked) and len(self._pending) < self.depth:
            try:
                batch = next(self.inner)
            except StopIteration:
                self._exhausted = True
            except BaseException as exc:  # noqa: BLE001 - raised at its position
                failed, self.inner.failed_tag = getattr(self.inner, "failed_tag", None), None
                self._pending.append(_Entry(error=exc, failed_tag=failed))
                self._blocked = True
            else:
                tag = self.inner.last_tag
                if type(batch) is Unshaped:  # samples read before the buffers had a shape: shaped here, in order
                    try:
                        batch = self.shape(batch)
                    except BaseException as exc:  # noqa: BLE001 - that batch's own error
                        self._pending.append(_Entry(error=exc, failed_tag=tag))
                        self._blocked = True
                        continue
                self._pending.append(_Entry(self._pool.submit(self.finisher.finish, batch), tag))
                del batch  # the finish thread holds it until it is finished

    def __iter__(self) -> FinishingExecutor:
        return self

    def __next__(self) -> Any:
        if self._closed:
            raise StopIteration
        self._top_up()
        if not self._pending:
            self.close()
            raise StopIteration
        entry = self._pending.popleft()
        if entry.error is not None:
            self._blocked = False
            self.failed_tag = entry.failed_tag
            raise entry.error
        try:
            finished = entry.future.result()  # type: ignore[union-attr]
            batch = self.finisher.handoff(finished)
        except BaseException:
            self.failed_tag = entry.tag  # the batch's own error
            raise
        self.last_tag = entry.tag
        return batch

    def close(self) -> None:
        """Stop: drop the batches finished ahead, let a finish that is running end on its own, and
        close ``inner``. Idempotent."""
        self._closed = True
        for entry in self._pending:
            if entry.future is not None:
                entry.future.cancel()
        self._pending.clear()
        self._pool.shutdown(wait=False, cancel_futures=True)
        self.inner.close()
