"""``ss.open`` of WebDataset tar shards: a ``.tar`` file, a list of them, a folder of them, or a
brace pattern (``shard-{0000..0099}.tar``), read in place with random access.

Opening a shard reads its index (``inplace.tarindex``: one pass over the headers, then cached);
its samples come in *parts* (runs of consecutive samples, about ``part_bytes`` of members each, or
``part_samples`` samples), each one page of a ``PackedDataset`` (``order="quasi_random"`` shuffles
parts, then samples within a few of them). A part is read with one read of its byte range, the
members sliced out of it, and kept among the ``keep`` most recently used.

Samples are WebDataset's (see ``tarindex``): ``__key__`` (``F.Text``) and one field per extension
found in the shard, chosen by the extension's last dot-separated part: ``jpg``, ``jpeg``, ``png``
an image (``image=``, default ``F.Image(codec="jpeg")``; kept as its bytes, read by the pipelines,
compiled tasks and device stage as a packed file's), ``cls``, ``cls2``, ``index`` an ``F.Int``
(ASCII digits), ``txt``, ``text`` an ``F.Text`` (UTF-8), ``json`` an ``F.JSON``, anything else
``F.Bytes``. Every sample must hold every field read: one that lacks an extension others have is
refused naming its key, unless ``fields=`` leaves that extension out. The shards of a set must
hold the same fields.

What is checked: the index (see ``tarindex``); the file's identity (``tarindex.file_identity``:
inode, size, modification and status-change times) before each read, which opens the file by its
path: a file changed in place since it was opened, or replaced by another at its path (renamed
over it), raises ``CorruptFileError``, reading neither the new file nor the one opened (open it
again to read the new contents); each member's own header
in the bytes read (``tarindex.first_bad_header``: checksum, type, size, and the name where the
header holds it); and each value as its field reads it (integers, UTF-8, JSON, image headers),
errors naming the file, the sample's key and the member.
"""

from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from ..convert.columns import Column, list_values
from ..core.errors import CorruptFileError
from ..files import field_kinds as F
from ..files.field import pyarrow_module as _pa
from ..files.packed import PackedDataset
from ..files.pagememory import RecentPages
from ..files.shards import ShardedDataset
from .tablepages import DEFAULT_KEEP, TablePages, chosen_columns
from .tarcache import tar_index
from .tarindex import BLOCK, TarIndex, file_identity, first_bad_header, header_problem

__all__ = ["PART_BYTES", "TarPages", "TarParts", "expand_braces", "is_pattern", "is_webdataset", "open_webdataset", "tar_files"]

SUFFIX = ".tar"
KEY = "__key__"
PART_BYTES = 8 << 20  # about how many member bytes one part holds
MAX_PART_SAMPLES = 8192
MAX_EXPANSION = 1_000_000  # names a brace pattern may give
IMAGES, INTS, TEXTS, JSONS = ("jpg", "jpeg", "png"), ("cls", "cls2", "index"), ("txt", "text"), ("json",)
_KINDS = {
    **dict.fromkeys(IMAGES, "image"),
    **dict.fromkeys(INTS, "int"),
    **dict.fromkeys(TEXTS, "text"),
    **dict.fromkeys(JSONS, "json"),
}
_INT = re.compile(rb"[ \t\r\n]*[+-]?[0-9]{1,19}[ \t\r\n]*")


# -- which files ---------------------------------------------------------------------------------
def expand_braces(pattern: str) -> list[str]:
    """WebDataset's brace pattern expanded: ``{0000..0099}`` (numbers, zero-padded to the wider end
    when either end starts with 0; descending too; ``{0..10..2}`` with a step) and ``{a,b,c}``
    (lists), several groups giving every combination in order; no nesting. ``ValueError`` for a
    malformed pattern (unbalanced or nested braces, an empty or one-item group, a range that is not
    of integers, more than ``MAX_EXPANSION`` names)."""
    parts: list[list[str]] = []
    pos = 0
    for match in re.finditer(r"[{}]", pattern):
        if match.group() == "}" or match.start() < pos:
            if match.start() >= pos:
                raise ValueError(f"{pattern!r}: a '}}' at {match.start()} closes no '{{'")
            continue
        close = pattern.find("}", match.start())
        inner = pattern[match.start() + 1 : close] if close >= 0 else ""
        if close < 0:
            raise ValueError(f"{pattern!r}: the '{{' at {match.start()} is never closed")
        if "{" in inner:
            raise ValueError(f"{pattern!r}: nested braces at {match.start()} are not supported")
        parts.append([pattern[pos : match.start()]])
        parts.append(_group(pattern, inner))
        pos = close + 1
    parts.append([pattern[pos:]])
    total = 1
    for options in parts:
        total *= len(options)
        if total > MAX_EXPANSION:
            raise ValueError(f"{pattern!r} gives more than {MAX_EXPANSION} names")
    names = [""]
    for options in parts:
        names = [name + option for name in names for option in options]
    return names


