"""The pages a ``PackedDataset`` keeps decoded: all of them (a local file's pages cost only their
mapping), or the ``keep`` most recently used (a remote file's pages are held in memory).

Thread-safe; ``get`` marks a page as just used. A page dropped here stays valid for whoever
still holds its columns (its buffers live as long as they are referenced).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

from ..core.processlock import ProcessLock

__all__ = ["PageMemory"]


class PageMemory:
    """Decoded pages by number: every page (``keep=None``) or the ``keep`` most recently used."""

    def __init__(self, num_pages: int, keep: int | None):
        self.keep = keep
        self._all: list[Any] | None = [None] * num_pages if keep is None else None
        self._recent: OrderedDict[int, Any] = OrderedDict()
        self._lock = ProcessLock()  # (a forked worker inherits the memory; never a held lock)

    def get(self, p: int) -> Any:
        if self._all is not None:
            return self._all[p]  # (a list read needs no lock)
        with self._lock:
            value = self._recent.get(p)
            if value is not None:
                self._recent.move_to_end(p)
            return value

    def put(self, p: int, value: Any) -> None:
        if self._all is not None:
            self._all[p] = value
            return
        with self._lock:
            self._recent[p] = value
            self._recent.move_to_end(p)
            while len(self._recent) > max(1, self.keep or 1):
                self._recent.popitem(last=False)

    def __getstate__(self) -> dict[str, Any]:  # pages are never pickled
        return {"num_pages": len(self._all) if self._all is not None else 0, "keep": self.keep}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["num_pages"], state["keep"])  # type: ignore[misc]
