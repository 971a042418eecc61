"""JAX: batches moved onto devices ahead of the training step.

``device_prefetch(loader)`` wraps any iterable of batches (what ``ss.DataLoader`` yields: NumPy
arrays in nested dicts, tuples and lists) and yields the same structure with every numeric array
moved onto a JAX device (or spread over several with a ``jax.sharding.Sharding``), keeping a few
batches in flight so that the host-to-device copy of the next batch overlaps the step on this one:

```python
import jax
from jax.sharding import NamedSharding, PartitionSpec
from slipstream.jax import device_prefetch

for batch in device_prefetch(loader):                    # the default device
    state = train_step(state, batch)

mesh = jax.make_mesh((jax.device_count(),), ("data",))
sharding = NamedSharding(mesh, PartitionSpec("data"))    # axis 0 split across the devices
for batch in device_prefetch(loader, device=sharding):   # use drop_last=True: every batch must divide
    ...
```

JAX is optional: ``import slipstream`` never imports it; importing this module without it raises
ImportError. Nothing runs in background threads: the copies are JAX's asynchronous dispatch, and
the source is advanced in the consumer's thread (``ss.DataLoader`` loads in its own workers).
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterable, Iterator, Mapping, MutableMapping
from copy import copy
from typing import Any

import numpy as np

from .core.optional import require

jax = require("jax", extra="jax", purpose="slipstream.jax needs JAX", note="for an accelerator, the jax[cuda12] / jax[tpu] build")

from .core import nested
from .core.arguments import check_int
from .core.closing import ClosingIterator
from .core.errors import add_note
from .core.lookahead import Lookahead

__all__ = ["DevicePrefetch", "device_prefetch"]

# dtype kinds jax.device_put accepts: bool, ints, floats, complex; 'V' without fields covers
# ml_dtypes' bfloat16 and float8 types. Strings, bytes, objects, datetimes and records stay on the host.
_MOVABLE_KINDS = frozenset("biufc")


def _is_torch_tensor(x: Any) -> bool:
    """A torch tensor (a device stage's images: ``ss.open(p).map(..., device=...)``), told without
    importing torch."""
    kind = type(x)
    return kind.__module__.startswith("torch") and kind.__name__ == "Tensor" and hasattr(x, "__dlpack__")


def _from_torch(x: Any) -> Any:
    """A torch tensor as a jax Array through DLPack, zero-copy on its own device (made contiguous
    first: JAX takes row-major buffers only, so a channels_last tensor costs a copy on its device)."""
    return jax.dlpack.from_dlpack(x if x.is_contiguous() else x.contiguous())


def _movable(x: Any) -> bool:
    if isinstance(x, jax.Array) or _is_torch_tensor(x):
        return True
    if not isinstance(x, (np.ndarray, np.generic)):
        return False
    dtype = x.dtype
    return dtype.kind in _MOVABLE_KINDS or (dtype.kind == "V" and dtype.names is None)


def _arrays(batch: Any) -> list[Any]:
    """The movable arrays of ``batch``, depth first (the order ``_rebuild`` consumes them)."""
    return [leaf for leaf in nested.leaves(batch) if _movable(leaf)]


def _rebuild(batch: Any, moved: Iterator[Any]) -> Any:
    """``batch`` with its movable arrays replaced, in order, by ``moved``; a part without any is returned as is."""
    return nested.map_nodes(batch, lambda leaf: next(moved) if _movable(leaf) else leaf, _keep_type)


def _keep_type(node: Any, values: Any) -> Any:
    """``node`` rebuilt with its members ``values`` (a dict for a mapping, a list for a sequence),
    keeping its type: the node itself when no member changed; a dict subclass, an OrderedDict or a
    defaultdict copied with its state; a namedtuple, tuple or list subclass of its own type."""
    if isinstance(node, Mapping):
        if all(values[key] is value for key, value in node.items()):
            return node
        if type(node) is dict:
            return values
        if isinstance(node, MutableMapping):  # keeps the type and its state (OrderedDict, defaultdict, ...)
            new = copy(node)
            new.update(values)
            return new
        return type(node)(values)
    if all(a is b for a, b in zip(values, node)):
        return node
    if nested.is_namedtuple(node):
        return type(node)(*values)
    return values if type(node) is list else type(node)(values)


class _InFlight:
    """One batch on its way: the device batch, its device arrays, and the host batch until those are ready."""

    __slots__ = ("arrays", "batch", "host")

    def __init__(self, host: Any, batch: Any, arrays: list[Any]):
        self.host, self.batch, self.arrays = host, batch, arrays

    def release_if_ready(self) -> None:
        if self.host is not None and all(a.is_ready() for a in self.arrays):
            self.host = None

    def release(self) -> None:
        """Wait until the device copies are done, then let go of the host batch (its buffers may be reused)."""
        if self.host is not None:
            for array in self.arrays:
                array.block_until_ready()
            self.host = None


class _Numbered(Iterator[Any]):
    """``source``'s batches; an error it raises gets a note naming the batch it was asked for."""

    def __init__(self, source: Iterator[Any]):
        self.source, self.position = source, 0

    def __next__(self) -> Any:
        try:
            batch = next(self.source)
        except StopIteration:
            raise
        except Exception as exc:
            add_note(exc, f"slipstream.jax.device_prefetch: raised by the iterable when asked for batch {self.position}")
            raise
        self.position += 1
        return batch

    def __len__(self) -> int:
        return len(self.source)  # type: ignore[arg-type]

    def close(self) -> None:
        close = getattr(self.source, "close", None)
        if callable(close):
            close()


class _DeviceCopy:
    """The finisher (``core.lookahead``) of ``device_prefetch``: ``finish`` starts a host batch's
    copies (``jax.device_put``: asynchronous dispatch, in the consumer's thread), and lets go of the
    host batches whose copies are done; ``settle`` waits for a batch's copies before it is handed
    out; ``discard`` (closing) waits for the copies still reading host memory. ``discard`` may come
    from another thread (``close()``) while ``finish`` runs: ``in_flight`` is changed only under
    ``lock``, and ``finish`` walks a snapshot of it."""

    def __init__(self, device: Any):
        self.device = device
        self.put = 0  # batches put so far: the next one's position
        self.in_flight: deque[_InFlight] = deque()  # holding their host batch until it is let go
        self.lock = threading.Lock()  # ``in_flight``'s changes and snapshots

    def finish(self, host: Any) -> _InFlight:
        position, self.put = self.put, self.put + 1
        try:
            arrays = _arrays(host)
            if not arrays:
                return _InFlight(None, host, [])
            arrays = [_from_torch(a) if _is_torch_tensor(a) else a for a in arrays]
            moved = jax.device_put(arrays, self.device)
            entry = _InFlight(host, _rebuild(host, iter(moved)), moved)
        except Exception as exc:
            where = f"jax.device_put for batch {position} (device={self.device!r})"
            add_note(exc, f"slipstream.jax.device_prefetch: raised by {where}")
            raise
        with self.lock:
            self.in_flight.append(entry)
            waiting = list(self.in_flight)
        for each in waiting:  # let go early of host batches whose copies are done
            each.release_if_ready()
        return entry

    def handoff(self, entry: _InFlight) -> Any:
        return entry.batch

    def settle(self, entry: _InFlight) -> None:
        """The host batch is referenced until its copy is done, then let go."""
        self._landed(entry)
        entry.release()

    def discard(self, entry: _InFlight) -> None:
        self._landed(entry)
        try:
            entry.release()
        except Exception:  # noqa: BLE001, S110 - a failed copy reads nothing any more
            pass

    def _landed(self, entry: _InFlight) -> None:
        if entry.arrays:  # (a batch without arrays was never in flight)
            with self.lock:
                self.in_flight.remove(entry)


class DevicePrefetch:
    """An iterable of ``iterable``'s batches with their arrays on ``device``, ``size`` batches in flight.

    Each ``iter()`` starts a fresh pass over ``iterable`` (an iterator can be passed only once), so
    ``DevicePrefetch(loader)`` can be iterated once per epoch like the loader. ``len()`` is
    ``len(iterable)`` when it has one. See ``device_prefetch`` for the details.
    """

    def __init__(self, iterable: Iterable[Any], size: int = 2, device: Any = None):
        if not isinstance(iterable, Iterable):
            raise TypeError(f"device_prefetch needs an iterable of batches, got {type(iterable).__name__}")
        if device is not None and not isinstance(device, (jax.Device, jax.sharding.Sharding)):
            raise TypeError(
                f"device must be a jax.Device, a jax.sharding.Sharding or None, got {type(device).__name__} {device!r}"
            )
        self.iterable = iterable
        self.size = check_int("size", size, 1)
        self.device = device

    def __len__(self) -> int:
        return len(self.iterable)  # type: ignore[arg-type]

    def __iter__(self) -> DevicePrefetchIterator:
        return DevicePrefetchIterator(iter(self.iterable), self.size, self.device)

    def __repr__(self) -> str:
        return f"DevicePrefetch({self.iterable!r}, size={self.size}, device={self.device!r})"


class DevicePrefetchIterator(ClosingIterator):
    """One pass: batches ``0, 1, ...`` of the source, on the device, ``size`` in flight (a
    ``core.lookahead.Lookahead`` with the copies as its inline finish).

    Stops (and closes the source, when it has ``close()``) on exhaustion, an error, ``close()``,
    leaving a ``with`` block, or garbage collection (``core.closing``).
    """

    def __init__(self, source: Iterator[Any], size: int, device: Any):
        self._ahead = Lookahead(_Numbered(source), _DeviceCopy(device), size)
        super().__init__(self._ahead.close)

    def _next(self) -> Any:
        return next(self._ahead)  # (anything it raises, KeyboardInterrupt and the like, stops the pass)

    def __len__(self) -> int:
        """Batches left in this pass (when the source iterator has a ``len()``)."""
        return len(self._ahead)

    def close(self) -> None:
        """Stop: wait for copies still reading host memory, drop the queued batches, close the source."""
        super().close()


def device_prefetch(iterable: Iterable[Any], size: int = 2, *, device: Any = None) -> DevicePrefetch:
    """Batches of ``iterable`` with their arrays moved onto JAX devices, ``size`` batches in flight.

    Args:
        iterable: batches, each a NumPy array or a nested dict / tuple / namedtuple / list of them
            (what ``ss.DataLoader`` yields). Numeric arrays (and NumPy scalars, jax Arrays, and
            torch tensors: a device stage's images, ``ss.open(p).map(..., device="cuda")``, taken
            through DLPack without a copy when contiguous, so prefer ``layout="NHWC"`` there) are
            moved with ``jax.device_put``; everything else (lists of strings, string or
            object arrays, Python numbers, None) is passed through as it is, and a part of the
            structure with no array in it is the very same object. The structure is rebuilt with
            the same container types. As with ``jax.device_put``, 64-bit arrays become 32-bit
            unless ``jax_enable_x64`` is on.
        size: batches on the device at once, counting the one the consumer holds: when the
            consumer receives batch ``k``, batches ``k+1 .. k+size-1`` have already been taken
            from ``iterable`` and their copies started. ``size=1`` copies each batch only when
            asked for it. The source is never read further ahead than that.
        device: None (JAX's default device), a ``jax.Device``, or a ``jax.sharding.Sharding``
            applied to every array, e.g. ``NamedSharding(mesh, PartitionSpec("data"))`` to split
            axis 0 of each batch across the mesh's devices (each batch's length must divide;
            use ``drop_last=True``). Single-process only: for a multi-host mesh build the global
            arrays with ``jax.make_array_from_process_local_data`` instead.

    Host buffers: ``ss.DataLoader`` reuses a batch's buffers once nothing references them, and
    ``jax.device_put`` may copy asynchronously. The adapter keeps a reference to each host batch
    until all of its device arrays are ready (checked without blocking after each new batch is
    queued; at the latest it blocks on a batch's copies before handing it out, and on close), so
    a buffer is never reused while a copy still reads it. On an accelerator the yielded batches hold
    no host memory of the loader. On JAX's CPU backend ``device_put`` may instead alias a
    64-byte-aligned host buffer (shared-memory batches of ``backend="process"`` always are): the
    device array then keeps that buffer referenced, so the loader leaves it alone (and allocates
    another) for as long as the device array lives.

    With ``ss.DataLoader(..., backend="process")``: once JAX has started its threads, JAX warns that
    ``os.fork()`` may deadlock; prefer ``mp_context="spawn"`` or ``"forkserver"`` (or start the
    loader's workers, i.e. its first ``iter()``, before touching JAX).

    Never hangs: it runs no threads of its own. An exception from ``iterable`` (or from
    ``jax.device_put``) reaches the consumer at that batch's position, after the batches before
    it, with its own type and traceback plus a note; the pass then ends. Breaking out, ``close()``,
    leaving a ``with`` block or dropping the iterator closes the source iterator (which stops
    ``ss.DataLoader``'s workers). Each ``iter()`` is a fresh pass (one epoch of a loader);
    ``len()`` passes through.
    """
    return DevicePrefetch(iterable, size, device)