def _group(pattern: str, inner: str) -> list[str]:
    numbers = re.fullmatch(r"(-?\d+)\.\.(-?\d+)(?:\.\.(-?\d+))?", inner)
    if numbers:
        first, last, step_text = numbers.groups()
        step = abs(int(step_text)) if step_text else 1
        if step == 0 or abs(int(last) - int(first)) // step >= MAX_EXPANSION:
            raise ValueError(f"{pattern!r}: the range {{{inner}}} has step 0 or gives more than {MAX_EXPANSION} names")
        pad = (
            max(len(first), len(last))
            if any(t.lstrip("-").startswith("0") and len(t.lstrip("-")) > 1 for t in (first, last))
            else 0
        )
        a, b = int(first), int(last)
        values = range(a, b + 1, step) if a <= b else range(a, b - 1, -step)
        return [str(v).zfill(pad) if pad else str(v) for v in values]
    if ".." in inner:
        raise ValueError(f"{pattern!r}: the range {{{inner}}} is not of integers (such as {{0000..0099}})")
    if "," not in inner:
        raise ValueError(f"{pattern!r}: the group {{{inner}}} is neither a range ({{0..9}}) nor a list ({{a,b}})")
    return inner.split(",")


def is_pattern(path: Any) -> bool:
    return isinstance(path, str) and "{" in path and "}" in path


def is_webdataset(path: Any) -> bool:
    """Whether ``path`` names WebDataset shards: a ``.tar`` path, a brace pattern of ``.tar`` names
    (recognized by its form, so a malformed one reaches ``open_webdataset``'s clear error), or a
    folder holding ``.tar`` files and neither an ``index.json`` (a sharded packed dataset's) nor
    ``.parquet`` files."""
    if not isinstance(path, (str, os.PathLike)):
        return False
    if is_pattern(path):
        return str(path).endswith(SUFFIX)
    p = Path(path)
    if p.suffix == SUFFIX:
        return True
    if not p.is_dir() or (p / "index.json").exists():
        return False
    children = list(p.iterdir())
    return any(q.suffix == SUFFIX and q.is_file() for q in children) and not any(q.suffix == ".parquet" for q in children)


def tar_files(path: Any) -> list[Path]:
    """The shards ``path`` names: a list (in its order), a brace pattern (expanded, each file must
    exist), a folder (its ``.tar`` files, in name order) or one file."""
    if isinstance(path, (list, tuple)):
        files = [Path(p) for p in path]
    elif is_pattern(path):
        files = [Path(p) for p in expand_braces(str(path))]
    elif Path(path).is_dir():
        files = sorted(q for q in Path(path).iterdir() if q.suffix == SUFFIX and q.is_file())
        if not files:
            raise FileNotFoundError(f"{path}: no .tar files in this folder")
    else:
        files = [Path(path)]
    if not files:
        raise ValueError("open_webdataset needs at least one .tar file")
    for file in files:
        if not file.is_file():
            raise FileNotFoundError(f"{file}: no such tar shard")
    return files


# -- columns -------------------------------------------------------------------------------------
def _kind(extension: str) -> str:
    """What an extension holds, by its last dot-separated part (``seg.png``: an image)."""
    return _KINDS.get(extension.rsplit(".", 1)[-1], "bytes")


class JsonValues:
    """The values of a JSON member column (``Column.values``): each member's text parsed,
    ``ValueError`` naming the sample's key and member when it does not parse."""

    def __init__(self, index: TarIndex, code: int):
        self.index, self.code = index, code

    def __call__(self, array: Any, first_row: int) -> list[Any]:
        out = []
        for k, text in enumerate(array.to_pylist()):
            try:
                out.append(json.loads(text.decode("utf-8")))  # (UTF-8 only, as F.JSON stores it)
            except ValueError as exc:  # (a UnicodeDecodeError too)
                sample = first_row + k
                member = self.index.names[self.index.member(sample, self.code)]
                raise ValueError(f"sample {self.index.keys[sample]!r}, member {member!r}: not JSON: {exc}") from None
        return out


