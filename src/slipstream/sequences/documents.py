"""Token documents: the protocol ``ss.pack`` reads, and ``documents_of`` that finds it in a container.

A ``Documents`` is a sequence of 1-d integer arrays (documents) kept in *pages*: page ``p`` holds
documents ``page_first[p] .. page_first[p+1]-1`` as ``(offsets, values)``, document ``d`` being
``values[offsets[r]:offsets[r+1]]`` with ``r = d - page_first[p]``. Every document's length is
known up front (``lengths``, from the offsets: no token is read to plan a packing), and the
tokens are read page by page, zero-copy, by the compiled row gather.

Contract for implementations (``token_file``, ``megatron_file`` and packed files return one):
``name`` names the data in error messages; ``page_first`` is int64 (num_pages + 1,), starting at 0,
non-decreasing, ending at the number of documents; ``lengths`` int64, one per document, >= 0;
``dtype`` the stored token dtype, the same on every page; ``page(p)`` returns int64 offsets of
``n_p + 1`` entries and 1-d values of ``dtype`` (thread-safe, callable again for the same page);
``resident`` says whether holding every page at once costs only address space (memory-mapped or
in-memory data; False for pages fetched from object storage); ``check()`` runs before every batch
(a mapped file's cheap is-it-unchanged test; nothing by default). A ``Documents`` must pickle: one
backed by a file reopens it when unpickled rather than carrying its tokens. A page that disagrees
with ``lengths`` is refused when read (``ValueError`` naming the page), never read past.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from ..files.field_tokens import token_ids
from ..files.identity import check_unchanged
from ..files.shards import data_name

__all__ = ["ArrayDocuments", "Documents", "documents_of", "tokens_of"]


class Documents:
    """Token documents in pages: page p holds documents page_first[p] .. page_first[p+1]-1 (see the module doc)."""

    resident = True

    def __init__(self, name: str, page_first: Any, dtype: Any, lengths: Any, *, resident: bool = True):
        self.name = str(name)
        self.page_first = np.ascontiguousarray(page_first, dtype=np.int64)
        self.lengths = np.ascontiguousarray(lengths, dtype=np.int64)
        self.dtype = np.dtype(dtype)
        self.resident = bool(resident)
        first = self.page_first
        if self.dtype.kind not in "iu":
            raise TypeError(f"{self.name}: token documents hold integer token ids, got dtype {self.dtype}")
        if first.ndim != 1 or first.size < 1 or first[0] != 0 or first[-1] != self.lengths.size or (np.diff(first) < 0).any():
            raise ValueError(
                f"{self.name}: page_first must rise from 0 to the {self.lengths.size} documents, got {first[:8].tolist()}.."
            )
        if self.lengths.ndim != 1 or (self.lengths.size and self.lengths.min() < 0):
            raise ValueError(f"{self.name}: document lengths must be a 1-d array of counts >= 0")

    def __len__(self) -> int:
        return int(self.lengths.size)

    @property
    def num_pages(self) -> int:
        return int(self.page_first.size - 1)

    @property
    def tokens(self) -> int:
        """Tokens in every document together."""
        return int(self.lengths.sum())

    def page(self, p: int) -> tuple[np.ndarray, np.ndarray]:
        """(offsets int64 (n_p + 1,), values 1-d of ``dtype``) of page ``p``."""
        raise NotImplementedError

    def check(self) -> None:
        """Called before every batch is read from pages already loaded: a file-backed implementation
        raises here when its file changed in place since it was opened (one ``fstat``); by default
        nothing to check."""

    def document(self, d: int) -> np.ndarray:
        """Document ``d``'s tokens (a read-only view where the page allows)."""
        if not 0 <= d < len(self):
            raise IndexError(f"{self.name}: document {d} is out of range for {len(self)} documents")
        p = int(np.searchsorted(self.page_first, d, side="right")) - 1
        offsets, values = self.page(p)
        r = d - int(self.page_first[p])
        return values[int(offsets[r]) : int(offsets[r + 1])]

    def __repr__(self) -> str:
        return f"Documents({self.name}: {len(self)} documents, {self.tokens} {self.dtype} tokens in {self.num_pages} pages)"


class ArrayDocuments(Documents):
    """Documents held as one page in memory: ``values[offsets[d]:offsets[d+1]]`` is document ``d``."""

    def __init__(self, offsets: Any, values: Any, name: str = "token arrays"):
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        values = np.ascontiguousarray(values)
        if values.ndim != 1:
            raise ValueError(f"{name}: token values must be 1-d, got shape {values.shape}")
        if offsets.ndim != 1 or offsets.size < 1 or offsets[0] < 0 or offsets[-1] > values.size or (np.diff(offsets) < 0).any():
            raise ValueError(f"{name}: offsets must be non-decreasing and inside the {values.size} values")
        super().__init__(name, [0, offsets.size - 1], values.dtype, np.diff(offsets))
        self.offsets, self.values = offsets, values

    def page(self, p: int) -> tuple[np.ndarray, np.ndarray]:
        if p != 0:
            raise IndexError(f"{self.name}: page {p} is out of range for 1 page")
        return self.offsets, self.values


