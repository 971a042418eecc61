"""Flat token files as containers of documents: ``ss.token_file`` (nanoGPT-style ``.bin``) and the
base they share with ``ss.megatron_file`` (``sequences.megatron``).

A token file is memory-mapped, never read whole: item ``i`` is ``{field: tokens}``, a read-only
view of document ``i``'s tokens in the map. Every document's start is found once, when the file
is opened (``token_file``: a NumPy scan for the end-of-document token in bounded chunks), so the
lengths are known without reading tokens again; ``token_documents(field)`` gives them to
``ss.pack`` as one page, and ``default_fields()`` tells ``ss.write`` to store them as ``F.Tokens``.
Each read checks (one ``fstat``) that the file was not truncated or rewritten in place since it was
opened (``CorruptFileError``), which would otherwise kill the process reading its map. Pickling
(for worker processes) sends the path, the document offsets and the file's identity; the copy
maps the file again and refuses one that changed.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import CorruptFileError
from ..files.field_tokens import TOKEN_DTYPES, Tokens
from ..files.identity import FileIdentity
from .documents import Documents

__all__ = ["MappedTokens", "TokenFile", "map_tokens", "token_file"]

_SCAN_TOKENS = 1 << 24  # tokens compared per step of the end-of-document scan (16 Mi: bounded memory)
_LARGE_DOCUMENT = 1 << 30  # a document longer than this is stored with int64 offsets (large_list)


def map_tokens(identity: FileIdentity, dtype: np.dtype) -> tuple[np.ndarray, Any]:
    """(read-only 1-d array of ``dtype`` over the whole file, the map keeping it alive); ``ValueError``
    naming the file when its size is not a whole number of tokens."""
    size = identity.seen[1]
    if size % dtype.itemsize:
        raise ValueError(
            f"{identity.path}: {size} bytes is not a whole number of {dtype} tokens ({dtype.itemsize} bytes each): "
            "the file is cut short, or holds another dtype (pass dtype=)"
        )
    if size == 0:
        values = np.zeros(0, dtype)
        values.flags.writeable = False
        return values, None
    mapped = mmap.mmap(identity.fd, size, access=mmap.ACCESS_READ)
    return np.frombuffer(mapped, dtype=dtype), mapped


class _Documents(Documents):
    """A mapped token file's documents as one page (its offsets and its map); pickles the container,
    which maps the file again, never its tokens."""

    def __init__(self, data: MappedTokens):
        self.data = data
        super().__init__(data.name, [0, len(data)], data.dtype, data.lengths())

    def page(self, p: int) -> tuple[np.ndarray, np.ndarray]:
        if p != 0:
            raise IndexError(f"{self.name}: page {p} is out of range for 1 page")
        self.data.check()
        return self.data.offsets, self.data.values

    def check(self) -> None:
        """``CorruptFileError`` when the file changed in place since it was opened (one ``fstat``)."""
        self.data.check()

    def __getstate__(self) -> dict[str, Any]:
        return {"data": self.data}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["data"])  # type: ignore[misc]


class MappedTokens:
    """Documents ``values[offsets[i]:offsets[i+1]]`` of a memory-mapped token file, as ``{field: tokens}``.

    Subclasses open the file (``_open``: ``self.identity``, ``self.values``, ``self.offsets``,
    checked so that every document lies inside ``values``) and say what they are (``name``)."""

    field: str
    dtype: np.dtype
    offsets: np.ndarray
    values: np.ndarray
    identity: FileIdentity

    @property
    def name(self) -> str:
        return str(self.identity.path)

    def __len__(self) -> int:
        return int(self.offsets.size - 1)

    def __getitem__(self, index: int) -> dict[str, np.ndarray]:
        if isinstance(index, (bool, np.bool_)) or not isinstance(index, (int, np.integer)):
            raise TypeError(f"{self.name}: document index must be an integer, got {type(index).__name__}")
        n = len(self)
        i = int(index) + n if index < 0 else int(index)
        if not 0 <= i < n:
            raise IndexError(f"{self.name}: document {index} is out of range for {n} documents")
        self.check()
        return {self.field: self.values[self.offsets[i] : self.offsets[i + 1]]}

    def check(self) -> None:
        """``CorruptFileError`` when the file changed in place since it was opened (one ``fstat``)."""
        self.identity.check()

    def lengths(self) -> np.ndarray:
        """Tokens per document (int64), from the offsets."""
        return np.diff(self.offsets)

    @property
    def tokens(self) -> int:
        return int(self.offsets[-1])

    def token_documents(self, field: str = "tokens") -> Documents:
        """The documents for ``ss.pack`` (one page: the offsets and the map); ``KeyError`` for another field."""
        if field != self.field:
            raise KeyError(f"{self.name}: no field {field!r}; its documents are field {self.field!r}")
        return _Documents(self)

    def default_fields(self) -> dict[str, Tokens]:
        """What ``ss.write`` stores: ``F.Tokens`` of the file's dtype (``large`` when a document has more than 2**30 tokens)."""
        longest = int(self.lengths().max()) if len(self) else 0
        return {self.field: Tokens(dtype=self.dtype, large=longest > _LARGE_DOCUMENT)}

    def sample_origin(self, index: int) -> str:
        return f"{self.name} tokens {int(self.offsets[index])}..{int(self.offsets[index + 1])}"

    def _reopened(self, seen: tuple[int, int, int]) -> None:
        """After unpickling: ``CorruptFileError`` unless the file is the one the original opened."""
        if self.identity.seen != tuple(seen):
            raise CorruptFileError(
                self.identity.path,
                f"the token file changed since it was opened (inode, size, mtime {tuple(seen)} -> {self.identity.seen}): open it again",
            )

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r}: {len(self)} documents, {self.tokens} {self.dtype} tokens, field {self.field!r})"


