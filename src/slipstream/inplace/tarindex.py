"""A tar shard's index: each member's name, data offset and size, and its samples as WebDataset
groups them, found by one pass over the headers.

``scan(read, size, name)`` is that pass over any ``read(offset, n)``: it reads only the 512-byte
headers (and the pax and GNU long-name records they announce), seeking over member data, so a
reader of the shard needs nothing more than ranged reads of ``offsets[i] .. offsets[i] + sizes[i]``
afterwards (a remote reader the same). ``group`` makes the samples of the members.

What is refused, with ``CorruptFileError`` naming the file (and the member or byte offset): a
header whose checksum does not match, a number field that is not octal (or GNU base-256), a
member or record that would end past the file's end, a truncated header, no end-of-archive marker
(a file cut at a header boundary), names that are not UTF-8, pax records that do not parse, a pax
``size`` other than the header's own size field (accepted only where that field cannot hold it:
above ``MAX_OCTAL`` bytes, the field 0 or ``MAX_OCTAL``; the pax size is then the member's), a pax
or long-name record above ``MAX_RECORD`` bytes (nothing is allocated from a header's size before it
is checked against that bound and the file's size), compressed archives, and member types other
than regular files and folders (links, devices, FIFOs, sparse files). Folders are skipped and
global pax headers read and ignored. The archive ends with its end-of-archive marker, two all-zero
blocks, followed by at most ``MAX_TAIL`` bytes, all zero (a writer's padding to its record size,
10240 bytes by default); anything else after a zero block is refused naming the offset (a zeroed
header, from a hole or a damaged copy, would otherwise end the archive early and lose every member
after it; concatenated archives are refused too, as ``tarfile`` reads only the first).

Samples, as WebDataset's ``group_by_keys`` makes them: a member's key is its path up to the first
dot of its base name, its extension the rest, lowercased; consecutive members of one key form one
sample. Members WebDataset skips are skipped (no dot in the base name, a base name starting with a
dot, ``__name__`` metadata paths). A key that comes back after another, or an extension twice in one
sample, is refused naming the file and the key.

The file's identity (``file_identity``) is its (inode, size, modification time, status-change
time) in ns: the status-change time moves on every write and cannot be set back (``utime`` sets
the other two), so a shard rewritten in place with its size and modification time restored
(``cp -p``, ``rsync --inplace -t``) is another file to the cache and to an open reader. A change
of mode, owner or link count moves it too (the index is then rebuilt, an open reader refuses).

The index is cached by ``inplace.tarcache`` (``tar_index``, ``remote_tar_index``).

Readers check each member's own header in the bytes they read (``first_bad_header``): the 512
bytes before its data must be a header with a matching checksum, of a regular file, of the index's
size, and, for a member named by its header alone (no pax ``path`` or GNU long name before it),
of the index's name (the name field, after the ustar prefix when there is one). An index that is
not this file's (a forged or stale entry, another file's) is caught there unless every member of
the part read has the same offset, size and name in both, or takes its name from a pax or
long-name record (whose names are not checked: the record is not in the bytes read).
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..core.errors import CorruptFileError
from ..files.field import pyarrow_module as _pa

__all__ = ["BLOCK", "MAX_OCTAL", "MAX_RECORD", "MAX_TAIL", "Strings", "TarIndex", "file_identity", "first_bad_header",
           "group", "header_ok", "header_problem", "header_size", "object_identity", "scan"]  # fmt: skip

BLOCK = 512
MAX_RECORD = 1 << 20  # the largest pax or GNU long-name record read (a name is at most a few KiB)
MAX_TAIL = 1 << 20  # the most bytes after the end-of-archive marker (a record of up to 2048 blocks, padded)
MAX_OCTAL = 8**11 - 1  # the largest size an octal size field holds (above it, a pax size or base-256)
_REGULAR = (b"0", b"\0", b"7")  # regular file, old regular file, contiguous file
_FOLDER = b"5"
_PAX, _PAX_GLOBAL, _SOLARIS_PAX = b"x", b"g", b"X"
_LONGNAME, _LONGLINK = b"L", b"K"
_RECORDS = (_PAX, _PAX_GLOBAL, _SOLARIS_PAX, _LONGNAME, _LONGLINK)  # headers that describe the next member
_TYPES = {b"1": "a hard link", b"2": "a symbolic link", b"3": "a character device", b"4": "a block device", b"6": "a FIFO",
          b"S": "a sparse file", b"V": "a volume label", b"M": "a multi-volume continuation"}  # fmt: skip
_COMPRESSED = {b"\x1f\x8b": "gzip", b"BZh": "bzip2", b"\xfd7zXZ\x00": "xz", b"\x28\xb5\x2f\xfd": "zstd"}
_OCTAL = re.compile(rb"[0-7]*")
_HIGH = bytes(range(128, 256))
_KEY = re.compile(r"^((?:.*/|)[^.]+)[.]([^/]*)$")  # WebDataset's base_plus_ext
_META = re.compile(r"__[^/]*__($|/)")  # WebDataset's skip_meta


class Strings:
    """Strings as one UTF-8 blob and int64 ``offsets`` (``ends`` = ``offsets[1:]``; compact to keep
    and to pickle); ``arrow(a, b)`` is strings ``a .. b - 1`` as a large_string array over the blob,
    without a copy."""

    def __init__(self, blob: bytes, ends: np.ndarray):
        self.blob = blob
        self.offsets = np.concatenate([np.zeros(1, np.int64), np.asarray(ends, dtype=np.int64)])
        self.ends = self.offsets[1:]

    def __reduce__(self) -> tuple[Any, ...]:
        return Strings, (self.blob, self.ends)  # (the ends only: the offsets are made again)

    @classmethod
    def of(cls, items: list[str]) -> Strings:
        encoded = [s.encode("utf-8") for s in items]
        return cls(b"".join(encoded), np.cumsum([len(e) for e in encoded], dtype=np.int64))

    def __len__(self) -> int:
        return len(self.ends)

    def __getitem__(self, i: int) -> str:
        start = int(self.ends[i - 1]) if i > 0 else 0
        return self.blob[start : int(self.ends[i])].decode("utf-8")

    def tolist(self) -> list[str]:
        return [self[i] for i in range(len(self))]

    def arrow(self, start: int, stop: int) -> Any:
        pa = _pa()
        return pa.Array.from_buffers(
            pa.large_string(), stop - start, [None, pa.py_buffer(self.offsets), pa.py_buffer(self.blob)], 0, start
        )


@dataclass
class TarIndex:
    """One tar shard's members (``names``, data ``offsets``, ``sizes``, in file order, the skipped
    ones left out; ``named[m]``: whether member ``m``'s name is its header's own, no pax or
    long-name record before it) and its samples: ``keys[s]`` owns members ``starts[s] ..
    starts[s + 1] - 1``, member ``m`` holding extension ``extensions[codes[m]]``. ``path``: the
    file's absolute path or the object's name; ``identity``: the file's (``file_identity``) or the
    object's (``object_identity``), its size second in both."""

    path: str
    identity: tuple[Any, ...]
    names: Strings
    offsets: np.ndarray
    sizes: np.ndarray
    keys: Strings
    starts: np.ndarray
    extensions: list[str]
    codes: np.ndarray
    named: np.ndarray
    cached: bool = False  # whether it is in (or came from) the cache: another process finds it there

    def __len__(self) -> int:
        return len(self.keys)

    def member(self, sample: int, code: int) -> int:
        """The member of ``sample`` holding extension ``code`` (-1 when it has none)."""
        for m in range(int(self.starts[sample]), int(self.starts[sample + 1])):
            if self.codes[m] == code:
                return m
        return -1


