"""Per-sample arrays of one image field over a whole packed file, for whole image tasks.

``ImageIndex(dataset, name).table(idx, marks)`` gives the ``images.tasks.ImageTable`` of samples
``idx``: each one's codec, the address and size of its stored bytes (zero-copy, in the page's memory
map, which the dataset keeps for its lifetime) and its stored shape, gathered with a few NumPy
operations. The arrays cover the whole file (about 30 bytes per sample) and are filled page by page
the first time a page is read, so after the first epoch no Python runs per sample or per page.
Values are taken as stored: the task path checks what it relies on (and sends any sample it does
not like through the per-sample path, which raises for damage).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..images.tasks import ImageTable

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

    def _load(self, p: int) -> None:
        column = self._dataset.page(p)[self._name]
        a, b = int(self._starts[p]), int(self._ends[p])
        self._codecs[a:b], self._addrs[a:b], self._sizes[a:b], self._shapes[a:b] = column.table()
        self._loaded[p] = True  # (two threads loading one page write the same values)

    def table(self, idx: np.ndarray, pages: np.ndarray, marks: np.ndarray) -> ImageTable:
        """Samples ``idx`` (in range; ``pages`` their pages), with the field's decode ``marks``."""
        missing = pages[~self._loaded[pages]]
        for p in np.unique(missing).tolist():
            self._load(p)
        return ImageTable(self._codecs[idx], self._addrs[idx], self._sizes[idx], self._shapes[idx], marks, idx, self._dataset)
