"""The helper backend: the loader's ``workers`` threads, in one helper process beside the trainer.

The process backend's machinery (a persistent ``WorkerPool``, shared-memory batch slots, the same
``remote_*`` read path) with one worker process that runs ``workers`` threads (``workers.crew``).
Each batch goes to the helper as one message (the job's tasks) and comes back as one answer once
its rows are written into the shared slot, so the trainer's process does a few microseconds of
Python per batch and none per sample: a training loop that holds the GIL neither slows the loader
nor is slowed by it. One process starts (once, kept across epochs like the process backend's) and
holds one copy of the data, whatever the number of workers; inside it the threads share the GIL
as the thread backend's do, so work that releases the GIL (decoding, NumPy, packed files) scales
with them, and pure-Python samples do not (use ``backend="process"`` for those).

Each thread is a worker to ``worker_info()`` (``backend`` "helper", ids ``0..workers-1``) and runs
``worker_init(id)`` once, when the helper starts.
"""

from __future__ import annotations

from .processes import ProcessBackend

__all__ = ["HelperBackend"]


class HelperBackend(ProcessBackend):
    """One persistent helper process running ``workers`` threads, started at the first ``run``."""

    name = "helper"
    whole_jobs = True

    def layout(self) -> tuple[int, int]:
        return 1, self.options.workers
