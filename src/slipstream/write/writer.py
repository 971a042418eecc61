"""``ss.write``: pack any container or iterable of dict samples into a packed file, once.

Samples are encoded in parallel worker threads (in order), gathered into pages of about
``page_size`` bytes and written as they fill, so memory stays bounded however large the dataset.
The file is written under a unique temporary name in ``path``'s folder (``.<name>.<random>.partial``),
flushed to disk (fsync) and renamed over ``path`` only once complete, then the folder is synced: an
interrupted or failing write never leaves a file at ``path`` that looks complete, and removes only
its own temporary file. Writers racing to one path (every rank of a job converting the same data)
never share a file: the last to complete wins, and a reader sees the old file or a new one, never
a mix. Samples from an iterable are copied as they are yielded (decoders often reuse one buffer),
so each is stored as it was when yielded; a container's samples are read in the workers. The same
input and settings give a byte-identical file.
"""

from __future__ import annotations

import copy
import json
import os
import sys
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from ..core.arguments import check_workers
from ..core.containers import numobs
from ..core.cpus import usable_cores
from ..core.optional import require
from ..core.sizes import parse_size
from ..files import folder as _folder
from ..files import format as _format
from ..files.field import Field
from ..files.field import pyarrow_module as _pa
from ..files.inferred import infer_fields
from ..loading.parallel import loadparallel
from . import described as _described
from . import failures as _failures
from . import folderwrite as _folderwrite
from . import shardwrite
from .atomic import commit, temporary
from .pagewrite import Chunking, field_value, is_container, naming, paged, write_pages
from .planned import check_engine, first_sample, write_planned

__all__ = ["write"]


def _chunks(data: Any, chunking: Chunking) -> tuple[Callable[[list[str]], Iterator[list[tuple[int, Any]]]], int | None, Any]:
    """For an iterable (a container goes through ``shardwrite.chunks``): ``chunks(names)``, chunks of
    (index, sample) holding the stored fields ``names``, taken (``_snapshot``) as they are yielded;
    the total and the first sample."""
    iterator = iter(data)
    try:
        first = _snapshot(next(iterator))
    except StopIteration:
        return lambda names: iter(()), 0, None
    total = len(data) if hasattr(data, "__len__") else None

    def batches(names: list[str]) -> Iterator[list[tuple[int, Any]]]:
        chunk = [(0, first)]
        for i, sample in enumerate(iterator, start=1):
            if len(chunk) >= chunking.size:
                yield chunk
                chunk = []
            chunk.append((i, _snapshot(sample, names)))
        if chunk:
            yield chunk

    return batches, total, first


def _snapshot(sample: Any, names: list[str] | None = None) -> Any:
    """What an iterable's sample holds now, safe from the iterable changing it later: a new dict of
    its keys ``names`` (all when None) whose NumPy arrays, bytearrays and memoryviews are copied (same
    types, dtypes and shapes), PIL images copied, tensors and other array-likes read into arrays, and
    lists, dicts and tuples deep-copied. Immutable values and other objects are kept as they are. A sample that is not a dict, or lacks one of ``names``, is returned
    unchanged, for ``encode`` to report."""
    if not isinstance(sample, Mapping):
        return sample
    if names is not None and not all(name in sample for name in names):
        return sample
    return {name: _snapshot_value(sample[name]) for name in (sample.keys() if names is None else names)}


