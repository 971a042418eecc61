"""Work: what one batch is made of, below the loader and every backend.

``readers`` fill a batch from a container (one ``Reader`` per loader, ``BatchInfo`` per batch),
``batchplan`` says how one batch is read (one ``BatchPlan``: indices, chunks, collate or in place),
``buffers`` holds the batch slots (shaped once, reused), ``jobs`` are the units an executor runs
(``Job`` of ``Task``, failures kept with their batch), ``readtasks`` builds a plan's jobs for the
local and the remote side, and ``stats`` measures an epoch and a pool (``EpochStats``,
``BusyMeter``). Nothing here imports the loader or a backend.
"""
