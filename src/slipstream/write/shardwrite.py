"""Writing one shard of a planned sharded write: the unit of work every engine runs.

``write_shard(data, spec, job)`` encodes samples ``job.start .. job.stop - 1`` of ``data`` (numbered
as in the whole dataset: errors and seeded image policies see the global index), gathers them into
pages of about ``spec.page_size`` bytes (a new page at the shard's start, so a shard's bytes depend
on its samples alone), writes them under a temporary name ``.shard-NNNNN.arrow.<token>.<random>.partial``
and renames it to ``shard-NNNNN.arrow`` once complete (flushed first), returning the shard's index
entry. The same data, spec and job give the same bytes in any process, on any machine.

Contract for failures:

* an exception removes the shard's temporary file and propagates as itself, with a note naming
  the shard and its samples (an encoding error already names its sample and field; an error
  reading a sample gets a note naming it), marked as raised for that sample (``failures.mark``);
* with ``spec.on_error == "skip"`` a sample that fails to read or encode is left out instead, and
  the shard's entry lists it under ``"skipped"`` (``failures``: the driver takes the lists out);
* a process killed mid-shard leaves its temporary file behind, never a file named like a shard:
  ``sweep(folder, token)`` removes every temporary file of the write ``token`` (the driver runs it
  when the write ends, failed or not). A retried task writes a new temporary file and renames it
  over the same name, so a shard written twice is replaced whole, by the same bytes.

``data`` is a container (``len`` and ``[i]``: samples read one by one, in the encoding threads when
there are any) or a file set (``len`` and ``read_rows(start, stop)``: the samples in order, reading
only the files or row groups that hold them).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.containers import getobs, numobs, origin_note
from ..core.errors import add_note
from ..files import folder as _folder
from ..files.field import Field
from ..loading.parallel import loadparallel
from .atomic import commit, temporary
from .failures import Skips, mark
from .folderwrite import SHARD
from .pagewrite import Chunking, field_value, is_container, naming, paged, write_pages

__all__ = ["ShardJob", "ShardSpec", "chunks", "encode_chunk", "is_splittable", "read_samples", "sweep", "write_shard"]

_UNREAD = object()  # a chunk's placeholder for a container sample its encoder reads itself


@dataclass(frozen=True)
class ShardJob:
    """Shard ``number`` (``shard-NNNNN.arrow``) holds samples ``start .. stop - 1``."""

    number: int
    start: int
    stop: int

    @property
    def name(self) -> str:
        return SHARD.format(self.number)

    def describe(self) -> str:
        samples = f"samples {self.start}..{self.stop - 1}" if self.stop > self.start else "no samples"
        return f"{self.name} ({samples})"


@dataclass(frozen=True)
class ShardSpec:
    """What every shard of one write shares: its ``folder``, the write's ``token`` (in its temporary
    names), the Arrow ``schema`` (with the fields' metadata), the prepared ``fields`` and ``page_size``."""

    folder: Path
    token: str
    schema: Any
    fields: dict[str, Field]
    page_size: int
    on_error: str = "raise"  # or "skip": samples that fail are left out and listed (``failures``)


def is_splittable(data: Any) -> bool:
    """Whether ``data`` can be split into shards up front: a file set (``read_rows``) or a container."""
    return (callable(getattr(data, "read_rows", None)) and hasattr(data, "__len__")) or is_container(data)


def chunks(data: Any, start: int, stop: int, size: Callable[[], int]) -> Iterator[list[tuple[int, Any]]]:
    """Samples ``start .. stop - 1`` as lists of ``(index, sample)`` of about ``size()`` samples; a
    container's samples are left for ``encode_chunk`` to read (in whichever thread encodes them)."""
    read_rows = getattr(data, "read_rows", None)
    if not callable(read_rows):
        while start < stop:
            end = min(stop, start + max(1, size()))
            yield [(i, _UNREAD) for i in range(start, end)]
            start = end
        return
    chunk: list[tuple[int, Any]] = []
    index = start
    try:
        for sample in read_rows(start, stop):
            chunk.append((index, sample))
            index += 1
            if len(chunk) >= max(1, size()):
                yield chunk
                chunk = []
    except Exception as exc:
        add_note(exc, f"while reading sample {index}")
        mark(exc, index, skippable=False)  # the rows after it cannot be read past it
        raise
    if index != stop:
        raise ValueError(f"{type(data).__name__}.read_rows({start}, {stop}) gave {index - start} samples, expected {stop - start}")
    if chunk:
        yield chunk


def read_samples(data: Any, start: int, stop: int) -> list[tuple[int, Any]]:
    """Samples ``start .. stop - 1`` as ``(index, sample)``, all read in this thread."""
    out = []
    for chunk in chunks(data, start, stop, lambda: stop - start):
        out.extend((i, _read(data, i) if sample is _UNREAD else sample) for i, sample in chunk)
    return out


def _read(data: Any, index: int) -> Any:
    """A container's sample ``index``; an error gets a note naming it."""
    try:
        return getobs(data, index)
    except Exception as exc:
        add_note(exc, f"while reading sample {index}{origin_note(data, index)}")
        raise


def encode_chunk(
    data: Any, fields: dict[str, Field], where: Callable[[int, str], str], chunk: list[tuple[int, Any]], skips: Skips | None = None
) -> list[tuple[Any, ...]]:
    """The encoded rows of ``chunk`` (a row: one encoded value per field, in ``fields``' order). A
    sample that fails to read or encode raises, marked as that sample's (``failures.mark``), or
    with ``skips`` is left out and added to them."""
    names = list(fields)
    rows = []
    for index, sample in chunk:
        name = None  # the field being encoded
        try:
            if sample is _UNREAD:
                sample = _read(data, index)
            row = []
            for name in names:
                row.append(fields[name].encode(field_value(sample, name, index), index, where(index, name)))
            rows.append(tuple(row))
        except Exception as exc:
            if skips is None or isinstance(exc, MemoryError):
                mark(exc, index, stage="read" if name is None else "encode")
                raise
            skips.add(index, exc, name, where(index, name) if name is not None else None)
    return rows


def write_shard(data: Any, spec: ShardSpec, job: ShardJob, *, threads: int = 0, progress: Any = None) -> dict[str, Any]:
    """Write ``job``'s shard of ``data`` into ``spec.folder`` atomically (see the module doc) and
    return its index entry. ``threads``: encoding threads (0: encode in this thread).
    ``progress``: an object whose ``update(n)`` is called as samples are written (a tqdm bar)."""
    origin = getattr(data, "sample_origin", None)
    where = naming(origin if callable(origin) else None)
    final = spec.folder / job.name
    partial = None
    try:
        if not 0 <= job.start <= job.stop <= numobs(data):
            raise IndexError(f"samples {job.start}..{job.stop} are not within the {numobs(data)} samples of the data")
        chunking = Chunking()
        parts = chunks(data, job.start, job.stop, lambda: chunking.size)
        skips = Skips(origin if callable(origin) else None) if spec.on_error == "skip" else None
        rows = loadparallel(parts, lambda chunk: encode_chunk(data, spec.fields, where, chunk, skips), workers=threads, prefetch=threads + 1)
        pages = paged(spec.fields, iter(rows), spec.page_size, chunking, progress)
        partial = temporary(final, spec.token)
        write_pages(partial, spec.schema, spec.fields, pages)
        entry, _ = _folder.describe(job.name, partial.stat().st_size, _folder.read_local(partial))
        commit(partial, final)
        if skips is not None:
            entry["skipped"] = skips.entries()  # taken out of the entry by the driver (failures.record_in_shards)
        return entry
    except BaseException as exc:
        if partial is not None:
            partial.unlink(missing_ok=True)
        add_note(exc, f"while writing {job.describe()} into {spec.folder}")
        raise


def sweep(folder: Path, token: str) -> list[Path]:
    """Remove the temporary files the write ``token`` left in ``folder`` (a killed process's
    unfinished shards); returns what it removed. Other writes' files are never touched."""
    removed = []
    if not token or not folder.is_dir():
        return removed
    for path in folder.glob(f".*.{token}.*.partial"):
        path.unlink(missing_ok=True)
        removed.append(path)
    return removed
