"""``engine="ray"``: a planned sharded write's shards written by Ray tasks, one task per shard.

Ray is optional: it is imported only here, when this engine runs (``ImportError`` naming
``pip install 'slipstream[ray]'`` without it). Connecting: when this process is already connected
(``ray.init`` was called), that connection is used and left as it is; otherwise ``ray.init(address=
ray_address)`` connects to the cluster at ``ray_address`` or, when None, to the one Ray finds
(``RAY_ADDRESS``, a ``ray start`` on this machine), else starts a local Ray (``start_local``: every
server it runs listens on loopback only, no dashboard); the connection made here is closed when
the write ends (``ray.shutdown``: a local Ray started here stops, a cluster keeps running). The
folder must be on a file system every node of the cluster sees (NFS, a shared volume): tasks write
their shards straight into it (a relative folder is the caller's, made absolute before the tasks
start), and slipstream must be installed on every node.

The data reach the tasks once: ``ray.put(data)`` puts them in the object store and each task gets
a reference to it (each worker process fetches and unpickles them once, for all the shards it
writes); a task's own arguments are its shard's number and range.

Modules the workers cannot import (``ship_modules``): Ray's workers import the data's classes (and
the fields') by module, and do not have this process's ``sys.path``: a class from a test module, or
from a folder a script put on ``sys.path``, would be a ``ModuleNotFoundError`` in every task where
``engine="processes"`` (whose workers get ``sys.path``) works. So before the data are put, the
modules they name (outside the standard library, slipstream, NumPy and pyarrow) are imported in a
worker once; those missing there are sent by value (``cloudpickle.register_pickle_by_value``, for
this write's data only: unregistered after), the same data then unpickling in every worker. A
module the workers have but cannot import (a dependency missing there, an error at import), or one
that cannot be sent by value, is a ``WorkerError`` before any shard is written, naming the module,
its error and what to do (install it on every node, or ``ray.init(runtime_env={"py_modules":
[...]})``). A worker that still cannot load the data (another node lacks a module) is a
``WorkerError`` saying the same.

Failures: Ray retries a task whose worker process died or whose node was lost (``MAX_RETRIES``
times); the retry writes the shard again under a new temporary name and renames it into place,
and the driver sweeps the temporary files a killed attempt left. An exception raised by the task
itself (a sample that cannot be read or encoded) is not retried: it is raised here as itself,
its notes naming the shard and sample, with Ray's error (and the remote traceback) as its cause;
one that Ray could not rebuild here as itself (see ``core.carried``) arrives as a
``RuntimeError`` stand-in saying its type, message, notes and traceback. A task whose retries ran
out (its worker or node died) is a ``WorkerError`` naming its shard and the retries; any other
Ray error is a ``WorkerError`` naming its shard and Ray's error, no retry claimed. The tasks still running are
then cancelled. ``workers`` bounds the tasks in flight (default: all, and Ray schedules them on
the cluster's CPUs, one each).
"""

from __future__ import annotations

import importlib
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from ..core.arguments import check_workers
from ..core.carried import raise_portable
from ..core.errors import WorkerError, add_note
from ..core.optional import require
from .shardwrite import ShardJob, ShardSpec, write_shard

__all__ = ["LOOPBACK", "MAX_RETRIES", "run", "ship_modules", "start_local"]

MAX_RETRIES = 3  # attempts after the first, for a task whose worker process died
LOOPBACK = "127.0.0.1"
_held: dict[str, Any] = {}  # in a Ray worker process: the data of the write it last worked for, by object id
_PRESENT = frozenset({"slipstream", "numpy", "pyarrow", "ray", "__main__"})  # (with the standard library) what every worker has
_IMPORT_SIGNS = ("No module named", "ModuleNotFoundError", "ImportError", "Can't get attribute")  # an unpickling error Ray wrapped
_FIX = (
    "install {need} on every node of the cluster, or give it to the workers when connecting, before ss.write: "
    "ray.init(runtime_env={{'py_modules': [{where}]}}) for a local module or package ('pip': [...] for one from an "
    "index, 'working_dir': ... for a project folder)"
)


def _ray() -> Any:
    return require("ray", extra="ray", purpose="engine='ray' needs Ray")


