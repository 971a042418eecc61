"""Views: lazy containers over other containers. They compose, and cost O(1) to make (bar indices).

``obsview`` re-indexes, ``batchview`` groups into batches, ``mapobs`` applies a function,
``shuffleobs`` and ``splitobs`` are re-indexings, ``joinobs`` concatenates. Views flatten: an
``obsview`` of an ``obsview`` indexes the original data through one composed index array, so a
stack of ten views costs one lookup. Views read their parent on access and hold no copies;
they are as thread-safe as the data under them.

Views pass on what the loader asks of remote data (``remote``, ``prefetch(indices)``: read-ahead,
in the data's own indices) and, where it has pages, the page layout (``page_starts()``, for
``order="quasi_random"``): ``obsview``, ``mapobs`` and ``joinobs`` of packed data are read ahead
and page by page as the data itself; ``batchview`` passes on read-ahead.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .collate import default_collate
from .containers import _check_index, getobs, getobs_into, numobs
from .spec import spec_of_data

__all__ = ["BatchView", "JoinedObs", "MappedObs", "ObsView", "batchview", "joinobs", "mapobs", "obsview", "shuffleobs", "splitobs"]


def _as_indices(indices: Any, n: int) -> np.ndarray:
    if isinstance(indices, slice):
        return np.arange(n, dtype=np.intp)[indices]
    array = np.asarray(indices)
    if array.dtype == bool:
        if array.shape != (n,):
            raise ValueError(f"a boolean mask must have one entry per observation ({n}), got shape {array.shape}")
        return np.flatnonzero(array).astype(np.intp)
    if array.size == 0:
        return np.zeros(0, dtype=np.intp)
    if array.ndim != 1 or not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"indices must be a 1-d sequence of integers, a slice or a boolean mask, got {array.dtype} of shape {array.shape}")
    array = array.astype(np.intp)
    array = np.where(array < 0, array + n, array)
    bad = (array < 0) | (array >= n)
    if bad.any():
        raise IndexError(f"index {indices[int(np.argmax(bad))]} is out of range for a container of {n} observations")
    return array


class ObsView:
    """Observations ``indices`` of ``data``, in that order (indices may repeat)."""

    def __init__(self, data: Any, indices: Any):
        n = numobs(data)
        idx = _as_indices(indices, n)
        if isinstance(data, ObsView):  # flatten: index the original through one array
            data, idx = data.data, data.indices[idx]
        self.data = data
        self.indices = idx
        self.indices.setflags(write=False)

    def __len__(self) -> int:
        return len(self.indices)

    def __getitem__(self, i: int) -> Any:
        if isinstance(i, (slice, Sequence, np.ndarray)):
            return ObsView(self, i)
        return getobs(self.data, int(self.indices[_check_index(self, i)]))

    def getobs_into(self, buffer: Any, i: int) -> Any:
        return getobs_into(buffer, self.data, int(self.indices[_check_index(self, i)]))

    @property
    def remote(self) -> bool:
        """Whether the data under the view fetches its pages from far away."""
        return bool(getattr(self.data, "remote", False))

    def prefetch(self, indices: Any) -> None:
        """The read-ahead hint for observations ``indices`` of the view, as the data's (``PackedDataset.prefetch``)."""
        _hint(self.data, self.indices[_within(indices, len(self))])

    @property
    def page_starts(self) -> Callable[[], np.ndarray]:
        """``page_starts()``: the first view position of each run of positions whose observations lie
        in one page of the data (for page-aware orders). A view in the data's order (a slice,
        ``splitobs`` without shuffle) has the data's pages, cut at its ends; a shuffled one, runs of
        about one observation (a page-aware order over it reads about as randomly as "random").
        Absent (``AttributeError``) when the data has no pages."""
        starts = _page_starts_of(self.data)
        return lambda: _runs(starts(), self.indices)

    def __repr__(self) -> str:
        return f"ObsView({type(self.data).__name__}, {len(self)} observations)"


def obsview(data: Any, indices: Any) -> ObsView:
    """A view of ``data`` holding observations ``indices`` (integers, a slice, or a boolean mask)."""
    return ObsView(data, indices)


