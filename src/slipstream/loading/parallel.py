"""``loadparallel``: an ordered, bounded, cancellable parallel map over any iterable."""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from .executor import InlineExecutor, Job, ThreadExecutor
from .loader import _check_int
from .readers import add_note

__all__ = ["loadparallel"]


def _identity(item: Any) -> Any:
    return item


class _Box:
    __slots__ = ("value",)


def _jobs(iterable: Iterable[Any], fn: Callable[[Any], Any]) -> Iterator[Job]:
    iterator = iter(iterable)
    position = 0
    while True:
        try:
            item = next(iterator)
        except StopIteration:
            return
        except BaseException as exc:
            add_note(exc, f"slipstream.loadparallel: raised by the iterable when asked for item {position}")
            raise
        box = _Box()

        def task(item: Any = item, box: _Box = box, position: int = position) -> None:
            try:
                box.value = fn(item)
            except BaseException as exc:
                add_note(exc, f"slipstream.loadparallel: raised by item {position} of the iterable")
                raise

        yield Job([task], lambda box=box: box.value)
        position += 1


class LoadParallel:
    """``fn`` over ``iterable`` in worker threads; results in the input order.

    Each ``iter()`` starts a fresh pass over ``iterable`` (an iterator can be passed only once).
    ``len()`` is ``len(iterable)`` when the iterable has one. At most ``prefetch`` items are
    started ahead of the consumer. The iterable itself is advanced by one thread at a time.
    An exception from ``fn`` or from the iterable reaches the consumer at its position, with its
    original type and traceback; then the pass stops. Breaking out, ``close()``, or dropping the
    iterator stops the workers.
    """

    def __init__(self, iterable: Iterable[Any], fn: Callable[[Any], Any] | None, workers: int, prefetch: int):
        self.iterable, self.fn, self.workers, self.prefetch = iterable, fn or _identity, workers, prefetch

    def __len__(self) -> int:
        return len(self.iterable)  # type: ignore[arg-type]

    def __iter__(self) -> Iterator[Any]:
        jobs = _jobs(self.iterable, self.fn)
        if self.workers == 0:
            return _Pass(InlineExecutor(jobs))
        return _Pass(ThreadExecutor(jobs, self.workers, self.prefetch, name="slipstream-loadparallel"))


class _Pass:
    def __init__(self, executor: Any):
        self._executor = executor
        self._close = weakref.finalize(self, executor.close)
        self._close.atexit = False  # the executors' own exit hook stops them without long waits

    def __iter__(self) -> _Pass:
        return self

    def __next__(self) -> Any:
        try:
            return next(self._executor)
        except BaseException:
            self._close()
            raise

    def close(self) -> None:
        self._close()


def loadparallel(iterable: Iterable[Any], fn: Callable[[Any], Any] | None = None, *, workers: int = 4, prefetch: int | None = None) -> LoadParallel:
    """An iterable of ``fn(item)`` for each item of ``iterable``, computed ahead by ``workers`` threads.

    Order is kept. ``prefetch`` bounds the items in flight (default ``2 * workers``). ``workers=0``
    maps lazily in the consumer's thread. ``fn`` must be thread-safe; threads pay off when it
    releases the GIL (I/O, NumPy, decoders).
    """
    if not isinstance(iterable, Iterable):
        raise TypeError(f"loadparallel needs an iterable, got {type(iterable).__name__}")
    if fn is not None and not callable(fn):
        raise TypeError(f"fn must be callable or None, got {type(fn).__name__}")
    workers = _check_int("workers", workers, 0)
    prefetch = 2 * max(workers, 1) if prefetch is None else _check_int("prefetch", prefetch, 1)
    return LoadParallel(iterable, fn, workers, prefetch)