def start_local(**options: Any) -> Any:
    """``ray.init`` starting a new local Ray whose servers (GCS, raylet, object manager, workers,
    agents) all listen on loopback (``LOOPBACK``) only, without a dashboard (``include_dashboard``
    may say otherwise); ``options`` go to ``ray.init`` (``num_cpus=2``, ``log_to_driver=False``...).
    Ray rewrites a loopback ``_node_ip_address`` into the machine's address, and its servers listen
    on the node's address, unless it runs as on a laptop (macOS, Windows): that is how it is started
    here, for the length of the call. Returns what ``ray.init`` returns."""
    ray = _ray()
    options.setdefault("include_dashboard", False)
    try:
        constants = importlib.import_module("ray._private.ray_constants")
    except ImportError:  # pragma: no cover - another Ray layout: its own localhost rule applies
        constants = None
    saved = getattr(constants, "ENABLE_RAY_CLUSTER", None)
    if saved is not None:
        constants.ENABLE_RAY_CLUSTER = False  # (read by ray._private.services.get_node_ip_address while the node starts)
    try:
        return ray.init(address="local", _node_ip_address=LOOPBACK, **options)
    finally:
        if saved is not None:
            constants.ENABLE_RAY_CLUSTER = saved


def _connect(ray: Any, ray_address: str | None) -> None:
    """Connect as ``ray.init(address=ray_address)`` would, a local Ray it would start being on loopback (``start_local``)."""
    if ray_address in (None, "", "local") and _nothing_to_join(ray_address):
        start_local()
    else:
        ray.init(address=ray_address or None)


def _nothing_to_join(ray_address: str | None) -> bool:
    """Whether ``ray.init(address=ray_address)`` would start a new local Ray (no ``RAY_ADDRESS``, no ``ray start`` here)."""
    if ray_address == "local":
        return True
    try:
        services = importlib.import_module("ray._private.services")
        return services.canonicalize_bootstrap_address(None) is None
    except Exception:  # noqa: BLE001 - another Ray layout, or several clusters: ray.init decides, as it always did
        return False


def _data(holder: list[Any]) -> Any:
    """The data behind ``holder[0]`` (an object reference), fetched once per worker process; a
    ``WorkerError`` saying what to do when this worker cannot load them."""
    key = holder[0].hex()
    if key not in _held:
        _held.clear()  # only the current write's data are kept
        try:
            _held[key] = _ray().get(holder[0])
        except Exception as exc:  # noqa: BLE001 - Ray wraps the unpickling error (RaySystemError) or raises it
            text = str(exc).strip().splitlines()
            if not isinstance(exc, ImportError) and not any(sign in str(exc) for sign in _IMPORT_SIGNS):
                raise  # (a lost object, a dead owner: Ray's own error)
            raise WorkerError(
                f"engine='ray': a Ray worker could not load the data it was sent ({type(exc).__name__}: {text[0] if text else ''}). "
                "The workers import the data's classes by module: a module they cannot import must be installed on every "
                "node, or given to the workers when connecting, before ss.write: ray.init(runtime_env={'py_modules': "
                "[<its .py file or package folder>]})"
            ) from exc
    return _held[key]


class _Discard:
    """A file that keeps nothing: what a pickling pass written only for what it names writes into."""

    def write(self, data: Any) -> int:
        return len(data)


def _named_modules(pickler: Any, objects: Any) -> set[str] | None:
    """The modules of the classes, functions and modules that pickling ``objects`` with Ray's
    cloudpickle names (by reference, or inside what it sends by value); None when they cannot be
    pickled here (``ray.put`` then says why)."""
    found: set[str] = set()

    class Recorder(pickler.Pickler):  # type: ignore[misc,name-defined]
        def reducer_override(self, obj: Any) -> Any:
            if isinstance(obj, types.ModuleType):
                found.add(obj.__name__)
            elif isinstance(obj, (type, types.FunctionType, types.BuiltinFunctionType)):
                module = getattr(obj, "__module__", None)
                if isinstance(module, str):
                    found.add(module)
            return super().reducer_override(obj)

    try:
        Recorder(_Discard(), protocol=5, buffer_callback=lambda buffer: None).dump(objects)  # (arrays' buffers not copied)
    except Exception:  # noqa: BLE001 - anything cloudpickle cannot send: Ray's own serializers may
        return None
    return found


