"""``ss.megatron_file``: Megatron-LM's indexed dataset (``prefix.bin`` + ``prefix.idx``) as a container of sequences.

The index (``MMIDIDX`` format, version 1), little-endian::

    magic      9 bytes   b"MMIDIDX\\x00\\x00"
    version    uint64    1
    dtype      uint8     token dtype code: 1 uint8, 2 int8, 3 int16, 4 int32, 5 int64, 8 uint16
                         (6 float64 and 7 float32 are not token ids)
    S          uint64    number of sequences
    D          uint64    number of document indices (documents + 1)
    lengths    S x int32     tokens per sequence
    pointers   S x int64     byte offset of each sequence in the .bin
    doc_index  D x int64     sequence index where each document starts, from 0, ending at S
    modes      S x int8      (optional: multimodal datasets)

Every count is checked against the index file's size before anything is read or allocated by it
(a forged header raises ``ValueError`` naming the file, never allocates), and the sequences must
tile the ``.bin`` in order (pointer ``i`` is the sum of the sizes before it, the last one ending
at the end of the ``.bin``), as Megatron's builder writes them: so the sequences are a single
page of offsets over the mapped ``.bin``, and every read stays inside it.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import CorruptFileError
from ..files.identity import FileIdentity
from .tokenfiles import MappedTokens, map_tokens

__all__ = ["MAGIC", "MegatronFile", "dtype_codes", "megatron_file"]

MAGIC = b"MMIDIDX\x00\x00"
_HEADER = struct.Struct("<9sQBQQ")  # magic, version, dtype code, sequence count, document count: 34 bytes
_CODES = {1: np.uint8, 2: np.int8, 3: np.int16, 4: np.int32, 5: np.int64, 8: np.uint16}
_FLOAT_CODES = {6: "float64", 7: "float32"}


def dtype_codes() -> dict[int, np.dtype]:
    """Megatron's token dtype codes that hold integer ids."""
    return {code: np.dtype(t) for code, t in _CODES.items()}


def _read_index(path: Path, fd: int, size: int) -> tuple[np.dtype, np.ndarray, np.ndarray, np.ndarray]:
    """(dtype, lengths int32, pointers int64, document indices int64) of the index, the counts
    checked against ``size`` before any array is made."""
    if size < _HEADER.size:
        raise ValueError(f"{path}: {size} bytes is shorter than a Megatron index header ({_HEADER.size} bytes)")
    magic, version, code, sequences, documents = _HEADER.unpack(os.pread(fd, _HEADER.size, 0))
    if magic != MAGIC:
        raise ValueError(f"{path}: not a Megatron MMIDIDX index (it starts with {magic!r}, expected {MAGIC!r})")
    if version != 1:
        raise ValueError(f"{path}: Megatron index version {version}; this reader knows version 1")
    if code in _FLOAT_CODES:
        raise ValueError(f"{path}: the index says the tokens are {_FLOAT_CODES[code]} (dtype code {code}); token ids are integers")
    if code not in _CODES:
        raise ValueError(f"{path}: unknown Megatron dtype code {code} (known: {sorted(_CODES)})")
    body = size - _HEADER.size
    if sequences > body // 12 or documents > body // 8:
        raise ValueError(f"{path}: the header counts {sequences} sequences and {documents} document indices, more than its {size} bytes hold")
    expected = _HEADER.size + 12 * sequences + 8 * documents
    if size not in (expected, expected + sequences):  # + S bytes: the modes of a multimodal dataset
        raise ValueError(
            f"{path}: {size} bytes, but {sequences} sequences and {documents} document indices make an index of {expected} bytes "
            f"({expected + sequences} with modes): the index is damaged or cut short"
        )
    raw = np.frombuffer(mmap.mmap(fd, size, access=mmap.ACCESS_READ), np.uint8)[_HEADER.size : expected]  # mapped, not read
    lengths = raw[: 4 * sequences].view("<i4")
    pointers = raw[4 * sequences : 12 * sequences].view("<i8")
    doc_index = raw[12 * sequences :].view("<i8")
    return np.dtype(_CODES[code]).newbyteorder("<"), lengths, pointers, doc_index