def _columns(index: TarIndex, image: F.Image) -> list[Column]:
    """``__key__`` and one column per extension, in name order (so shards of one set agree)."""
    columns = [Column(KEY, F.Text(), list_values)]
    for extension in sorted(index.extensions):
        code = index.extensions.index(extension)
        kind = _kind(extension)
        if kind == "image":
            columns.append(Column(extension, copy.deepcopy(image), list_values))
        elif kind == "int":
            columns.append(Column(extension, F.Int(), list_values))
        elif kind == "text":
            columns.append(Column(extension, F.Text(), list_values))
        elif kind == "json":
            columns.append(Column(extension, F.JSON(), JsonValues(index, code)))
        else:
            columns.append(Column(extension, F.Bytes(), list_values))
    return columns


def _parts(index: TarIndex, part_bytes: int, part_samples: int | None) -> list[int]:
    """The first sample of each part (and the sample count at the end)."""
    n = len(index)
    if part_samples is not None:
        return [*range(0, n, part_samples), n]
    starts = index.starts
    begin = index.offsets[starts[:-1]] - BLOCK if n else np.zeros(0, np.int64)
    end = index.offsets[starts[1:] - 1] + index.sizes[starts[1:] - 1] if n else np.zeros(0, np.int64)
    bounds, first = [0], 0
    while first < n:
        stop = int(np.searchsorted(end, begin[first] + part_bytes, side="right"))
        first = min(n, max(first + 1, stop), first + MAX_PART_SAMPLES)
        bounds.append(first)
    return bounds


