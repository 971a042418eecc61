"""``ss.open([path, ...])``: several packed files read as one dataset, in list order.

A ``ShardedDataset`` holds one ``PackedDataset`` per shard (each memory-mapped, checked and read as
``ss.open`` reads one file) and numbers their samples and pages one after the other: sample ``i``
of the dataset is sample ``i - start`` of the shard whose range holds it, and page ``p`` is a page
of one shard, so ``page_starts()`` (``order="quasi_random"``) spans all shards. It offers what a
packed file offers the rest of slipstream (``fields``, ``encoded``, ``locate_many``, ``page``,
``getobs_batch_into``, ``batch_spec``, ``map``), so image pipelines, whole image tasks, every
backend and rank sharding work on it unchanged. The shards must hold the same fields (names and
settings, the first shard's order) and the same class names (``metadata["class_names"]``, where
shards name them); errors name the shard's file, and a ``ChecksumError``'s
``page`` and ``samples`` are the dataset's numbers (its message says the shard's own as well).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import ChecksumError, ShardMismatchError
from ..core.spec import Spec
from ..images.mapfields import mapfields
from .packed import PackedDataset, checked_indices

__all__ = ["ShardedDataset", "data_name", "scatter_rows"]


class ShardedDataset:
    """Packed files ``paths`` as one container of dict samples (see the module doc)."""

    def __init__(self, paths: list[str | os.PathLike], cache: str = "os", fields: list[str] | None = None, *, shards: list[PackedDataset] | None = None):
        """``shards``: the datasets themselves, already open (remote ones); else ``paths`` are opened."""
        if not paths and not shards:
            raise ValueError("ss.open([...]) needs at least one packed file")
        self.shards = list(shards) if shards else [PackedDataset(path, cache=cache, fields=fields) for path in paths]
        self.cache = cache
        first = self.shards[0]
        for shard in self.shards[1:]:
            if list(shard.fields) != list(first.fields) or any(shard.fields[n] != first.fields[n] for n in first.fields):
                raise ShardMismatchError(
                    shard.path, f"holds fields {shard.fields} but the first shard ({first.path}) holds {first.fields}: shards must hold the same fields"
                )
        _check_class_names(self.shards)
        self.fields = first.fields
        counts = [len(shard) for shard in self.shards]
        self._sample_starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        pages = [shard.num_pages for shard in self.shards]
        self._page_starts_of_shard = np.concatenate([[0], np.cumsum(pages)]).astype(np.int64)
        self._page_starts = np.concatenate(
            [shard.page_starts() + start for shard, start in zip(self.shards, self._sample_starts[:-1])] or [np.zeros(0, np.int64)]
        ).astype(np.int64)
        self._n = int(self._sample_starts[-1])

    # -- numbering ---------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._n

    @property
    def num_pages(self) -> int:
        return len(self._page_starts)

    def page_starts(self) -> np.ndarray:
        """The first sample of every page of every shard, in dataset numbers (for page-aware orders)."""
        return self._page_starts.copy()

    def _located(self, s: int, error: ChecksumError) -> ChecksumError:
        """``error`` (raised by shard ``s``, in its numbers) with the dataset's page and samples."""
        first, page = int(self._sample_starts[s]), int(self._page_starts_of_shard[s])
        samples = range(error.samples.start + first, error.samples.stop + first)
        page = error.page + page if error.page >= 0 else error.page
        text = str(error.args[0] if error.args else error)
        message = text[len(error.path) + 2 :] if text.startswith(f"{error.path}: ") else text
        if len(samples):
            message += f"; in the dataset: page {page}, samples {samples.start}..{samples.stop - 1}"
        located = ChecksumError(error.path, message, page, samples)
        if getattr(error, "__notes__", None):
            located.__notes__ = list(error.__notes__)
        return located

    def _where(self, index: Any) -> tuple[int, int]:
        """(shard, sample in it) of sample ``index``."""
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"sample index must be an integer, got {type(index).__name__}")
        i = int(index) + (self._n if int(index) < 0 else 0)
        if not 0 <= i < self._n:
            raise IndexError(f"sample index {index} is out of range for {self._n} samples in {len(self.shards)} shards")
        s = int(np.searchsorted(self._sample_starts, i, side="right")) - 1
        return s, i - int(self._sample_starts[s])

    def _read(self, s: int, call: Any, *args: Any, **kwargs: Any) -> Any:
        """``call(*args, **kwargs)``, a read of shard ``s``, its ``ChecksumError`` in the dataset's numbers."""
        try:
            return call(*args, **kwargs)
        except ChecksumError as exc:
            raise self._located(s, exc) from exc

    def source_of(self, index: int) -> Path:
        """The file that holds sample ``index``."""
        return self.shards[self._where(index)[0]].path

    def page(self, p: int) -> Any:
        """Page ``p`` (in dataset numbers)'s columns, from its shard."""
        s = int(np.searchsorted(self._page_starts_of_shard, p, side="right")) - 1
        return self._read(s, self.shards[s].page, p - int(self._page_starts_of_shard[s]))

    def locate_many(self, indices: Any) -> tuple[np.ndarray, np.ndarray]:
        """(samples, pages) as ``PackedDataset.locate_many``, in dataset numbers."""
        idx = checked_indices(indices, self._n, "", f" in {len(self.shards)} shards")
        return idx, np.searchsorted(self._page_starts, idx, side="right") - 1

    # -- reading -----------------------------------------------------------------------------
    def __getitem__(self, index: int) -> dict[str, Any]:
        s, i = self._where(index)
        return self._read(s, self.shards[s].__getitem__, i)

    def getobs_into(self, buffer: Any, index: int, fields: Any = None) -> dict[str, Any]:
        s, i = self._where(index)
        return self._read(s, self.shards[s].getobs_into, buffer, i, fields=fields)

    def encoded(self, index: int, name: str, *, check: bool = True) -> tuple[str, Any, tuple[int, int, int]]:
        s, i = self._where(index)
        return self._read(s, self.shards[s].encoded, i, name, check=check)

    def getobs_batch_into(self, buffer: Any, indices: Any, fields: Any = None) -> dict[str, Any]:
        """``PackedDataset.getobs_batch_into`` over the shards: each shard reads its samples (into
        rows of a scratch buffer shaped like ``buffer``'s), which are then put in their rows."""
        idx, _ = self.locate_many(indices)
        shard_of = np.searchsorted(self._sample_starts, idx, side="right") - 1
        names = list(self.fields) if fields is None else list(fields)
        get = buffer.get if isinstance(buffer, dict) else (lambda name: None)
        parts = []
        for s in np.unique(shard_of).tolist():
            positions = np.flatnonzero(shard_of == s)
            local = idx[positions] - self._sample_starts[s]
            scratch = {name: _rows_like(get(name), len(positions)) for name in names}
            parts.append((positions, self._read(s, self.shards[s].getobs_batch_into, scratch, local, fields=names)))
        return {name: scatter_rows(get(name), len(idx), [(positions, value[name]) for positions, value in parts]) for name in names}

    # -- the rest of a packed file's face ------------------------------------------------------
    def batch_spec(self) -> Spec | None:
        """The first non-empty shard's batch structure (the shards hold the same fields)."""
        return next((shard.batch_spec() for shard in self.shards if len(shard)), None)

    def validate(self) -> None:
        """Check every page of every shard against its checksum (``ChecksumError`` naming the shard)."""
        for s, shard in enumerate(self.shards):
            self._read(s, shard.validate)

    @property
    def metadata(self) -> dict[str, Any]:
        """The first shard's writer metadata (the shards' class names agree: see the module doc)."""
        return self.shards[0].metadata

    @property
    def identity(self) -> tuple[tuple[int, int, int], ...]:
        return tuple(shard.identity for shard in self.shards)

    def map(self, **pipelines: Any) -> Any:
        """``ds.map(image=[ops...])``, as for one packed file."""
        return mapfields(self, **pipelines)

    @property
    def remote(self) -> bool:
        """Whether any shard's pages come from object storage."""
        return any(shard.remote for shard in self.shards)

    def pages_kept(self) -> int | None:
        """The most pages of the shards a process keeps decoded at once (see
        ``PackedDataset.pages_kept``: shards opened together share one bound, counted once; a local
        shard keeps all its pages), or None when every shard keeps every page."""
        bounds: dict[int, int] = {}
        unbounded = 0
        for shard in self.shards:
            recent = shard._source.recent
            if recent is None:
                unbounded += shard.num_pages
            else:
                bounds[id(recent)] = int(recent.keep)
        return None if not bounds else unbounded + sum(bounds.values())

    def remote_stats(self) -> dict[str, Any] | None:
        """The fetch counters of the first remote shard (shards opened together share them); None when all are local."""
        return next((shard.remote_stats() for shard in self.shards if shard.remote), None)

    def prefetch(self, indices: Any) -> None:
        """A hint that samples ``indices`` will be read soon (see ``PackedDataset.prefetch``)."""
        idx = np.asarray(indices, dtype=np.int64).ravel()
        idx = idx[(idx >= 0) & (idx < self._n)]
        shard_of = np.searchsorted(self._sample_starts, idx, side="right") - 1
        for s in np.unique(shard_of).tolist():
            self.shards[s].prefetch(idx[shard_of == s] - self._sample_starts[s])

    def __repr__(self) -> str:
        return f"ss.open([...{len(self.shards)} shards]): {self._n} samples in {self.num_pages} pages, fields {list(self.fields)}"