class _FileDocuments(Documents):
    """The ``F.Tokens`` field of a packed file (``PackedDataset`` / ``ShardedDataset``): its pages
    are the file's pages, offsets and values zero-copy over the memory map. Pickles the file (which
    reopens itself) and the lengths, never the tokens."""

    def __init__(self, data: Any, field: str, lengths: np.ndarray | None = None, name: str | None = None):
        self.data, self.field = data, field
        n = len(data)
        first = np.concatenate([np.asarray(data.page_starts(), np.int64), [n]]).astype(np.int64)
        if lengths is None:
            lengths = np.zeros(n, np.int64)
            for p in range(len(first) - 1):
                offsets, _ = self.page(p)
                if offsets.size != first[p + 1] - first[p] + 1:
                    raise ValueError(
                        f"{data_name(data)}: page {p} of field {field!r} has {offsets.size - 1} rows, expected {first[p + 1] - first[p]}"
                    )
                lengths[first[p] : first[p + 1]] = np.diff(offsets)
        dtype = self._values_dtype(first)
        super().__init__(name or f"{data_name(data)} field {field!r}", first, dtype, lengths, resident=_resident(data, len(first) - 1))

    def _values_dtype(self, first: np.ndarray) -> np.dtype:
        tokens_field = self.data.fields[self.field]
        stored = getattr(tokens_field, "dtype", None)
        if stored is not None:
            return np.dtype(stored)
        return self.page(0)[1].dtype if len(first) > 1 else np.dtype(np.int32)

    def page(self, p: int) -> tuple[np.ndarray, np.ndarray]:
        column = self.data.page(p)[self.field]
        return column.offsets, column.values

    def check(self) -> None:
        """The file's (every shard's) is-it-unchanged test, one ``fstat`` each (``CorruptFileError``):
        the pages mapped before are read without the file's own reads, and a file cut in place under
        its map would crash them (SIGBUS)."""
        check_unchanged(self.data)

    def __getstate__(self) -> dict[str, Any]:
        return {"data": self.data, "field": self.field, "lengths": self.lengths, "name": self.name}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["data"], state["field"], state["lengths"], state["name"])  # type: ignore[misc]


def _resident(data: Any, pages: int) -> bool:
    """Whether holding every page of ``data`` at once costs no more than it already does: a local
    packed file's (a memory map), or local data read into memory whose every page fits the pages
    kept decoded (``pages_kept()``: a small Parquet file read in place). Never for pages fetched
    from object storage (``remote_stats()``), which would all be downloaded up front."""
    if not getattr(data, "remote", False):
        return True
    kept = getattr(data, "pages_kept", lambda: None)()
    return kept is not None and pages <= kept and getattr(data, "remote_stats", lambda: None)() is None


def _is_packed_file(data: Any) -> bool:
    return all(hasattr(data, name) for name in ("page", "page_starts", "num_pages", "fields"))


def tokens_of(value: Any, where: str) -> np.ndarray:
    """``value`` as a 1-d integer array; ``TypeError`` / ``ValueError`` naming ``where`` otherwise
    (floats and bools are refused, never cast): ``slipstream.files.field_tokens.token_ids``."""
    return token_ids(value, where)


def _read_container(data: Any, field: str) -> ArrayDocuments:
    """Every document of a container (or iterable) of arrays or dicts, read once into one page."""
    name = f"{type(data).__name__} of {len(data)} documents" if hasattr(data, "__len__") else type(data).__name__
    items: Iterable[Any] = (
        (data[i] for i in range(len(data))) if hasattr(data, "__len__") and hasattr(data, "__getitem__") else data
    )
    arrays: list[np.ndarray] = []
    for d, item in enumerate(items):
        if isinstance(item, dict):
            if field not in item:
                raise KeyError(f"{name}: document {d} has no field {field!r} (it has {sorted(map(str, item))})")
            item = item[field]
        arrays.append(tokens_of(item, f"{name}: document {d}, field {field!r}"))
    if not arrays:
        return ArrayDocuments(np.zeros(1, np.int64), np.zeros(0, np.int32), name)
    dtype = np.result_type(*{a.dtype for a in arrays})
    if dtype.kind not in "iu":  # int64 with uint64: NumPy says float64
        raise TypeError(f"{name}, field {field!r}: documents mix int64 and uint64 token ids; give one dtype")
    offsets = np.zeros(len(arrays) + 1, np.int64)
    np.cumsum([a.size for a in arrays], out=offsets[1:])
    return ArrayDocuments(offsets, np.concatenate(arrays).astype(dtype, copy=False), name)


def documents_of(data: Any, field: str = "tokens") -> Documents:
    """The token documents of ``data``'s ``field``:

    - a ``Documents`` itself;
    - ``data.token_documents(field)`` when the container has it (``ss.token_file``, ``ss.megatron_file``);
    - a packed file (``ss.open``: ``PackedDataset`` / ``ShardedDataset``) with an ``F.Tokens``
      field ``field``: its pages, zero-copy;
    - any other container or iterable of 1-d integer arrays (``field`` unused) or of dicts holding
      one under ``field``: read once into memory.

    Raises ``KeyError`` for a missing field and ``TypeError`` / ``ValueError`` for a document that is
    not a 1-d integer array, naming the data, document and field.
    """
    if isinstance(data, Documents):
        return data
    own = getattr(data, "token_documents", None)
    if callable(own):
        documents = own(field)
        if not isinstance(documents, Documents):
            raise TypeError(
                f"{type(data).__name__}.token_documents({field!r}) returned {type(documents).__name__}, not a Documents"
            )
        return documents
    if _is_packed_file(data):
        fields = data.fields
        if field not in fields:
            raise KeyError(f"{data_name(data)}: no field {field!r} to pack; it has {list(fields)}")
        if getattr(fields[field], "kind", None) != "tokens":
            raise TypeError(
                f"{data_name(data)}: field {field!r} is {fields[field]!r}, not token documents (write it as F.Tokens())"
            )
        return _FileDocuments(data, field)
    if isinstance(data, np.ndarray) and data.ndim != 2:
        raise ValueError(
            f"an array of shape {data.shape} is not token documents: give a 2-d array (one document per row) or a list of 1-d arrays"
        )
    return _read_container(data, field)