def _snapshot_value(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.copy()
    if isinstance(value, bytearray):
        return bytearray(value)
    if isinstance(value, memoryview):
        return memoryview(np.array(value))  # a copy with the view's format and shape
    if isinstance(value, (list, dict, tuple)):
        return copy.deepcopy(value)
    if type(value).__module__.startswith("PIL.") and callable(getattr(value, "copy", None)):
        return value.copy()  # an image object a decoder reuses (GIF/TIFF frames are one object, seeked)
    if hasattr(value, "__array__") and not isinstance(value, (str, bytes, np.generic)):
        try:
            return np.array(np.asarray(value), copy=True)  # a tensor or other array-like: its values now (asarray may be a view)
        except Exception:  # noqa: BLE001 - one NumPy cannot read is encoded as it is
            return value
    return value


def write(
    path: str | os.PathLike,
    data: Any,
    fields: Mapping[str, Field] | None = None,
    *,
    workers: int | None = None,
    progress: bool | None = None,
    page_size: int = 8 << 20,
    metadata: Mapping[str, Any] | None = None,
    shard_size: int | str | None = None,
    append: bool = False,
    engine: str | None = None,
    ray_address: str | None = None,
    on_error: str = "raise",
) -> Path:
    """Pack ``data`` (a container or an iterable of dict samples) into the file ``path``.

    ``fields`` maps each stored key to its field (``slipstream.fields``); keys a sample has beyond
    them are ignored, a missing one raises ``ValueError`` naming the sample (one field: a bare sample is its value). When None, the
    data's own (``data.default_fields()``: ``ss.imagefolder``'s image, label and path, a Hugging
    Face dataset's features), else fields inferred from the first sample (a PIL image as
    ``F.Image(codec="png")``). ``workers`` encoding threads (default: the usable cores, at
    most 8; 0: encoded in this thread; no "auto": None is the default, and an engine's workers are
    counted by the same rule, checked before any work). ``progress``: a tqdm bar (default: when stderr is a terminal). ``metadata``: a dict of
    your own (class names, a source, a license) with string keys and JSON values, stored in the
    file and read back as ``ss.open(path).metadata``, over what the data records of itself
    (``data.default_metadata(names)``: an image folder's or a ``ClassLabel``'s class names, as
    ``{"class_names": {field: [names]}}``, for the fields written). Returns the path.

    A Hugging Face ``datasets.Dataset`` is read as Arrow (``convert.hfrows``): ``Image`` columns
    as their stored bytes (a JPEG kept as it is), ``ClassLabel`` names kept, with or without ``fields``.

    The file appears at ``path`` only once complete (see the module docstring); an iterable's
    samples are stored as they were when yielded. An error names the sample, and where it came
    from when the container says (``data.sample_origin(index)``, e.g. ``ss.imagefolder``'s files),
    and the field, in its first line, with slipstream's own frames left out of its traceback.
    ``on_error="skip"`` leaves out the samples that fail to read or encode and lists them in the
    metadata, ``ss.open(path).metadata["skipped"]`` (each ``{"sample", "origin", "field", "error"}``,
    ``[]`` when none failed), with a ``SkippedSamplesWarning`` (``write.failures``).

    ``shard_size`` makes ``path`` a folder of shards and their ``index.json`` (``write.folderwrite``).
    A container, or a file set (``len`` and ``read_rows(start, stop)``: ``slipstream convert``'s
    Parquet and Hugging Face sources), is split into shards up front by one deterministic rule
    (``write.shardplan``: equal runs of samples, sized from an encoded probe of up to 64 samples), and
    each shard is written by one job; an iterable is streamed, its shards cut as bytes fill them.
    ``engine`` chooses where the jobs run: None, here (``workers`` encoding threads); "processes",
    ``workers`` local processes (default: every usable core); "ray", one Ray task per shard (at
    most ``workers`` in flight), on the cluster at ``ray_address`` or the one Ray finds, else a
    local Ray started for this write (``write.engine_ray``). Every engine writes the same bytes
    as the others for the same data and settings; only containers and file sets can use one.
    """
    on_error = _failures.check_on_error(on_error)
    workers = _checked_workers(workers, engine)
    report: list[Any] = []  # (skipped entries, total) of a write with on_error="skip"
    try:
        written = _write(
            path, data, fields, workers=workers, progress=progress, page_size=page_size, metadata=metadata, shard_size=shard_size,
            append=append, engine=engine, ray_address=ray_address, on_error=on_error, report=report,
        )  # fmt: skip
    except Exception as exc:
        if _failures.failed_sample(exc) is None:
            raise
        raise _failures.shortened(exc)  # noqa: B904 - itself, its traceback without slipstream's frames
    if report and report[0]:
        warnings.warn(_failures.warning(written, *report), stacklevel=2)
    return written


def _write(
    path: str | os.PathLike, data: Any, fields: Mapping[str, Field] | None, *, workers: int | None, progress: bool | None, page_size: int,
    metadata: Mapping[str, Any] | None, shard_size: int | str | None, append: bool, engine: str | None, ray_address: str | None, on_error: str,
    report: list[Any],
) -> Path:  # fmt: skip
    """``write`` (see there), its errors as raised; with a skip policy ``report`` gets
    ``[skipped entries, total samples]``."""
    data = _described.adapted(data, fields)  # a Hugging Face dataset as its rows; one field's bare samples as dicts
    skip = on_error == "skip"
    fields = _described.default_fields(data, fields)
    origin = getattr(data, "sample_origin", None)
    origin = origin if callable(origin) else None
    _pa()  # pyarrow, or ImportError naming the extra
    import pyarrow.ipc  # noqa: F401 - makes pa.ipc available

    path = Path(path)
    if page_size < 1:
        raise ValueError(f"page_size must be >= 1 byte, got {page_size}")
    existing = None
    if shard_size is not None:
        shard_size = parse_size(shard_size, "shard_size")
        existing = _folderwrite.check_target(path, append)
        if existing is not None:
            fields, page_size, metadata = _folderwrite.appended(existing, fields, _checked_metadata(metadata) if metadata is not None else None, path)
    elif append:
        raise ValueError("append=True adds shards to a sharded dataset: pass shard_size= too")
    elif path.is_dir():  # os.replace would refuse it only after every sample was encoded
        raise IsADirectoryError(f"{path}: is a folder; ss.write writes a file (such as {path / 'data.arrow'})")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"{path}: the folder {path.parent} does not exist; create it first")
    if skip and existing is not None:
        raise ValueError(
            f"{path}: on_error='skip' lists the samples it leaves out in the dataset's metadata, which append=True keeps as it "
            "is: write the new samples into a new folder, or use on_error='raise'"
        )
    user_metadata = _checked_metadata(metadata)
    if existing is None:
        user_metadata = _failures.with_empty_list(_described.stored_metadata(data, fields, user_metadata), skip, user_metadata)
    planned = _planned(data, shard_size, check_engine(engine), ray_address)
    if skip and shard_size is not None and not planned:
        raise TypeError(
            f"{path}: on_error='skip' with shard_size= needs a container (len(data) and data[i]) or a file set, which are "
            f"split into shards up front; got {type(data).__name__}, which can only be streamed: write one file (no shard_size), "
            "or pass a container"
        )
    if planned:
        return _write_planned(
            path, data, fields, page_size=page_size, user_metadata=user_metadata, shard_size=shard_size, existing=existing,
            engine=engine, workers=workers, progress=progress, ray_address=ray_address, where=naming(origin), on_error=on_error,
            report=report,
        )  # fmt: skip
    chunking = Chunking()
    container = is_container(data)
    if container:  # its samples are read in the workers
        total = numobs(data)
        first = _failures.first_sample(data, total, skip, path)
    else:
        make_chunks, total, first = _chunks(data, chunking)
    where = naming(origin)
    fields = _settled_fields(fields, first, where)
    names = list(fields)
    chunks = shardwrite.chunks(data, 0, total, lambda: chunking.size) if container else make_chunks(names)
    schema = _schema(fields, page_size, user_metadata)
    skips = _failures.Skips(origin) if skip else None

    def encode(chunk: list[tuple[int, Any]]) -> list[tuple[Any, ...]]:
        return shardwrite.encode_chunk(data, fields, where, chunk, skips)

    workers = _default_workers() if workers is None else workers
    schema = _appended_schema(path, schema, existing)
    partial = temporary(path) if shard_size is None else None
    bar = None
    try:
        bar = _bar(progress, total, f"packing {path.name}")
        rows = loadparallel(chunks, encode, workers=workers, prefetch=workers + 1)
        pages = paged(fields, rows, page_size, chunking, bar)
        if partial is None:  # a sharded dataset: each shard and the index are committed as they are done
            return _folderwrite.write_shards(
                path, schema, pages, shard_size, existing, lambda part, stop: write_pages(part, schema, fields, pages, stop), temporary, commit
            )
        write_pages(partial, schema, fields, pages)
        if skips is not None and len(skips):
            partial = _failures.listed(partial, path, schema, skips.entries(), temporary)
        commit(partial, path)
    except BaseException:
        if partial is not None:
            partial.unlink(missing_ok=True)  # this writer's own file only: a racing writer's is untouched
        raise
    finally:
        if bar is not None:
            bar.close()
    if skips is not None:
        report[:] = [skips.entries(), total]
    return path


