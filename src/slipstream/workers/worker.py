"""The worker side of the pool: one process that starts once, then serves the parent's messages.

``run_worker`` is each worker process's target. It

* ignores SIGINT (Ctrl-C is the parent's to handle: it stops the workers);
* starts: a forked worker runs the fork clean-up hooks (``core.forking``: it lets go of the pipes,
  fds and free shared slots it inherited); a "spawn"/"forkserver" worker reads the payload and
  ``worker_init`` from its pipe (``protocol.read_startup``) and maps the payload's segments; then
  it seeds the global RNGs, sets ``worker_info()`` and calls ``worker_init(worker_id)`` (in each
  thread, with several). Anything raised there is sent as INIT_ERROR and the worker exits;
* serves messages (``protocol.Kind``) in the order they arrive: a TASK runs ``fn(state, *args)`` and
  is answered by OK or ERR (the exception wrapped with its traceback), a JOB runs its parts and is
  answered once (``crew.Run``), the others fill or empty ``state`` and are not answered;
* with several threads (one seed each in ``seeds``), TASKs and JOBs run on its ``crew.Crew``
  instead: each thread is a worker of its own (``worker_info()``, ``worker_init``), the main thread
  only reads the pipe;
* exits on CLOSE, when the pipe ends, or when the process that started it is no longer its parent
  (checked every ``_PARENT_POLL`` seconds while idle), so a worker never outlives its parent.
"""

from __future__ import annotations

import os
import pickle
import signal
import threading
from typing import Any

from ..core.carried import wrap_error
from ..core.errors import add_note
from ..core.forking import run_worker_fork_hooks
from ..core.workerinfo import WorkerInfo, seed_globals, set_worker_info
from . import protocol
from .crew import Crew, Run
from .payload import unpickled_payload
from .protocol import Kind
from .shm import attach

__all__ = ["WorkerState", "run_worker"]

_PARENT_POLL = 0.25  # how often an idle worker checks that its parent lives (seconds)


class WorkerState:
    """What a task function sees in its worker: the payload, who it is, and a per-worker cache."""

    def __init__(self, payload: Any, worker_id: int, num_workers: int, seed: int, cancel: Any):
        self.payload, self.id, self.num_workers, self.seed = payload, worker_id, num_workers, seed
        self.cache: dict[Any, Any] = {}  # kept across tasks (objects put by the parent land here too)
        self.segments: dict[int, Any] = {}  # shared-memory mappings by key
        self._cancel = cancel

    def cancelled(self, generation: tuple[int, int]) -> bool:
        """True once the parent has cancelled the tasks sent under ``generation``."""
        return protocol.cancelled(self._cancel, generation)


def run_worker(
    conn: Any,
    inherited: bool,
    payload: Any,
    worker_id: int,
    num_workers: int,
    seeds: list[int],
    worker_init: Any,
    cancel: Any,
    backend: str = "process",
) -> None:
    """A worker process's life: start (``payload``/``worker_init`` are given when ``inherited``,
    read from ``conn`` otherwise), then serve messages until told to stop or orphaned. It runs
    ``len(seeds)`` worker threads (the workers ``worker_id * len(seeds) + t`` of ``num_workers``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle
    parent = os.getppid()
    threads = len(seeds)
    where = f"{'worker' if backend == 'process' else f'{backend} process'} {worker_id} (pid {os.getpid()})"
    crew = None
    try:
        if inherited:  # fork: let go of what the parent's other loaders and workers hold
            run_worker_fork_hooks()
        else:  # spawn/forkserver: the pickled payload comes first on the pipe, then its segments
            payload, worker_init = _receive_payload(conn)
        seed_globals(seeds[0])
        state = WorkerState(payload, worker_id, num_workers, seeds[0], cancel)
        if threads == 1:
            set_worker_info(WorkerInfo(worker_id, num_workers, seeds[0], backend), process=True)
            if worker_init is not None:
                worker_init(worker_id)
        else:
            infos = [WorkerInfo(worker_id * threads + t, num_workers, seed, backend) for t, seed in enumerate(seeds)]
            crew = Crew(state, infos, worker_init, _sender(conn), where)
            crew.start()
    except (EOFError, OSError):
        return
    except BaseException as exc:  # noqa: BLE001 - reported to the parent
        conn.send_bytes(protocol.init_error(wrap_error(exc, f"raised while starting {where}")))
        return
    try:
        while True:
            try:
                if not conn.poll(_PARENT_POLL):
                    if os.getppid() != parent:
                        return  # the parent died: we were re-parented
                    continue
                kind, fields = protocol.decode(conn.recv_bytes())
            except (EOFError, OSError):
                return  # the parent closed the pipe (or died)
            if not _handle(conn, state, where, kind, fields, crew):
                return
    finally:
        if crew is not None:
            crew.stop()


def _sender(conn: Any) -> Any:
    """``send(message)`` for several threads at once: one at a time; a pipe that is gone is the
    main thread's to notice (its read ends)."""
    lock = threading.Lock()

    def send(message: bytes) -> None:
        with lock:
            try:
                conn.send_bytes(message)
            except OSError:
                pass

    return send


def _receive_payload(conn: Any) -> tuple[Any, Any]:
    """The payload and ``worker_init`` a "spawn"/"forkserver" worker reads from its pipe."""
    blob, init_blob, sizes = protocol.read_startup(conn)
    segments = [attach(protocol.recv_fd(conn), size) for size in sizes]
    try:
        return unpickled_payload(blob, segments), pickle.loads(init_blob)
    except (AttributeError, ImportError) as exc:
        add_note(
            exc,
            "slipstream: each worker rebuilds the dataset by unpickling it, so its classes and functions must "
            "be importable in a fresh interpreter (defined in a module, not in the __main__ of an interactive "
            "session or `python -c`); or use mp_context='fork'",
        )
        raise


def _handle(conn: Any, state: WorkerState, where: str, kind: Kind, fields: tuple[Any, ...], crew: Crew | None) -> bool:
    """Act on one message; False when the worker should exit."""
    if kind is Kind.TASK or kind is Kind.JOB:
        if kind is Kind.TASK:
            ticket, fn, args = fields
            run = Run(ticket, [(fn, args)])
        else:
            ticket, generation, parts = fields
            run = Run(ticket, parts, generation)
        if crew is not None:
            crew.put(run)
            return True
        for pos in range(len(run.parts)):
            run.settle(pos, *run.part(state, pos), where)
        try:
            conn.send_bytes(run.reply(where))
        except OSError:
            return False
    elif kind is Kind.ATTACH:
        key, size = fields
        state.segments[key] = attach(protocol.recv_fd(conn), size)
    elif kind is Kind.PUT:
        key, obj = fields
        if type(obj) is protocol.Apply:
            obj.fn(state, *obj.args)
        else:
            state.cache[key] = obj
    elif kind is Kind.FORGET:
        (keys,) = fields
        for key in keys:
            state.segments.pop(key, None)
            state.cache.pop(key, None)
    elif kind is Kind.CLOSE:
        return False
    return True