class MappedObs:
    """``fn`` applied lazily to each observation of ``data`` (``fn`` may call ``sample_rng()``)."""

    def __init__(self, fn: Callable[[Any], Any], data: Any):
        if not callable(fn):
            raise TypeError(f"mapobs expects a callable first, got {type(fn).__name__}")
        numobs(data)
        self.fn, self.data = fn, data

    def __len__(self) -> int:
        return numobs(self.data)

    def __getitem__(self, i: int) -> Any:
        return self.fn(getobs(self.data, _check_index(self, i)))

    @property
    def remote(self) -> bool:
        return bool(getattr(self.data, "remote", False))

    def prefetch(self, indices: Any) -> None:
        """The data's read-ahead hint (observation ``i`` is the data's ``i``)."""
        _hint(self.data, _within(indices, len(self)))

    @property
    def page_starts(self) -> Callable[[], np.ndarray]:
        """The data's ``page_starts`` (absent when it has none)."""
        return _page_starts_of(self.data)

    def __repr__(self) -> str:
        return f"MappedObs({getattr(self.fn, '__name__', self.fn)!s}, {self.data!r})"


def mapobs(fn: Callable[[Any], Any], data: Any) -> MappedObs:
    """A view of ``data`` whose observation ``i`` is ``fn(getobs(data, i))``, computed on access."""
    return MappedObs(fn, data)


class BatchView:
    """A container of batches: observation ``k`` is the collated batch of observations ``k*b .. k*b+b-1``."""

    def __init__(self, data: Any, batch_size: int, drop_last: bool = False, collate: Callable[[list], Any] | None = None):
        _check_positive_int("batch_size", batch_size)
        if collate is not None and not callable(collate):
            raise TypeError(f"collate must be callable or None, got {type(collate).__name__}")
        self.data, self.batch_size, self.drop_last, self.collate = data, batch_size, bool(drop_last), collate
        self._n = numobs(data)
        self._vector = collate is None and spec_of_data(data) is not None

    def __len__(self) -> int:
        return self._n // self.batch_size if self.drop_last else math.ceil(self._n / self.batch_size)

    def __getitem__(self, k: int) -> Any:
        k = _check_index(self, k)
        indices = range(k * self.batch_size, min((k + 1) * self.batch_size, self._n))
        if self._vector:
            return getobs(self.data, indices)
        samples = [getobs(self.data, i) for i in indices]
        return (self.collate or default_collate)(samples)

    @property
    def remote(self) -> bool:
        return bool(getattr(self.data, "remote", False))

    def prefetch(self, indices: Any) -> None:
        """The data's read-ahead hint for the observations of batches ``indices``."""
        ks = _within(indices, len(self))
        rows = (ks[:, None] * self.batch_size + np.arange(self.batch_size)).ravel()
        _hint(self.data, rows[rows < self._n])

    def __repr__(self) -> str:
        return f"BatchView({len(self)} batches of {self.batch_size})"


def batchview(data: Any, batch_size: int, drop_last: bool = False, collate: Callable[[list], Any] | None = None) -> BatchView:
    """A view of ``data`` as consecutive batches (the last one short unless ``drop_last``)."""
    return BatchView(data, batch_size, drop_last, collate)


def shuffleobs(data: Any, seed: int | None = None) -> ObsView:
    """A view of ``data`` in a random order: a pure function of ``seed`` (fresh entropy when None)."""
    return ObsView(data, np.random.default_rng(seed).permutation(numobs(data)))


