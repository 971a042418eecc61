"""Samples that fail to read or encode in ``ss.write``: the error it raises for one, or the list it leaves out.

``on_error="raise"`` (the default): the first sample that fails stops the write (nothing is left
at the path) and is raised as itself, its message naming the sample, where it came from (its
file, when the data says: ``data.sample_origin(i)``) and the field, with a short traceback:
slipstream's own frames are dropped (what is left is the caller's line and the data's own code;
set ``SLIPSTREAM_FULL_TRACEBACKS=1`` to keep them), an encoder's own chained cause is not printed
(its message is in the error's; it stays as ``__context__``), and a note says the way out.

``on_error="skip"``: a sample whose reading (a container's ``data[i]``) or encoding fails is left
out and the write goes on; the written dataset's metadata lists each one,
``ss.open(path).metadata["skipped"]``: ``{"sample": its index in the data, "origin": its file
(when the data names one), "field": the field that failed to encode (none when reading failed),
"error": why}`` in sample order (``[]`` when none failed), and a warning
(``SkippedSamplesWarning``) says how many. A write in which every sample fails raises. Errors of
an iterable itself (its ``next``) or of a file set's ``read_rows`` still stop the write: what
follows cannot be read past them.

The list lives in the schema's metadata, which a packed file holds before its pages: a write that
left samples out writes its pages first, then copies them once (at disk speed, the pages as they
are) into the final file, or each shard, under the schema that lists them. A write with nothing
to leave out costs nothing more.
"""

from __future__ import annotations

import json
import os
import threading
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.containers import getobs, origin_note
from ..core.errors import add_note
from ..files import folder as _folder
from ..files import format as _format
from ..files.field import pyarrow_module as _pa

__all__ = [
    "ON_ERROR",
    "SkippedSamplesWarning",
    "Skips",
    "all_failed",
    "check_on_error",
    "copy_pages",
    "describe",
    "failed_sample",
    "first_sample",
    "listed",
    "mark",
    "record_in_shards",
    "shortened",
    "skipped_of",
    "warning",
    "with_empty_list",
    "with_skipped",
]

ON_ERROR = ("raise", "skip")
KEY = "skipped"  # the metadata key of the list
SKIP_HINT = (
    "fix or remove that sample, or pass on_error='skip' to write the others and list those that fail in "
    "ss.open(path).metadata['skipped']"
)
_ATTRIBUTE = "_slipstream_failed_sample"  # (index, skippable, stage) on an exception raised for one sample
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # .../slipstream
_MESSAGE_LIMIT = 500  # characters of an error kept in the list


class SkippedSamplesWarning(UserWarning):
    """``ss.write(..., on_error="skip")`` left samples out (listed in the metadata under "skipped")."""


def check_on_error(on_error: Any) -> str:
    if on_error not in ON_ERROR:
        raise ValueError(f"on_error must be 'raise' (stop at the first sample that fails) or 'skip' (leave it out and list it), got {on_error!r}")
    return on_error


# -- one failing sample ----------------------------------------------------------------------
def mark(exc: BaseException, index: int, skippable: bool = True, stage: str = "read") -> None:
    """Record on ``exc`` that it was raised for sample ``index`` (``skippable``: by reading or
    encoding that sample alone, which ``on_error="skip"`` would leave out), while reading it (the
    data's own code) or encoding it (``stage="encode"``: a field's own message)."""
    try:
        setattr(exc, _ATTRIBUTE, (int(index), bool(skippable), stage))
    except Exception:  # noqa: BLE001 - an exception type that takes no attributes keeps its long traceback
        pass


def failed_sample(exc: BaseException) -> tuple[int, bool] | None:
    """(sample index, skippable) when ``exc`` was raised for one sample, else None."""
    found = getattr(exc, _ATTRIBUTE, None)
    return (found[0], found[1]) if isinstance(found, tuple) and len(found) == 3 else None


