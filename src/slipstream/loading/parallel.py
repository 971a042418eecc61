"""``loadparallel``: an ordered, bounded, cancellable parallel map over any iterable."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..core.arguments import check_callable, check_int, check_workers
from ..core.closing import ClosingIterator
from ..core.errors import add_note
from .backends.inline import InlineExecutor
from .backends.threads import ThreadExecutor
from .work.jobs import Job, Task

__all__ = ["LoadParallel", "loadparallel"]


def _identity(item: Any) -> Any:
    return item


def _first(results: list[Any]) -> Any:
    return results[0]


def _apply(fn: Callable[[Any], Any], item: Any, position: int) -> Any:
    try:
        return fn(item)
    except BaseException as exc:
        add_note(exc, f"slipstream.loadparallel: raised by item {position} of the iterable")
        raise


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
        yield Job([Task(_apply, (fn, item, position))], _first)
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


class _Pass(ClosingIterator):
    """One pass: its executor's results, the executor stopped however the pass ends."""

    def __init__(self, executor: Any):
        super().__init__(executor.close)
        self._executor = executor

    def _next(self) -> Any:
        return next(self._executor)


def loadparallel(
    iterable: Iterable[Any], fn: Callable[[Any], Any] | None = None, *, workers: int | str = 4, prefetch: int | None = None
) -> LoadParallel:
    """An iterable of ``fn(item)`` for each item of ``iterable``, computed ahead by ``workers`` threads.

    Order is kept. ``prefetch`` bounds the items in flight (default ``2 * workers``). ``workers=0``
    maps lazily in the consumer's thread; ``workers="auto"``: one thread per core this process may use
    (affinity and cgroup CPU quota, not ``os.cpu_count()``). ``fn`` must be thread-safe; threads pay off when it
    releases the GIL (I/O, NumPy, decoders).
    """
    if not isinstance(iterable, Iterable):
        raise TypeError(f"loadparallel needs an iterable, got {type(iterable).__name__}")
    check_callable("fn", fn, "callable")
    workers = check_workers(workers)
    prefetch = 2 * max(workers, 1) if prefetch is None else check_int("prefetch", prefetch, 1)
    return LoadParallel(iterable, fn, workers, prefetch)