def _planned(data: Any, shard_size: int | None, engine: str | None, ray_address: str | None) -> bool:
    """Whether a write is planned (split up front, ``write.planned``); ``ValueError`` / ``TypeError``
    for an engine that cannot run this write."""
    if ray_address is not None and engine != "ray":
        raise ValueError(f"ray_address= is for engine='ray', got engine={engine!r}")
    if shard_size is None:
        if engine is not None:
            raise ValueError(f"engine={engine!r} writes a sharded folder, one job per shard: pass shard_size= too")
        return False
    if shardwrite.is_splittable(data):
        return True
    if engine is not None:
        raise TypeError(
            f"engine={engine!r} splits the data into shards up front, so it needs a container (len(data) and data[i]) or a file set "
            f"(len(data) and data.read_rows(start, stop), as slipstream convert's Parquet and Hugging Face sources); got "
            f"{type(data).__name__}, which can only be streamed: use engine=None"
        )
    return False


def _write_planned(
    path: Path, data: Any, fields: Mapping[str, Field] | None, *, page_size: int, user_metadata: dict[str, Any], shard_size: int,
    existing: dict[str, Any] | None, engine: str | None, workers: int | None, progress: bool | None, ray_address: str | None,
    where: Callable[[int, str], str], on_error: str = "raise", report: list[Any] | None = None,
) -> Path:  # fmt: skip
    """``write`` of a container or file set into a sharded folder, by ``write.planned``."""
    skip = on_error == "skip"
    first = _failures.first_sample(data, numobs(data), skip, path) if is_container(data) else first_sample(data)
    fields = _settled_fields(fields, first, where)
    schema = _appended_schema(path, _schema(fields, page_size, user_metadata), existing)
    if engine is None and workers is None:
        workers = _default_workers()
    bar = None
    try:
        how = f" ({engine})" if engine is not None else ""
        bar = _bar(progress, numobs(data), f"packing {path.name}{how}")
        written = write_planned(
            path, data, fields, schema, page_size=page_size, shard_size=shard_size, existing=existing, engine=engine, workers=workers,
            progress=bar, ray_address=ray_address, temporary=temporary, commit=commit, where=where, on_error=on_error,
        )  # fmt: skip
    finally:
        if bar is not None:
            bar.close()
    if skip and report is not None:
        report[:] = [_failures.skipped_of(_folder.read_local_index(path.absolute())["schema"]) or [], numobs(data)]
    return written


