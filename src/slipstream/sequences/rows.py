"""Packed rows gathered from token pages: the compiled gather and its NumPy reference.

A row is its pieces laid end to end (``packplan``): each piece's tokens, converted to the output
dtype (an id that does not fit it is a ``ValueError`` naming its document, never wrapped), with its
segment id (1, 2, ... within the row) and positions 0, 1, ... beside them; the
rest of the row is padding: ``pad_id`` tokens, segment 0, positions 0, 1, ... (a padding run
counts as one segment of its own, as ``attention_inputs`` reads it). The outputs are the tokens
and, unless a gather is asked for tokens only (a 1-tuple of outputs), the segment ids and
positions, of a dtype of their own (``segment_dtype``).

``PageTable`` hands the compiled gather each page's offsets and values as addresses, checked once
per page (int64 offsets of one more entry than the page has documents, agreeing with the
documents' lengths; 1-d contiguous values of the documents' dtype) and kept alive as long as the
table: for resident documents (memory-mapped or in memory) the table of every page is built on
first use and kept; for others (object storage) a table holds just the pages one call reads.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from .documents import Documents
from .packplan import BinsPlan, ConcatPlan

__all__ = ["OUT_DTYPES", "Gather", "PageTable", "gather_reference", "row_pieces", "segment_dtype"]

_TOKEN_CODES = {
    np.dtype(t): k for k, t in enumerate((np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64, np.uint64, np.int8))
}
OUT_DTYPES = tuple(np.dtype(t) for t in (np.int32, np.int64, np.uint16, np.uint32))  # the C module's output codes


def segment_dtype(dtype: np.dtype, length: int) -> np.dtype:
    """The dtype of segment ids and positions beside tokens of ``dtype`` in rows of ``length``:
    ``dtype`` itself when it holds ``length`` (segment ids run up to ``length``), else int32."""
    return dtype if length <= np.iinfo(dtype).max else np.dtype(np.int32)


_MISSING = 1024  # pages recorded per gather call that found some not loaded


class _Table:
    """Addresses of loaded pages (0 where not loaded) and the arrays they point into."""

    def __init__(self, page_first: np.ndarray):
        pages = page_first.size - 1
        self.page_first = page_first
        self.off_addr = np.zeros(pages, np.uint64)
        self.val_addr = np.zeros(pages, np.uint64)
        self.nvals = np.zeros(pages, np.int64)
        self.arrays: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def add(self, p: int, offsets: np.ndarray, values: np.ndarray) -> None:
        self.arrays[p] = (offsets, values)
        self.nvals[p] = values.size
        self.val_addr[p] = values.__array_interface__["data"][0]
        self.off_addr[p] = offsets.__array_interface__["data"][0]


class PageTable:
    """The documents' pages, checked, for the gathers (thread-safe)."""

    def __init__(self, documents: Documents):
        self.documents = documents
        self._full: _Table | None = None
        self._lock = threading.Lock()

    def checked(self, p: int) -> tuple[np.ndarray, np.ndarray]:
        """Page ``p``'s (offsets, values), checked against the documents (``ValueError`` naming the page)."""
        docs = self.documents
        first, last = int(docs.page_first[p]), int(docs.page_first[p + 1])
        offsets, values = docs.page(p)
        offsets, values = np.asarray(offsets), np.asarray(values)
        where = f"{docs.name}: page {p} (documents {first}..{last - 1})"
        if offsets.dtype.kind not in "iu" or offsets.ndim != 1 or offsets.size != last - first + 1:
            raise ValueError(
                f"{where}: expected {last - first + 1} integer offsets, got {offsets.dtype} of shape {offsets.shape}"
            )
        if values.ndim != 1 or values.dtype.kind not in "iu":
            raise ValueError(f"{where}: expected 1-d integer token values, got {values.dtype} of shape {values.shape}")
        if values.dtype != docs.dtype:
            raise ValueError(f"{where}: its tokens are {values.dtype}, the documents' are {docs.dtype}")
        offsets = np.ascontiguousarray(offsets, dtype=np.int64)
        if not values.dtype.isnative:
            values = values.astype(values.dtype.newbyteorder("="))
        values = np.ascontiguousarray(values)
        if offsets.size > 1 and (
            offsets[0] < 0 or offsets[-1] > values.size or not np.array_equal(np.diff(offsets), docs.lengths[first:last])
        ):
            raise ValueError(f"{where}: its offsets disagree with the document lengths (or run past its {values.size} tokens)")
        if values.__array_interface__["data"][0] == 0:  # an empty buffer: no piece reads it, but 0 means "not loaded"
            values = np.zeros(1, values.dtype)[:0]
        return offsets, values

    def full(self) -> _Table:
        """The table of every page (resident documents), built once."""
        table = self._full
        if table is None:
            with self._lock:
                if self._full is None:
                    table = _Table(self.documents.page_first)
                    for p in range(self.documents.num_pages):
                        table.add(p, *self.checked(p))
                    self._full = table
                table = self._full
        return table

    def start(self) -> _Table:
        """The table a gather starts from: every page, or (not resident) none yet."""
        return self.full() if self.documents.resident else _Table(self.documents.page_first)

    def load(self, table: _Table, pages: np.ndarray) -> _Table:
        """``table`` with ``pages`` loaded too (a table being read is never changed: a new one)."""
        grown = _Table(self.documents.page_first)
        for p, arrays in table.arrays.items():
            grown.add(p, *arrays)
        for p in np.unique(pages).tolist():
            if p not in grown.arrays:
                grown.add(p, *self.checked(p))
        return grown

    def arrays(self, p: int, table: _Table | None) -> tuple[np.ndarray, np.ndarray]:
        if table is not None and p in table.arrays:
            return table.arrays[p]
        return self.checked(p)


