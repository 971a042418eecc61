"""``engine="processes"``: a planned sharded write's shards written by local worker processes.

``workers`` processes (default: every core this process may use), started with ``spawn`` (no
inherited threads or locks; a script that writes this way needs the usual
``if __name__ == "__main__":`` guard). The data and the shard spec are pickled once, in this
process (an object that cannot be pickled is a ``TypeError`` naming it, or the field, before any
process starts), and unpickled once per worker; each job then sends only its shard number and
range. Each worker writes one shard at a time, encoding in its own thread, and exits when this
process ends, even killed (it watches its parent: no orphan keeps running).

Failures:

* an exception in a job propagates as itself, with its notes naming the shard and sample; one
  that cannot cross back as itself (see ``core.carried``) as a ``RuntimeError`` stand-in
  saying its type, message, notes and traceback. The jobs not started are cancelled and the
  ones running finish first;
* a worker that cannot unpickle the data (a class defined in ``__main__`` of a notebook,
  ``python -c`` or stdin, which spawned processes cannot import) is a ``WorkerError`` giving
  the unpickling error and that cause;
* workers that exit while starting, before any runs a job (a script without the guard runs its
  top level again in each and fails), are a ``WorkerError`` naming the missing guard;
* a worker process that dies (the out-of-memory killer, a crash in native code, ``os._exit``)
  breaks the pool: ``WorkerError`` naming the shards that were unfinished, at once, never a hang.

Either way the driver then removes the write's shards and temporary files and writes no index
(``write.planned``).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import pickle
import threading
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from typing import Any

from ..core.arguments import check_workers
from ..core.carried import raise_portable
from ..core.cpus import usable_cores
from ..core.errors import WorkerError
from .shardwrite import ShardJob, ShardSpec, write_shard

__all__ = ["run"]

_adopted: tuple[Any, ShardSpec] | None = None  # (data, spec) in a worker process
_unpickling: str | None = None  # in a worker process: why the data could not be unpickled


def _adopt(payload: bytes, started: Any) -> None:
    """A worker's initializer: exit with the parent, count itself started, unpickle the data and
    spec once (an error is kept, for each job to report: an initializer's error breaks the pool)."""
    global _adopted, _unpickling
    _exit_with_parent()
    with started.get_lock():
        started.value += 1
    try:
        _adopted = pickle.loads(payload)
    except Exception as exc:  # noqa: BLE001 - AttributeError, ImportError, ModuleNotFoundError, UnpicklingError...
        _unpickling = f"{type(exc).__name__}: {exc}"


def _exit_with_parent() -> None:
    """End this process as soon as its parent ends (a killed driver leaves no worker behind)."""
    parent = multiprocessing.parent_process()
    if parent is None:
        return

    def watch() -> None:
        multiprocessing.connection.wait([parent.sentinel])
        os._exit(1)

    threading.Thread(target=watch, name="slipstream-exit-with-parent", daemon=True).start()


def _write(job: ShardJob) -> dict[str, Any]:
    if _unpickling is not None:
        raise WorkerError(
            f"engine='processes': a worker process could not unpickle the data it was sent ({_unpickling}). Spawned worker "
            "processes import the data's classes by module: a class defined in __main__ of a notebook, `python -c` or stdin "
            "cannot be found there; define it in a module the workers can import (a .py file), or use engine=None (threads in "
            "this process). In a script, also keep the write under `if __name__ == \"__main__\":`"
        )
    assert _adopted is not None, "the worker's initializer did not run"
    data, spec = _adopted
    try:
        return write_shard(data, spec, job)
    except Exception as exc:
        raise_portable(exc)


def _payload(data: Any, spec: ShardSpec) -> bytes:
    try:
        return pickle.dumps((data, spec), protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:  # noqa: BLE001 - pickling fails with many types (TypeError, AttributeError, PicklingError)
        for name, field in spec.fields.items():
            try:
                pickle.dumps(field, protocol=pickle.HIGHEST_PROTOCOL)
            except Exception as field_exc:  # noqa: BLE001
                raise TypeError(
                    f"engine='processes' pickles the fields for its worker processes, and field {name!r} ({type(field).__name__}) "
                    f"cannot be pickled ({type(field_exc).__name__}: {field_exc}); make it picklable (no lambdas or local "
                    "functions in its attributes) or use engine=None (threads in this process)"
                ) from exc
        raise TypeError(
            f"engine='processes' pickles the data once for its worker processes, and this {type(data).__name__} cannot be pickled "
            f"({type(exc).__name__}: {exc}); use engine=None (threads in this process) or make it picklable"
        ) from exc


def run(
    data: Any, spec: ShardSpec, jobs: list[ShardJob], *, workers: int | None, advance: Callable[[int], None]
) -> list[dict[str, Any]]:
    """Write ``jobs`` in ``workers`` local processes; their index entries, in the jobs' order."""
    workers = check_workers(workers, minimum=1, auto=False, default="every usable core", unit="processes")
    payload = _payload(data, spec)
    count = max(1, min(workers or usable_cores(), len(jobs)))
    entries: list[dict[str, Any] | None] = [None] * len(jobs)
    context = multiprocessing.get_context("spawn")
    started = context.Value("i", 0)  # workers that reached their initializer
    pool = ProcessPoolExecutor(count, mp_context=context, initializer=_adopt, initargs=(payload, started))
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
        if started.value == 0:
            raise WorkerError(
                f"engine='processes': the worker processes exited while starting, before any could write a shard into {spec.folder}. "
                "Spawned workers import the main script: a script that writes with engine='processes' must keep its code under "
                'if __name__ == "__main__": (without the guard each worker runs the write again, and fails); the workers\' '
                f"own error is on stderr above ({exc})"
            ) from exc
        unfinished = [jobs[k].name for f, k in futures.items() if entries[k] is None]
        shown = ", ".join(unfinished[:count]) + (f" (and {len(unfinished) - count} waiting)" if len(unfinished) > count else "")
        raise WorkerError(
            f"engine='processes': a worker process died while writing shards into {spec.folder} (unfinished: {shown}): "
            f"killed (out of memory?), crashed in native code, or exited; no index was written ({exc})"
        ) from exc
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    return entries  # type: ignore[return-value]
