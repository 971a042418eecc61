"""One epoch of a ``slipstream.torch.DataLoader``: the iterator ``iter(loader)`` returns.

It hands out the batches of its source (an iterator of finished batches), with ``len()`` as
torch's iterator gives it, torch's warning when an ``IterableDataset`` yields more batches than
its reported ``len()``, and ``close()`` (or ``with``) to stop the epoch's loading at once. It
tells the epoch's ``EpochRecord`` each batch it hands out and its end (for ``state_dict()``); a
batch whose loading raised counts as handed out when the epoch goes on past it (its source did not
close itself), as torch's iterator goes on past it.

``loader.close()`` stops the worker processes an epoch may still read from: its ``next()`` then
raises a ``RuntimeError`` saying so (not counted as a batch) and the iterator is closed (with
``num_workers=0``, thread workers, or an ``IterableDataset``'s workers that are not persistent,
the epoch goes on). Closing is leaving the epoch early (as ``break``), not its end: ``next()`` on a closed iterator
raises StopIteration without marking the epoch ended, so ``state_dict()`` still resumes the rest
of the epoch left.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch.utils.data as _tud

from ..core.closing import ClosingIterator
from ._record import EpochRecord

if TYPE_CHECKING:
    from ._dataloader import DataLoader


class LoaderClosedError(RuntimeError):
    """The epoch's worker processes were stopped by ``loader.close()``: the epoch cannot go on."""


_POOL_CLOSED = "slipstream: the worker pool is closed"  # what the worker pool raises once closed


def _close_source(source: Iterator[Any]) -> None:
    close = getattr(source, "close", None)
    if close is not None:
        close()


class _LoaderIter(ClosingIterator):
    """One epoch of a ``DataLoader``: ``next()``, ``len()`` (as torch's iterator) and ``close()``
    (also on ``with`` exit and when dropped: workers stay for the next epoch where they persist)."""

    def __init__(self, loader: DataLoader, source: Iterator[Any], record: EpochRecord | None = None):
        super().__init__(_close_source, source)
        self._loader = loader
        self._source = source
        self._record = record
        self._yielded = 0 if record is None else record.skipped  # a resumed epoch's count goes on
        self._iterable = loader._dataset_kind == _tud.dataloader._DatasetKind.Iterable
        self._len_called = loader._IterableDataset_len_called
        self._closes = loader._closes  # loader.close() calls before this epoch

    def _next(self) -> Any:
        if self.closed:  # left by the user: not the epoch's end (see ``_ended``)
            raise StopIteration
        try:
            batch = next(self._source)
        except StopIteration:
            raise
        except Exception as exc:
            if self._loader._closes != self._closes and isinstance(exc, RuntimeError) and str(exc).startswith(_POOL_CLOSED):
                raise LoaderClosedError(
                    "loader.close() stopped this epoch's worker processes, so the epoch cannot go on: start the next "
                    "epoch with iter(loader) (new workers start), or resume the rest of this one from loader.state_dict()"
                ) from exc
            # a batch's own error where the epoch goes on counts as handed out (torch's iterator goes on past it)
            if self._record is not None and not getattr(self._source, "closed", False):
                self._record.handed += 1
            raise
        self._yielded += 1
        if self._record is not None:
            self._record.handed += 1
        if self._iterable and self._len_called is not None and self._yielded > self._len_called:
            message = (
                f"Length of IterableDataset {self._loader.dataset} was reported to be {self._len_called}"
                f"(when accessing len(dataloader)), but {self._yielded} samples have been fetched. "
            )
            if self._loader.num_workers > 0:
                message += (
                    "For multiprocessing data-loading, this could be caused by not properly configuring the "
                    "IterableDataset replica at each worker. Please see "
                    "https://pytorch.org/docs/stable/data.html#torch.utils.data.IterableDataset for examples."
                )
            warnings.warn(message, stacklevel=3)
        return batch

    def _ended(self) -> None:
        """The source ran out: the epoch's end, unless the user closed this iterator before."""
        if self._record is not None and not self.closed:
            self._record.ended = True

    def __len__(self) -> int:
        return len(self._loader._index_sampler)

    def _keeps_going(self, error: BaseException) -> bool:
        # the source decides whether its epoch goes on, unless loader.close() stopped its workers
        return isinstance(error, Exception) and not isinstance(error, LoaderClosedError)
