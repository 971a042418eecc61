"""Per-sample arrays of one image field over a whole packed file, for whole image tasks.

``ImageIndex(dataset, name).table(idx, marks)`` gives the ``images.imagetasks.ImageTable`` of samples
``idx``: each one's codec, the address and size of its stored bytes (zero-copy, in the page's memory
map, which the dataset keeps for its lifetime) and its stored shape, gathered with a few NumPy
operations. The arrays cover the whole file (about 30 bytes per sample) and are filled page by page
the first time a page is read, so after the first epoch no Python runs per sample or per page.
Values are taken as stored: the task path checks what it relies on (and sends any sample it does
not like through the per-sample path, which raises for damage).

A remote dataset (``dataset.remote``) keeps only its recently used pages in memory, so addresses
into them cannot be kept: its tables are made afresh from the chunk's pages each time, and hold
those pages (``ImageTable.keep``) until the task is done.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.ma  # noqa: F401 - np.unique loads it on first use: here, not in the first image batch (~12 ms)

from .imagetasks import ImageTable

__all__ = ["ImageIndex"]


class ImageIndex:
    """The image field ``name`` of ``dataset`` (a ``PackedDataset``), as flat per-sample arrays."""

    def __init__(self, dataset: Any, name: str):
        field = dataset.fields[name]
        if field.kind != "image":
            raise TypeError(f"{dataset.path}: field {name!r} is not an image field ({field!r})")
        n, pages = len(dataset), dataset.num_pages
        self._dataset, self._name = dataset, name
        self._starts = dataset.page_starts()
        self._ends = np.append(self._starts[1:], n)
        self._codecs = np.zeros(n, np.uint8)
        self._addrs = np.zeros(n, np.uint64)
        self._sizes = np.zeros(n, np.uint64)
        self._shapes = np.zeros((n, 3), np.int32)
        self._loaded = np.zeros(pages, bool)
        self._fresh = bool(getattr(dataset, "remote", False))

    def _load(self, p: int) -> None:
        column = self._dataset.page(p)[self._name]
        a, b = int(self._starts[p]), int(self._ends[p])
        self._codecs[a:b], self._addrs[a:b], self._sizes[a:b], self._shapes[a:b] = column.table()
        self._loaded[p] = True  # (two threads loading one page write the same values)

    def table(self, idx: np.ndarray, pages: np.ndarray, marks: np.ndarray) -> ImageTable:
        """Samples ``idx`` (in range; ``pages`` their pages), with the field's decode ``marks``."""
        if self._fresh:
            return self._fresh_table(idx, pages, marks)
        missing = pages[~self._loaded[pages]]
        for p in np.unique(missing).tolist():
            self._load(p)
        return ImageTable(self._codecs[idx], self._addrs[idx], self._sizes[idx], self._shapes[idx], marks, idx, self._dataset)

    def _fresh_table(self, idx: np.ndarray, pages: np.ndarray, marks: np.ndarray) -> ImageTable:
        """The table made from the chunk's pages themselves, which it holds (a remote dataset's)."""
        n = len(idx)
        codecs, addrs, sizes, shapes = np.zeros(n, np.uint8), np.zeros(n, np.uint64), np.zeros(n, np.uint64), np.zeros((n, 3), np.int32)
        held = []
        for p in np.unique(pages).tolist():
            column = self._dataset.page(p)[self._name]
            held.append(column)
            at = np.flatnonzero(pages == p)
            rows = idx[at] - self._starts[p]
            c, a, s, sh = column.table()
            codecs[at], addrs[at], sizes[at], shapes[at] = c[rows], a[rows], s[rows], sh[rows]
        return ImageTable(codecs, addrs, sizes, shapes, marks, idx, (self._dataset, held))
