"""Read-ahead: the loader tells data that fetches from far away which samples come next.

A container with a true ``remote`` attribute and a ``prefetch(indices)`` method (a packed file or
sharded dataset in object storage, and their mapped views) is handed each batch's indices
``depth`` batches before that batch is planned, so the pages those batches need are being
downloaded (concurrently, bounded by the data's own limit) while the batches before them are
read. Other data is left alone: its batches are pulled exactly as before, one at a time.

When other processes read the batches (process and helper workers), the hints are given inside
``remote.pages.shared_only()``: they fill the disk cache the workers share, and pages it cannot
hold are left to the worker that reads them (this process would download them for no one). The
hints then keep to the epoch's ``CacheWindow`` (``remote.window``): a batch is hinted only once the
cache has room for its pages beside those of every batch hinted or being read and not yet handed
out (until then it waits, and is hinted as soon as batches handed out make room; one that reaches
the workers unhinted is counted, its pages fetched by them), and never among the ``lead`` batches
the workers are given next (they would read those pages before this process's download landed,
and download them again). So read-ahead never evicts a page before the workers read it, and a cache
of a few pages is filled no faster than it is read. Views of such data (``obsview``, ``splitobs``, ``mapobs``, ``joinobs``, ``batchview``) pass the
hints on in the data's own indices.

The first batches need not wait for ``iter()``: a ``FirstWindow`` hints the first ``depth``
batches of the epoch a loader will start next (``start(position, seed)``: its epoch, rank share and
resume point, drawn from the loader's built-in order exactly as ``iter()`` will draw them) when the
loader is made, and again when a state is loaded. It does so only where it cannot change what is
read: the built-in orders (a user's sampler or order is drawn once per epoch, by ``iter()``), data
without state of its own, batches read in this process (with workers in other processes the
shared cache's room is counted per epoch, from ``iter()``). Its downloads are ordinary read-ahead
(bounded by the data's own limit, on daemon threads, each into the cache as it ends); those not
yet begun are taken back (``remote.fetch.withdraw``) when another start replaces them, when
``iter()`` starts another epoch or seed than was hinted, and when the loader is closed or dropped;
those under way end on their own (threads lent beside the data's, so the downloads after them do
not wait).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from ..core.containers import numobs
from ..order.epochs import IndexOrder
from ..order.progress import Position
from ..remote.fetch import Ticket, recorded, withdraw
from ..remote.pages import shared_only
from ..remote.window import CacheWindow

__all__ = ["FirstWindow", "SharedHint", "depth_of", "hint_of", "read_ahead"]

T = TypeVar("T")


class SharedHint:
    """A hint for the shared cache: ``data.prefetch`` inside ``shared_only(window)``, where
    ``window`` counts the cache's room for the epoch (see the module doc)."""

    def __init__(self, prefetch: Callable[[Any], None], handed_out: Callable[[int], bool], lead: int):
        self.prefetch, self.lead = prefetch, max(0, int(lead))
        self.window = CacheWindow(handed_out)

    def __call__(self, indices: Any) -> None:
        with shared_only(self.window):
            self.prefetch(indices)

    def batch(self, k: int, indices: Any, counting: bool = False) -> bool:
        """Hint (or, ``counting``, only count) batch ``k``; whether every page of it found room."""
        window = self.window
        window.batch, window.counting, window.short = k, counting, False
        self(indices)
        return not window.short


def hint_of(
    data: Any, elsewhere: bool = False, handed_out: Callable[[int], bool] | None = None, lead: int = 0
) -> Callable[[Any], None] | None:
    """``data.prefetch`` when ``data`` reads remote pages, else None; with ``elsewhere`` (other
    processes read the batches), given inside ``shared_only()``, and with ``handed_out`` (whether
    the consumer got batch ``k``) a ``SharedHint`` that keeps to the cache's room and stays ``lead``
    batches ahead of the workers (see the module doc)."""
    prefetch = getattr(data, "prefetch", None)
    if not callable(prefetch) or not getattr(data, "remote", False):
        return None
    if not elsewhere:
        return prefetch
    if handed_out is not None:
        return SharedHint(prefetch, handed_out, lead)

    def for_the_shared_cache(indices: Any) -> None:
        with shared_only():
            prefetch(indices)

    return for_the_shared_cache


