"""``ss.pack``: token documents packed into fixed-length rows, as a data container.

``rows = ss.pack(data, 2048)``; ``rows[k]`` is ``{"tokens": (2048,), "segment_ids": (2048,),
"positions": (2048,)}``: tokens of ``dtype``, segment ids and positions of ``segment_dtype`` (``dtype``
itself when it holds ``length``, else int32); ``segments=False``: ``{"tokens": (2048,)}`` only. Segment ids number the document pieces of a
row 1, 2, ...; 0 is padding (``pad_id`` tokens). Positions count 0, 1, ... from the start of each
piece, and from the start of each padding run. A document cut by a row boundary goes on in the
next row as a new segment whose positions start again at 0.

Methods (see ``pack``): ``"concat"`` for pre-training (no padding, documents cross rows),
``"best_fit"`` / ``"first_fit"`` for fine-tuning (documents whole within a row, little padding).
Every item is a pure function of its index, so the loader's orders, ranks, workers, backends and
resume apply as to any container; a batch is filled by one compiled gather per chunk of rows,
straight into the batch's arrays, without the GIL (``getobs_batch_into``).
"""

from __future__ import annotations

import operator
from typing import Any

import numpy as np

from ..core.nodes import ArrayLeaf
from ..core.spec import Spec
from ..files.packed import checked_indices
from ..loading.options import warn_scattered_reads
from .documents import Documents, documents_of
from .packplan import METHODS, TOO_LONG, BinsPlan, ConcatPlan, bins_plan, concat_plan, kernels
from .rows import OUT_DTYPES, Gather, PageTable, gather_reference, segment_dtype

__all__ = ["Packing", "pack"]

_EXTRA = ("segment_ids", "positions")


def _integer(value: Any, what: str) -> int:
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"ss.pack: {what} must be an integer, got {value!r}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"ss.pack: {what} must be an integer, got {type(value).__name__} {value!r}") from None


