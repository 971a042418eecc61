"""Data stored elsewhere as a page source for ``PackedDataset`` (the protocol of ``files.local``).

A ``TablePages`` is made of *parts* (a Parquet file's row groups, a tar shard's runs of samples, a
Hugging Face dataset's record batches), each one page: ``read_part(p)`` (a subclass's) reads part
``p``'s raw columns, and ``batch(p)`` turns them into the columns the fields store
(``inplace.storage``), so the dataset on top is a ``PackedDataset`` like any other: random access,
``len``, ``page_starts()`` (``order="quasi_random"`` treats parts as pages), ``.map`` pipelines,
compiled image tasks, the device stage, every backend, ranks and resume.

Its schema is the one a packed file with those fields would have (the slipstream metadata, the
class names of Hugging Face ``ClassLabel`` columns under ``metadata["class_names"]``), made here;
pages carry no checksum (-1): what is checked is the source's own (see each subclass). Decoded
parts are real memory, not a memory map: the most recently used ``keep`` of them are kept per
process over all the files opened together (``recent``), and ``local`` is False (no gather over
every page).
"""

from __future__ import annotations

from typing import Any

from ..convert.columns import Column
from ..core.errors import ChecksumError, CorruptFileError, MissingFieldError
from ..files import format as _format
from ..files.field import pyarrow_module as _pa
from ..files.local import PageMeta
from ..files.pagememory import RecentPages
from .storage import stored_array

__all__ = ["DEFAULT_KEEP", "TablePages", "chosen_columns"]

DEFAULT_KEEP = 16  # decoded parts each process keeps (over all the files opened together)


def chosen_columns(name: Any, columns: list[Column], fields: list[str] | None) -> list[Column]:
    """``columns`` limited to ``fields`` (their order), ``MissingFieldError`` naming one that is absent."""
    if fields is None:
        return list(columns)
    by_name = {c.name: c for c in columns}
    missing = [n for n in fields if n not in by_name]
    if missing:
        raise MissingFieldError(name, f"no column {missing[0]!r}; it has {list(by_name)}")
    return [by_name[n] for n in fields]


class TablePages:
    """A table's parts as pages (see the module doc). Subclasses set ``name``, ``size``, ``identity``
    and implement ``read_part(p)`` (a record batch or table with the columns by name), ``check()``
    and pickling."""

    local = False

    def __init__(self, columns: list[Column], part_rows: list[int], user_metadata: dict[str, Any] | None, recent: RecentPages | None):
        pa = _pa()
        self.columns = columns
        self.part_rows = [int(n) for n in part_rows]
        class_names = {c.name: c.class_names for c in columns if c.class_names is not None}
        user = dict(user_metadata or {})
        if class_names:
            user.setdefault("class_names", class_names)
        raw = _format.schema_metadata({c.name: c.field.spec() for c in columns}, 0, user)
        self.schema = pa.schema([pa.field(c.name, c.field.arrow_type(), nullable=False) for c in columns], metadata=raw)
        self._schema_crc = _format.metadata_checksum(raw[_format.META_KEY])
        self.recent = recent if recent is not None else RecentPages(DEFAULT_KEEP)
        starts, total = [], 0
        for rows in self.part_rows:
            starts.append(total)
            total += rows
        self.part_starts = starts

    def page_table(self) -> list[PageMeta]:
        return [(first, rows, -1, self._schema_crc) for first, rows in zip(self.part_starts, self.part_rows)]

    def read_part(self, p: int) -> Any:
        raise NotImplementedError

    def where(self, p: int) -> str:
        """How errors name part ``p`` within the file (the error names the file)."""
        return f"part {p}"

    def batch(self, p: int) -> Any:
        """Part ``p`` as a page: its columns as the fields store them (``CorruptFileError`` naming the
        file, part, column and row when a value cannot be read)."""
        pa = _pa()
        raw = self.read_part(p)
        if raw.num_rows != self.part_rows[p]:
            raise CorruptFileError(self.name, f"{self.where(p)} holds {raw.num_rows} rows, but {self.part_rows[p]} when opened: the data changed")
        where = self.where(p)
        try:
            arrays = [stored_array(c, raw.column(c.name), self.part_starts[p], where) for c in self.columns]
        except (ValueError, TypeError, KeyError) as exc:
            text, own = str(exc), f"{self.name}: "
            if text.startswith(own):  # a column's own error (``convert.columns`` names the file): name the part as well
                text = f"{where}: {text[len(own) :]}"
            raise CorruptFileError(self.name, text) from None
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def validate(self, starts: list[int], n: int) -> None:
        """Check the source (``check()``), then read every part, checking what reading it checks
        (each subclass says what: structure, checksums where stored, headers, values);
        ``ChecksumError`` naming the first part that fails (``page`` and ``samples`` in this file's
        numbers; ``starts``: each page's first sample, ``n`` the samples)."""
        self.check()
        for p in range(len(self.part_rows)):
            stop = starts[p + 1] if p + 1 < len(starts) else n
            try:
                self.batch(p)
            except ChecksumError:
                raise
            except CorruptFileError as exc:
                message = str(exc).removeprefix(f"{self.name}: ")
                where = self.where_samples(p, starts[p], stop)
                raise ChecksumError(self.name, f"{where} fails its checks: {message}", p, range(starts[p], stop)) from None

    def where_samples(self, p: int, start: int, stop: int) -> str:
        """How ``validate`` names part ``p``, holding samples ``start .. stop - 1``."""
        return f"{self.where(p)} (samples {start}..{stop - 1})"

    def prefetch(self, pages: Any) -> None:
        """Nothing to fetch ahead here (a remote subclass may)."""
