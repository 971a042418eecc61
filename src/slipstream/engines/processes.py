"""``engine="processes"``: a planned sharded write's shards written by local worker processes.

``workers`` processes (default: every core this process may use), started with ``spawn`` (no
inherited threads or locks; a script that writes this way needs the usual
``if __name__ == "__main__":`` guard). The data and the shard spec are pickled once, in this
process (an object that cannot be pickled is a ``TypeError`` naming it, before any process
starts), and unpickled once per worker; each job then sends only its shard number and range.
Each worker writes one shard at a time, encoding in its own thread.

Failures: an exception in a job propagates as itself, with its notes naming the shard and sample;
the jobs not started are cancelled and the ones running finish first. A worker process that dies
(the out-of-memory killer, a crash in native code, ``os._exit``) breaks the pool: ``WorkerError``
naming the shards that were unfinished, at once, never a hang. Either way the driver then sweeps
the write's temporary files and writes no index.
"""

from __future__ import annotations

import multiprocessing
import pickle
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from ..core.cpus import usable_cores
from ..core.errors import WorkerError
from ..files.shardwrite import ShardJob, ShardSpec, write_shard

__all__ = ["run"]

_adopted: tuple[Any, ShardSpec] | None = None  # (data, spec) in a worker process


def _adopt(payload: bytes) -> None:
    """A worker's initializer: unpickle the data and spec once."""
    global _adopted
    _adopted = pickle.loads(payload)


def _write(job: ShardJob) -> dict[str, Any]:
    assert _adopted is not None, "the worker's initializer did not run"
    data, spec = _adopted
    return write_shard(data, spec, job)


def _payload(data: Any, spec: ShardSpec) -> bytes:
    try:
        return pickle.dumps((data, spec), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - pickling fails with many types (TypeError, AttributeError, PicklingError)
        raise TypeError(
            f"engine='processes' pickles the data once for its worker processes, and this {type(data).__name__} cannot be pickled "
            f"({type(exc).__name__}: {exc}); use engine=None (threads in this process) or make it picklable"
        ) from exc


def run(
    data: Any, spec: ShardSpec, jobs: list[ShardJob], *, workers: int | None, advance: Callable[[int], None]
) -> list[dict[str, Any]]:
    """Write ``jobs`` in ``workers`` local processes; their index entries, in the jobs' order."""
    if workers is not None and (isinstance(workers, bool) or not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers must be a positive number of processes (or None: every usable core), got {workers!r}")
    payload = _payload(data, spec)
    count = max(1, min(workers or usable_cores(), len(jobs)))
    entries: list[dict[str, Any] | None] = [None] * len(jobs)
    pool = ProcessPoolExecutor(count, mp_context=multiprocessing.get_context("spawn"), initializer=_adopt, initargs=(payload,))
    futures: dict[Future, int] = {}
    try:
        futures = {pool.submit(_write, job): k for k, job in enumerate(jobs)}
        waiting = set(futures)
        while waiting:
            done, waiting = wait(waiting, return_when=FIRST_COMPLETED)
            for future in sorted(done, key=futures.__getitem__):
                k = futures[future]
                entries[k] = future.result()
                advance(jobs[k].stop - jobs[k].start)
    except BrokenProcessPool as exc:
        unfinished = [jobs[k].name for f, k in futures.items() if entries[k] is None]
        shown = ", ".join(unfinished[:count]) + (f" (and {len(unfinished) - count} waiting)" if len(unfinished) > count else "")
        raise WorkerError(
            f"engine='processes': a worker process died while writing shards into {spec.folder} (unfinished: {shown}): "
            f"killed (out of memory?), crashed in native code, or exited; no index was written ({exc})"
        ) from exc
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return entries  # type: ignore[return-value]
