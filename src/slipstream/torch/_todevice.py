"""Where the batches go after loading: ``pin_memory`` and ``device``.

Each is a finisher (``core.lookahead``) run by ``Lookahead`` over the epoch's batches:

* ``_pinned`` pins each batch with torch's own ``pin_memory`` walk (``_compat.pin_memory``), in
  line; ``_accelerator_available`` tells whether pinning means anything (without an accelerator
  torch warns ``_NO_ACCELERATOR`` and does nothing).
* ``_to_cuda`` copies each batch to a CUDA device on a side stream, one batch ahead of the
  consumer, synchronized with the consumer's stream before it is handed out (``_CudaCopy``: an
  error taking the batch ahead comes after the batch held, and the epoch goes on); ``_to_device``
  copies to any other device in line. ``_move`` copies a batch's tensors, keeping its nesting.
* ``_check_device`` validates the ``device`` argument (``core.devices.device_name``; None for
  the CPU).

Each wrapper closes its source when it is closed or exhausted; an error of the source passes
through without ending the wrapper (``Lookahead``'s rules), and ``closed`` tells whether the
wrapper was closed or the source closed itself (an error that ended the epoch).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch

from ..core import nested
from ..core.devices import device_name
from ..core.lookahead import Lookahead
from ._compat import pin_memory

_NO_ACCELERATOR = "'pin_memory' argument is set as true but no accelerator is found, then device pinned memory won't be used."


def _accelerator_available() -> bool:
    accelerator = getattr(torch, "accelerator", None)
    if accelerator is not None and hasattr(accelerator, "is_available"):
        return bool(accelerator.is_available())
    return torch.cuda.is_available()


def _pin(batch: Any) -> Any:
    """``batch`` pinned by torch's own walk; a batch already holding device tensors (a device stage's
    images) has its CPU tensors pinned one by one (torch's walk refuses a CUDA tensor)."""
    if any(tensor.device.type != "cpu" for tensor in _tensors(batch)):
        return nested.map_nodes(batch, _pin_leaf, _like)
    return pin_memory(batch)


def _pin_leaf(value: Any) -> Any:
    return value.pin_memory() if isinstance(value, torch.Tensor) and value.device.type == "cpu" else value


def _move(batch: Any, device: torch.device) -> Any:
    """``batch`` with every tensor copied to ``device`` (non-blocking), in the same nesting
    (``core.nested``'s nodes, rebuilt by ``_like``)."""

    def leaf(value: Any) -> Any:
        return value.to(device, non_blocking=True) if isinstance(value, torch.Tensor) else value

    return nested.map_nodes(batch, leaf, _like)


def _like(node: Any, values: Any) -> Any:
    """``node`` rebuilt with its moved members ``values`` (a dict for a mapping, a list for a
    sequence): a mapping other than a dict is cloned and updated (a plain dict when it cannot be),
    a tuple keeps its type (a namedtuple too), a list (a list subclass too) is a list."""
    if isinstance(node, Mapping):
        if type(node) is dict:
            return values
        try:
            out = copy.copy(node)
            out.update(values)  # type: ignore[attr-defined]
            return out
        except (TypeError, AttributeError):
            return values
    if isinstance(node, tuple):
        return type(node)(*values) if nested.is_namedtuple(node) else type(node)(values)
    return values


def _tensors(batch: Any) -> Iterator[torch.Tensor]:
    return (leaf for leaf in nested.leaves(batch) if isinstance(leaf, torch.Tensor))


class _CudaCopy:
    """The finisher copying each batch to the CUDA ``device`` on a side stream, one batch ahead of
    the consumer (run by ``_to_cuda``'s ``Lookahead``, depth 1, taking after the handoff).

    ``finish`` queues batch ``k+1``'s copy on the side stream (and an event after it) before batch
    ``k`` is handed out, so it overlaps the consumer's work on ``k``. ``handoff`` makes the
    consumer's current stream wait for the side stream (a GPU-side wait, no host sync) before the
    next copy is queued there, and ``record_stream``-s each of the batch's tensors on the
    consumer's stream, so the caching allocator does not reuse its memory while work queued on
    that stream may still read it. ``settle`` (once batch ``k+1`` was taken and its copy queued)
    waits for batch ``k``'s event: the host batch is kept until its copy has finished, so a reused
    host buffer is never overwritten mid-copy.

    Errors (``Lookahead``'s rules): when taking batch ``k+1`` (or queueing its copy) raises, batch
    ``k`` is handed out first and the error is raised by the next ``next()``; the ``next()`` after
    that goes on with the source (which goes on past a batch that raised, as torch's iterator
    does, or has ended). An error with no batch held is raised at once.
    """

    def __init__(self, device: torch.device):
        self.device = device
        self.stream = torch.cuda.Stream(device=device)

    def finish(self, host: Any) -> tuple[Any, Any, Any]:
        """(host batch, its copy, the copy's event), the copy queued on the side stream."""
        with torch.cuda.stream(self.stream):
            moved = _move(host, self.device)
            done = torch.cuda.Event()
            done.record(self.stream)
        return host, moved, done

    def handoff(self, copied: tuple[Any, Any, Any]) -> Any:
        moved = copied[1]
        current = torch.cuda.current_stream(self.device)
        current.wait_stream(self.stream)
        for tensor in _tensors(moved):
            if tensor.device.type == "cuda":
                tensor.record_stream(current)
        return moved

    def settle(self, copied: tuple[Any, Any, Any]) -> None:
        copied[2].synchronize()  # the copy out of the host batch is complete: its buffer may be reused


def _to_cuda(source: Iterator[Any], device: torch.device) -> Lookahead:
    """``source``'s batches copied to the CUDA ``device`` one batch ahead (see ``_CudaCopy``)."""
    return Lookahead(source, _CudaCopy(device), 1, take_after_handoff=True)


class _InLine:
    """A finisher applying ``fn`` to each batch as it is taken (no look-ahead: depth 1)."""

    def __init__(self, fn: Callable[[Any], Any]):
        self.finish = fn

    def handoff(self, finished: Any) -> Any:
        return finished


def _to_device(source: Iterator[Any], device: torch.device) -> Lookahead:
    """``source``'s batches copied to ``device`` in line (non-blocking copies)."""
    return Lookahead(source, _InLine(lambda batch: _move(batch, device)), 1)


def _pinned(source: Iterator[Any]) -> Lookahead:
    """``source``'s batches pinned in line (see ``_pin``)."""
    return Lookahead(source, _InLine(_pin), 1)


def _check_device(device: str | int | torch.device | None) -> torch.device | None:
    """``device`` as a ``torch.device`` (read by ``core.devices.device_name``: an int is a CUDA
    index); None for None and the CPU. ``ValueError`` for what is not a device torch knows,
    ``RuntimeError`` for CUDA where torch has none."""
    name = device_name(device)
    if name is None:
        return None
    try:
        chosen = torch.device(name)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device must be None, 'cpu' or a CUDA device such as 'cuda:0', got {device!r}: {exc}") from None
    if chosen.type == "cpu":
        return None
    if chosen.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError(
            f"device={device!r} asks for CUDA, but torch.cuda.is_available() is False (no GPU, or a CPU-only "
            "build of torch); pass device=None or 'cpu'"
        )
    return chosen
