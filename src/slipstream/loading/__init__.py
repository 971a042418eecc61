"""Loading: the ``DataLoader`` and ``loadparallel``, and how a batch gets filled.

``loader`` composes the rest: ``options`` (its arguments, checked), the epoch's order from
``order``, ``batchplan`` (one ``BatchPlan`` per batch), ``buffers`` (the batch slots, shaped once),
and a backend (``backends``: inline, threads, helper, processes, behind one interface) that runs
the plans as ``jobs`` of ``readtasks``, which fill a batch through ``readers``; ``finishing`` runs a
container's whole-batch work ahead of the consumer, ``readahead`` tells remote data what comes next,
``iterator`` counts what an epoch handed out and ``stats`` what its pipeline is doing.
``parallel`` is ``loadparallel``, on the same executors.
"""
