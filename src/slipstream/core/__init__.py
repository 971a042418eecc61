"""The core: what any loader is made of, independent of how it runs.

Containers (``numobs``/``getobs``), views, orders, per-sample randomness, batch structure and
default collation, the batch-buffer pool, worker identity, the exception hierarchy, and the
small shared utilities (argument checks, nested structures, closing iterators).
Nothing here starts a thread or a process.
"""
