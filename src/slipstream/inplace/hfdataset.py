"""A Hugging Face ``datasets.Dataset`` read in place: its Arrow table as the pages of a ``PackedDataset``.

``open_hf_dataset(dataset)`` reads ``dataset.data.table`` (memory-mapped for a dataset loaded from
its cache files: ``load_from_disk``, ``Dataset.from_file``, the result of ``.map``; in memory for
``from_dict`` and the like) without copying it into a packed file. ``datasets`` is never imported
here: a dataset is recognized by its type (``is_hf_dataset``).

Parts (the pages): the table's record batches, each cut into runs of at most ``PART_ROWS`` rows
(1,000: ``datasets``' own default writer batch; image datasets are written 100 rows a batch, so
there a part is one batch) and of about ``PART_BYTES`` (32 MiB) of table at its mean row size, so a
decoded part stays bounded even for one in-memory chunk of a million rows. ``order="quasi_random"``
treats parts as pages; the ``keep`` most recently used are kept decoded per process.

Columns map to fields as ``ss.write(path, dataset)`` maps them (``convert.columns.hf_column``, from
``dataset.features``): ``Image`` -> ``image=`` (default ``F.Image(codec="jpeg")``), the stored JPEG
or PNG bytes kept as they are (a row that holds only a path reads that file, relative paths under
the working folder at open); ``ClassLabel`` -> ``F.Int`` with its names as
``ds.metadata["class_names"][column]``; lists of integers (``Sequence``/``List`` of ``Value``
ints) -> ``F.Tokens``; ``ArrayND`` -> ``F.Array``; ``Json`` -> ``F.JSON``; ``Value`` -> numbers,
bools, text, bytes. Numbers, labels and token lists are read zero-copy where the stored type is the
field's (a part of a table's rows in order; a gathered view part is a copy). ``fields=`` reads only
those columns (others are not even mapped).

A view with an indices mapping (``select`` of scattered rows, ``shuffle``, ``filter``, ``sort``)
gives the view's rows in the view's order: parts are runs of ``PART_ROWS`` consecutive *view* rows,
each read as one gather (``take``) of the table, or as a zero-copy slice where its rows are
consecutive in the table. (No ``flatten_indices()`` needed; a gathered part is a copy of its rows.)

What is read: the cache files as ``open_hf_dataset`` finds them, each mapped again from a
descriptor of this module's own, its identity (inode, size, mtime) taken from that descriptor
(``fstat``), so the identity recorded is that of the bytes read. The table is built again from
``dataset.data`` the way ``datasets`` builds it when it unpickles one: each memory-mapped block
from its file with the dataset's recorded transforms (``replays``: ``cast``, ``rename_columns``,
``select``...) applied again (a column a replay recasts is computed again: a copy, as in a
``datasets`` worker), in-memory blocks as they are, concatenations in their order; an indices
mapping the same way. The dataset's own memory maps are not read: a file renamed over a cache file
after ``load_from_disk`` is what every process reads (as ``datasets``' own pickling would), and one
that holds other columns or another row count than the loaded table is refused with
``CorruptFileError`` (load the dataset again).

Pickling (process workers started by spawn or forkserver): the table pickles as that recipe, a
memory-mapped block by its path and replays (small), an in-memory one whole (save it with
``save_to_disk`` and ``load_from_disk`` to share one memory map instead). Unpickling maps each
cache file from its own descriptor and compares that descriptor's identity with the one recorded
at open before reading anything from it: a file changed, replaced or removed since is refused with
``CorruptFileError``. The opening process checks the paths (one ``stat`` each) before every part
read. So a cache file rewritten or replaced under the reader is never read as if it were the data
opened, and every process reads the same bytes. ``identity`` is the dataset's ``_fingerprint`` at
open with those file identities (two views of one file differ).
``datasets`` stores no checksums: ``validate()`` reads every part and checks each value (image
headers, nulls, types), naming the rows of the first part that fails.
"""

from __future__ import annotations

import json
import mmap
import os
import stat
from pathlib import Path
from typing import Any

import numpy as np