def _check_class_names(shards: list[PackedDataset]) -> None:
    """``ShardMismatchError`` naming the shard whose class names for a field (``metadata["class_names"]``)
    differ from the first shard's that names that field's classes: label ``k`` would mean one class
    in one shard and another in the next. Shards that name no classes for a field are not compared."""
    first: dict[str, tuple[Any, list[Any]]] = {}  # field -> (the first shard naming its classes, the names)
    for shard in shards:
        names = shard.metadata.get("class_names")
        if not isinstance(names, dict):
            continue
        for field, listed in names.items():
            seen = first.setdefault(field, (shard.path, listed))
            if listed != seen[1]:
                raise ShardMismatchError(
                    shard.path,
                    f"names the classes of field {field!r} {listed} but {seen[0]} names them {seen[1]}: label k would mean "
                    "another class in each; shards must hold the same class names in the same order",
                )


def _rows_like(target: Any, n: int) -> Any:
    """A scratch array of ``n`` rows shaped like ``target``'s rows (None when it is not an array)."""
    return np.empty((n, *target.shape[1:]), target.dtype) if isinstance(target, np.ndarray) else None


def scatter_rows(target: Any, n: int, parts: list[tuple[np.ndarray, Any]]) -> Any:
    """One field of a batch read shard by shard: ``parts`` are (positions, what the shard returned
    for them). ``target`` (the batch's array) with every part's rows put in place when each part
    was written whole; else a list of the ``n`` rows' values, for the caller to check and collate."""
    if isinstance(target, np.ndarray) and all(isinstance(value, np.ndarray) for _, value in parts):
        for positions, value in parts:
            target[positions] = value
        return target
    rows: list[Any] = [None] * n
    for positions, value in parts:
        for k, position in enumerate(positions.tolist()):
            rows[position] = value[k]
    return rows


def data_name(data: Any) -> str:
    """The data as a message names it: its file, or its first shard's and how many more (a
    ``ShardedDataset``), else its type."""
    path = getattr(data, "path", None)
    if path is not None:
        return str(path)
    shards = getattr(data, "shards", None)
    if shards:
        return f"{shards[0].path}" + (f" and {len(shards) - 1} more shards" if len(shards) > 1 else "")
    return type(data).__name__
