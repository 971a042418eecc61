"""The backend interface: what runs a loader's batch plans.

A backend has a small surface, the same for every way of loading:

* ``allocate(spec, rows)``: the memory of one batch slot (private arrays; shared memory for
  worker processes), used by the loader's ``Buffers``;
* ``run(plans, reading, epoch, keep_going)``: an executor (an iterator) over one epoch's batch
  plans that hands out batches (or ``Unshaped`` samples) in order, keeping the executor contract
  (``loading.work.jobs``, ``backends.ordered``): bounded prefetch, errors at their batch, ``close()``;
* ``restart(worker_init)``: the next ``run`` starts fresh workers (with the data as it is then);
* ``data_changed(state)``: stateful data took ``state`` (``order.datastate``): jobs made after it
  run on copies of the data that loaded it (nothing to do where the workers share the data);
* ``close()``: stop the workers and free what they hold (idempotent; a later ``run`` starts anew).

A backend is made from the loader's ``Options`` (``loading.options``: the data, collate, workers,
prefetch, in_order, timeout, worker_init and mp_context are what it reads) and keeps it as
``options``. ``Reading`` is what a plan is read with: the loader's reader, buffers and collate. The
loader knows nothing else about its backend; ``backends.make_backend`` chooses one by name.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from ...core.slots import heap_arrays
from ..work.batchplan import BatchPlan
from ..work.buffers import Buffers
from ..work.jobs import Job
from ..work.readers import Reader
from ..work.readtasks import local_job

if TYPE_CHECKING:  # for the hints only: options imports backends (for the names it checks backend= against)
    from ..options import Options

__all__ = ["Backend", "Reading"]


class Reading:
    """What one epoch's plans are read with."""

    __slots__ = ("reader", "buffers", "collate", "seed")

    def __init__(self, reader: Reader, buffers: Buffers, collate: Callable[[list[Any]], Any] | None, seed: int):
        self.reader, self.buffers, self.collate, self.seed = reader, buffers, collate, seed


class Backend:
    """The base: loads in this process (see ``inline`` and ``threads``); subclasses override what differs."""

    name = "base"
    shares_memory = False  # True: batch slots live in shared memory (released on close)

    def __init__(self, options: Options):
        self.options = options

    @property
    def pids(self) -> list[int]:
        """The worker processes' ids (none here)."""
        return []

    def allocate(self, spec: Any, rows: int) -> tuple[list[Any], Any, list[int]]:
        return heap_arrays(spec, rows)

    def run(self, plans: Iterator[BatchPlan], reading: Reading, epoch: int, keep_going: bool) -> Any:
        jobs = (self.job(plan, reading) for plan in plans)
        return self.executor(jobs, reading, epoch, keep_going)

    def job(self, plan: BatchPlan, reading: Reading) -> Job:
        return local_job(plan, reading.reader, reading.buffers, reading.collate)

    def executor(self, jobs: Iterator[Job], reading: Reading, epoch: int, keep_going: bool) -> Any:
        """The executor that runs ``jobs`` (made from ``reading``'s plans) for ``epoch``."""
        raise NotImplementedError

    def data_changed(self, state: Any) -> None:
        """The data's state changed to ``state``: the workers here read the data itself."""

    def restart(self, worker_init: Callable[[int], Any] | None = None) -> None:
        """The next ``run`` starts fresh workers (a no-op where workers live one epoch anyway)."""
        if worker_init is not None:
            self.options = replace(self.options, worker_init=worker_init)

    def close(self) -> None:
        """Stop the workers (none here). Idempotent."""