from ..convert.columns import Column, hf_column
from ..core.errors import CorruptFileError, MissingFieldError
from ..files import field_kinds as F
from ..files.field import pyarrow_module as _pa
from ..files.packed import PackedDataset
from ..files.pagememory import RecentPages
from .tablepages import DEFAULT_KEEP, TablePages

__all__ = ["PART_BYTES", "PART_ROWS", "HFDatasetPages", "is_hf_dataset", "open_hf_dataset"]

PART_ROWS = 1000  # at most this many rows a part (datasets' default writer batch size)
PART_BYTES = 32 << 20  # and about this many bytes of table at its mean row size


def is_hf_dataset(obj: Any) -> bool:
    """Whether ``obj`` is a map-style Hugging Face ``datasets.Dataset`` (by its type: nothing is imported)."""
    return any(cls.__module__ == "datasets.arrow_dataset" and cls.__name__ == "Dataset" for cls in type(obj).__mro__)


class HFDatasetPages(TablePages):
    """A ``datasets.Dataset``'s table as pages (see the module doc)."""

    def __init__(
        self, dataset: Any, fields: list[str] | None = None, *, image: F.Image | None = None, recent: RecentPages | None = None
    ):
        features = json.loads(json.dumps(dataset.features.to_dict()))  # tuples as lists, as hf_column reads them
        plans = (_plan(dataset.data), None if dataset._indices is None else _plan(dataset._indices))
        files: dict[str, _Mapped] = {}
        data, indices = (None if plan is None else _build(plan, files, None) for plan in plans)
        for mine, loaded in ((data, dataset.data), (indices, dataset._indices)):
            loaded = getattr(loaded, "table", loaded)
            if loaded is not None and (mine.num_rows != loaded.num_rows or not mine.schema.equals(loaded.schema)):
                raise CorruptFileError(
                    next(iter(files), "Hugging Face dataset"),
                    f"its cache files now hold {mine.num_rows} rows of {mine.schema.names}, the loaded dataset "
                    f"{loaded.num_rows} rows of {loaded.schema.names}: a cache file was replaced since the dataset "
                    "was loaded; load it again",
                )
        limits = (PART_ROWS, PART_BYTES)
        fingerprint, base = str(dataset._fingerprint), str(Path.cwd())
        self._open(data, indices, plans, files, features, fingerprint, fields, image, recent, base, limits)

    def _open(
        self, data: Any, indices: Any, plans: tuple[Any, Any], files: dict[str, _Mapped], features: dict[str, Any],
        fingerprint: str, fields: list[str] | None, image: F.Image | None, recent: RecentPages | None, base: str,
        limits: tuple[int, int],
    ) -> None:  # fmt: skip
        self._plans, self._features, self._fingerprint = plans, features, fingerprint
        self._maps = {path: m.buffer for path, m in files.items()}  # the memory maps the table reads
        seen = [(path, m.seen) for path, m in files.items()]
        self._seen, self._wanted, self._base, self._limits = seen, None if fields is None else list(fields), base, limits
        self._image = image if image is not None else F.Image(codec="jpeg")
        self._table = data
        self._index = None if indices is None else indices.column(0)
        rows = self._table.num_rows if self._index is None else len(self._index)
        first_file = next((path for path, _ in seen), None)
        self.name = f"Hugging Face dataset ({rows} rows{', ' + first_file if first_file else ''})"
        self.size = sum(s[1] for _, s in seen) if seen else int(self._table.nbytes)
        self.identity = (fingerprint, tuple((path, tuple(s)) for path, s in seen))
        self._parts = self._layout(rows)
        super().__init__(self._columns(), [n for _, n in self._parts], None, recent)
        self._names = [c.name for c in self.columns]

    def _columns(self) -> list[Column]:
        pa = _pa()
        schema = self._table.schema
        names = list(schema.names) if self._wanted is None else self._wanted
        missing = [n for n in names if n not in schema.names]
        if missing:
            raise MissingFieldError(self.name, f"no column {missing[0]!r}; it has {list(schema.names)}")

        def first(name: str) -> Any:  # a column's first values (binary columns without a feature: image bytes?)
            column = self._table.column(name)
            return column.slice(0, 16).combine_chunks() if len(column) else pa.array([], type=column.type)

        base = Path(self._base)
        return [
            hf_column(self.name, n, self._features.get(n), schema.field(n).type, lambda n=n: first(n), self._image, base)  # type: ignore[arg-type]
            for n in names
        ]

    def _layout(self, rows: int) -> list[tuple[int, int]]:
        """(first row, rows) of each part: record batches (or runs of view rows) cut to the limits."""
        most_rows, most_bytes = self._limits
        row_bytes = max(1, int(self._table.nbytes) // max(1, self._table.num_rows))
        limit = max(1, min(most_rows, most_bytes // row_bytes))
        if self._index is None:
            runs, start = [], 0
            for batch in self._table.to_batches():
                runs.append((start, batch.num_rows))
                start += batch.num_rows
        else:
            runs = [(0, rows)]
        return [(start + k, min(limit, n - k)) for start, n in runs for k in range(0, n, limit)]

    def where(self, p: int) -> str:
        start, rows = self._parts[p]
        return f"rows {start}..{start + rows - 1} (part {p})"

    def read_part(self, p: int) -> Any:
        pa = _pa()
        start, rows = self._parts[p]
        if self._index is None:
            return _one_batch(self._table.slice(start, rows))
        rows_of = np.asarray(self._index.slice(start, rows).to_numpy(), dtype=np.int64)
        if rows and rows_of[0] >= 0 and (rows == 1 or bool(np.all(np.diff(rows_of) == 1))):
            first = int(rows_of[0])
            if first + rows <= self._table.num_rows:
                return _one_batch(self._table.slice(first, rows))  # consecutive rows: a zero-copy slice
        try:
            return _one_batch(self._table.take(pa.array(rows_of)))
        except (pa.ArrowException, IndexError) as exc:
            raise CorruptFileError(
                self.name, f"{self.where(p)}: the indices mapping names rows the table does not hold: {exc}"
            ) from None

    def check(self) -> None:
        """``CorruptFileError`` when a cache file is not the one opened (one ``stat`` each)."""
        for path, seen in self._seen:
            try:
                st = os.stat(path)
            except FileNotFoundError:
                raise CorruptFileError(path, f"the cache file of the {self.name} was removed since it was opened") from None
            _same(path, self.name, tuple(seen), (st.st_ino, st.st_size, st.st_mtime_ns))

    def where_samples(self, p: int, start: int, stop: int) -> str:
        return self.where(p)  # (it names the rows already)

    def __getstate__(self) -> dict[str, Any]:
        return {
            "plans": self._plans, "features": self._features, "fingerprint": self._fingerprint, "seen": self._seen,
            "fields": self._wanted, "image": self._image, "keep": self.recent.keep, "base": self._base,
            "limits": self._limits, "parts": self._parts, "name": self.name,
        }  # fmt: skip

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Reopen in another process: each cache file mapped from a descriptor whose identity is the
        one recorded at open (else refused before it is read), then the table built again."""
        self.name, seen = state["name"], {path: tuple(s) for path, s in state["seen"]}
        files: dict[str, _Mapped] = {}
        data, indices = (
            None if plan is None else _build(plan, files, lambda path: (self.name, seen.get(path, ()))) for plan in state["plans"]
        )
        self._open(
            data, indices, state["plans"], files, state["features"], state["fingerprint"], state["fields"], state["image"],
            RecentPages(state["keep"]), state["base"], tuple(state["limits"]),
        )  # fmt: skip
        if self._parts != state["parts"]:
            raise CorruptFileError(
                self.name, "its table reads back with other rows than when it was opened: open the dataset again"
            )


class _Mapped:
    """One cache file mapped from a descriptor of our own: its Arrow table (zero-copy), the buffer
    over the map, and the (inode, size, mtime) that descriptor had."""

    def __init__(self, path: str, expected: tuple[str, tuple[int, ...]] | None):
        pa = _pa()
        try:
            fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        except FileNotFoundError:
            since = "loaded" if expected is None else "opened"
            what = "Hugging Face dataset" if expected is None else expected[0]
            raise CorruptFileError(path, f"the cache file of the {what} was removed since it was {since}") from None
        try:
            st = os.fstat(fd)
            self.seen = (st.st_ino, st.st_size, st.st_mtime_ns)
            if expected is not None:
                _same(path, expected[0], expected[1], self.seen)
            if not stat.S_ISREG(st.st_mode):
                raise CorruptFileError(path, "the cache file is not a file")
            self.buffer = pa.py_buffer(mmap.mmap(fd, 0, access=mmap.ACCESS_READ) if st.st_size else b"")
        finally:
            os.close(fd)
        try:
            self.table = pa.ipc.open_stream(pa.BufferReader(self.buffer)).read_all()
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise CorruptFileError(path, f"the cache file is not a readable Arrow stream: {exc}") from None


def _same(path: str, name: str, seen: tuple[int, ...], now: tuple[int, int, int]) -> None:
    """``CorruptFileError`` unless a cache file's identity ``now`` is the one ``seen`` at open."""
    if now != seen:
        size = seen[1] if len(seen) > 1 else "?"
        raise CorruptFileError(
            path,
            f"the cache file of the {name} changed since it was opened (size {size} -> {now[1]} bytes, "
            "or replaced): load the dataset again and open it again to read the new contents",
        )


def _plan(table: Any) -> Any:
    """How to build a ``datasets`` table again (see the module doc): ``("mapped", cls, path, replays)``,
    ``("concat", cls, [[plan, ...], ...], schema)`` or ``("memory", table)`` (pickled as ``datasets`` pickles it)."""
    if hasattr(table, "blocks"):
        return ("concat", type(table), [[_plan(block) for block in row] for row in table.blocks], table.table.schema)
    if hasattr(table, "path") and hasattr(table, "replays"):
        return ("mapped", type(table), str(table.path), list(table.replays))
    return ("memory", table)


def _build(plan: Any, files: dict[str, _Mapped], expected: Any) -> Any:
    """The pyarrow table of ``plan``, its cache files mapped into ``files`` (once each);
    ``expected(path)`` gives (name, identity) each must have, ``None`` records them."""
    kind = plan[0]
    if kind == "memory":
        return getattr(plan[1], "table", plan[1])
    if kind == "mapped":
        _, cls, path, replays = plan
        if path not in files:
            files[path] = _Mapped(path, None if expected is None else expected(path))
        return cls._apply_replays(files[path].table, replays)  # datasets' own replay of its transforms
    _, cls, blocks, schema = plan
    table = cls._concat_blocks_horizontally_and_vertically([[_build(b, files, expected) for b in row] for row in blocks])
    if table.schema != schema:  # as datasets restores a concatenation: missing columns as nulls
        pa = _pa()
        table = pa.concat_tables([table, pa.Table.from_batches([], schema=schema)], promote_options="default")
    return table


def _one_batch(table: Any) -> Any:
    """``table`` as one record batch when its rows lie in one (zero-copy: combining a chunked column
    copies it, even a single chunk), else as it is."""
    batches = table.to_batches()
    return batches[0] if len(batches) == 1 else table


def open_hf_dataset(
    dataset: Any, fields: list[str] | None = None, *, image: F.Image | None = None, keep: int = DEFAULT_KEEP
) -> PackedDataset:
    """A ``datasets.Dataset`` as a ``PackedDataset`` read in place (see the module doc); ``TypeError``
    for anything else (a ``DatasetDict``: pick a split)."""
    if not is_hf_dataset(dataset):
        modules = {cls.__module__ for cls in type(dataset).__mro__}
        hint = ": pick a split (dataset['train'])" if "datasets.dataset_dict" in modules else ""
        hint = ": an IterableDataset has no random access" if "datasets.iterable_dataset" in modules else hint
        raise TypeError(f"expected a map-style datasets.Dataset, got {type(dataset).__name__}{hint}")
    source = HFDatasetPages(dataset, fields, image=image, recent=RecentPages(keep))
    return PackedDataset(source.name, fields=fields, source=source)