def _token_dtype(dtype: Any, path: Path) -> np.dtype:
    try:
        found = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{path}: dtype={dtype!r} is not a NumPy dtype (token files hold uint16 or uint32 ids)") from None
    native = found.newbyteorder("=") if found.byteorder in "<>" else found
    if native not in TOKEN_DTYPES or (found.byteorder == ">" and found.itemsize > 1):
        raise TypeError(f"{path}: token files hold little-endian integer ids (uint16, uint32, ...), got dtype {found}")
    return native.newbyteorder("<")


def _document_ends(values: np.ndarray, eod: int) -> np.ndarray:
    """Positions just after each ``eod`` token (int64), found ``_SCAN_TOKENS`` at a time."""
    found = []
    for start in range(0, values.size, _SCAN_TOKENS):
        hits = np.flatnonzero(values[start : start + _SCAN_TOKENS] == eod)
        if hits.size:
            found.append(hits.astype(np.int64) + (start + 1))
    return np.concatenate(found) if found else np.zeros(0, np.int64)


class TokenFile(MappedTokens):
    """A flat file of ``dtype`` tokens split into documents after each ``eod`` token (see ``token_file``)."""

    def __init__(self, path: str | os.PathLike, dtype: Any = "uint16", eod: int | None = None, field: str = "tokens"):
        self.path = Path(path)
        self.dtype = _token_dtype(dtype, self.path)
        if eod is not None:
            if isinstance(eod, (bool, np.bool_)) or not isinstance(eod, (int, np.integer)):
                raise TypeError(f"{self.path}: eod must be an integer token id or None, got {eod!r}")
            info = np.iinfo(self.dtype)
            if not info.min <= int(eod) <= info.max:
                raise ValueError(f"{self.path}: eod={eod} is not a {self.dtype} token id ({info.min}..{info.max})")
        if not isinstance(field, str):
            raise TypeError(f"field must be a str, got {field!r}")
        self.eod, self.field = None if eod is None else int(eod), field
        self._open(None)

    def _open(self, offsets: np.ndarray | None) -> None:
        if not self.path.is_file():
            raise FileNotFoundError(f"{self.path}: no such token file")
        self.identity = FileIdentity(self.path)
        self.values, self._map = map_tokens(self.identity, self.dtype)
        if offsets is None:
            n = self.values.size
            ends = _document_ends(self.values, self.eod) if self.eod is not None else np.zeros(0, np.int64)
            tail = [n] if n and (ends.size == 0 or ends[-1] != n) else []
            offsets = np.concatenate([np.zeros(1, np.int64), ends, np.asarray(tail, np.int64)])
        self.offsets = offsets

    def __getstate__(self) -> dict[str, Any]:
        return {"path": str(self.path), "dtype": self.dtype.str, "eod": self.eod, "field": self.field, "offsets": self.offsets, "seen": self.identity.seen}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path, self.dtype, self.eod, self.field = Path(state["path"]), np.dtype(state["dtype"]), state["eod"], state["field"]
        self._open(np.asarray(state["offsets"], np.int64))
        self._reopened(state["seen"])
        if self.offsets[-1] != self.values.size:
            raise CorruptFileError(self.path, f"holds {self.values.size} tokens, the documents found when it was opened {int(self.offsets[-1])}")


def token_file(path: str | os.PathLike, *, dtype: Any = "uint16", eod: int | None = None, field: str = "tokens") -> TokenFile:
    """A flat token file (nanoGPT's ``train.bin``: token ids of ``dtype`` end to end, no header) as a
    container of documents ``{field: tokens}``, memory-mapped.

    ``eod``: the end-of-document token id (GPT-2's ``<|endoftext|>`` is 50256); the file is split after
    each one, which stays at the end of its document (a last document without one runs to the end of
    the file). ``eod=None``: the whole file is one document. ``dtype``: uint16 (vocabularies under
    65536 ids) or uint32, or another little-endian integer dtype. A file whose size is not a whole
    number of tokens raises ``ValueError`` naming it.

    Opening scans the file once for ``eod`` (NumPy, 16 Mi tokens at a time) and keeps the document
    offsets (8 bytes per document); tokens are read from the map only when an item is. The result
    is a container (``len``, ``[i]``) every loader feature applies to, gives its documents to
    ``ss.pack`` (``token_documents``), and ``ss.write(out, ss.token_file(...))`` stores them as an
    ``F.Tokens`` field of the file's dtype without naming it.
    """
    return TokenFile(path, dtype=dtype, eod=eod, field=field)
