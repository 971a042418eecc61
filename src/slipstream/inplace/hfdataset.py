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

Pickling (process workers started by spawn or forkserver): the tables pickle as ``datasets`` pickles
them, a memory-mapped table by its file's path (small), an in-memory one whole (save it with
``save_to_disk`` and ``load_from_disk`` to share one memory map instead). Unpickling first checks
the cache files (``dataset.cache_files``: data and indices) against their identity at open
(inode, size, mtime); a file changed, replaced or removed since is refused with
``CorruptFileError``, as it is before every part read in the opening process: a cache file
rewritten or replaced under the reader is never read as if it were the data opened. ``identity`` is
the dataset's ``_fingerprint`` at open with those file identities (two views of one file differ).
``datasets`` stores no checksums: ``validate()`` reads every part and checks each value (image
headers, nulls, types), naming the rows of the first part that fails.
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from ..convert.columns import Column, hf_column
from ..core.errors import ChecksumError, CorruptFileError, MissingFieldError
from ..files import field_kinds as F
from ..files.field import pyarrow_module as _pa
from ..files.identity import identity
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
        files = [str(entry["filename"]) for entry in dataset.cache_files if isinstance(entry, dict) and "filename" in entry]
        features = json.loads(json.dumps(dataset.features.to_dict()))  # tuples as lists, as hf_column reads them
        seen = [(path, identity(Path(path))) for path in files]
        limits = (PART_ROWS, PART_BYTES)
        fingerprint, base = str(dataset._fingerprint), str(Path.cwd())
        self._open(dataset.data, dataset._indices, features, fingerprint, seen, fields, image, recent, base, limits)

    def _open(
        self, data: Any, indices: Any, features: dict[str, Any], fingerprint: str, seen: list[tuple[str, tuple[int, int, int]]],
        fields: list[str] | None, image: F.Image | None, recent: RecentPages | None, base: str, limits: tuple[int, int],
    ) -> None:  # fmt: skip
        self._data, self._indices, self._features, self._fingerprint = data, indices, features, fingerprint
        self._seen, self._wanted, self._base, self._limits = seen, None if fields is None else list(fields), base, limits
        self._image = image if image is not None else F.Image(codec="jpeg")
        self._table = getattr(data, "table", data)  # datasets' Table wrapper -> the pyarrow Table
        self._index = None if indices is None else getattr(indices, "table", indices).column(0)
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
                now = identity(Path(path))
            except FileNotFoundError:
                raise CorruptFileError(path, f"the cache file of the {self.name} was removed since it was opened") from None
            if now != tuple(seen):
                raise CorruptFileError(
                    path,
                    f"the cache file of the {self.name} changed since it was opened (size {seen[1]} -> {now[1]} bytes, "
                    "or replaced): load the dataset again and open it again to read the new contents",
                )

    def validate(self, starts: list[int], n: int) -> None:
        """Read every part, checking each value; ``ChecksumError`` naming the first that fails."""
        for p in range(len(self.part_rows)):
            stop = starts[p + 1] if p + 1 < len(starts) else n
            try:
                self.batch(p)
            except CorruptFileError as exc:
                message = str(exc).removeprefix(f"{self.name}: ")
                raise ChecksumError(
                    self.name, f"{self.where(p)} fails its checks: {message}", p, range(starts[p], stop)
                ) from None

    def __getstate__(self) -> dict[str, Any]:
        return {
            "data": pickle.dumps(self._data), "indices": pickle.dumps(self._indices), "features": self._features,
            "fingerprint": self._fingerprint, "seen": self._seen, "fields": self._wanted, "image": self._image,
            "keep": self.recent.keep, "base": self._base, "limits": self._limits, "parts": self._parts, "name": self.name,
        }  # fmt: skip

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Reopen in another process: the cache files checked first, then the tables unpickled."""
        self._seen, self.name = state["seen"], state["name"]
        self.check()
        data, indices = pickle.loads(state["data"]), pickle.loads(state["indices"])
        self._open(
            data, indices, state["features"], state["fingerprint"], state["seen"], state["fields"], state["image"],
            RecentPages(state["keep"]), state["base"], tuple(state["limits"]),
        )  # fmt: skip
        if self._parts != state["parts"]:
            raise CorruptFileError(
                self.name, "its table reads back with other rows than when it was opened: open the dataset again"
            )


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
