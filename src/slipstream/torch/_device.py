"""Where the batches go after loading: ``pin_memory`` and ``device``.

* ``_pinned`` pins each batch with torch's own ``pin_memory`` walk; ``_accelerator_available``
  tells whether pinning means anything (without an accelerator torch warns ``_NO_ACCELERATOR``
  and does nothing).
* ``_to_cuda`` copies each batch to a CUDA device on a side stream, one batch ahead of the
  consumer, synchronized with the consumer's stream before it is handed out; ``_to_device``
  copies to any other device in line. ``_move`` copies a batch's tensors, keeping its nesting.
* ``_check_device`` validates the ``device`` argument (None for the CPU).

Each wrapper closes its source when it is closed or exhausted.
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
    return _tud._utils.pin_memory.pin_memory(batch)


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


def _to_cuda(source: Iterator[Any], device: torch.device) -> Iterator[Any]:
    """Copy each batch to ``device`` on a side stream, one batch ahead of the consumer.

    The copy of batch ``k+1`` is queued on the side stream before batch ``k`` is handed out, so it
    overlaps the consumer's work on ``k``. Before a batch is handed out, the consumer's current
    stream waits for the side stream (a GPU-side wait, no host sync), and each of its tensors is
    ``record_stream``-ed on the consumer's stream, so the caching allocator does not reuse its
    memory while work queued on that stream may still read it. The host batch is kept until its
    copy has finished (an event), so a reused host buffer is never overwritten mid-copy.
    """
    stream = torch.cuda.Stream(device=device)

    def issue(host: Any) -> tuple[Any, Any, Any]:
        with torch.cuda.stream(stream):
            moved = _move(host, device)
            done = torch.cuda.Event()
            done.record(stream)
        return host, moved, done

    try:
        try:
            ahead = issue(next(source))
        except StopIteration:
            return
        while True:
            host, moved, done = ahead
            current = torch.cuda.current_stream(device)
            current.wait_stream(stream)
            for tensor in _tensors(moved):
                if tensor.device.type == "cuda":
                    tensor.record_stream(current)
            try:
                ahead = issue(next(source))
            except StopIteration:
                ahead = None
            done.synchronize()  # the copy out of ``host`` is complete: its buffer may be reused
            del host
            yield moved
            if ahead is None:
                return
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()


class _Mapped(Iterator[Any]):
    """``fn`` applied to each batch of ``source``; an error of ``source`` passes through without
    ending it (torch's iterator can be resumed past a batch that raised)."""

    def __init__(self, source: Iterator[Any], fn: Callable[[Any], Any]):
        self.source, self.fn = source, fn

    def __next__(self) -> Any:
        return self.fn(next(self.source))

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
