"""Test ordering (the JAX and Ray tests run last) and the S3 tests' proxy fixtures.

Importing JAX starts its thread pools, and forking a process that runs threads can deadlock the
child (a lock held by a thread that does not exist there). The process-backend tests fork, so
they must run before anything in this interpreter has imported JAX.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))  # the tests' shared helpers (``from helpers import ...``)
import s3local  # noqa: E402 - tools/, for the remote tests (stdlib only here; moto runs in its child)


def _last(item: Any) -> bool:
    """JAX's tests, and Ray's (its driver keeps threads too), run after every test that forks."""
    return any(item.nodeid.startswith(f"tests/{name}") or f"{name}::" in item.nodeid for name in ("test_jax.py", "test_ray.py"))


def pytest_collection_modifyitems(session, config, items):
    items.sort(key=_last)


# A test module that defines a ``server`` fixture (an ``s3local.S3Server``) gets these: one
# fault-injecting proxy in front of it per module, and ``proxy``, the same with its faults cleared
# after each test.
@pytest.fixture(scope="module")
def proxy_module(server: Any) -> Iterator[s3local.ProxyHandle]:
    with s3local.start_proxy(server.endpoint) as proxy:
        yield proxy


@pytest.fixture
def proxy(proxy_module: s3local.ProxyHandle) -> Iterator[s3local.ProxyHandle]:
    """The module's proxy, its faults cleared after the test."""
    yield proxy_module
    proxy_module.set_faults(None)
