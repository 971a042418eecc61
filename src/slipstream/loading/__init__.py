"""Loading: the ``DataLoader`` and ``loadparallel``, and how a batch gets filled.

``loader`` composes the rest: ``options`` (its arguments, checked), the epoch's order from
``order``, the batch work from ``work`` (``batchplan``: one ``BatchPlan`` per batch; ``buffers``:
the batch slots, shaped once; ``jobs`` of ``readtasks``, which fill a batch through ``readers``;
``stats``: what the pipeline is doing), and a backend (``backends``: inline, threads, helper,
processes, behind one interface) that runs the plans; ``finishing`` runs a container's whole-batch
work ahead of the consumer, ``readahead`` tells remote data what comes next, ``iterator`` counts
what an epoch handed out.
``parallel`` is ``loadparallel``, on the same executors.
"""