def splitobs(data: Any, at: float | int | Sequence[float | int] = 0.8, shuffle: bool = False, seed: int | None = None) -> tuple[ObsView, ...]:
    """Split ``data`` into consecutive views at ``at``: fractions in (0, 1) or observation counts.

    ``at=0.8`` gives (first 80%, rest); ``at=(0.7, 0.2)`` gives three parts. A fraction ``f`` of
    ``n`` observations is ``floor(f * n)``. With ``shuffle`` the data is shuffled first (by ``seed``).
    """
    n = numobs(data)
    cuts = [at] if isinstance(at, (int, float)) else list(at)
    sizes = []
    for cut in cuts:
        if isinstance(cut, bool) or not isinstance(cut, (int, float)):
            raise TypeError(f"splitobs 'at' takes fractions or counts, got {cut!r}")
        if isinstance(cut, float):
            if not 0.0 < cut < 1.0:
                raise ValueError(f"a split fraction must lie in (0, 1), got {cut}")
            sizes.append(math.floor(cut * n))
        else:
            if cut < 0:
                raise ValueError(f"a split count must be >= 0, got {cut}")
            sizes.append(cut)
    if sum(sizes) > n:
        raise ValueError(f"splits {cuts} ask for {sum(sizes)} observations but the data holds {n}")
    order = np.random.default_rng(seed).permutation(n) if shuffle else np.arange(n, dtype=np.intp)
    bounds = np.cumsum([0, *sizes, n - sum(sizes)])
    return tuple(ObsView(data, order[a:b]) for a, b in zip(bounds[:-1], bounds[1:]))


class JoinedObs:
    """The observations of several containers, one after another."""

    def __init__(self, *datas: Any):
        parts: list[Any] = []
        for data in datas:
            parts.extend(data.parts if isinstance(data, JoinedObs) else [data])
        self.parts = parts
        self.offsets = np.cumsum([0, *(numobs(d) for d in parts)])

    def __len__(self) -> int:
        return int(self.offsets[-1])

    def _locate(self, i: int) -> tuple[Any, int]:
        i = _check_index(self, i)
        part = int(np.searchsorted(self.offsets, i, side="right")) - 1
        return self.parts[part], i - int(self.offsets[part])

    def __getitem__(self, i: int) -> Any:
        data, j = self._locate(i)
        return getobs(data, j)

    def getobs_into(self, buffer: Any, i: int) -> Any:
        data, j = self._locate(i)
        return getobs_into(buffer, data, j)

    @property
    def remote(self) -> bool:
        return any(getattr(part, "remote", False) for part in self.parts)

    def prefetch(self, indices: Any) -> None:
        """Each part's read-ahead hint, for the observations ``indices`` that lie in it."""
        idx = _within(indices, len(self))
        part_of = np.searchsorted(self.offsets, idx, side="right") - 1
        for k in np.unique(part_of).tolist():
            _hint(self.parts[k], idx[part_of == k] - int(self.offsets[k]))

    @property
    def page_starts(self) -> Callable[[], np.ndarray]:
        """The parts' pages, one after another (absent unless every part has pages)."""
        starts = [_page_starts_of(part) for part in self.parts]
        offsets = self.offsets[:-1].tolist()
        return lambda: np.concatenate([np.zeros(0, np.int64), *(np.asarray(f(), np.int64) + k for f, k in zip(starts, offsets))])

    def __repr__(self) -> str:
        return f"JoinedObs({len(self.parts)} parts, {len(self)} observations)"


def joinobs(*datas: Any) -> JoinedObs:
    """A container of all observations of ``datas`` in sequence (nested joins flatten)."""
    return JoinedObs(*datas)


def _within(indices: Any, n: int) -> np.ndarray:
    """A read-ahead hint's indices that lie in ``0..n-1`` (a hint never raises; the others are dropped)."""
    idx = np.asarray(indices, dtype=np.int64).ravel()
    return idx[(idx >= 0) & (idx < n)]


def _hint(data: Any, indices: np.ndarray) -> None:
    prefetch = getattr(data, "prefetch", None)
    if callable(prefetch) and getattr(data, "remote", False) and len(indices):
        prefetch(indices)


def _page_starts_of(data: Any) -> Callable[[], np.ndarray]:
    """``data.page_starts``, or ``AttributeError`` (so that a view of data without pages has none either)."""
    starts = getattr(data, "page_starts", None)
    if not callable(starts):
        raise AttributeError(f"{type(data).__name__} has no page_starts(): its observations are not kept in pages")
    return starts


def _runs(page_starts: Any, indices: np.ndarray) -> np.ndarray:
    """The first position of each run of ``indices`` that lie in one page (pages begin at ``page_starts``)."""
    if not len(indices):
        return np.zeros(0, np.int64)
    page = np.searchsorted(np.asarray(page_starts), indices, side="right")
    return np.flatnonzero(np.r_[True, page[1:] != page[:-1]]).astype(np.int64)


def _check_positive_int(name: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1, got {value}")