def _offsets(path: Path, bin_path: Path, bin_size: int, dtype: np.dtype, lengths: np.ndarray, pointers: np.ndarray, doc_index: np.ndarray) -> np.ndarray:
    """Token offsets (int64, S + 1) of the sequences; ``ValueError`` unless they tile the ``.bin`` in order."""
    if lengths.size and lengths.min() < 0:
        i = int(np.argmax(lengths < 0))
        raise ValueError(f"{path}: sequence {i} has length {int(lengths[i])}")
    offsets = np.zeros(lengths.size + 1, np.int64)
    np.cumsum(lengths, dtype=np.int64, out=offsets[1:])
    if bin_size % dtype.itemsize or offsets[-1] * dtype.itemsize != bin_size:
        raise ValueError(
            f"{path}: the index describes {int(offsets[-1])} {dtype} tokens ({int(offsets[-1]) * dtype.itemsize} bytes), "
            f"but {bin_path} holds {bin_size} bytes: the pair does not match, or one is cut short"
        )
    wrong = pointers != offsets[:-1] * dtype.itemsize
    if wrong.any():
        i = int(np.argmax(wrong))
        raise ValueError(
            f"{path}: sequence {i} starts at byte {int(pointers[i])} of {bin_path}, expected {int(offsets[i]) * dtype.itemsize} "
            "(sequences must follow each other in order, as Megatron's builder writes them)"
        )
    if doc_index.size == 0 or doc_index[0] != 0 or doc_index[-1] != lengths.size or (np.diff(doc_index) < 0).any():
        shown = doc_index[:4].tolist() + (["..", int(doc_index[-1])] if doc_index.size > 4 else [])
        raise ValueError(f"{path}: the document indices {shown} do not rise from 0 to the {lengths.size} sequences")
    return offsets


class MegatronFile(MappedTokens):
    """Megatron-LM's indexed dataset ``prefix.bin`` / ``prefix.idx`` (see ``megatron_file``)."""

    def __init__(self, prefix: str | os.PathLike, field: str = "tokens"):
        if not isinstance(field, str):
            raise TypeError(f"field must be a str, got {field!r}")
        self.prefix, self.field = str(prefix), field
        self._open()

    def _open(self) -> None:
        index_path, bin_path = Path(self.prefix + ".idx"), Path(self.prefix + ".bin")
        for needed in (index_path, bin_path):
            if not needed.is_file():
                raise FileNotFoundError(f"{needed}: no such file (a Megatron dataset is a prefix.bin and prefix.idx pair; prefix={self.prefix!r})")
        index = FileIdentity(index_path)
        self.dtype, lengths, pointers, doc_index = _read_index(index_path, index.fd, index.seen[1])
        self.identity = FileIdentity(bin_path)
        self.offsets = _offsets(index_path, bin_path, self.identity.seen[1], self.dtype, lengths, pointers, doc_index)
        self.document_index = np.array(doc_index)  # a copy: the index's map goes, so an index cut in place later cannot SIGBUS a read
        self.index_identity = index
        self.values, self._map = map_tokens(self.identity, self.dtype)

    def check(self) -> None:
        super().check()
        self.index_identity.check()

    def documents(self) -> int:
        """Documents of the dataset (Megatron's grouping of sequences: ``document_index``)."""
        return int(self.document_index.size - 1)

    def __getstate__(self) -> dict[str, Any]:
        return {"prefix": self.prefix, "field": self.field, "seen": self.identity.seen, "index_seen": self.index_identity.seen}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.prefix, self.field = state["prefix"], state["field"]
        self._open()
        self._reopened(state["seen"])
        if self.index_identity.seen != tuple(state["index_seen"]):
            raise CorruptFileError(self.index_identity.path, "the Megatron index changed since it was opened: open it again")


def megatron_file(prefix: str | os.PathLike, field: str = "tokens") -> MegatronFile:
    """Megatron-LM's indexed dataset (``prefix.bin`` and ``prefix.idx``, as ``tools/preprocess_data.py``
    writes them) as a container of its sequences ``{field: tokens}``, memory-mapped: item ``i`` is
    sequence ``i`` (Megatron's GPT datasets read one sequence per document), a read-only view of the
    ``.bin``. ``document_index`` keeps Megatron's grouping of sequences into documents.

    The index is validated before use (see the module doc): a wrong magic, version or dtype code,
    counts the file cannot hold, pointers outside the ``.bin`` or out of order raise ``ValueError``
    naming the file. Like ``ss.token_file``, it gives its documents to ``ss.pack`` and
    ``ss.write(out, ss.megatron_file(prefix))`` stores them as ``F.Tokens``.
    """
    return MegatronFile(prefix, field=field)
