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
  (``num_workers=0`` draws the sampler at the first ``next()``) and returns slipstream's iterator.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..workers.pool import WorkerError
from ._convert import _keep
from ._iterable import DataLoaderTimeoutError, _torch_worker_error


class _MapEpoch:
    """The epoch's batches of slipstream ``loader`` as torch gives them. ``start()`` starts the
    epoch and returns slipstream's iterator over it (one that goes on after a failed batch)."""

    def __init__(self, loader: Any, start: Callable[[], Any], timeout: float):
        self._loader, self._start, self._timeout = loader, start, timeout
        self._it: Any = None
        self._ended = False

    def __iter__(self) -> _MapEpoch:
        return self

    def begin(self) -> None:
        """Start the epoch now (draw the sampler, start loading) rather than at the first ``next()``."""
        if self._it is None and not self._ended:
            self._it = self._start()

    def __next__(self) -> Any:
        if self._ended:
            raise StopIteration
        self.begin()
        try:
            batch = next(self._it)
        except StopIteration:
            self.close()
            raise
        except DataLoaderTimeoutError:
            self.close()
            raise
        except TimeoutError as exc:
            self.close()
            raise DataLoaderTimeoutError(f"DataLoader timed out after {self._timeout} seconds ({exc})") from exc
        except WorkerError as exc:
            self.close()
            torch_error = _torch_worker_error(exc)
            if torch_error is exc:
                raise
            raise torch_error from None
        except Exception:
            raise  # the batch's own error: slipstream's iterator goes on (or ended, if it could not)
        except BaseException:
            self.close()
            raise
        convert = getattr(self._loader, "convert", _keep)
        return batch if convert is _keep else convert(batch)

    def close(self) -> None:
        """Stop the epoch's loading now."""
        self._ended = True
        it, self._it = self._it, None
        if it is not None:
            it.close()
