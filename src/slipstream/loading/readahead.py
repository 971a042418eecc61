"""Read-ahead: the loader tells data that fetches from far away which samples come next.

A container with a true ``remote`` attribute and a ``prefetch(indices)`` method (a packed file or
sharded dataset in object storage, and their mapped views) is handed each batch's indices
``depth`` batches before that batch is planned, so the pages those batches need are being
downloaded (concurrently, bounded by the data's own limit) while the batches before them are
read. Other data is left alone: its batches are pulled exactly as before, one at a time.

When other processes read the batches (process and helper workers), the hints are given inside
``remote.pages.shared_only()``: they fill the disk cache the workers share, and pages it cannot
hold are left to the worker that reads them (this process would download them for no one).
Views of such data (``obsview``, ``splitobs``, ``mapobs``, ``joinobs``, ``batchview``) pass the
hints on in the data's own indices.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from ..remote.pages import shared_only

__all__ = ["hint_of", "read_ahead"]

T = TypeVar("T")


def hint_of(data: Any, elsewhere: bool = False) -> Callable[[Any], None] | None:
    """``data.prefetch`` when ``data`` reads remote pages, else None; with ``elsewhere`` (other
    processes read the batches), given inside ``shared_only()`` (see the module doc)."""
    prefetch = getattr(data, "prefetch", None)
    if not callable(prefetch) or not getattr(data, "remote", False):
        return None
    if not elsewhere:
        return prefetch

    def for_the_shared_cache(indices: Any) -> None:
        with shared_only():
            prefetch(indices)

    return for_the_shared_cache


def read_ahead(batches: Iterator[tuple[int, T]], hint: Callable[[Any], None] | None, depth: int) -> Iterator[tuple[int, T]]:
    """``batches`` ((number, indices) pairs) unchanged, each one's indices hinted ``depth`` ahead."""
    if hint is None or depth < 1:
        yield from batches
        return
    window: deque[tuple[int, T]] = deque()
    for pair in batches:
        hint(pair[1])
        window.append(pair)
        if len(window) > depth:
            yield window.popleft()
    while window:
        yield window.popleft()
