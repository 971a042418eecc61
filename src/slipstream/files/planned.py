"""A planned sharded write: the split decided first (``files.plan``), then one job per shard run by an engine.

``ss.write(folder, data, shard_size=...)`` takes this path for a container or a file set (see
``files.shardwrite``), whatever the engine, so one process, local worker processes and Ray write
the same shards and the same index, byte for byte. The driver (this module, in the calling
process):

1. probes the data (``probe``: packs up to 64 samples in memory) and splits it (``plan.split``)
   into shards whose pages fill ``shard_size`` less an empty packed file's bytes;
2. runs the jobs, shards numbered after any existing ones (``append=True``), on the engine;
3. removes the temporary files of this write that are left (a killed process's), failed or not;
4. writes ``index.json`` last (temporary name, then renamed), naming the existing shards and the
   new ones in order, only when every shard was written.

A failure leaves the shards already renamed into place and no new index: the folder is not a
dataset until a write completes (or, appending, still the dataset it was).
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..core.containers import numobs
from . import folder as _folder
from . import plan as _plan
from .field import Field
from .field import pyarrow_module as _pa
from .shardwrite import ShardJob, ShardSpec, encode_chunk, read_samples, sweep

__all__ = ["first_sample", "probe", "write_planned"]


def first_sample(data: Any) -> Any:
    """Sample 0 of a container or file set (None when it is empty), to settle the fields from."""
    if numobs(data) == 0:
        return None
    return read_samples(data, 0, 1)[0][1]


def probe(data: Any, fields: dict[str, Field], schema: Any, page_size: int, where: Callable[[int, str], str]) -> tuple[int, int, int]:
    """(bytes, samples, empty): the probe's samples (``plan.probe_runs``) encoded and packed into
    pages as a shard packs them, in memory; ``bytes`` is what they add to a packed file (Arrow
    buffers, padding, page metadata, footer entries), ``empty`` the bytes of a packed file of
    no samples (the schema and footer every shard has)."""
    from .pagewrite import Chunking, paged, write_pages

    pa = _pa()
    rows = [row for run in _plan.probe_runs(numobs(data)) for row in encode_chunk(data, fields, where, read_samples(data, run.start, run.stop))]
    sizes = []
    for part in ([], rows):
        sink = pa.BufferOutputStream()
        write_pages(sink, schema, fields, paged(fields, iter([part] if part else []), page_size, Chunking(), None))
        sizes.append(sink.getvalue().size)
    return sizes[1] - sizes[0], len(rows), sizes[0]


def write_planned(
    folder: Path, data: Any, fields: dict[str, Field], schema: Any, *, page_size: int, shard_size: int, existing: dict[str, Any] | None,
    engine: str | None, workers: int | None, progress: Any, ray_address: str | None, temporary: Callable[[Path], Path],
    commit: Callable[[Path, Path], None], where: Callable[[int, str], str],
) -> Path:  # fmt: skip
    """Write ``data`` into ``folder`` as planned shards on ``engine`` and index them (see the module
    doc); ``progress``: a tqdm-like bar (``update``) or None. Returns ``folder``."""
    nbytes, count, empty = probe(data, fields, schema, page_size, where)
    number = _folder.first_number(existing)
    ranges = _plan.split(numobs(data), nbytes, count, max(1, shard_size - empty) if shard_size else 0)
    jobs = [ShardJob(number + k, r.start, r.stop) for k, r in enumerate(ranges)]
    folder.mkdir(parents=True, exist_ok=True)
    spec = ShardSpec(folder, secrets.token_hex(6), schema, fields, page_size)
    advance = progress.update if progress is not None else (lambda n: None)
    try:
        if engine == "processes":
            from ..engines import processes

            entries = processes.run(data, spec, jobs, workers=workers, advance=advance)
        elif engine == "ray":
            from ..engines import raytasks

            entries = raytasks.run(data, spec, jobs, workers=workers, advance=advance, ray_address=ray_address)
        else:
            from ..engines import inprocess

            entries = inprocess.run(data, spec, jobs, workers=workers if workers is not None else 1, advance=advance)
    finally:
        sweep(folder, spec.token)
    previous = list(existing["shards"]) if existing is not None else []
    _folder.write_index(folder, previous + entries, schema, temporary, commit)
    return folder
