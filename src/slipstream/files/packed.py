"""``ss.open``: a packed file as a data container, read zero-copy from a memory map.

``ds = ss.open(path)``; ``len(ds)``; ``ds[i]`` is a dict of the decoded fields of sample ``i``.
Reads are thread-safe. Arrays returned for ``F.Array`` fields and raw images are read-only views
into the file (copy one to modify it); ``getobs_into`` writes fields straight into a batch buffer.

Replace a packed file that readers may have open by renaming a new one over it (``ss.write`` does):
they keep reading the old one. Truncating or copying over it in place changes the pages under their
memory map; a read that touches a page past the new end gets SIGBUS, which Python cannot catch. Each
read first checks (one ``fstat``) that the file is unchanged and raises ``CorruptFileError`` if not,
which narrows that window to the reads already running when the file changes (``files.identity``).
"""

from __future__ import annotations

import bisect
import json
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import ChecksumError, CorruptFileError, FormatVersionError, MissingFieldError, NotAPackedFileError
from ..core.processlock import ProcessLock
from ..core.spec import Spec
from ..images.mapfields import mapfields
from . import format as _format
from .field import Column, Field, ScalarColumn, field_from_spec
from .field import pyarrow_module as _pa
from .field_array import FixedColumn
from .field_image import ImageColumn
from .local import LocalFile
from .pagememory import PageMemory

__all__ = ["PackedDataset", "checked_indices"]

# what decoding damaged bytes raises (columns raise ValueError; the others are a safety net): every
# one becomes a CorruptFileError naming the file, sample, page and field
_DAMAGE = (ValueError, IndexError, TypeError, OverflowError, UnicodeDecodeError)
_FLAT_MAX_ROW_BYTES = 256  # fields this small per sample are gathered from one concatenated array