def _import_failures(names: list[str]) -> dict[str, tuple[str, str | None, str]]:
    """In a worker: the modules of ``names`` that cannot be imported there, as (error type, the
    missing module's name for a ``ModuleNotFoundError``, message)."""
    failures = {}
    for name in names:
        try:
            importlib.import_module(name)
        except BaseException as exc:  # noqa: BLE001 - an error at import is as much a failure as a missing module
            missing = exc.name if isinstance(exc, ModuleNotFoundError) else None
            failures[name] = (type(exc).__name__, missing, str(exc))
    return failures


def _by_value(pickler: Any, name: str) -> bool:
    """Whether ``name`` (or a package above it) is sent by value already."""
    registered = set(pickler.list_registry_pickle_by_value())
    parts = name.split(".")
    return any(".".join(parts[:k]) in registered for k in range(1, len(parts) + 1))


def _where(name: str) -> str:
    module = sys.modules.get(name.split(".")[0])
    path = getattr(module, "__path__", None)
    path = next(iter(path)) if path else getattr(module, "__file__", None)
    return repr(path) if path else f"<the folder or .py file of {name}>"


def _shippable(module: Any) -> bool:
    """Whether ``module`` can be sent by value: Python code (source or bytecode), not an extension."""
    file = getattr(module, "__file__", None)
    return file is None or not file.endswith((".so", ".pyd", ".dll"))


@contextmanager
def ship_modules(ray: Any, objects: Any, what: str) -> Iterator[list[str]]:
    """While open: the modules ``objects`` name that Ray's workers cannot import sent by value (see
    the module doc; yields their names, unregistered again on leaving); a ``WorkerError`` naming
    ``what`` for a module the workers cannot import that cannot be sent so."""
    pickler = ray.cloudpickle
    shipped: list[str] = []
    probed: set[str] = set()
    try:
        for _ in range(8):  # modules sent by value may name others, each round a few more
            named = _named_modules(pickler, objects)
            if named is None:
                break
            candidates = sorted(
                name for name in named - probed
                if name.split(".")[0] not in _PRESENT and name.split(".")[0] not in sys.stdlib_module_names and not _by_value(pickler, name)
            )  # fmt: skip
            if not candidates:
                break
            probed.update(candidates)
            try:
                failures = ray.get(ray.remote(num_cpus=0)(_import_failures).remote(candidates))
            except Exception:  # noqa: BLE001 - no answer: the tasks say what they cannot load (_data)
                break
            for name, (kind, missing, message) in sorted(failures.items()):
                module = sys.modules.get(missing) if missing and (name == missing or name.startswith(missing + ".")) else None
                if module is None or not _shippable(module):
                    need = missing or name
                    raise WorkerError(
                        f"engine='ray': the Ray workers cannot import {name!r}, which {what} need ({kind}: {message}): "
                        + _FIX.format(need=repr(need), where=_where(need))
                    )
                if not _by_value(pickler, missing):
                    pickler.register_pickle_by_value(module)
                    shipped.append(missing)
        yield shipped
    finally:
        for name in shipped:
            try:
                pickler.unregister_pickle_by_value(sys.modules[name])
            except Exception:  # noqa: BLE001 - already unregistered (by the caller) or unloaded
                pass


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
    workers = check_workers(workers, minimum=1, auto=False, default="all", unit="tasks in flight")
    ray = _ray()
    started = not ray.is_initialized()
    if started:
        _connect(ray, ray_address)
    pending: dict[Any, int] = {}
    try:
        with ship_modules(ray, (data, spec), f"the data ({type(data).__name__}) or its fields") as shipped:
            try:
                held = [ray.put(data)]  # in a list: the tasks get the reference, not a copy each
                spec_ref = ray.put(spec)
            except Exception as exc:  # noqa: BLE001 - re-raised, or said with what to do
                if not shipped:
                    raise
                raise WorkerError(
                    f"engine='ray': the Ray workers cannot import {', '.join(shipped)}, and sending it by value failed "
                    f"({type(exc).__name__}: {exc}): " + _FIX.format(need="it", where=", ".join(_where(name) for name in shipped))
                ) from exc
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
