"""The pages a ``PackedDataset`` keeps decoded: all of them (a local file's pages cost only their
mapping), or, for remote files, the most recently used ones within a bound shared by every file
opened together (``RecentPages``: a remote page is held in memory, so the bound is per process,
not per shard).

Thread-safe; ``get`` marks a page as just used, ``has`` does not. A page dropped here stays valid
for whoever still holds its columns (its buffers live as long as they are referenced).
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from typing import Any

from ..core.processlock import ProcessLock

__all__ = ["PageMemory", "RecentPages"]

_tokens = itertools.count()


class RecentPages:
    """The ``keep`` most recently used pages of several datasets together (keys: (dataset, page))."""

    def __init__(self, keep: int):
        self.keep = max(1, int(keep))
        self._items: OrderedDict[Any, Any] = OrderedDict()
        self._lock = ProcessLock()  # (a forked worker inherits the memory; never a held lock)

    def get(self, key: Any) -> Any:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def has(self, key: Any) -> bool:
        with self._lock:
            return key in self._items

    def put(self, key: Any, value: Any) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.keep:
                self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)

    def __getstate__(self) -> dict[str, Any]:  # pages are never pickled
        return {"keep": self.keep}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["keep"])  # type: ignore[misc]


class PageMemory:
    """One dataset's decoded pages by number: every page (``recent=None``), or those of them the
    shared ``recent`` keeps."""

    def __init__(self, num_pages: int, recent: RecentPages | None = None):
        self._all: list[Any] | None = [None] * num_pages if recent is None else None
        self._recent = recent
        self._token = next(_tokens)

    def get(self, p: int) -> Any:
        if self._all is not None:
            return self._all[p]  # (a list read needs no lock)
        return self._recent.get((self._token, p))  # type: ignore[union-attr]

    def has(self, p: int) -> bool:
        if self._all is not None:
            return self._all[p] is not None
        return self._recent.has((self._token, p))  # type: ignore[union-attr]

    def put(self, p: int, value: Any) -> None:
        if self._all is not None:
            self._all[p] = value
        else:
            self._recent.put((self._token, p), value)  # type: ignore[union-attr]
