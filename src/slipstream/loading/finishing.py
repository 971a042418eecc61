"""A batch finisher: work a container asks for on each whole batch, in the consumer's process.

A container may declare ``batch_finisher()``, returning an object with two methods (or None):
``finish(batch)``, run in one background thread per epoch on each batch the workers loaded (a
device stage decodes and resamples images on a GPU there, ``slipstream.gpu``), and
``handoff(finished)``, run in the consumer's thread just before the batch is handed out (for a
device: its stream waits for the finish's work). ``finisher_of(data)`` finds it (through an
``obsview`` too; under other views it raises ``TypeError``).

``FinishingExecutor`` wraps a backend's executor with it, ``depth`` batches ahead: a
``core.lookahead.Lookahead`` whose ``finish`` runs in the ``slipstream-finish`` thread. The
consumer's ``next()`` tops up the finisher with the batches that follow (taken from the executor in
the consumer's thread, as without a finisher, so the executor keeps its one-consumer contract) and
hands out the oldest once finished. At most ``depth`` batches are finished or being finished ahead
of the consumer, which bounds the memory they hold (device memory, for a device stage).

Errors come out where their batch would have (``core.lookahead``'s rules): an error of the
executor at its position (with its ``failed_tag``), after which nothing more is taken until the
consumer has received it; an error of ``finish`` (or of shaping a batch read before the buffers had
a shape) as that batch's own (``failed_tag`` its tag: with ``keep_going`` it counts as handed out,
and the epoch goes on). An interrupt (``KeyboardInterrupt``) while the consumer waits is raised at
once and is nobody's error: the batch stays next, uncounted. A finish that takes longer than
``timeout`` raises ``TimeoutError`` and closes the executor. ``last_tag`` is the tag of the batch
handed out last (the loader's progress counts only batches handed out, never the ones finished
ahead). ``close()`` is safe from any thread.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from ..core.lookahead import Lookahead
from ..core.views import BatchView, JoinedObs, MappedObs, ObsView
from .work.buffers import Unshaped

__all__ = ["FinishingExecutor", "finisher_of"]


def finisher_of(data: Any) -> Any:
    """``data.batch_finisher()`` (looked up through ``obsview``s), or None. A finisher under another
    view (``joinobs``, ``mapobs``, ``batchview``) cannot be applied to the batches that view makes:
    ``TypeError`` rather than batches left unfinished."""
    while isinstance(data, ObsView):
        data = data.data
    make = getattr(data, "batch_finisher", None)
    if callable(make):
        return make()
    if _finishes_below(data):
        raise TypeError(
            f"a device-mapped view (ss.open(p).map(..., device=...)) under {type(data).__name__} cannot finish its "
            "batches there: read it directly or through ss.obsview / ss.splitobs (map device fields last)"
        )
    return None


def _finishes_below(data: Any, depth: int = 0) -> bool:
    """Whether a view of ``core.views`` holds, at any depth, data with a batch finisher."""
    if depth > 32 or not isinstance(data, (ObsView, MappedObs, BatchView, JoinedObs)):
        return False
    below = data.parts if isinstance(data, JoinedObs) else (data.data,)
    return any(callable(getattr(part, "batch_finisher", None)) or _finishes_below(part, depth + 1) for part in below)


class _Shaped(Iterator[Any]):
    """``inner``'s batches as a ``Lookahead`` source: a batch read before the buffers had a shape
    is shaped here (in the consumer's thread, in order: a shape error is that batch's own);
    ``tag`` is the tag of the batch taken last, or of the error ``inner`` raised in its place
    (``inner.failed_tag``, reset there)."""

    def __init__(self, inner: Any, shape: Callable[[Unshaped], Any], tagged: bool = False):
        self.inner, self.shape, self.tagged = inner, shape, tagged  # tagged: items are (tag, batch)
        self.tag: Any = None

    def __next__(self) -> Any:
        try:
            batch = next(self.inner)
        except StopIteration:
            raise
        except Exception:
            self.tag, self.inner.failed_tag = getattr(self.inner, "failed_tag", None), None
            raise
        self.tag = self.inner.last_tag
        if type(batch) is Unshaped:
            batch = self.shape(batch)
        return (self.tag, batch) if self.tagged else batch

    def close(self) -> None:
        self.inner.close()


class FinishingExecutor(Lookahead):
    """``inner``'s batches through ``finisher`` in the ``slipstream-finish`` thread, ``depth``
    ahead (module doc; the rules are ``core.lookahead``'s). Same consumer interface as an executor:
    ``next()``, ``close()``, ``last_tag``, ``failed_tag``, ``busy_meter``. ``shape``: the loader's
    ``shape_batch``, for batches read before the buffers had a shape (called in the consumer's
    thread, in order, before the batch is finished). A finisher whose ``tagged`` is True gets
    ``(tag, batch)`` items (the tag: the batch's number; ``loading.batchfinish``)."""

    def __init__(self, inner: Any, finisher: Any, depth: int, shape: Callable[[Unshaped], Any], timeout: float | None = None):
        source = _Shaped(inner, shape, getattr(finisher, "tagged", False))
        super().__init__(source, finisher, depth, thread="slipstream-finish", timeout=timeout, tag=lambda: source.tag)
        self.inner = inner
        self.closes_with_timeout = getattr(inner, "closes_with_timeout", False)
        self.busy_meter = getattr(inner, "busy_meter", None)
