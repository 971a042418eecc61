"""Shared test helpers: batch comparison, the resume check run on every stateful piece, subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

SRC = str(Path(__file__).resolve().parents[1] / "src")


def snapshot(batch: Any) -> Any:
    """A deep copy of a batch (arrays copied), safe to keep while the loader runs on."""
    if isinstance(batch, np.ndarray):
        return batch.copy()
    if isinstance(batch, Mapping):
        return {k: snapshot(v) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(snapshot(v) for v in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(snapshot(v) for v in batch)
    return batch


def assert_same(a: Any, b: Any, where: str = "batch") -> None:
    """Structure, types, shapes, dtypes and values equal."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, np.ndarray):
        assert a.shape == b.shape and a.dtype == b.dtype, f"{where}: {a.shape}/{a.dtype} != {b.shape}/{b.dtype}"
        np.testing.assert_array_equal(a, b, err_msg=where)
    elif isinstance(a, Mapping):
        assert a.keys() == b.keys(), f"{where}: keys {list(a)} != {list(b)}"
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    elif isinstance(a, (tuple, list)):
        assert len(a) == len(b), f"{where}: length {len(a)} != {len(b)}"
        for k, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{k}]")
    else:
        assert a == b, f"{where}: {a!r} != {b!r}"


def assert_resumes_exactly(make: Callable[[], Any], epochs: int = 2) -> int:
    """The shared checkpoint test: save the state before every step of ``epochs`` epochs, restore
    each into a fresh object, and check it yields exactly the rest of the uninterrupted run.

    The state goes through JSON on the way (it must be small and serializable). Returns the
    number of restore points checked.
    """
    loader = make()
    states: list[tuple[dict, int]] = []
    batches: list[Any] = []
    for _ in range(epochs):
        iterator = iter(loader)
        while True:
            states.append((json.loads(json.dumps(loader.state_dict())), len(batches)))
            try:
                batches.append(snapshot(next(iterator)))
            except StopIteration:
                break
    for state, consumed in states:
        fresh = make()
        fresh.load_state_dict(state)
        rest = [snapshot(b) for _ in range(epochs - state["epoch"]) for b in fresh]
        assert len(rest) == len(batches) - consumed, f"restoring {state}: {len(rest)} batches, expected {len(batches) - consumed}"
        for k, (got, want) in enumerate(zip(rest, batches[consumed:])):
            assert_same(got, want, f"after restoring {state}, batch {k}")
    return len(states)


def run_python(code: str, timeout: float = 60, env: dict | None = None, argv: list[str] | None = None) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (so a hang or crash fails one test); return the result."""
    full_env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", ""), **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *(argv or [])], capture_output=True, text=True, timeout=timeout, env=full_env
    )
