"""Loading: the ``DataLoader`` and ``loadparallel``, and how a batch gets filled.

The loader plans batches (which indices, in which chunks) and hands them to a backend
(``loading.backends``: inline, threads, processes); readers fill a batch's storage from a
container the fastest way it allows.
"""
