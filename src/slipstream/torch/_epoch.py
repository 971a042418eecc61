"""One epoch of a ``slipstream.torch.DataLoader``: the iterator ``iter(loader)`` returns, the
map-style epoch under it, and the errors their ``next()`` raises in torch's words.

``LoaderIter`` hands out the batches of its source (an iterator of finished batches), with
``len()`` as torch's iterator gives it, torch's warning when an ``IterableDataset`` yields more
batches than its reported ``len()``, and ``close()`` (or ``with``) to stop the epoch's loading at
once. It tells the epoch's ``EpochRecord`` each batch it hands out and its end (for
``state_dict()``); a batch whose loading raised counts as handed out when the epoch goes on past it
(its source did not close itself), as torch's iterator goes on past it.

``loader.close()`` stops the worker processes an epoch may still read from: its ``next()`` then
raises a ``LoaderClosedError`` (a ``RuntimeError`` saying so, not counted as a batch) and the
iterator is closed (with ``num_workers=0``, thread workers, or an ``IterableDataset``'s workers that
are not persistent, the epoch goes on). Closing is leaving the epoch early (as ``break``), not its
end: ``next()`` on a closed iterator raises StopIteration without marking the epoch ended, so
``state_dict()`` still resumes the rest of the epoch left.

``MapEpoch`` is a map-style dataset's source: it wraps slipstream's epoch iterator and gives
torch's batches and torch's errors:

* each batch through the collate plan its loader decided from the first batch (``_convert``);
* a timeout raises ``DataLoaderTimeoutError`` (a ``RuntimeError`` starting with torch's
  ``DataLoader timed out after N seconds``, and a ``TimeoutError``); a dead worker's
  ``WorkerError`` says torch's ``DataLoader worker (pid(s) N) exited unexpectedly`` first
  (``torch_worker_error``, also used for an ``IterableDataset``'s workers);
* an exception raised while loading a batch (the dataset's, the collate's) is raised by that
  ``next()``, and the next ``next()`` goes on with the following batch, as torch's iterator does:
  slipstream's iterator is made with ``keep_going=True``, so each batch is read once (none is
  loaded again) and the failed one counts as consumed;
* ``start`` runs at the first ``next()`` when torch's iterator would only start then
  (``num_workers=0`` draws the sampler at the first ``next()``) and returns slipstream's iterator;
* ``record`` (an ``EpochRecord``, optional) is told when the epoch starts and each batch taken
  (a batch that raised where the epoch goes on included), for ``state_dict()``.
"""

from __future__ import annotations

import signal
import warnings
from collections.abc import Callable, Iterator
from typing import Any

from ..core.closing import ClosingIterator
from ..core.errors import DataLoaderTimeoutError, WorkerError
from ._context import CloseCount, LoaderContext
from ._convert import keep
from ._record import EpochRecord


class LoaderClosedError(RuntimeError):
    """The epoch's worker processes were stopped by ``loader.close()``: the epoch cannot go on."""


_POOL_CLOSED = "slipstream: the worker pool is closed"  # what the worker pool raises once closed


def torch_worker_error(error: WorkerError) -> WorkerError:
    """A dead worker's ``WorkerError`` with torch's words first (``DataLoader worker (pid(s) N)
    exited unexpectedly``, and for a signal ``DataLoader worker (pid N) is killed by signal: ...``),
    then slipstream's; ``error`` itself when it is not about a worker that died."""
    pid, code = error.pid, error.exitcode
    if pid is None or code is None:
        return error
    words = f"DataLoader worker (pid(s) {pid}) exited unexpectedly"
    if code < 0:
        try:
            name = signal.strsignal(-code) or f"signal {-code}"
        except ValueError:
            name = f"signal {-code}"
        words += f". DataLoader worker (pid {pid}) is killed by signal: {name}."
    else:
        words += f" with exit code {code}."
    torch_error = WorkerError(f"{words} {error}", pid, code)
    torch_error.__notes__ = list(getattr(error, "__notes__", []))
    return torch_error.with_traceback(error.__traceback__)


