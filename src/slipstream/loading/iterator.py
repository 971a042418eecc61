"""An epoch's iterator: batches from the backend's executor, counted as they are handed out.

``LoaderIterator`` is what ``iter(loader)`` returns. Each ``next()`` first lets stateful data settle
its changes (``order.datastate``: before the executor starts any more batches), then takes the
executor's next batch (shaping one read before the buffers had a shape through the loader's
``shape_batch``) and records it in the epoch's ``Progress`` and ``EpochStats``.
"""

from __future__ import annotations

import threading
from typing import Any

from ..core.closing import ClosingIterator
from ..order.datastate import Settler
from ..order.progress import Progress
from .work.buffers import Unshaped
from .work.stats import EpochStats, clock

__all__ = ["LoaderIterator"]


def _shut(stop: threading.Event, executor: Any) -> None:
    stop.set()  # readers stop between samples
    executor.close()


class LoaderIterator(ClosingIterator):
    """One epoch of a loader. Stops its workers on ``close()``, exhaustion, an error, or garbage
    collection (``core.closing``). It holds its loader: a loader nobody else references lives (with
    its worker processes and buffers) as long as one of its iterators does."""

    def __init__(
        self, loader: Any, executor: Any, progress: Progress, stop: threading.Event, keep_going: bool, stats: EpochStats,
        settle: Settler | None = None,
    ):  # fmt: skip
        super().__init__(_shut, stop, executor)
        self._loader, self._executor, self._progress, self._keep_going = loader, executor, progress, keep_going
        self._stats, self._settle = stats, settle
        self._failed: Any = None  # the tag of the batch whose error ``next()`` is raising, if its own

    @property
    def epoch(self) -> int:
        return self._progress.epoch

    def _next(self) -> Any:
        executor = self._executor
        if self._settle is not None and not self.closed:  # (before the executor starts any more batches)
            self._settle(self._progress)
        began = clock()
        try:
            batch = next(executor)
        except StopIteration:
            raise
        except BaseException:
            self._failed, executor.failed_tag = executor.failed_tag, None
            raise
        if type(batch) is Unshaped:
            try:
                batch = self._loader.shape_batch(batch)
            except BaseException:
                self._failed = executor.last_tag
                raise
        self._progress.handed_out(executor.last_tag)
        self._stats.handed_out(executor.last_tag, began, clock())
        return batch

    def _ended(self) -> None:
        self._progress.ended()

    def _keeps_going(self, error: BaseException) -> bool:
        """With ``keep_going``, a batch's own error lets the epoch go on (it counts as handed out)."""
        tag, self._failed = self._failed, None
        if self._keep_going and tag is not None:
            self._progress.handed_out(tag)
            return True
        return False

    def __len__(self) -> int:
        """Batches left in this epoch (TypeError when the sampler has no ``__len__``)."""
        return self._progress.left()
