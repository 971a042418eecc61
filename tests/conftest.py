"""Test ordering: the JAX tests run last.

Importing JAX starts its thread pools, and forking a process that runs threads can deadlock the
child (a lock held by a thread that does not exist there). The process-backend tests fork, so
they must run before anything in this interpreter has imported JAX.
"""

from __future__ import annotations


def pytest_collection_modifyitems(session, config, items):
    items.sort(key=lambda item: item.nodeid.startswith("tests/test_jax.py") or "test_jax.py::" in item.nodeid)
