"""``engine="ray"``: a planned sharded write's shards written by Ray tasks, one task per shard.

Ray is optional: it is imported only here, when this engine runs (``ImportError`` naming
``pip install 'slipstream[ray]'`` without it). Connecting: when this process is already connected
(``ray.init`` was called), that connection is used and left as it is; otherwise ``ray.init(address=
ray_address)`` connects to the cluster at ``ray_address`` or, when None, to the one Ray finds
(``RAY_ADDRESS``, a ``ray start`` on this machine), else starts a local Ray; the connection made
here is closed when the write ends (``ray.shutdown``: a local Ray started here stops, a cluster
keeps running). The folder must be on a file system every node of the cluster sees (NFS, a
shared volume): tasks write their shards straight into it (a relative folder is the caller's,
made absolute before the tasks start), and slipstream must be installed on every node.

The data reach the tasks once: ``ray.put(data)`` puts them in the object store and each task gets
a reference to it (each worker process fetches and unpickles them once, for all the shards it
writes); a task's own arguments are its shard's number and range.

Failures: Ray retries a task whose worker process died or whose node was lost (``MAX_RETRIES``
times); the retry writes the shard again under a new temporary name and renames it into place,
and the driver sweeps the temporary files a killed attempt left. An exception raised by the task
itself (a sample that cannot be read or encoded) is not retried: it is raised here as itself,
its notes naming the shard and sample, with Ray's error (and the remote traceback) as its cause;
one that Ray could not rebuild here as itself (see ``engines.portable``) arrives as a
``RuntimeError`` stand-in saying its type, message, notes and traceback. A task whose retries ran
out (its worker or node died) is a ``WorkerError`` naming its shard and the retries; any other
Ray error is a ``WorkerError`` naming its shard and Ray's error, no retry claimed. The tasks still running are
then cancelled. ``workers`` bounds the tasks in flight (default: all, and Ray schedules them on
the cluster's CPUs, one each).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.errors import WorkerError, add_note
from ..core.optional import require
from ..files.shardwrite import ShardJob, ShardSpec, write_shard
from . import check_workers
from .portable import raise_portable

__all__ = ["MAX_RETRIES", "run"]

MAX_RETRIES = 3  # attempts after the first, for a task whose worker process died
_held: dict[str, Any] = {}  # in a Ray worker process: the data of the write it last worked for, by object id


def _ray() -> Any:
    return require("ray", extra="ray", purpose="engine='ray' needs Ray")


def _data(holder: list[Any]) -> Any:
    """The data behind ``holder[0]`` (an object reference), fetched once per worker process."""
    key = holder[0].hex()
    if key not in _held:
        _held.clear()  # only the current write's data are kept
        _held[key] = _ray().get(holder[0])
    return _held[key]


def _task(holder: list[Any], spec: ShardSpec, job: ShardJob) -> dict[str, Any]:
    try:
        return write_shard(_data(holder), spec, job)
    except Exception as exc:
        pickler = _ray().cloudpickle
        raise_portable(exc, pickler.dumps, pickler.loads)  # as itself when Ray can rebuild it in the driver


def run(
    data: Any, spec: ShardSpec, jobs: list[ShardJob], *, workers: int | None, advance: Callable[[int], None], ray_address: str | None = None
) -> list[dict[str, Any]]:
    """Write ``jobs`` as Ray tasks (at most ``workers`` in flight); their index entries, in order."""
    check_workers(workers, "tasks in flight", "all")
    ray = _ray()
    started = not ray.is_initialized()
    if started:
        ray.init(address=ray_address or None)
    pending: dict[Any, int] = {}
    try:
        held = [ray.put(data)]  # in a list: the tasks get the reference, not a copy each
        spec_ref = ray.put(spec)
        remote = ray.remote(num_cpus=1, max_retries=MAX_RETRIES, retry_exceptions=False)(_task)
        limit = workers or len(jobs)
        entries: list[dict[str, Any] | None] = [None] * len(jobs)
        submitted = 0
        while pending or submitted < len(jobs):
            while submitted < len(jobs) and len(pending) < limit:
                pending[remote.remote(held, spec_ref, jobs[submitted])] = submitted
                submitted += 1
            done, _ = ray.wait(list(pending), num_returns=1)
            for ref in done:
                k = pending.pop(ref)
                entries[k] = _result(ray, ref, jobs[k])
                advance(jobs[k].stop - jobs[k].start)
        return entries  # type: ignore[return-value]
    except BaseException:
        _cancel(ray, list(pending))
        raise
    finally:
        if started:
            ray.shutdown()


def _result(ray: Any, ref: Any, job: ShardJob) -> dict[str, Any]:
    """The entry a task returned, or its failure raised (see the module doc)."""
    try:
        return ray.get(ref)
    except ray.exceptions.RayTaskError as exc:
        cause = getattr(exc, "cause", None)
        if isinstance(cause, Exception):
            notes = getattr(cause, "__notes__", [])
            if not any(job.name in note for note in notes):
                add_note(cause, f"while writing {job.describe()}")
            add_note(cause, "(in a Ray task: the remote traceback is in the cause below)")
            raise cause from exc
        raise
    except ray.exceptions.RayError as exc:
        if isinstance(exc, _retried(ray)):
            raise WorkerError(f"engine='ray': the task writing {job.describe()} failed after {MAX_RETRIES} retries: {exc}") from exc
        raise WorkerError(f"engine='ray': the task writing {job.describe()} failed ({type(exc).__name__}): {exc}") from exc


def _retried(ray: Any) -> tuple[type, ...]:
    """Ray's errors for a task that Ray retries (``MAX_RETRIES`` times) before raising them: its
    worker process, node or local raylet died, or the out-of-memory monitor killed it."""
    names = ("WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError", "OutOfMemoryError")
    return tuple(getattr(ray.exceptions, name) for name in names if hasattr(ray.exceptions, name))


def _cancel(ray: Any, refs: list[Any]) -> None:
    """Cancel ``refs``' tasks (killing their workers) and wait a while for them to end, so that
    none writes a shard after the driver has swept the write's temporary files."""
    if not refs:
        return
    for ref in refs:
        try:
            ray.cancel(ref, force=True)
        except Exception:  # noqa: BLE001 - a task that already ended cannot be cancelled
            pass
    try:
        ray.wait(refs, num_returns=len(refs), timeout=30)
    except Exception:  # noqa: BLE001 - best effort: the write is failing anyway
        pass
