"""The loader's ``batch_ops``: batch augmentations applied to each whole batch in its finish thread.

A batch is whole only once every worker's chunk is written (into a shared buffer, for worker
processes: the consumer's process is the first to hold all of it), so the batch ops run where a
batch finisher runs (``loading.finishing``): in the ``slipstream-finish`` thread of the consumer's
process, ``finish_ahead`` batches ahead of the consumer, for every backend and worker count (with
``workers=0`` too). ``BatchOpsFinisher`` is that finisher: ``finish((k, batch))`` applies the ops
in order with the draws of batch ``k`` (``images.batchops``: a pure function of seed, epoch, ``k``,
rank and the op's position), so the batches are the same whichever backend, worker count or resume
point; a batch read before the buffers had a shape is shaped first (``FinishingExecutor``).

Over data that has its own batch finisher (a device stage), the ops run after it, inside its
``finish`` (``finish(batch, then=...)``: on the device's side stream, before its event), on the
device tensors it made, with the same host-computed draws.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

from ..images.batchops import OutputBuffers, check_batch_ops

__all__ = ["BatchOpsFinisher", "apply_batch_ops", "checked_ops"]


def checked_ops(ops: Any) -> tuple[Any, ...]:
    """``batch_ops=`` checked (``images.batchops.check_batch_ops``)."""
    if ops is None or (isinstance(ops, (list, tuple)) and not ops):
        return ()
    return check_batch_ops(ops)


def apply_batch_ops(ops: Sequence[Any], batch: Any, seed: int, epoch: int, index: int, rank: int = 0, buffers: Any = None) -> Any:
    """``batch`` (batch ``index`` of ``epoch`` on ``rank``) through ``ops`` in order (NumPy outputs
    in ``buffers``, an ``images.batchops.OutputBuffers``, when given)."""
    for position, op in enumerate(ops):
        batch = op(batch, seed=seed, epoch=epoch, index=index, rank=rank, position=position, buffers=buffers)
    return batch


class BatchOpsFinisher:
    """A ``loading.finishing`` finisher that applies ``ops`` to each batch after ``inner`` (the
    data's own finisher, or None). It takes ``(tag, batch)`` items (``tagged``): the tag is the
    batch's number in the epoch. ``buffers``: the ``OutputBuffers`` to reuse (a loader's, from one
    epoch to the next; default new ones)."""

    tagged = True

    def __init__(self, ops: Sequence[Any], seed: int, epoch: int, rank: int, inner: Any = None, buffers: Any = None):
        self.ops, self.seed, self.epoch, self.rank, self.inner = tuple(ops), seed, epoch, rank, inner
        self.buffers = OutputBuffers() if buffers is None else buffers
        if inner is not None:
            try:
                takes_then = "then" in inspect.signature(inner.finish).parameters
            except (TypeError, ValueError):
                takes_then = False
            if not takes_then:
                raise TypeError(
                    f"batch_ops over data whose batch finisher ({type(inner).__name__}) has no finish(batch, then=...): "
                    "the ops cannot run after it"
                )
            for name in ("settle", "discard"):
                if callable(getattr(inner, name, None)):
                    setattr(self, name, getattr(inner, name))

    def finish(self, item: tuple[Any, Any]) -> Any:
        tag, batch = item
        index = int(tag)

        def run(value: Any) -> Any:
            return apply_batch_ops(self.ops, value, self.seed, self.epoch, index, self.rank, self.buffers)

        if self.inner is None:
            return run(batch)
        return self.inner.finish(batch, then=run)

    def handoff(self, finished: Any) -> Any:
        return finished if self.inner is None else self.inner.handoff(finished)
