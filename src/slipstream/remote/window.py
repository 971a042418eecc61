"""The room one epoch's read-ahead may take in the shared disk cache, counted in the trainer's process.

When worker processes read the batches, the trainer's read-ahead helps only through the disk cache
they share, and a hint that puts more pages there than the cache holds evicts pages before any
worker read them (each is then downloaded twice, or more). ``CacheWindow(handed_out)`` counts, per
cache, the bytes of the pages of every batch that is hinted or being read and not yet handed out
(``handed_out(k)`` says whether batch ``k`` was): a hint is admitted only while those bytes, with its
page, fit under the cache's limit. The pages of a batch that goes to the workers unhinted are
counted too (the workers download them into the same cache), but never fetched here.

``RemotePages.prefetch`` asks ``admit(cache, key, length)`` for each page of a hint given inside
``shared_only(window)``; the loader's read-ahead sets ``batch`` (and ``counting``) before each hint,
checks ``short`` after it (some page found no room: the batch is hinted again later), and calls
``release()`` as batches are handed out: pages no batch still to come needs are forgotten and
retired in the cache (evicted before any other page, see ``PageCache.retire``), so what eviction
removes is what was read, not what was read ahead.

Counting is of this loader's pages only: other readers of the same cache can still evict them (a
page is then downloaded again when read: a cost, never an error).
"""

from __future__ import annotations

from collections.abc import Callable

from .cache import PageCache
from .cachedir import TAG

__all__ = ["CacheWindow"]


class CacheWindow:
    """One epoch's read-ahead room in the shared cache (see the module doc)."""

    def __init__(self, handed_out: Callable[[int], bool]):
        self._handed_out = handed_out
        self._pages: dict[str, tuple[PageCache, int, set[int]]] = {}  # key -> (cache, file bytes, the batches that read it)
        self._used: dict[str, int] = {}  # cache folder -> bytes of the pages counted
        self.batch = -1  # the batch whose pages are hinted or counted now
        self.counting = False  # True: count the pages (the workers fetch them), fetch none
        self.short = False  # a page of the current hint found no room

    def admit(self, cache: PageCache, key: str, length: int) -> bool:
        """Whether this process should start fetching page ``key`` (``length`` bytes) for batch
        ``batch`` now: True once for each page counted while not ``counting``. A page is counted
        either way, unless it found no room (``short`` is set then)."""
        entry = self._pages.get(key)
        if entry is not None:  # (another batch needs it too: it stays counted until both are handed out)
            entry[2].add(self.batch)
            return False
        size, folder = length + TAG, str(cache.folder)
        used = self._used.get(folder, 0)
        if not self.counting and used + size > cache.limit:
            self.short = True
            return False
        self._pages[key] = (cache, size, {self.batch})
        self._used[folder] = used + size
        return not self.counting

    def release(self) -> None:
        """Forget the pages whose batches were all handed out, and retire them in their cache."""
        for key, (cache, size, batches) in list(self._pages.items()):
            if all(self._handed_out(k) for k in batches):
                del self._pages[key]
                self._used[str(cache.folder)] -= size
                cache.retire(key)

    def used(self, cache: PageCache) -> int:
        """Bytes counted in ``cache`` now."""
        return self._used.get(str(cache.folder), 0)
