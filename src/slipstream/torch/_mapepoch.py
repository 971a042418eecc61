"""One epoch of a map-style dataset, as torch's iterator behaves.

``_MapEpoch`` wraps slipstream's epoch iterator and gives torch's batches and torch's errors:

* each batch through the collate plan its loader decided from the first batch (``_convert``);
* a timeout raises ``DataLoaderTimeoutError`` (a ``RuntimeError`` starting with torch's
  ``DataLoader timed out after N seconds``, and a ``TimeoutError``); a dead worker's
  ``WorkerError`` says torch's ``DataLoader worker (pid(s) N) exited unexpectedly`` first;
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

from collections.abc import Callable
from typing import Any

from ..core.closing import ClosingIterator
from ..workers.pool import WorkerError
from ._convert import _keep
from ._iterable import DataLoaderTimeoutError, _torch_worker_error
from ._record import EpochRecord


def _close_started(started: list[Any]) -> None:
    for it in started:
        it.close()


class _MapEpoch(ClosingIterator):
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
            torch_error = _torch_worker_error(exc)
            if torch_error is exc:
                raise
            raise torch_error from None
        except Exception:
            if self._record is not None and not source.closed:  # the batch's own error: it counts as handed out
                self._record.took(self._loader)
            raise
        if self._record is not None:
            self._record.took(self._loader)
        convert = getattr(self._loader, "convert", _keep)
        return batch if convert is _keep else convert(batch)

    def _keeps_going(self, error: BaseException) -> bool:
        """A batch's own error (the dataset's, the collate's): slipstream's iterator goes on (or
        ended, if it could not); a timeout, a dead worker or an interrupt ends the epoch."""
        return isinstance(error, Exception) and not isinstance(error, (TimeoutError, WorkerError))