def file_identity(st: os.stat_result) -> tuple[int, int, int, int]:
    """A file's identity from its ``stat``: (inode, size, modification time, status-change time),
    times in ns (see the module doc)."""
    return st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns


def object_identity(size: int, tag: str) -> tuple[str, int, str]:
    """An object's identity in a store: ("object", its size, its ETag or modification time, "" when
    the store gives none)."""
    return "object", int(size), str(tag or "")


# -- the pass over the headers -----------------------------------------------------------------
def _number(field: bytes, name: Path, what: str, at: int) -> int:
    """A header's number field: octal ASCII (spaces and NULs around it), or GNU base-256 (positive)."""
    if field[0] == 0o200:
        return int.from_bytes(field[1:], "big")
    if field[0] == 0o377:
        raise CorruptFileError(name, f"the header at byte {at} has a negative {what} (base-256 {field.hex()})")
    text = field.split(b"\0", 1)[0].strip(b" ")
    if not _OCTAL.fullmatch(text):
        raise CorruptFileError(name, f"the header at byte {at} has a {what} field that is not octal: {field!r}")
    return int(text or b"0", 8)


def header_size(block: bytes) -> int | None:
    """The size field of a 512-byte header (octal or GNU base-256), None when it is neither."""
    field = block[124:136]
    if field[0] == 0o200:
        return int.from_bytes(field[1:], "big")
    text = field.split(b"\0", 1)[0].strip(b" ")
    return int(text or b"0", 8) if _OCTAL.fullmatch(text) else None