class PackedDataset:
    """A packed file as a container of dict samples (see ``ss.open``)."""

    def __init__(self, path: str | os.PathLike, cache: str = "os", fields: list[str] | None = None, *, source: Any = None):
        """``source``: where the pages come from (a page source, see ``files.local``); a local file
        at ``path`` read with ``cache`` when None."""
        self._source = LocalFile(path, cache) if source is None else source
        self.path = self._source.name
        self.cache = cache
        self._identity = self._source.identity
        schema = self._source.schema
        try:
            column_names = list(schema.names)
        except ValueError as exc:  # a damaged name that is not UTF-8
            raise CorruptFileError(self.path, f"the column names cannot be read: {exc}") from None
        raw_meta = meta = (schema.metadata or {}).get(_format.META_KEY)
        if meta is None:
            raise NotAPackedFileError(self.path, "an Arrow file, but not one slipstream wrote (no 'slipstream' schema metadata)")
        try:
            meta = json.loads(meta)
        except ValueError:
            raise CorruptFileError(self.path, "the slipstream schema metadata is not valid JSON") from None
        if not isinstance(meta, dict) or meta.get("format") != _format.FORMAT:
            raise NotAPackedFileError(self.path, f"the schema metadata names format {meta.get('format') if isinstance(meta, dict) else meta!r}, not {_format.FORMAT!r}")
        if not isinstance(meta.get("version"), int) or meta["version"] > _format.VERSION:
            raise FormatVersionError(self.path, f"format version {meta.get('version')} is newer than this slipstream reads ({_format.VERSION}): upgrade slipstream")
        self.format_metadata = meta  # the format's own: fields, codecs, page size (see _format)
        try:
            all_fields = {name: field_from_spec(spec) for name, spec in meta["fields"].items()}
        except (ValueError, TypeError, KeyError) as exc:
            raise CorruptFileError(self.path, f"the field descriptions cannot be read: {exc}") from None
        names = [n for n in column_names if n in all_fields] if fields is None else list(fields)
        missing = [n for n in names if n not in all_fields]
        if missing:
            stored = [n for n in column_names if n in all_fields]
            raise MissingFieldError(self.path, f"no field {missing[0]!r} in the file; it has {stored}")
        for name, field in all_fields.items():
            index = schema.get_field_index(name)
            if index < 0 or schema.field(index).type != field.arrow_type():
                found = "no such column" if index < 0 else f"column type {schema.field(index).type}"
                raise CorruptFileError(self.path, f"field {name!r} should be stored as {field.arrow_type()} but the file has {found}")
        self.fields: dict[str, Field] = {n: all_fields[n] for n in names}
        self._schema_crc = _format.metadata_checksum(raw_meta)
        self._columns_index = [schema.get_field_index(n) for n in names]
        starts, checks = [], []
        total = 0
        for p, (first, rows, check, schema_check) in enumerate(self._source.page_table()):
            if first != total or rows < 0:
                raise CorruptFileError(self.path, f"page {p} says it holds samples from {first} but {total} were expected")
            if p == 0 and schema_check != self._schema_crc:
                raise CorruptFileError(self.path, "the schema metadata does not match the checksum its pages were written with")
            starts.append(total)
            checks.append(check)
            total += rows
        self._starts = starts
        self._checks = checks
        self._n = total
        self._starts_array = np.asarray(starts, dtype=np.int64)
        self._pages = PageMemory(len(starts), self._source.recent)
        self._flights = _Flights()
        self._flats: dict[str, np.ndarray | None] = {}

    # -- container protocol ------------------------------------------------------------------
    def __len__(self) -> int:
        return self._n

    @property
    def metadata(self) -> dict[str, Any]:
        """The writer's own metadata (``ss.write(metadata=...)``; class names that ``slipstream convert``
        stored under ``"class_names"``: {field: [names]}), a fresh copy; ``{}`` when none."""
        return json.loads(json.dumps(_format.user_metadata(self.format_metadata)))

    @property
    def num_pages(self) -> int:
        return len(self._starts)

    def page_starts(self) -> np.ndarray:
        """The first sample index of each page (for page-aware orders)."""
        return np.asarray(self._starts, dtype=np.int64)

    def page(self, p: int) -> dict[str, Column]:
        """Page ``p``'s columns, one per field read (``Column.get(row)`` decodes a row), mapped on first
        use and kept; ``CorruptFileError`` when the page cannot be mapped. A source that is not local
        reads a page once for the threads that ask for it at once (``_Flights``)."""
        columns = self._pages.get(p)
        if columns is not None:
            return columns
        if self._source.local:  # (mapping a page costs nothing to share)
            return self._read_page(p)
        return self._flights.read(p, self._pages.get, self._read_page)

    def _read_page(self, p: int) -> dict[str, Column]:
        """Page ``p`` read from the source, mapped into columns and kept."""
        self._source.check()  # (reads of a loaded page are checked by their callers, once each)
        batch = self._source.batch(p)  # a remote source raises its own errors (RemoteReadError...)
        try:
            batch.validate()  # buffer sizes against lengths (cheap; offsets are checked by the columns)
            columns = {n: self.fields[n].column(batch.column(k)) for n, k in zip(self.fields, self._columns_index)}
        except Exception as exc:  # noqa: BLE001 - any failure to map a page is damage
            raise CorruptFileError(self.path, f"page {p} cannot be read: {exc}") from exc
        self._pages.put(p, columns)
        return columns

    def _locate(self, index: Any, check: bool = True) -> tuple[dict[str, Column], int, int]:
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"sample index must be an integer, got {type(index).__name__}")
        if check:
            self._source.check()
        i = int(index)
        if i < 0:
            i += self._n
        if not 0 <= i < self._n:
            raise IndexError(f"{self.path}: sample index {index} is out of range for {self._n} samples")
        p = bisect.bisect_right(self._starts, i) - 1
        return self.page(p), i - self._starts[p], i

    def __getitem__(self, index: int) -> dict[str, Any]:
        columns, row, i = self._locate(index)
        try:
            return {name: column.get(row) for name, column in columns.items()}
        except _DAMAGE as exc:
            raise self._damage(exc, i, columns, row) from exc

    def getobs_into(self, buffer: Any, index: int, fields: Any = None) -> dict[str, Any]:
        """Write sample ``index`` into ``buffer`` (a dict of per-field arrays, or None where a field
        cannot be written in place); return the sample, whose array fields are the buffer's arrays.
        ``fields`` limits the read to those fields."""
        columns, row, i = self._locate(index)
        get = buffer.get if isinstance(buffer, dict) else (lambda name: None)
        names = columns if fields is None else fields
        try:
            return {name: columns[name].into(get(name), row) for name in names}
        except _DAMAGE as exc:
            raise self._damage(exc, i, columns, row) from exc

    def source_of(self, index: int) -> Path:
        """The file that holds sample ``index``: this one (a ``ShardedDataset`` names the shard's)."""
        return self.path

    def encoded(self, index: int, name: str, *, check: bool = True) -> tuple[str, Any, tuple[int, int, int]]:
        """(codec, stored bytes, (H, W, C)) of image field ``name`` of sample ``index``, the bytes a
        zero-copy read-only view into the page: for pipelines that decode it themselves. ``check=False``
        skips the file-identity check (one fstat), for a caller that has just read the sample's other
        fields, which checked it (``ss.open(p).map`` does)."""
        columns, row, i = self._locate(index, check=check)
        column = columns[name]
        if not isinstance(column, ImageColumn):
            raise TypeError(f"{self.path}: field {name!r} is not an image field ({self.fields[name]!r})")
        try:
            return column.codec(row), column.encoded(row), column.stored_shape(row)  # the decoder checks the header
        except _DAMAGE as exc:
            raise CorruptFileError(self.path, f"sample {i}, field {name!r}: {exc}") from exc

    def map(self, **pipelines: Any) -> Any:
        """``ds.map(image=[ops...])``: a view whose field ``image`` goes through that pipeline (see
        ``slipstream.ops``); ``ds.map(image=[ops...], device="cuda")`` runs its pixel work on that
        torch device (``slipstream.images.device.devicemap``; options ``cpu_share``, ``dtype``, ``layout``)."""
        return mapfields(self, **pipelines)

    def batch_spec(self) -> Spec | None:
        """The structure of a batch of this file's samples, from the fields (and the first sample's
        stored shapes, read without decoding): fixed-size fields are arrays, Text and Bytes lists,
        while fields whose values vary per sample (JSON, ragged arrays, images) are collated per
        batch exactly as ``default_collate`` would (in place when they match the first sample's
        shape). None for an empty file."""
        if self._n == 0:
            return None
        columns = self.page(0)
        try:
            return Spec({name: column.batch_node(0) for name, column in columns.items()})
        except _DAMAGE as exc:
            raise self._damage(exc, 0, columns, 0) from exc

    def locate_many(self, indices: Any) -> tuple[np.ndarray, np.ndarray]:
        """(samples, pages): ``indices`` as non-negative sample numbers (intp) and the page of each;
        ``TypeError`` / ``IndexError`` (naming the file) for indices that are not in range."""
        idx = checked_indices(indices, self._n, f"{self.path}: ", "")
        return idx, np.searchsorted(self._starts_array, idx, side="right") - 1

    def getobs_batch_into(self, buffer: Any, indices: Any, fields: Any = None) -> dict[str, Any]:
        """Read samples ``indices`` into ``buffer`` (a dict of per-field arrays with one row per
        index, or None where a field cannot be written in place); return a dict whose field is the
        buffer's array when every row was written into it, else a list of the rows' values (rows
        already written in place given as views of the buffer), for the caller to check and
        collate. Small fixed-size fields are gathered with one ``take`` per field; larger ones are
        copied (or decoded) row by row into place. ``fields`` limits the read to those fields.
        """
        self._source.check()
        idx, pages = self.locate_many(indices)
        rows = (idx - self._starts_array[pages]).tolist()
        pages = pages.tolist()
        get = buffer.get if isinstance(buffer, dict) else (lambda name: None)
        out: dict[str, Any] = {}
        for name in self.fields if fields is None else fields:
            target = get(name)
            flat = self._flat(name)
            if flat is not None and isinstance(target, np.ndarray) and target.shape == (len(idx), *flat.shape[1:]) and target.dtype == flat.dtype:
                flat.take(idx, axis=0, out=target, mode="clip")  # bounds checked above
                out[name] = target
                continue
            if isinstance(target, np.ndarray) and self._fixed_rows_into(name, target, pages, rows):
                out[name] = target
                continue
            out[name] = self._rows_into(name, target if isinstance(target, np.ndarray) else None, idx, pages, rows)
        return out

    def _rows_into(self, name: str, target: np.ndarray | None, idx: np.ndarray, pages: list[int], rows: list[int]) -> Any:
        """Field ``name`` of the rows, decoded into ``target``'s rows where each fits exactly (then
        ``target`` is returned), else a list of the values (see ``getobs_batch_into``)."""
        values: list[Any] | None = None if target is not None else []
        for j, (p, r) in enumerate(zip(pages, rows)):
            column = self.page(p)[name]
            try:
                if values is not None:
                    values.append(column.get(r))
                    continue
                view = target[j, ...]  # a 0-d view, not a scalar, for a 1-d target
                result = column.into(view, r)
            except _DAMAGE as exc:
                raise CorruptFileError(self.path, f"sample {int(idx[j])} (page {p}, row {r}), field {name!r}: {exc}") from exc
            if result is view:
                continue
            if isinstance(result, (np.ndarray, np.generic)) and result.shape == view.shape and result.dtype == view.dtype:
                view[...] = result
                continue
            values = [target[k, ...] for k in range(j)] + [result]  # the spec decides what to do with it
        return target if values is None else values

    def _fixed_rows_into(self, name: str, target: np.ndarray, pages: list[int], rows: list[int]) -> bool:
        """Fixed-shape arrays (and, for a remote file, whose values are not gathered over every page,
        scalars): plain row copies, page by page (no per-sample dispatch)."""
        kinds = (FixedColumn,) if self._source.local else (FixedColumn, ScalarColumn)
        if not isinstance(self.page(pages[0])[name] if pages else None, kinds):
            return False
        by_page: dict[int, tuple[list[int], list[int]]] = {}
        for j, (p, r) in enumerate(zip(pages, rows)):
            positions, page_rows = by_page.setdefault(p, ([], []))
            positions.append(j)
            page_rows.append(r)
        for p, (positions, page_rows) in by_page.items():
            if not self.page(p)[name].rows_into(target, positions, page_rows):
                return False
        return True

    def _flat(self, name: str) -> np.ndarray | None:
        """All of a small fixed-size field's values as one array (built on first use), else None."""
        if name in self._flats:
            return self._flats[name]
        if not self._source.local:  # every page of a remote file: not for a label column
            self._flats[name] = None
            return None
        columns = [self.page(p)[name] for p in range(self.num_pages)]
        flat = None
        if columns and all(isinstance(c, (ScalarColumn, FixedColumn)) for c in columns):
            if columns[0].values[:1].nbytes <= _FLAT_MAX_ROW_BYTES:
                flat = np.concatenate([c.values for c in columns])
        self._flats[name] = flat
        return flat

    def _damage(self, exc: Exception, i: int, columns: dict[str, Column], row: int) -> Exception:
        """The ``CorruptFileError`` for ``exc``, raised while decoding sample ``i``, naming the field
        that fails to decode; ``exc`` itself when every field decodes (it was not damage)."""
        for name, column in columns.items():  # find the field that fails, for the message
            try:
                column.get(row)
            except _DAMAGE:
                return CorruptFileError(self.path, f"sample {i} (page {self._page_of(i)}, row {row}), field {name!r}: {exc}")
        return exc

    def _page_of(self, i: int) -> int:
        return bisect.bisect_right(self._starts, i) - 1

    # -- checks and inspection ---------------------------------------------------------------
    def validate(self) -> None:
        """Check every page against its stored checksum; raise ``ChecksumError`` naming the first bad page.
        A source with checks of its own (data read in place: ``inplace``) runs those instead."""
        own = getattr(self._source, "validate", None)
        if own is not None:
            own(self._starts, self._n)
            return
        pa = _pa()
        for p, (start, expected) in enumerate(zip(self._starts, self._checks)):
            stop = self._starts[p + 1] if p + 1 < len(self._starts) else self._n
            try:
                actual = _format.page_checksum(self._source.batch(p))
            except (pa.ArrowException, CorruptFileError) as exc:
                raise ChecksumError(self.path, f"page {p} (samples {start}..{stop - 1}) cannot be read: {exc}", p, range(start, stop)) from None
            if actual != expected:
                raise ChecksumError(
                    self.path, f"page {p} (samples {start}..{stop - 1}) fails its checksum (stored {expected}, computed {actual})", p, range(start, stop)
                )

    def __repr__(self) -> str:
        return f"ss.open({str(self.path)!r}): {self._n} samples in {self.num_pages} pages, fields {list(self.fields)}"

    @property
    def identity(self) -> tuple[int, int, int]:
        """(inode, size, mtime in ns) of the file as opened: a file with another is other data
        (for a remote object, its source's identity)."""
        return self._identity

    @property
    def file_size(self) -> int:
        """The file's (or object's) size in bytes."""
        return int(self._source.size)

    def stored_bytes(self) -> dict[str, int]:
        """Bytes each field read takes in the file, over every page (reads every page: for a remote
        file, downloads it)."""
        out = dict.fromkeys(self.fields, 0)
        for p in range(self.num_pages):
            batch = self._source.batch(p)
            for name, k in zip(self.fields, self._columns_index):
                out[name] += batch.column(k).nbytes
        return out

    @property
    def remote(self) -> bool:
        """Whether the pages are read into memory rather than memory-mapped from this file (object
        storage, data read in place: fetched or decoded, the recently used ones kept a while)."""
        return not self._source.local

    def pages_kept(self) -> int | None:
        """The most pages of this file a process keeps decoded at once (``keep``: the bound on the
        pages read into memory, shared by the files opened together), or None when every page is
        kept (a local file's pages are a memory map). An order that reads more pages than this
        back and forth (a global shuffle) reads most of them again."""
        recent = self._source.recent
        return None if recent is None else int(recent.keep)

    def remote_stats(self) -> dict[str, Any] | None:
        """A remote file's fetch counters in this process (requests, bytes, hits, misses, retries,
        pages the cache could not take, hit rate, cache bytes on disk; shared by the files opened
        together); None for a local file."""
        fetcher = getattr(self._source, "fetcher", None)
        return None if fetcher is None else fetcher.stats()

    def prefetch(self, indices: Any) -> None:
        """A hint that samples ``indices`` will be read soon: a remote file starts fetching their
        pages in the background (bounded); a local file has nothing to do. Never raises for
        indices out of range (they are ignored); a fetch that fails fails again when read."""
        if self._source.local:
            return
        idx = np.asarray(indices, dtype=np.int64).ravel()
        idx = idx[(idx >= 0) & (idx < self._n)]
        pages = np.unique(np.searchsorted(self._starts_array, idx, side="right") - 1)
        self._source.prefetch([p for p in pages.tolist() if not self._pages.has(p)])

    def __getstate__(self) -> dict[str, Any]:  # reopened by path (or from its remote source): pages are never pickled
        state = {"path": str(self.path), "cache": self.cache, "fields": list(self.fields), "identity": self._identity}
        if not isinstance(self._source, LocalFile):
            state["source"] = self._source
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Reopen by path (a spawned worker process), refusing a file that is not the one pickled:
        one renamed over it since would be other data than the parent's reader serves."""
        self.__init__(state["path"], state["cache"], state["fields"], source=state.get("source"))  # type: ignore[misc]
        pickled = state.get("identity")
        if pickled is not None and tuple(pickled) != tuple(self._identity):
            raise CorruptFileError(
                self.path,
                "was replaced since the dataset was opened in the process that sent it here (a new file renamed "
                "over it): this process would read other data than that one; open the new file with ss.open "
                "(a new loader), or keep the old one in place until the run ends",
            )