def read_ahead(
    batches: Iterator[tuple[int, T]], hint: Callable[[Any], None] | None, depth: int, hinted: int = 0
) -> Iterator[tuple[int, T]]:
    """``batches`` ((number, indices) pairs) unchanged, each one's indices hinted ``depth`` ahead
    (a ``SharedHint``: up to ``depth`` ahead, as its window has room; see the module doc), but the
    first ``hinted`` (a ``FirstWindow`` hinted them already)."""
    if hint is None or depth < 1:
        yield from batches
        return
    if isinstance(hint, SharedHint):
        yield from _within_the_cache(batches, hint, depth)
        return
    window: deque[tuple[int, T]] = deque()
    for pair in batches:
        if hinted > 0:
            hinted -= 1
        else:
            hint(pair[1])
        window.append(pair)
        if len(window) > depth:
            yield window.popleft()
    while window:
        yield window.popleft()


def _within_the_cache(batches: Iterator[tuple[int, T]], hint: SharedHint, depth: int) -> Iterator[tuple[int, T]]:
    """``read_ahead`` for other processes' workers: batches hinted in order while the window has room."""
    pending: deque[list[Any]] = deque()  # [(number, indices), hinted or counted]
    source, more = iter(batches), True
    while True:
        while more and len(pending) <= max(depth, hint.lead):
            pair = next(source, None)
            if pair is None:
                more = False
            else:
                pending.append([pair, False])
        if not pending:
            return
        hint.window.release()
        for position, entry in enumerate(pending):
            if entry[1]:
                continue
            if position < hint.lead:  # the workers get it next, too soon to read it ahead: they fetch its pages
                hint.batch(entry[0][0], entry[0][1], counting=True)
                entry[1] = True
            elif hint.batch(entry[0][0], entry[0][1]):
                entry[1] = True
            else:
                break  # no room: this batch and the ones after it wait for batches to be handed out
        pair, done = pending.popleft()
        if not done:
            hint.batch(pair[0], pair[1], counting=True)
        yield pair


def depth_of(prefetch: int, workers: int) -> int:
    """How many batches ahead of the ones being read the loader hints: ``2 * (prefetch + workers)``
    (at least one worker counted)."""
    return 2 * (prefetch + max(1, workers))


class FirstWindow:
    """The hints of the first ``depth`` batches of the epoch a loader starts next, given before its
    ``iter()`` (see the module doc). ``enabled`` False (batches read by other processes, or data
    with state of its own), an order other than the built-in ones, or data that reads no remote
    pages: it does nothing."""

    def __init__(self, data: Any, order: Any, depth: int, enabled: bool = True):
        self._hint = hint_of(data) if enabled and isinstance(order, IndexOrder) else None
        self._data, self._order, self._depth = data, order, int(depth)
        self._tickets: list[Ticket] = []
        self._hinted: tuple[Any, ...] | None = None  # the start whose batches were hinted (``_start_key``)
        self._count = 0  # ... and how many of its first batches
        self._lock = threading.Lock()

    def start(self, position: Position, seed: int) -> None:
        """Hint the first ``depth`` batches still to load from ``position`` of the order seeded
        ``seed``, taking back those of an earlier start. Never raises: a failure here is met again,
        and raised, by ``iter()``."""
        if self._hint is None:
            return
        with self._lock:
            withdraw(self._tickets)
            self._hinted, self._count = None, 0
            try:
                n = numobs(self._data)
                if position.deal.fresh:
                    batches = self._order.batches(position.epoch, n, seed)
                else:
                    batches = self._order.batches(position.epoch, n, seed, position.deal)
                first = [b for k, b in enumerate(batches) if k >= position.batch and k not in position.done][: self._depth]
                with recorded(self._tickets):
                    for indices in first:
                        self._hint(indices)
                self._hinted, self._count = _start_key(position, seed, n), len(first)
            except Exception:  # noqa: BLE001, S110 - only a hint: iter() draws the order again and raises
                pass

    def handover(self, position: Position, seed: int, n: int) -> int:
        """``iter()`` starts the epoch at ``position`` with ``seed`` over ``n`` observations: how many
        of its first batches were hinted already (its own read-ahead goes on after them); the hints
        of any other start are taken back (0)."""
        with self._lock:
            count = self._count if self._hinted == _start_key(position, seed, n) else 0
            if not count:
                withdraw(self._tickets)
            self._tickets.clear()
            self._hinted, self._count = None, 0
            return count

    def stop(self) -> None:
        """Take back every hinted download not yet begun (the loader is closed or gone)."""
        with self._lock:
            withdraw(self._tickets)
            self._hinted, self._count = None, 0


def _start_key(position: Position, seed: int, n: int) -> tuple[Any, ...]:
    """What decides an epoch's first batches: where it starts, how it was dealt, the seed and the data's length."""
    deal = position.deal
    return (position.epoch, position.batch, frozenset(position.done), deal.consumed, tuple(deal.extra.tolist()), seed, n)