class Gather:
    """The compiled gather of one plan: ``gather(rows, out)`` fills rows ``rows`` (int64) into
    ``out``: (tokens,) or (tokens, segment_ids, positions), C-contiguous (len(rows), length) arrays,
    tokens of ``out_dtype`` and the others of ``segment_dtype(out_dtype, length)``, without the GIL.
    Everything but the rows and the outputs is decided once, here, so a call costs the GIL a few
    microseconds."""

    def __init__(
        self,
        kernel: Any,
        plan: BinsPlan | ConcatPlan,
        pages: PageTable,
        length: int,
        pad_id: int,
        out_dtype: np.dtype,
        segments: bool = True,
    ):
        docs = pages.documents
        self.pages, self.documents, self.resident, self.segments = pages, docs, docs.resident, segments
        if isinstance(plan, BinsPlan):
            self.call, plan_args = (
                kernel.rows_bins,
                (plan.bin_offsets, plan.bin_items, docs.lengths, plan.extra_doc, plan.extra_start),
            )
        else:
            self.call, plan_args = kernel.rows_concat, (plan.cum, plan.order if plan.order is not None else np.zeros(0, np.int64))
        code = _TOKEN_CODES[np.dtype(docs.dtype).newbyteorder("=")]
        out_dtype = np.dtype(out_dtype)
        seg_code = OUT_DTYPES.index(segment_dtype(out_dtype, length)) if segments else -1
        self.tail = (*plan_args, length, pad_id, code, OUT_DTYPES.index(out_dtype), seg_code)
        self.table: _Table | None = None
        self.none = np.zeros(0, np.int64)  # a resident table misses no page: nothing is recorded

    def __call__(self, rows: np.ndarray, out: tuple[np.ndarray, ...]) -> None:
        if len(out) != (3 if self.segments else 1):
            raise ValueError(f"{self.documents.name}: the gather writes {3 if self.segments else 1} outputs, got {len(out)}")
        self.documents.check()
        outs = out if self.segments else (out[0], None, None)
        if self.resident:
            table = self.table
            if table is None:
                table = self.table = self.pages.full()
            if self._run(rows, table, outs, self.none):
                raise RuntimeError(f"{self.documents.name}: a page is missing from the table of every page")
            return
        missing = np.empty(_MISSING, np.int64)
        table = self.pages.start()
        while True:
            count = self._run(rows, table, outs, missing)
            if count == 0:
                return
            table = self.pages.load(table, missing[: min(count, _MISSING)])

    def _run(self, rows: np.ndarray, table: _Table, out: tuple[Any, ...], missing: np.ndarray) -> int:
        """The kernel over ``table``: pieces on pages it lacks; its ``ValueError`` names the documents."""
        try:
            return self.call(rows, table.page_first, table.off_addr, table.val_addr, table.nvals, *out, missing, *self.tail)
        except ValueError as exc:
            raise ValueError(f"{self.documents.name}: {exc}") from None