class _Flight:
    """One read of a page under way: ``done`` once it ended, with its ``value`` or its ``error``
    (both None: it was interrupted, by something other than an ``Exception``)."""

    __slots__ = ("done", "error", "value")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: Exception | None = None


class _Flights:
    """The page reads under way in this process, one per page: a thread that asks for a page being
    read waits for that read and gets its result or its error; a read that ended is forgotten, so
    the next caller after a failure reads again. The lock is held only to look a page up (never
    across a read, nor across pages); a forked process starts with none under way."""

    def __init__(self) -> None:
        self._lock = ProcessLock()
        self._pid = os.getpid()
        self._running: dict[int, _Flight] = {}

    def read(self, p: int, kept: Callable[[int], Any], read: Callable[[int], Any]) -> Any:
        """Page ``p``: ``kept(p)`` when not None, else the result of the one ``read(p)`` under way
        (this thread's, when none is)."""
        while True:
            with self._lock:
                if self._pid != os.getpid():  # a forked child: the parent's reads are not running here
                    self._pid, self._running = os.getpid(), {}
                value = kept(p)  # (kept before its flight ends: a thread that comes after finds it)
                if value is not None:
                    return value
                flight = self._running.get(p)
                lead = flight is None
                if flight is None:
                    flight = self._running[p] = _Flight()
            if lead:
                return self._lead(p, flight, read)
            flight.done.wait()
            if flight.error is not None:
                raise flight.error
            if flight.value is not None:
                return flight.value
            # the leader was interrupted (KeyboardInterrupt, ...): this thread tries itself

    def _lead(self, p: int, flight: _Flight, read: Callable[[int], Any]) -> Any:
        try:
            flight.value = read(p)
            return flight.value
        except Exception as exc:
            flight.error = exc
            raise
        finally:
            with self._lock:
                if self._running.get(p) is flight:
                    del self._running[p]
            flight.done.set()


def checked_indices(indices: Any, n: int, before: str, after: str) -> np.ndarray:
    """``indices`` (a 1-d integer sequence, negative ones counting from the end) as non-negative
    intp sample numbers below ``n``; else ``TypeError`` / ``IndexError``, the message between
    ``before`` and ``after`` (what names the data)."""
    idx = np.asarray(indices)
    if idx.dtype.kind not in "iu" or idx.ndim != 1:
        raise TypeError(f"indices must be a 1-d sequence of integers, got {idx.dtype} of shape {idx.shape}")
    idx = np.where(idx < 0, idx + n, idx).astype(np.intp, copy=False)
    if len(idx) and (idx.min() < 0 or idx.max() >= n):
        bad = int(np.asarray(indices)[np.argmax((idx < 0) | (idx >= n))])
        raise IndexError(f"{before}sample index {bad} is out of range for {n} samples{after}")
    return idx

