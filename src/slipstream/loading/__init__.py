"""Loading: the ``DataLoader`` and ``loadparallel``, and how a batch gets filled.

``loader`` composes the rest: ``options`` (its arguments, checked), ``epochs`` (which batches an
epoch has), ``plan`` (one ``BatchPlan`` per batch), ``progress`` (how far an epoch got; the
``state_dict``), ``buffers`` (the batch slots, shaped once), and a backend (``backends``: inline,
threads, processes, behind one interface) that runs the plans as ``jobs`` of ``tasks``, which
fill a batch through ``readers``. ``parallel`` is ``loadparallel``, on the same executors.
"""