class Packing:
    """Token documents packed into rows (see ``pack``)."""

    def __init__(
        self,
        documents: Documents,
        length: int,
        *,
        field: str,
        method: str,
        seed: int | None,
        pad_id: int,
        too_long: str,
        dtype: np.dtype,
        segments: bool = True,
    ):
        self.documents, self.length, self.field, self.method = documents, length, field, method
        self.seed, self.pad_id, self.too_long, self.dtype = seed, pad_id, too_long, dtype
        self.segments = segments
        self.segment_dtype = segment_dtype(dtype, length)
        names = (field, *_EXTRA) if segments else (field,)
        self._dtypes = {name: (dtype if name == field else self.segment_dtype) for name in names}
        self._kernel, self.kernel_status = kernels()
        lengths = documents.lengths
        if method == "concat":
            self.plan: BinsPlan | ConcatPlan = concat_plan(lengths, length, seed)
        else:
            self.plan = bins_plan(lengths, length, method, seed, too_long, documents.name, self._kernel)
        self._pages = PageTable(documents)
        self._gather: Gather | None = None
        self._total = documents.tokens
        self._stats: dict[str, Any] | None = None

    # -- the container -------------------------------------------------------------------------
    def __len__(self) -> int:
        return self.plan.rows

    def __getitem__(self, index: Any) -> dict[str, np.ndarray]:
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"{self._label()}: row index must be an integer, got {type(index).__name__}")
        k = int(index) + (len(self) if int(index) < 0 else 0)
        if not 0 <= k < len(self):
            raise IndexError(f"{self._label()}: row {index} is out of range for {len(self)} rows")
        out = tuple(np.empty((1, self.length), dtype) for dtype in self._dtypes.values())
        self._fill(np.asarray([k], np.int64), out)
        return dict(zip(self._dtypes, (a[0] for a in out)))

    @property
    def names(self) -> tuple[str, ...]:
        """The item's keys: the tokens field, then (``segments``) "segment_ids", "positions"."""
        return tuple(self._dtypes)

    def batch_spec(self) -> Spec:
        """A batch: a (B, length) array per name: tokens of ``dtype``, the others of ``segment_dtype``."""
        return Spec({name: ArrayLeaf((self.length,), dtype) for name, dtype in self._dtypes.items()})

    def getobs_batch_into(self, buffer: Any, indices: Any) -> dict[str, np.ndarray]:
        """Rows ``indices`` written into ``buffer`` (a dict of (len(indices), length) arrays: the
        batch's row slices), one compiled gather for them all; arrays it lacks, or that are not
        C-contiguous arrays of ``dtype`` of that shape, are made. Returns the dict of the arrays."""
        rows = indices
        # the compiled gather checks every row itself (its refusal is turned into the IndexError below)
        if (
            type(rows) is not np.ndarray
            or rows.dtype != np.int64
            or rows.ndim != 1
            or not rows.flags.c_contiguous
            or (self._kernel is None and rows.size and (rows.min() < 0 or rows.max() >= len(self)))
        ):
            rows = np.ascontiguousarray(checked_indices(indices, len(self), f"{self._label()}: ", ""), dtype=np.int64)
        shape, out = (rows.size, self.length), []
        given_all = buffer if type(buffer) is dict else {}
        for name, dtype in self._dtypes.items():
            given = given_all.get(name)
            if not (
                type(given) is np.ndarray
                and given.shape == shape
                and given.dtype == dtype
                and given.flags.c_contiguous
                and given.flags.writeable
            ):
                given = np.empty(shape, dtype)
            out.append(given)
        try:
            self._fill(rows, tuple(out))
        except ValueError:  # a row out of range: negative ones count from the end, others are an IndexError
            if not (rows.size and (rows.min() < 0 or rows.max() >= len(self))):
                raise
            self._fill(
                np.ascontiguousarray(checked_indices(indices, len(self), f"{self._label()}: ", ""), dtype=np.int64), tuple(out)
            )
        return dict(zip(self._dtypes, out))

    def _fill(self, rows: np.ndarray, out: tuple[np.ndarray, ...]) -> None:
        gather = self._gather
        if gather is None and self._kernel is not None:
            gather = self._gather = Gather(
                self._kernel, self.plan, self._pages, self.length, self.pad_id, self.dtype, self.segments
            )
        if gather is not None:
            gather(rows, out)
        else:
            gather_reference(self.plan, self._pages, rows, out, self.length, self.pad_id)

    # -- what it holds -------------------------------------------------------------------------
    def stats(self) -> dict[str, Any]:
        """rows, length, documents, pieces (document pieces placed), tokens (in rows), padding
        (tokens), padding_fraction, lower_bound_rows (ceil(tokens / length): no packing has fewer),
        empty_documents (in no row), long_documents (longer than a row), truncated_tokens."""
        if self._stats is None:
            lengths = self.documents.lengths
            info = {
                "empty_documents": int(np.count_nonzero(lengths == 0)),
                "long_documents": int(np.count_nonzero(lengths > self.length)),
                "truncated_tokens": 0,
            }
            if isinstance(self.plan, BinsPlan):
                info.update(self.plan.info)
                pieces = int(self.plan.bin_items.size)
            else:
                pieces = len(lengths) - info["empty_documents"] + _cut_documents(self.plan.cum, self.plan.rows, self.length)
            tokens = self.tokens
            self._stats = {
                "rows": self.plan.rows, "length": self.length, "documents": lengths.size, "pieces": pieces, "tokens": tokens,
                "padding": self.padding, "padding_fraction": self.padding_fraction, "lower_bound_rows": -(-tokens // self.length), **info,
            }  # fmt: skip
        return dict(self._stats)

    @property
    def tokens(self) -> int:
        """Document tokens in the rows (all of them but what ``too_long="truncate"`` cut)."""
        truncated = self.plan.info.get("truncated_tokens", 0) if isinstance(self.plan, BinsPlan) else 0
        return self._total - truncated

    @property
    def padding(self) -> int:
        """Padding tokens in the rows."""
        return self.plan.rows * self.length - self.tokens

    @property
    def padding_fraction(self) -> float:
        """Padding tokens over all the rows' tokens."""
        slots = self.plan.rows * self.length
        return self.padding / slots if slots else 0.0

    def _label(self) -> str:
        return f"ss.pack({self.documents.name}, {self.length}, method={self.method!r})"

    def __repr__(self) -> str:
        return f"{self._label()}: {len(self)} rows of {self.length} {self.dtype} tokens from {len(self.documents)} documents, padding {self.padding_fraction:.3%}"

    def __getstate__(self) -> dict[str, Any]:  # the plan travels; pages are reopened (a file source reopens itself)
        state = dict(self.__dict__)
        del state["_pages"], state["_kernel"], state["kernel_status"], state["_gather"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._kernel, self.kernel_status = kernels()
        self._pages = PageTable(self.documents)
        self._gather = None


def _cut_documents(cum: np.ndarray, rows: int, length: int, chunk: int = 1 << 20) -> int:
    """How many of the concatenation's row boundaries fall inside a document (each adds a piece)."""
    cut = 0
    for first in range(1, rows, chunk):
        bounds = np.arange(first, min(first + chunk, rows), dtype=np.int64) * length
        at = np.searchsorted(cum, bounds, side="left")
        cut += int(np.count_nonzero(cum[np.minimum(at, cum.size - 1)] != bounds))
    return cut


def pack(
    data: Any,
    length: int,
    *,
    field: str = "tokens",
    method: str = "concat",
    seed: int | None = 0,
    pad_id: int = 0,
    too_long: str = "split",
    dtype: Any = "int32",
    segments: bool = True,
) -> Packing:
    """Token documents packed into rows of ``length`` tokens: a container of ``{field, "segment_ids",
    "positions"}`` dicts of (length,) arrays: tokens of ``dtype`` (int32, int64, uint16 or uint32),
    segment ids and positions of ``dtype`` too when it holds ``length`` (uint16 holds up to 65535),
    else of int32 (``Packing.segment_dtype``). ``segments=False``: ``{field: tokens}`` only, no
    segment ids or positions written (concatenated pre-training without document masking, as
    nanoGPT and LitData's ``TokensLoader`` read it; ``dtype="uint16"`` then moves 2 bytes a token).

    ``data``: a packed file with an ``F.Tokens`` field ``field`` (``ss.open``), ``ss.token_file`` /
    ``ss.megatron_file``, a ``Documents``, or any container or iterable of 1-d integer arrays or of
    dicts holding one under ``field`` (read once into memory). ``method``:

    - ``"concat"`` (pre-training): the documents in a seeded order (``seed=None``: stored order),
      concatenated and cut every ``length`` tokens. No padding but in the last row (every token is
      in exactly one row); documents cross rows. The plan is the cumulative lengths (8 bytes per
      document, 16 with a seeded order); a row is found by a binary search over them. A seeded
      order over data read into memory page by page (object storage, data read in place) whose
      pages outnumber those a process keeps warns (``UserWarning``): each row reads pages again.
    - ``"best_fit"`` / ``"first_fit"`` (fine-tuning): best-fit / first-fit decreasing bin packing,
      every document whole within one row, padding close to the least possible. The plan is one
      int64 per piece plus one per row. ``seed`` only decides among documents of equal length.

    ``too_long`` (best_fit / first_fit) for a document longer than ``length``: ``"split"`` cuts it
    into pieces of ``length`` (the last shorter), packed like documents; ``"truncate"`` keeps its
    first ``length`` tokens; ``"error"`` raises ``ValueError`` naming it. Empty documents are in no
    row. Token ids are converted to ``dtype`` and must fit it (one that does not is a ``ValueError``
    naming its document, never wrapped into another id), as ``pad_id`` must.
    """
    length = _integer(length, "length")
    if length < 1:
        raise ValueError(f"ss.pack: length must be at least 1, got {length}")
    if method not in METHODS:
        raise ValueError(f"ss.pack: unknown method {method!r}; expected one of {', '.join(map(repr, METHODS))}")
    if too_long not in TOO_LONG:
        raise ValueError(f"ss.pack: too_long must be one of {', '.join(map(repr, TOO_LONG))}, got {too_long!r}")
    if seed is not None and _integer(seed, "seed") < 0:
        raise ValueError(f"ss.pack: seed must be None or an integer >= 0, got {seed}")
    choices = ", ".join(str(d) for d in OUT_DTYPES)
    try:
        out = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"ss.pack: dtype must be one of {choices}, got {dtype!r}") from None
    if out not in OUT_DTYPES:
        raise TypeError(f"ss.pack: dtype must be one of {choices}, got {out}")
    if not isinstance(segments, (bool, np.bool_)):
        raise TypeError(f"ss.pack: segments must be True or False, got {segments!r}")
    pad_id = _integer(pad_id, "pad_id")
    info = np.iinfo(out)
    if not info.min <= pad_id <= info.max:
        raise ValueError(f"ss.pack: pad_id {pad_id} does not fit dtype {out}")
    if not isinstance(field, str) or field in _EXTRA:
        raise ValueError(f"ss.pack: field must be a name other than {_EXTRA}, got {field!r}")
    if segments and length > np.iinfo(segment_dtype(out, length)).max:
        raise ValueError(f"ss.pack: length {length} does not fit segment ids and positions of dtype {segment_dtype(out, length)}")
    documents = documents_of(data, field)
    if len(documents) == 0:
        raise ValueError(f"ss.pack: {documents.name} holds no documents (field {field!r})")
    if documents.tokens == 0:
        raise ValueError(f"ss.pack: the {len(documents)} documents of {documents.name} (field {field!r}) hold no tokens")
    if method == "concat" and seed is not None and not documents.resident:
        warn_scattered_reads(
            getattr(documents, "data", None),
            "seed=None (the documents in their stored order: the rows read the pages in turn)",
            f"ss.pack(..., seed={seed}) concatenates the documents in a seeded order, each row's from all over the data",
            stacklevel=3,
        )
    return Packing(
        documents,
        length,
        field=field,
        method=method,
        seed=None if seed is None else int(seed),
        pad_id=pad_id,
        too_long=too_long,
        dtype=out,
        segments=bool(segments),
    )