# -- the pages ---------------------------------------------------------------------------------
class TarParts(TablePages):
    """A tar shard's samples in parts, as pages, from its index and ``_part_bytes`` (a subclass's:
    a part's byte range, its members' headers checked). The subclasses: ``TarPages`` (a local file),
    ``webdataset_remote.RemoteTarPages`` (an object in a store)."""

    def _parts_of(
        self, name: Any, index: TarIndex, fields: list[str] | None, image: F.Image | None, part_bytes: int,
        part_samples: int | None, recent: RecentPages | None,
    ) -> None:  # fmt: skip
        """Set up the fields and parts of ``index`` (called by a subclass's ``__init__``)."""
        if part_samples is not None and (not isinstance(part_samples, int) or part_samples < 1):
            raise ValueError(f"part_samples must be a positive integer or None, got {part_samples!r}")
        if not isinstance(part_bytes, int) or part_bytes < 1:
            raise ValueError(f"part_bytes must be a positive integer, got {part_bytes!r}")
        self.index = index
        self._image = image if image is not None else F.Image(codec="jpeg")
        self._wanted = None if fields is None else list(fields)
        columns = chosen_columns(name, _columns(index, self._image), fields)
        self._codes = {c.name: index.extensions.index(c.name) for c in columns if c.name != KEY}
        self._check_complete()
        self._bounds = _parts(index, part_bytes, part_samples)
        super().__init__(columns, list(np.diff(self._bounds)), None, recent)

    def _check_complete(self) -> None:
        """Every sample holds every extension read (``CorruptFileError`` naming the first that lacks one)."""
        n = len(self.index)
        for extension, code in self._codes.items():
            members = np.flatnonzero(self.index.codes == code)
            if len(members) != n:
                owners = np.searchsorted(self.index.starts, members, side="right") - 1
                has = np.zeros(n, bool)
                has[owners] = True
                missing = int(np.flatnonzero(~has)[0])
                raise CorruptFileError(
                    self.name, f"sample {self.index.keys[missing]!r} has no {extension!r} member, which other samples have: "
                    f"leave it out with fields= (this file's fields are {[KEY, *sorted(self.index.extensions)]})",
                )  # fmt: skip

    def where(self, p: int) -> str:
        first, stop = self._bounds[p], self._bounds[p + 1]
        return f"part {p} (samples {first}..{stop - 1}, keys {self.index.keys[first]!r}..{self.index.keys[stop - 1]!r})"

    def span(self, p: int) -> tuple[int, int, int, int]:
        """Part ``p``'s byte range (from its first member's header to its last member's end) and members ``m0 .. m1 - 1``."""
        index = self.index
        first, stop = self._bounds[p], self._bounds[p + 1]
        m0, m1 = int(index.starts[first]), int(index.starts[stop])
        return int(index.offsets[m0]) - BLOCK, int(index.offsets[m1 - 1] + index.sizes[m1 - 1]), m0, m1

    def bad_header(self, data: Any, base: int, m0: int, m1: int) -> str | None:
        """What is wrong with the first member header of ``m0 .. m1 - 1`` in ``data`` (the bytes from
        ``base``) that is not the index's (see ``tarindex.first_bad_header``), or None."""
        offsets = self.index.offsets[m0:m1] - base
        blocks = np.frombuffer(data, np.uint8, len(data) // BLOCK * BLOCK).reshape(-1, BLOCK)  # (base is block-aligned)
        bad = first_bad_header(blocks[offsets // BLOCK - 1], self.index, m0)
        if bad < 0:
            return None
        problem = header_problem(blocks[offsets[bad] // BLOCK - 1].tobytes(), self.index, m0 + bad)
        return f"member {self._member(m0 + bad)}: {problem}"

    def _part_bytes(self, p: int) -> Any:
        """Part ``p``'s bytes (``span(p)``), its member headers checked."""
        raise NotImplementedError

    def read_part(self, p: int) -> Any:
        pa = _pa()
        index = self.index
        first, stop = self._bounds[p], self._bounds[p + 1]
        base, _, m0, m1 = self.span(p)
        data = self._part_bytes(p)
        offsets, sizes = index.offsets[m0:m1] - base, index.sizes[m0:m1]
        # The part's bytes as one binary array of its members and the gaps before them (value 2j + 1:
        # member j), over the bytes read: a column is a take of its members (one copy, in Arrow).
        bounds = np.zeros(2 * len(offsets) + 1, np.int64)
        bounds[1::2], bounds[2::2] = offsets, offsets + sizes
        every = pa.Array.from_buffers(pa.large_binary(), 2 * len(offsets), [None, pa.py_buffer(bounds), pa.py_buffer(data)])
        codes = index.codes[m0:m1]
        arrays, names = [], []
        for column in self.columns:
            names.append(column.name)
            if column.name == KEY:
                arrays.append(index.keys.arrow(first, stop))
                continue
            members = np.flatnonzero(codes == self._codes[column.name])  # one per sample, in order
            kind = _kind(column.name)
            if kind == "int":
                view, at, size = memoryview(data), offsets.tolist(), sizes.tolist()
                values = [self._int(view[at[j] : at[j] + size[j]], first + k, m0 + j) for k, j in enumerate(members.tolist())]
                arrays.append(pa.array(values, pa.int64()))
                continue
            array = every.take(pa.array(2 * members + 1))
            if kind == "text":
                array = self._utf8(array, first, m0 + members)
            arrays.append(array)
        return pa.RecordBatch.from_arrays(arrays, names=names)

    def _member(self, m: int) -> str:
        return repr(self.index.names[m])

    def _int(self, value: memoryview, sample: int, m: int) -> int:
        raw = bytes(value)
        if _INT.fullmatch(raw):
            number = int(raw)
            if -(2**63) <= number < 2**63:
                return number
        raise CorruptFileError(
            self.name,
            f"sample {self.index.keys[sample]!r}, member {self._member(m)}: not an integer (int64 in ASCII digits): {raw[:40]!r}",
        )

    def _utf8(self, array: Any, first: int, members: np.ndarray) -> Any:
        pa = _pa()
        try:
            return array.cast(pa.large_string())
        except pa.ArrowInvalid:
            for k, value in enumerate(array.to_pylist()):
                try:
                    value.decode("utf-8")
                except UnicodeDecodeError as exc:
                    raise CorruptFileError(
                        self.name,
                        f"sample {self.index.keys[first + k]!r}, member {self._member(int(members[k]))}: not UTF-8 text: {exc}",
                    ) from None
            raise


class TarPages(TarParts):
    """A local tar shard's samples in parts, as pages (see the module doc)."""

    def __init__(
        self,
        path: str | os.PathLike,
        fields: list[str] | None = None,
        *,
        image: F.Image | None = None,
        recent: RecentPages | None = None,
        part_bytes: int = PART_BYTES,
        part_samples: int | None = None,
        cache_dir: str | os.PathLike | None = None,
        index: TarIndex | None = None,
    ):
        self.name = self.path = Path(path)
        self.identity = file_identity(os.stat(self.path))
        self.size = self.identity[1]
        index = index if index is not None else tar_index(self.path, cache_dir=cache_dir)
        if tuple(index.identity) != self.identity:
            raise CorruptFileError(
                self.path, "the file changed while it was opened (or since the dataset was pickled): reopen it"
            )
        self._settings = {"part_bytes": part_bytes, "part_samples": part_samples, "cache_dir": cache_dir}
        self._parts_of(self.path, index, fields, image, part_bytes, part_samples, recent)

    def _read(self, start: int, stop: int) -> bytes:
        """Bytes ``start .. stop - 1`` of the file at the path once its identity is the one opened (a
        descriptor of its own per read: a set of thousands of shards holds none open)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise CorruptFileError(self.path, "the file was removed since it was opened") from None
        try:
            st = os.fstat(fd)
            self._same(file_identity(st))
            chunks, at = [], start
            while at < stop:
                chunk = os.pread(fd, stop - at, at)
                if not chunk:
                    raise CorruptFileError(
                        self.path, f"bytes {start}..{stop} cannot be read: the file is shorter than when it was opened"
                    )
                chunks.append(chunk)
                at += len(chunk)
        finally:
            os.close(fd)
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _part_bytes(self, p: int) -> Any:
        base, stop, m0, m1 = self.span(p)
        data = self._read(base, stop)
        problem = self.bad_header(data, base, m0, m1)
        if problem is not None:
            raise CorruptFileError(self.path, f"{problem}: the file changed or the index is not this file's")
        return data

    def check(self) -> None:
        """``CorruptFileError`` when the file at the path is not the one opened (one ``stat``)."""
        try:
            now = file_identity(os.stat(self.path))
        except FileNotFoundError:
            raise CorruptFileError(self.path, "the file was removed since it was opened") from None
        self._same(now)

    def _same(self, now: tuple[int, int, int, int]) -> None:
        if now[0] != self.identity[0]:
            raise CorruptFileError(
                self.path,
                "the file was replaced since it was opened (another file is at its path, renamed over it or made anew; "
                "each read opens the path, so the file opened cannot be read): reopen it to read the new file",
            )
        if now != self.identity:
            raise CorruptFileError(
                self.path,
                f"the file changed in place since it was opened (size {self.identity[1]} -> {now[1]} bytes; its "
                "modification or status-change time moved): reopen it to read the new contents",
            )

    def __getstate__(self) -> dict[str, Any]:
        """The settings, the bound on decoded parts (one object: the shards pickled together share it
        again), and the index itself only when it is not cached (a worker process reads it from the
        cache, checked as ever, so a set of thousands of shards pickles small)."""
        index = None if self.index.cached else self.index
        return {
            "path": str(self.path),
            "fields": self._wanted,
            "image": self._image,
            "recent": self.recent,
            "index": index,
            **self._settings,
        }

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        path, fields = state.pop("path"), state.pop("fields")
        self.__init__(path, fields, **state)  # type: ignore[misc]


def open_webdataset(
    paths: Any,
    fields: list[str] | None = None,
    *,
    image: F.Image | None = None,
    keep: int = DEFAULT_KEEP,
    part_bytes: int = PART_BYTES,
    part_samples: int | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> PackedDataset | ShardedDataset:
    """WebDataset tar shards read in place (see the module doc): one ``.tar`` path as a
    ``PackedDataset``; a list of them, a folder of them or a brace pattern as a ``ShardedDataset``
    (in that order). ``keep``: the parts each process keeps decoded over all these shards;
    ``cache_dir``: where the indexes are cached (see ``tarindex``)."""
    recent = RecentPages(keep)
    settings = {"image": image, "recent": recent, "part_bytes": part_bytes, "part_samples": part_samples, "cache_dir": cache_dir}
    single = isinstance(paths, (str, os.PathLike)) and not is_pattern(paths) and not Path(paths).is_dir()
    files = tar_files(paths)
    shards = [PackedDataset(f, fields=fields, source=TarPages(f, fields, **settings)) for f in files]  # type: ignore[arg-type]
    return shards[0] if single else ShardedDataset([], fields=fields, shards=shards)