def shortened(exc: BaseException, hint: str | None = SKIP_HINT) -> BaseException:
    """``exc`` (raised for one sample) made short to read: slipstream's own frames dropped from its
    traceback and from those it was raised from (the caller's and the data's own frames stay),
    the thread pool's position note dropped, ``hint`` added as a note when the sample could be
    skipped. Returns ``exc``."""
    if os.environ.get("SLIPSTREAM_FULL_TRACEBACKS"):
        return exc
    marked = getattr(exc, _ATTRIBUTE, None)
    exc.__traceback__ = _outside(exc.__traceback__)
    if isinstance(marked, tuple) and marked[-1] == "encode" and exc.__cause__ is not None:
        exc.__context__, exc.__cause__, exc.__suppress_context__ = exc.__cause__, None, True  # its message says it
    seen = {id(exc)}
    chained = exc.__cause__ or (None if exc.__suppress_context__ else exc.__context__)
    while chained is not None and id(chained) not in seen:
        seen.add(id(chained))
        chained.__traceback__ = _outside(chained.__traceback__)
        chained = chained.__cause__ or (None if chained.__suppress_context__ else chained.__context__)
    notes = getattr(exc, "__notes__", None)
    if isinstance(notes, list):
        notes[:] = [note for note in notes if not (isinstance(note, str) and note.startswith("slipstream.loadparallel:"))]
    found = failed_sample(exc)
    if hint and found is not None and found[1] and hint not in (getattr(exc, "__notes__", None) or []):
        add_note(exc, hint)
    return exc


def _outside(tb: types.TracebackType | None) -> types.TracebackType | None:
    """The frames of ``tb`` outside slipstream's package, in order."""
    kept = []
    while tb is not None:
        if not os.path.abspath(tb.tb_frame.f_code.co_filename).startswith(_PACKAGE + os.sep):
            kept.append(tb)
        tb = tb.tb_next
    out = None
    for frame in reversed(kept):
        out = types.TracebackType(out, frame.tb_frame, frame.tb_lasti, frame.tb_lineno)
    return out


# -- the samples left out --------------------------------------------------------------------
class Skips:
    """The samples one write (or one shard of it) left out, collected from its encoding threads."""

    def __init__(self, origin: Callable[[int], Any] | None = None):
        self.origin = origin
        self._lock = threading.Lock()
        self._entries: list[dict[str, Any]] = []

    def add(self, index: int, exc: BaseException, field: str | None = None, where: str | None = None) -> None:
        """Sample ``index`` left out for ``exc``, raised encoding ``field`` (None: reading it), whose
        message starts with ``where`` (how the field names the sample: not repeated in the entry)."""
        entry: dict[str, Any] = {"sample": int(index)}
        if self.origin is not None:
            try:
                origin = self.origin(index)
            except Exception:  # noqa: BLE001 - naming the sample must not stop the write
                origin = None
            if origin:
                entry["origin"] = str(origin)
        if field is not None:
            entry["field"] = field
        text = str(exc)
        if where and text.startswith(where + ": "):
            text = text[len(where) + 2 :]
        message = " ".join(f"{type(exc).__name__}: {text}".split())
        entry["error"] = message if len(message) <= _MESSAGE_LIMIT else message[: _MESSAGE_LIMIT - 3] + "..."
        with self._lock:
            self._entries.append(entry)

    def entries(self) -> list[dict[str, Any]]:
        """The entries in sample order."""
        with self._lock:
            return sorted(self._entries, key=lambda entry: entry["sample"])

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)


def skipped_of(schema: Any) -> list[dict[str, Any]] | None:
    """The list a schema's metadata holds (None when its write had no skip policy)."""
    meta = json.loads(schema.metadata[_format.META_KEY])
    listed = _format.user_metadata(meta).get(KEY)
    return listed if isinstance(listed, list) else None


def with_skipped(schema: Any, entries: list[dict[str, Any]]) -> Any:
    """``schema`` with its metadata's list of skipped samples set to ``entries``."""
    meta = json.loads(schema.metadata[_format.META_KEY])
    user = dict(_format.user_metadata(meta))
    user[KEY] = entries
    return schema.with_metadata(_format.schema_metadata(meta["fields"], meta["page_size"], user))


def describe(entry: dict[str, Any]) -> str:
    """One skipped sample, for a message: "sample 4 (file x.jpg): ValueError: ..."."""
    origin = f" ({entry['origin']})" if entry.get("origin") else ""
    field = f", field {entry['field']!r}" if entry.get("field") else ""
    return f"sample {entry['sample']}{origin}{field}: {entry['error']}"


def all_failed(where: Any, skipped: list[dict[str, Any]], count: int | None = None) -> str:
    """The message of a write with ``on_error="skip"`` in which every sample (``count``, or as
    many as ``skipped`` lists) failed."""
    count = len(skipped) if count is None else count
    return f"{where}: every sample failed ({count}), so nothing was written; the first: {describe(skipped[0])}"