def close_source(source: Iterator[Any]) -> None:
    close = getattr(source, "close", None)
    if close is not None:
        close()


class LoaderIter(ClosingIterator):
    """One epoch of a ``DataLoader``: ``next()``, ``len()`` (as torch's iterator) and ``close()``
    (also on ``with`` exit and when dropped: workers stay for the next epoch where they persist).

    ``context`` is the loader's settings at this ``iter()``; ``closes`` its ``loader.close()``
    count; ``owner`` (the loader) stays referenced while the epoch is read, so that the loader, whose
    collection stops persistent worker processes, lives as long as its epoch."""

    def __init__(
        self,
        context: LoaderContext,
        source: Iterator[Any],
        record: EpochRecord | None,
        *,
        closes: CloseCount,
        owner: object,
    ):
        super().__init__(close_source, source)
        self._context, self._source, self._record, self._owner = context, source, record, owner
        self._yielded = 0 if record is None else record.skipped  # a resumed epoch's count goes on
        self._closes = closes
        self._closes_before = closes.count  # loader.close() calls before this epoch

    def _next(self) -> Any:
        if self.closed:  # left by the user: not the epoch's end (see ``_ended``)
            raise StopIteration
        try:
            batch = next(self._source)
        except StopIteration:
            raise
        except Exception as exc:
            if self._closes.count != self._closes_before and isinstance(exc, RuntimeError) and str(exc).startswith(_POOL_CLOSED):
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
        reported = self._context.reported_length
        if self._context.iterable and reported is not None and self._yielded > reported:
            message = (
                f"Length of IterableDataset {self._context.dataset} was reported to be {reported}"
                f"(when accessing len(dataloader)), but {self._yielded} samples have been fetched. "
            )
            if self._context.num_workers > 0:
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
        return len(self._context.index_sampler)

    def _keeps_going(self, error: BaseException) -> bool:
        # the source decides whether its epoch goes on, unless loader.close() stopped its workers
        return isinstance(error, Exception) and not isinstance(error, LoaderClosedError)


def _close_started(started: list[Any]) -> None:
    for it in started:
        it.close()


class MapEpoch(ClosingIterator):
    """The epoch's batches of slipstream ``loader`` as torch gives them. ``start()`` starts the
    epoch and returns slipstream's iterator over it (one that goes on after a failed batch)."""

    def __init__(self, loader: Any, start: Callable[[], Any], timeout: float, record: EpochRecord | None = None):
        self._started: list[Any] = []  # slipstream's iterator, once the epoch has started
        super().__init__(_close_started, self._started)
        self._loader, self._start, self._timeout, self._record = loader, start, timeout, record

    def begin(self) -> None:
        """Start the epoch now (draw the sampler, start loading) rather than at the first ``next()``."""
        if not self._started and not self.closed:
            self._started.append(self._start())
            record = self._record
            if record is not None:
                record.begun = True
                if not record.counts_pulls:
                    record.core_states[0] = self._loader.state_dict()

    def _next(self) -> Any:
        if self.closed:
            raise StopIteration
        self.begin()
        source = self._started[0]
        try:
            batch = next(source)
        except StopIteration:
            raise
        except DataLoaderTimeoutError:
            raise
        except TimeoutError as exc:
            raise DataLoaderTimeoutError(f"DataLoader timed out after {self._timeout} seconds ({exc})") from exc
        except WorkerError as exc:
            torch_error = torch_worker_error(exc)
            if torch_error is exc:
                raise
            raise torch_error from None
        except Exception:
            if self._record is not None and not source.closed:  # the batch's own error: it counts as handed out
                self._record.took(self._loader)
            raise
        if self._record is not None:
            self._record.took(self._loader)
        convert = getattr(self._loader, "convert", keep)
        return batch if convert is keep else convert(batch)

    def _keeps_going(self, error: BaseException) -> bool:
        """A batch's own error (the dataset's, the collate's): slipstream's iterator goes on (or
        ended, if it could not); a timeout, a dead worker or an interrupt ends the epoch."""
        return isinstance(error, Exception) and not isinstance(error, (TimeoutError, WorkerError))