def header_ok(block: bytes | memoryview) -> bool:
    """Whether a 512-byte header's checksum field matches its bytes (unsigned or signed sums, as tar
    writers differ)."""
    raw = bytes(block)
    field = raw[148:156].split(b"\0", 1)[0].strip(b" ")
    if not field or not _OCTAL.fullmatch(field):
        return False
    stored = int(field, 8)
    unsigned = sum(raw) - sum(raw[148:156]) + 256
    if stored == unsigned:
        return True
    rest = raw[:148] + raw[156:]
    return stored == unsigned - 256 * (len(rest) - len(rest.translate(None, _HIGH)))


def _octal_fields(chars: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Each row's octal number (spaces or NULs around its digits) and whether it is one in that
    plain form (rows that are not, such as base-256 or text after a NUL, are for ``header_ok``)."""
    k = len(chars)
    value, ok = np.zeros(k, np.int64), np.ones(k, bool)
    started, ended = np.zeros(k, bool), np.zeros(k, bool)
    for j in range(chars.shape[1]):
        ch = chars[:, j]
        digit, blank = (ch >= 48) & (ch <= 55), (ch == 32) | (ch == 0)
        ok &= (digit & ~ended) | blank
        ended |= started & blank
        value = np.where(digit & ~ended, value * 8 + (ch.astype(np.int64) - 48), value)
        started |= digit
    return value, ok & started


def _size_agrees(stored: int | None, size: int) -> bool:
    """Whether a header's size field ``stored`` is that of a member of ``size`` bytes (a size above
    ``MAX_OCTAL`` comes from a pax record, the field 0 or ``MAX_OCTAL``, or from a base-256 field)."""
    return stored == size or (size > MAX_OCTAL and stored in (0, MAX_OCTAL))


def _header_name(block: bytes) -> bytes:
    """The member name a header holds: its name field, after the ustar prefix when there is one."""
    name = block[:100].split(b"\0", 1)[0]
    prefix = block[345:500].split(b"\0", 1)[0]
    return prefix + b"/" + name if block[257:263] == b"ustar\0" and prefix else name


def header_problem(block: bytes, index: TarIndex, m: int) -> str | None:
    """What is wrong with ``block`` (the 512 bytes right before member ``m``'s data) as member
    ``m``'s header (see the module doc), in words; None when nothing is."""
    if not header_ok(block):
        return "the 512 bytes before its data are no tar header (their checksum fails)"
    if block[156:157] not in _REGULAR:
        return f"the header before its data is of type {block[156:157]!r}, not a regular file's"
    stored, size = header_size(block), int(index.sizes[m])
    if not _size_agrees(stored, size):
        return f"its header says it holds {stored} bytes, the index {size}"
    if index.named[m]:
        own = _header_name(block)
        if own != index.names[m].encode("utf-8"):
            return f"its header names {own.decode('utf-8', 'replace')!r}"
    return None


def _names_match(blocks: np.ndarray, names: Strings, first: int) -> np.ndarray:
    """Per row of ``blocks``: whether its name field is exactly ``names[first + row]`` (NUL-ended
    unless it fills the field), vectorized; a name under a ustar prefix does not match here."""
    k = len(blocks)
    lengths = np.diff(names.offsets[first : first + k + 1])
    fits = lengths <= 100
    counts = np.where(fits, lengths, 0)
    rows = np.repeat(np.arange(k), counts)
    columns = np.arange(len(rows)) - np.repeat(np.cumsum(counts) - counts, counts)
    want = np.frombuffer(names.blob, np.uint8)[np.repeat(names.offsets[first : first + k], counts) + columns]
    wrong = np.zeros(k, bool)
    wrong[rows[blocks[rows, columns] != want]] = True
    ended = np.ones(k, bool)
    short = np.flatnonzero(lengths < 100)
    ended[short] = blocks[short, lengths[short]] == 0
    return fits & ~wrong & ended


def first_bad_header(blocks: np.ndarray, index: TarIndex, first: int) -> int:
    """The first of ``blocks`` (k x 512 uint8: the 512 bytes right before the data of ``index``'s
    members ``first .. first + k - 1``) that is not its member's header (``header_problem``), or
    -1 (vectorized; rows in a rarer form are checked one by one)."""
    if not len(blocks):
        return -1
    sizes = index.sizes[first : first + len(blocks)]
    checksum, plain_checksum = _octal_fields(blocks[:, 148:156])
    size, plain_size = _octal_fields(blocks[:, 124:136])
    unsigned = blocks.sum(axis=1, dtype=np.int64) - blocks[:, 148:156].sum(axis=1, dtype=np.int64) + 256
    regular = np.isin(blocks[:, 156], np.frombuffer(b"".join(_REGULAR), np.uint8))
    named = index.named[first : first + len(blocks)].astype(bool)
    good = plain_checksum & (checksum == unsigned) & plain_size & (size == sizes) & regular
    good &= ~named | _names_match(blocks, index.names, first)
    for k in np.flatnonzero(~good).tolist():
        if header_problem(blocks[k].tobytes(), index, first + k) is not None:
            return k
    return -1


def _text(raw: bytes, name: Path, what: str, at: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise CorruptFileError(name, f"the {what} at byte {at} is not UTF-8: {raw[:200]!r}") from None


def _pax(raw: bytes, name: Path, at: int) -> dict[str, bytes]:
    """The records of a pax extended header (``"<length> <key>=<value>\\n"`` each)."""
    records, pos = {}, 0
    while pos < len(raw):
        if raw[pos:].strip(b"\0") == b"":
            break
        space = raw.find(b" ", pos, pos + 21)
        digits = raw[pos:space] if space > pos else b""
        if not digits.isdigit() or int(digits) <= len(digits) + 1 or pos + int(digits) > len(raw):
            raise CorruptFileError(name, f"the pax header at byte {at} has a record that does not parse at its byte {pos}")
        end = pos + int(digits)
        record = raw[space + 1 : end]
        if not record.endswith(b"\n") or b"=" not in record:
            raise CorruptFileError(name, f"the pax header at byte {at} has a record that does not parse at its byte {pos}")
        key, value = record[:-1].split(b"=", 1)
        records[_text(key, name, "pax record key", at)] = value  # (values stay bytes until used)
        pos = end
    return records


def _check_end(read: Callable[[int, int], bytes], size: int, name: Path, pos: int) -> None:
    """The all-zero block at ``pos`` is the end-of-archive marker: a second zero block follows,
    then at most ``MAX_TAIL`` bytes, all zero (``CorruptFileError`` naming the offset otherwise)."""
    if pos + 2 * BLOCK > size:
        raise CorruptFileError(
            name, f"one zero block at byte {pos} ends the file, not the two that end an archive: the file is cut short"
        )
    if read(pos + BLOCK, BLOCK).count(0) != BLOCK:
        raise CorruptFileError(
            name,
            f"the zero block at byte {pos} is followed by a non-zero block, not by the second zero block that ends an "
            "archive: a header was zeroed (a hole or a damaged copy), or archives were concatenated",
        )
    tail = size - pos - 2 * BLOCK
    if tail > MAX_TAIL:
        raise CorruptFileError(
            name,
            f"{tail} bytes follow the end-of-archive marker at byte {pos}, more than the {MAX_TAIL} bytes of padding "
            "a tar writer leaves: headers were zeroed (a hole or a damaged copy), or the file was only partly written",
        )
    rest = read(pos + 2 * BLOCK, tail)
    if rest.count(0) != len(rest) or len(rest) != tail:
        at = pos + 2 * BLOCK + len(rest) - len(rest.lstrip(b"\0"))
        raise CorruptFileError(
            name,
            f"the bytes after the end-of-archive marker at byte {pos} are not zeros (byte {at} is not): a header was "
            "zeroed (a hole or a damaged copy), or archives were concatenated",
        )


def scan(read: Callable[[int, int], bytes], size: int, name: Path) -> tuple[list[str], list[int], list[int], list[bool]]:
    """The regular members of the tar archive of ``size`` bytes that ``read(offset, n)`` reads:
    (names, data offsets, sizes, whether each name is its header's own) in file order (see the
    module doc for what is refused)."""
    if size == 0:
        raise CorruptFileError(name, "the file is empty, not a tar archive")
    head = read(0, min(size, 8))
    for magic, kind in _COMPRESSED.items():
        if head.startswith(magic):
            raise CorruptFileError(
                name,
                f"a {kind}-compressed file, not a tar archive: tar shards are read in place uncompressed (decompress it first)",
            )
    names: list[str] = []
    offsets: list[int] = []
    sizes: list[int] = []
    named: list[bool] = []
    pos = 0
    long_name: str | None = None
    pax: dict[str, bytes] = {}
    while True:
        if pos >= size:
            raise CorruptFileError(
                name, f"the archive ends at byte {size} without its end-of-archive block: the file is cut short"
            )
        block = read(pos, BLOCK)
        if len(block) < BLOCK:
            if block.strip(b"\0") == b"":
                raise CorruptFileError(
                    name, f"the archive ends at byte {size} without its end-of-archive block: the file is cut short"
                )
            raise CorruptFileError(
                name, f"the header at byte {pos} is truncated ({len(block)} of {BLOCK} bytes): the file is cut short"
            )
        if block.count(0) == BLOCK:
            _check_end(read, size, name, pos)
            break
        if not header_ok(block):
            raise CorruptFileError(name, f"the header at byte {pos} fails its checksum: the file is damaged or not a tar archive")
        length = _number(block[124:136], name, "size", pos)
        kind = block[156:157]
        data = pos + BLOCK
        if "size" in pax and kind not in _RECORDS:
            text = pax["size"]
            if not text.isdigit() or len(text) > 20:  # (20 digits hold any size a file can have)
                raise CorruptFileError(
                    name, f"the pax header before byte {pos} has a size that is not a number of at most 20 digits: {text[:40]!r}"
                )
            if not _size_agrees(length, int(text)):
                raise CorruptFileError(
                    name,
                    f"the member at byte {pos}: its pax header says it holds {int(text)} bytes, its own header {length}: "
                    "the archive is damaged or its writer is at fault (a size field holds up to "
                    f"{MAX_OCTAL} bytes; a larger pax size goes with a size field of 0)",
                )
            length = int(text)
        if data + length > size:
            raise CorruptFileError(
                name,
                f"the member at byte {pos} says it holds {length} bytes, past the file's end ({size} bytes): the file is cut short or damaged",
            )
        if kind in _RECORDS:
            if length > MAX_RECORD:
                raise CorruptFileError(
                    name,
                    f"the {'long name' if kind == _LONGNAME else 'pax header'} at byte {pos} says it holds {length} bytes, more than the {MAX_RECORD} read",
                )
            raw = read(data, length)
            if len(raw) != length:
                raise CorruptFileError(name, f"the record at byte {pos} is truncated: the file is cut short")
            if kind in (_PAX, _SOLARIS_PAX):
                pax = _pax(raw, name, pos)
            elif kind == _PAX_GLOBAL:
                _pax(raw, name, pos)  # checked, then ignored
            elif kind == _LONGNAME:
                long_name = _text(raw.split(b"\0", 1)[0], name, "long name", pos)
            pos = data + -(-length // BLOCK) * BLOCK
            continue
        own = "path" not in pax and long_name is None
        if "path" in pax:
            member = _text(pax["path"], name, "pax path", pos)
        elif long_name is not None:
            member = long_name
        else:
            member = _text(block[:100].split(b"\0", 1)[0], name, "member name", pos)
            prefix = block[345:500].split(b"\0", 1)[0]
            if block[257:263] == b"ustar\0" and prefix:
                member = _text(prefix, name, "member name prefix", pos) + "/" + member
        pax, long_name = {}, None
        if kind in _TYPES:
            raise CorruptFileError(
                name, f"member {member!r} (at byte {pos}) is {_TYPES[kind]}: tar shards hold regular files (and folders) only"
            )
        if kind not in _REGULAR and kind != _FOLDER:
            raise CorruptFileError(name, f"member {member!r} (at byte {pos}) has the unknown type {kind!r}")
        if kind == _FOLDER or member.endswith("/"):
            pass  # a folder: nothing to read
        elif not member:
            raise CorruptFileError(name, f"the member at byte {pos} has no name")
        else:
            names.append(member)
            offsets.append(data)
            sizes.append(length)
            named.append(own)
        pos = data + -(-length // BLOCK) * BLOCK
    return names, offsets, sizes, named


def group(
    path: str, identity: tuple[int, ...], names: list[str], offsets: Any, sizes: Any, name: Any = None, named: Any = None
) -> TarIndex:
    """The samples of a shard's members, as WebDataset groups them (see the module doc); errors
    name the file as ``name`` (default ``path``). ``named``: whether each name is its header's own
    (``scan``'s; default none, so no name is checked against a header)."""
    where = path if name is None else name
    kept_names, kept, keys, starts, codes = [], [], [], [], []
    extensions: dict[str, int] = {}
    seen: set[str] = set()
    current: str | None = None
    in_sample: set[str] = set()
    for m, member in enumerate(names):
        if "/" not in member and member.startswith("__") and member.endswith("__") or _META.match(member):
            continue
        match = _KEY.match(member)
        if match is None:
            continue
        key, extension = match.group(1), match.group(2).lower()
        if key != current:
            if key in seen:
                raise CorruptFileError(
                    where, f"key {key!r} comes back at member {member!r} after other keys: a sample's members must be consecutive"
                )
            seen.add(key)
            current, in_sample = key, set()
            keys.append(key)
            starts.append(len(kept))
        if extension in in_sample:
            raise CorruptFileError(where, f"sample {key!r} holds extension {extension!r} twice (member {member!r})")
        if extension == "__key__":
            raise CorruptFileError(where, f"member {member!r}: the extension '__key__' names the key column")
        in_sample.add(extension)
        kept.append(m)
        kept_names.append(member)
        codes.append(extensions.setdefault(extension, len(extensions)))
    starts.append(len(kept))
    at = np.asarray(kept, dtype=np.int64)
    return TarIndex(
        path=path, identity=tuple(identity), names=Strings.of(kept_names),
        offsets=np.asarray(offsets, dtype=np.int64)[at], sizes=np.asarray(sizes, dtype=np.int64)[at],
        keys=Strings.of(keys), starts=np.asarray(starts, dtype=np.int64), extensions=list(extensions),
        codes=np.asarray(codes, dtype=np.int32),
        named=(np.zeros(len(names), bool) if named is None else np.asarray(named, dtype=bool))[at],
    )  # fmt: skip