def _schema(fields: dict[str, Field], page_size: int, user_metadata: dict[str, Any]) -> Any:
    """The Arrow schema of ``fields`` (in order), its metadata describing them, ``page_size`` and the user's."""
    names = list(fields)
    schema = _pa().schema([(name, fields[name].arrow_type()) for name in names])
    return schema.with_metadata(_format.schema_metadata({n: fields[n].spec() for n in names}, page_size, user_metadata))


def _appended_schema(path: Path, schema: Any, existing: dict[str, Any] | None) -> Any:
    """``schema``, or when appending to ``existing`` its schema itself (appended shards carry it byte
    for byte); ``ValueError`` when their columns differ."""
    if existing is None:
        return schema
    if existing["schema"].remove_metadata() != schema.remove_metadata():
        raise ValueError(f"{path}: the data's columns {schema.remove_metadata()} differ from the dataset's {existing['schema'].remove_metadata()}")
    return existing["schema"]


def _checked_workers(workers: Any, engine: str | None) -> int | None:
    """``workers`` as ``engine`` takes it (``core.arguments.check_workers``, with the engines' own
    terms: no "auto", None for the default), so a bad count is refused before any work."""
    if check_engine(engine) == "processes":
        return check_workers(workers, minimum=1, auto=False, default="every usable core", unit="processes")
    if engine == "ray":
        return check_workers(workers, minimum=1, auto=False, default="all", unit="tasks in flight")
    return check_workers(workers, minimum=0, auto=False, default="the usable cores, at most 8", unit="encoding threads")


def _default_workers() -> int:
    """Encoding threads when ``workers`` is None: the usable cores (``core.cpus.usable_cores``), at most 8."""
    return min(8, usable_cores())


def _bar(progress: bool | None, total: int | None, desc: str) -> Any:
    """A tqdm bar over ``total`` samples when ``progress`` (None: when stderr is a terminal), else None."""
    if not (sys.stderr.isatty() if progress is None else bool(progress)):
        return None
    tqdm = require("tqdm", extra="files", purpose="progress bars need tqdm").tqdm
    return tqdm(total=total, unit="samples", desc=desc, file=sys.stderr)


def _checked_metadata(metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """The user's metadata as JSON will read it back; ``TypeError`` for what JSON cannot hold."""
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping) or not all(isinstance(key, str) for key in metadata):
        raise TypeError(f"metadata must be a dict with str keys and JSON values, got {metadata!r:.200}")
    try:
        return json.loads(json.dumps(dict(metadata), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"metadata must hold JSON values (dicts, lists, str, int, float, bool, None): {exc}") from None


def _settled_fields(fields: Mapping[str, Field] | None, first: Any, where: Callable[[int, str], str]) -> dict[str, Field]:
    """Private copies of ``fields`` (inferred from ``first`` when None), checked and prepared from ``first``."""
    if fields is None:
        if first is None:
            raise ValueError("cannot infer fields from an empty dataset: pass fields=")
        fields = infer_fields(first)
    if not isinstance(fields, Mapping) or not fields:
        raise TypeError(f"fields must be a non-empty dict of name -> slipstream.fields.Field, got {fields!r}")
    settled = {str(name): copy.deepcopy(field) for name, field in fields.items()}
    for name, field in settled.items():
        if not isinstance(field, Field):
            raise TypeError(f"field {name!r} must be a slipstream.fields.Field (e.g. F.Int()), got {type(field).__name__}")
        if first is not None:
            field.prepare(field_value(first, name, 0), where(0, name))
    return settled