def copy_pages(source: Path, target: Path, schema: Any) -> int:
    """Write the pages of the packed file ``source`` into ``target`` under ``schema`` (the same
    columns, other metadata): each page as it is, its metadata vouching for the new schema.
    Returns the samples copied."""
    pa = _pa()
    import pyarrow.ipc  # noqa: F401

    schema_crc = _format.metadata_checksum(schema.metadata[_format.META_KEY])
    reader = pa.ipc.open_file(pa.memory_map(str(source)))
    first = 0
    with pa.OSFile(str(target), "wb") as sink, pa.ipc.new_file(sink, schema) as writer:
        for p in range(reader.num_record_batches):
            batch = reader.get_batch(p).replace_schema_metadata(None)
            batch = pa.record_batch(batch.columns, schema=schema)
            writer.write_batch(batch, custom_metadata=_format.page_metadata(batch, first, schema_crc))
            first += batch.num_rows
    return first


def record_in_shards(
    folder: Path, entries: list[dict[str, Any]], schema: Any, temporary: Callable[[Path], Path], commit: Callable[[Path, Path], None],
) -> tuple[list[dict[str, Any]], Any]:  # fmt: skip
    """(index entries, schema) for the shards ``entries`` a planned write with ``on_error="skip"``
    just wrote, each entry's ``"skipped"`` list taken out: when any sample was left out, every
    shard is copied once under the schema that lists them all (its entry described again), so
    every shard and the index hold the same schema. Without a skip policy, as they are."""
    lists = [entry.pop(KEY, None) for entry in entries]
    skipped = [item for listed in lists if listed for item in listed]
    if not skipped:
        return entries, schema
    if not any(entry["samples"] for entry in entries):
        raise ValueError(all_failed(folder, skipped))
    schema = with_skipped(schema, skipped)
    rewritten = []
    for entry in entries:
        final = folder / entry["file"]
        partial = temporary(final)
        try:
            copy_pages(final, partial, schema)
            described, _ = _folder.describe(entry["file"], partial.stat().st_size, _folder.read_local(partial))
            commit(partial, final)
        except BaseException:
            partial.unlink(missing_ok=True)
            raise
        rewritten.append(described)
    return rewritten, schema


# -- a single file's write ---------------------------------------------------------------------
def with_empty_list(metadata: dict[str, Any], skip: bool, user: dict[str, Any]) -> dict[str, Any]:
    """``metadata`` with the skip policy's list (empty until samples are left out): ``ValueError``
    when the caller's own metadata (``user``) already uses its key."""
    if not skip:
        return metadata
    if KEY in user:
        raise ValueError(f"metadata[{KEY!r}] is where on_error='skip' lists the samples it leaves out: use another key")
    return {**metadata, KEY: []}


def first_sample(data: Any, total: int, skip: bool, where: Any = "the write") -> Any:
    """A container's first sample (None when empty) to settle the fields from; with ``skip``, the
    first that reads. A failure is marked as its sample's; with ``skip``, none reading is a
    ``ValueError`` that says every sample failed (``all_failed``, naming ``where``), the first's
    error chained."""
    failure = None
    for index in range(total if skip else min(total, 1)):
        try:
            return getobs(data, index)
        except Exception as exc:
            add_note(exc, f"while reading sample {index}{origin_note(data, index)}")
            mark(exc, index)
            if not skip:
                raise
            failure = failure or exc
    if failure is not None:
        origin = getattr(data, "sample_origin", None)
        skips = Skips(origin if callable(origin) else None)
        skips.add(0, failure)
        raise ValueError(all_failed(where, skips.entries(), total)) from failure
    return None


def listed(partial: Path, path: Path, schema: Any, skipped: list[dict[str, Any]], temporary: Callable[[Path], Path]) -> Path:
    """The packed file written to ``partial`` copied to a new temporary file (``temporary(path)``)
    under a schema that lists ``skipped``, ``partial`` removed; ``ValueError`` when every sample was
    left out."""
    target = temporary(path)
    try:
        if copy_pages(partial, target, with_skipped(schema, skipped)) == 0:
            raise ValueError(all_failed(path, skipped))
    except BaseException:
        target.unlink(missing_ok=True)
        raise
    finally:
        partial.unlink(missing_ok=True)
    return target


def warning(path: Any, skipped: list[dict[str, Any]], total: int | None) -> SkippedSamplesWarning:
    """The warning of a write that left ``skipped`` out of ``total`` samples (None: unknown)."""
    shown = "; ".join(describe(entry) for entry in skipped[:3]) + ("; ..." if len(skipped) > 3 else "")
    of = f" of {total}" if total is not None else ""
    return SkippedSamplesWarning(f"{path}: left out {len(skipped)}{of} samples that failed (listed in ss.open(path).metadata['skipped']): {shown}")
