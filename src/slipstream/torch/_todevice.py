"""Where the batches go after loading: ``pin_memory`` and ``device``.

* ``_pinned`` pins each batch with torch's own ``pin_memory`` walk; ``_accelerator_available``
  tells whether pinning means anything (without an accelerator torch warns ``_NO_ACCELERATOR``
  and does nothing).
* ``_to_cuda`` copies each batch to a CUDA device on a side stream, one batch ahead of the
  consumer, synchronized with the consumer's stream before it is handed out (``_ToCuda``: an
  error taking the batch ahead comes after the batch held, and the epoch goes on); ``_to_device``
  copies to any other device in line. ``_move`` copies a batch's tensors, keeping its nesting.
* ``_check_device`` validates the ``device`` argument (None for the CPU).

Each wrapper closes its source when it is closed (``_ToCuda`` also when exhausted); an error of
the source passes through without ending the wrapper, and ``closed`` tells whether the source
closed itself (an error that ended the epoch).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import torch
import torch.utils.data as _tud

from ..core import nested

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
    return _tud._utils.pin_memory.pin_memory(batch)


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


class _ToCuda(Iterator[Any]):
    """Copy each batch of ``source`` to ``device`` on a side stream, one batch ahead of the consumer.

    The copy of batch ``k+1`` is queued on the side stream before batch ``k`` is handed out, so it
    overlaps the consumer's work on ``k``. Before a batch is handed out, the consumer's current
    stream waits for the side stream (a GPU-side wait, no host sync), and each of its tensors is
    ``record_stream``-ed on the consumer's stream, so the caching allocator does not reuse its
    memory while work queued on that stream may still read it. The host batch is kept until its
    copy has finished (an event), so a reused host buffer is never overwritten mid-copy.

    Errors: when taking batch ``k+1`` raises, batch ``k`` (already held) is handed out first and
    the error is raised by the next ``next()``; the ``next()`` after that goes on with ``source``
    (which goes on past a batch that raised, as torch's iterator does, or has ended). An error with
    no batch held is raised at once. ``closed``: closed here, or ``source`` closed itself.
    """

    def __init__(self, source: Iterator[Any], device: torch.device):
        self.source, self.device = source, device
        self.stream = torch.cuda.Stream(device=device)
        self.held: tuple[Any, Any, Any] | None = None  # (host batch, its copy, the copy's event)
        self.error: Exception | None = None  # raised taking the batch after the one held
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed or bool(getattr(self.source, "closed", False))

    def _issue(self, host: Any) -> tuple[Any, Any, Any]:
        with torch.cuda.stream(self.stream):
            moved = _move(host, self.device)
            done = torch.cuda.Event()
            done.record(self.stream)
        return host, moved, done

    def __next__(self) -> Any:
        if self._closed:
            raise StopIteration
        if self.error is not None:
            error, self.error = self.error, None
            raise error
        try:
            if self.held is None:
                self.held = self._issue(next(self.source))
            host, moved, done = self.held
            self.held = None
            current = torch.cuda.current_stream(self.device)
            current.wait_stream(self.stream)
            for tensor in _tensors(moved):
                if tensor.device.type == "cuda":
                    tensor.record_stream(current)
            try:
                self.held = self._issue(next(self.source))
            except StopIteration:
                pass
            except Exception as exc:  # batch k+1's: raised after batch k is handed out
                self.error = exc
            done.synchronize()  # the copy out of ``host`` is complete: its buffer may be reused
            del host
            return moved
        except StopIteration:
            self.close()
            raise

    def close(self) -> None:
        self._closed, self.held, self.error = True, None, None
        close = getattr(self.source, "close", None)
        if close is not None:
            close()


def _to_cuda(source: Iterator[Any], device: torch.device) -> Iterator[Any]:
    """``source``'s batches copied to the CUDA ``device`` one batch ahead (see ``_ToCuda``)."""
    return _ToCuda(source, device)


class _Mapped(Iterator[Any]):
    """``fn`` applied to each batch of ``source``; an error of ``source`` passes through without
    ending it (torch's iterator can be resumed past a batch that raised)."""

    def __init__(self, source: Iterator[Any], fn: Callable[[Any], Any]):
        self.source, self.fn = source, fn

    def __next__(self) -> Any:
        return self.fn(next(self.source))

    @property
    def closed(self) -> bool:
        """``source`` closed itself (or was closed)."""
        return bool(getattr(self.source, "closed", False))

    def close(self) -> None:
        close = getattr(self.source, "close", None)
        if close is not None:
            close()


def _to_device(source: Iterator[Any], device: torch.device) -> Iterator[Any]:
    return _Mapped(source, lambda batch: _move(batch, device))


def _pinned(source: Iterator[Any]) -> Iterator[Any]:
    return _Mapped(source, _pin)


def _check_device(device: str | int | torch.device | None) -> torch.device | None:
    if device is None:
        return None
    try:
        chosen = torch.device(device)
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
