"""A planned sharded write: the split decided first (``write.shardplan``), then one job per shard run by an engine.

``ss.write(folder, data, shard_size=...)`` takes this path for a container or a file set (see
``write.shardwrite``), whatever the engine, so one process, local worker processes and Ray write
the same shards and the same index, byte for byte. The driver (this module, in the calling
process):

1. probes the data (``probe``: packs up to 64 samples in memory) and splits it (``plan.split``)
   into shards whose pages fill ``shard_size`` less an empty packed file's bytes;
2. takes the folder's write lock (``folderwrite.writing``: the dataset read again under it, so two
   appends are serialized and a second write of a new folder fails clearly), then runs the jobs,
   shards numbered after any existing ones (``append=True``), on the engine (none when appending
   no samples);
3. writes ``index.json`` last (temporary name, then renamed), naming the existing shards and the
   new ones in order, only when every shard was written;
4. removes the temporary files of this write that are left (a killed process's), failed or not.

A failure (an exception here, raised in a job or the engine) removes the shards this write
renamed into place (the jobs' names, numbered after any existing shards, each removed only when it
is not the file that was there before the jobs ran: never another write's) and writes no new
index: a new folder is left empty, so the same write can run again; an appended one is still the
dataset it was. Only the driver being killed leaves shards behind.
The folder is made absolute here, so tasks running in another working directory (a Ray
worker's) write into the same folder.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.containers import numobs
from ..files.field import Field
from ..files.field import pyarrow_module as _pa
from . import engine_inprocess, engine_processes, engine_ray
from . import folderwrite as _folderwrite
from . import shardplan as _plan
from .failures import Skips, describe, record_in_shards
from .pagewrite import Chunking, paged, write_pages
from .shardwrite import ShardJob, ShardSpec, chunks, encode_chunk, read_samples, sweep

__all__ = ["ENGINES", "check_engine", "first_sample", "probe", "write_planned"]

ENGINES = ("processes", "ray")  # besides None: this process (``engine_inprocess``)


def check_engine(engine: str | None) -> str | None:
    """``engine`` when it names one (None: this process); ``ValueError`` naming the choices otherwise."""
    if engine is not None and engine not in ENGINES:
        raise ValueError(f"engine must be None (this process), 'processes' or 'ray', got {engine!r}")
    return engine


def first_sample(data: Any) -> Any:
    """Sample 0 of a container or file set (None when it is empty), to settle the fields from."""
    if numobs(data) == 0:
        return None
    return read_samples(data, 0, 1)[0][1]


def probe(
    data: Any, fields: dict[str, Field], schema: Any, page_size: int, where: Callable[[int, str], str], skips: Skips | None = None
) -> tuple[int, int, int]:
    """(bytes, samples, empty): the probe's samples (``plan.probe_runs``) encoded and packed into
    pages as a shard packs them, in memory; ``bytes`` is what they add to a packed file (Arrow
    buffers, padding, page metadata, footer entries), ``empty`` the bytes of a packed file of
    no samples (the schema and footer every shard has). With ``skips`` (``on_error="skip"``),
    samples that fail are left out of the probe (``ValueError`` when all of them fail)."""
    pa = _pa()
    rows: list[tuple[Any, ...]] = []
    for run in _plan.probe_runs(numobs(data)):
        for chunk in chunks(data, run.start, run.stop, lambda run=run: len(run)):
            rows.extend(encode_chunk(data, fields, where, chunk, skips))
    if skips is not None and not rows and len(skips):
        first = describe(skips.entries()[0])
        raise ValueError(f"every one of the {len(skips)} samples probed to size the shards (spread over the data) failed; the first: {first}")
    sizes = []
    for part in ([], rows):
        sink = pa.BufferOutputStream()
        write_pages(sink, schema, fields, paged(fields, iter([part] if part else []), page_size, Chunking(), None))
        sizes.append(sink.getvalue().size)
    return sizes[1] - sizes[0], len(rows), sizes[0]


def write_planned(
    folder: Path, data: Any, fields: dict[str, Field], schema: Any, *, page_size: int, shard_size: int, existing: dict[str, Any] | None,
    engine: str | None, workers: int | None, progress: Any, ray_address: str | None, temporary: Callable[[Path], Path],
    commit: Callable[[Path, Path], None], where: Callable[[int, str], str], on_error: str = "raise",
) -> Path:  # fmt: skip
    """Write ``data`` into ``folder`` as planned shards on ``engine`` and index them (see the module
    doc); ``progress``: a tqdm-like bar (``update``) or None; ``on_error="skip"``: samples that fail
    are left out, and listed in every shard's and the index's schema (``failures``). Returns ``folder``."""
    nbytes, count, empty = probe(data, fields, schema, page_size, where, Skips() if on_error == "skip" else None)
    given = folder
    folder = folder.absolute()  # the tasks' working directory may be another (a Ray worker's)
    with _folderwrite.writing(folder, existing) as current:  # the dataset read again under the folder's write lock
        number = _folderwrite.first_number(current)
        ranges = _plan.split(numobs(data), nbytes, count, max(1, shard_size - empty) if shard_size else 0)
        if current is not None and numobs(data) == 0:
            ranges = []  # appending nothing adds no shard (as a streamed write)
        jobs = [ShardJob(number + k, r.start, r.stop) for k, r in enumerate(ranges)]
        spec = ShardSpec(folder, secrets.token_hex(6), schema, fields, page_size, on_error)
        advance = progress.update if progress is not None else (lambda n: None)
        before = {job.name: _folderwrite.file_identity(folder / job.name) for job in jobs}  # (a killed write's leftovers: not this write's)
        try:
            entries = _run(engine, data, spec, jobs, workers, advance, ray_address) if jobs else []
            entries, schema = record_in_shards(folder, entries, schema, lambda path: temporary(path, spec.token), commit)  # skipped samples listed
            previous = list(current["shards"]) if current is not None else []
            _folderwrite.write_index(folder, previous + entries, schema, lambda path: temporary(path, spec.token), commit)
        except BaseException:
            _folderwrite.remove_shards(_created(folder, before))
            raise
        finally:
            sweep(folder, spec.token)
    return given


def _created(folder: Path, before: dict[str, tuple[int, ...] | None]) -> dict[Path, tuple[int, ...] | None]:
    """The job shards that are not the files that were there before the jobs ran: this write's
    (the folder's write lock is held), each with its identity now."""
    now = {name: _folderwrite.file_identity(folder / name) for name in before}
    return {folder / name: identity for name, identity in now.items() if identity is not None and identity != before[name]}


def _run(
    engine: str | None, data: Any, spec: ShardSpec, jobs: list[ShardJob], workers: int | None, advance: Callable[[int], None],
    ray_address: str | None,
) -> list[dict[str, Any]]:  # fmt: skip
    """The jobs' index entries, in order, from the engine that runs them."""
    if engine == "processes":
        return engine_processes.run(data, spec, jobs, workers=workers, advance=advance)
    if engine == "ray":
        return engine_ray.run(data, spec, jobs, workers=workers, advance=advance, ray_address=ray_address)
    return engine_inprocess.run(data, spec, jobs, workers=workers if workers is not None else 1, advance=advance)