def row_pieces(plan: BinsPlan | ConcatPlan, lengths: np.ndarray, row: int, length: int) -> list[tuple[int, int, int]]:
    """(document, first token, tokens) of each piece of row ``row``, in order."""
    if isinstance(plan, BinsPlan):
        n = lengths.size
        pieces = []
        for item in plan.bin_items[plan.bin_offsets[row] : plan.bin_offsets[row + 1]].tolist():
            doc, start = (item, 0) if item < n else (int(plan.extra_doc[item - n]), int(plan.extra_start[item - n]))
            pieces.append((doc, start, min(int(lengths[doc]) - start, length)))
        return pieces
    cum = plan.cum
    t0, t1 = row * length, min((row + 1) * length, int(cum[-1]))
    j = int(np.searchsorted(cum, t0, side="right")) - 1
    pieces = []
    while t0 < t1:
        c0, c1 = int(cum[j]), int(cum[j + 1])
        if c1 > t0:
            doc = j if plan.order is None else int(plan.order[j])
            take = min(c1, t1) - t0
            pieces.append((doc, t0 - c0, take))
            t0 += take
        j += 1
    return pieces


def gather_reference(
    plan: BinsPlan | ConcatPlan,
    pages: PageTable,
    rows: np.ndarray,
    out: tuple[np.ndarray, ...],
    length: int,
    pad_id: int,
) -> None:
    """``gather`` in NumPy (a slice copy per piece): the same rows, the same errors; ``out`` is
    (tokens,) for tokens only or (tokens, segment_ids, positions)."""
    tokens = out[0]
    segments, positions = (out[1], out[2]) if len(out) == 3 else (None, None)
    docs = pages.documents
    docs.check()
    table = pages.full() if docs.resident else None
    for i, row in enumerate(rows.tolist()):
        at = 0
        for seg, (doc, start, take) in enumerate(row_pieces(plan, docs.lengths, row, length), start=1):
            p = int(np.searchsorted(docs.page_first, doc, side="right")) - 1
            offsets, values = pages.arrays(p, table)
            a = int(offsets[doc - int(docs.page_first[p])]) + start
            piece = values[a : a + take]
            _check_fits(piece, tokens.dtype, doc, start, docs.name)
            tokens[i, at : at + take] = piece.astype(tokens.dtype)
            if segments is not None and positions is not None:
                segments[i, at : at + take] = seg
                positions[i, at : at + take] = np.arange(take)
            at += take
        tokens[i, at:] = pad_id
        if segments is not None and positions is not None:
            segments[i, at:] = 0
            positions[i, at:] = np.arange(length - at)


def _check_fits(piece: np.ndarray, dtype: np.dtype, doc: int, start: int, name: str) -> None:
    """``ValueError`` naming the first token of ``piece`` (document ``doc`` from token ``start``)
    outside ``dtype``'s range: token ids are converted, never wrapped into other ids."""
    if np.can_cast(piece.dtype, dtype) or not piece.size:
        return
    info = np.iinfo(dtype)
    bad = piece > info.max if piece.dtype.kind == "u" else (piece < info.min) | (piece > info.max)
    if bad.any():
        k = int(np.argmax(bad))
        raise ValueError(
            f"{name}: document {doc}: token {start + k} is {int(piece[k])}, which does not fit dtype {dtype} "
            "(token ids are never wrapped)"
        )
