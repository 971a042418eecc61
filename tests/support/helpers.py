"""Shared test helpers: batch comparison, the resume check run on every stateful piece, subprocesses."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np

import slipstream

# the folder the slipstream under test is imported from, for child interpreters: src/ for an editable install,
# site-packages for an installed wheel (so children test the same build as the parent)
SRC = str(Path(slipstream.__file__).resolve().parents[1])
SUPPORT = str(Path(__file__).resolve().parent)  # tests/support: these shared helpers, for child interpreters


def _is_tensor(value: Any) -> bool:
    torch = sys.modules.get("torch")  # (only loaded where a test uses torch)
    return torch is not None and isinstance(value, torch.Tensor)


def snapshot(batch: Any) -> Any:
    """A deep copy of a batch (arrays and torch tensors copied), safe to keep while the loader runs on."""
    if isinstance(batch, np.ndarray):
        return batch.copy()
    if _is_tensor(batch):
        return batch.detach().clone()
    if isinstance(batch, Mapping):
        return {k: snapshot(v) for k, v in batch.items()}
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):
        return type(batch)(*(snapshot(v) for v in batch))
    if isinstance(batch, (tuple, list)):
        return type(batch)(snapshot(v) for v in batch)
    return batch


def assert_same(a: Any, b: Any, where: str = "batch") -> None:
    """Structure, types, shapes, dtypes and values equal (NumPy arrays and torch tensors compared whole)."""
    assert type(a) is type(b), f"{where}: {type(a).__name__} != {type(b).__name__}"
    if isinstance(a, np.ndarray):
        assert a.shape == b.shape and a.dtype == b.dtype, f"{where}: {a.shape}/{a.dtype} != {b.shape}/{b.dtype}"
        np.testing.assert_array_equal(a, b, err_msg=where)
    elif _is_tensor(a):
        assert a.shape == b.shape and a.dtype == b.dtype, f"{where}: {tuple(a.shape)}/{a.dtype} != {tuple(b.shape)}/{b.dtype}"
        assert bool((a == b).all()), f"{where}: values differ\n{a}\n{b}"
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


SEED = 7  # the loader's seed in assert_batches_equal_default_collate (samples are read with it too)


def collate_or_errors(samples: list[Any]) -> tuple[Any, tuple[type[Exception], ...]]:
    """``default_collate(samples)`` and no errors; or None and the error types a loader may raise
    for these samples: any failing field's (it collates field by field, ``default_collate``
    sample by sample, so with two bad fields either may be named)."""
    import slipstream as ss

    try:
        return ss.default_collate(samples), ()
    except (ValueError, TypeError) as exc:
        if not isinstance(samples[0], Mapping):
            return None, (type(exc),)
    errors = set()
    for name in samples[0]:
        try:
            ss.default_collate([sample[name] for sample in samples])
        except (ValueError, TypeError) as failed:
            errors.add(type(failed))
    return None, tuple(errors)


def assert_batches_equal_default_collate(ds: Any, batch_size: int, workers: int, **kwargs: Any) -> None:
    """Every batch of ``ss.DataLoader(ds, ...)`` equals ``default_collate`` of the same samples as the
    loader's sample ``i`` sees them (``ds[i]`` with that sample's random draws): structure, dtype,
    values; where that raises, the loader raises one of those error types at that batch."""
    import slipstream as ss
    from slipstream.core.rng import sample_context

    n = len(ds)
    iterator = iter(ss.DataLoader(ds, batch_size=batch_size, workers=workers, seed=SEED, **kwargs))
    for k, a in enumerate(range(0, n, batch_size)):
        indices = list(range(a, min(a + batch_size, n)))
        samples = []
        with sample_context(SEED, 0) as ctx:
            for i in indices:
                ctx.at(i)
                samples.append(ds[i])
        want, errors = collate_or_errors(samples)
        if errors:
            import pytest

            with pytest.raises(errors):
                next(iterator)
            return
        assert_same(snapshot(next(iterator)), want, f"batch {k} (samples {indices})")
    try:
        next(iterator)
    except StopIteration:
        return
    raise AssertionError(f"the loader gave more than {-(-n // batch_size)} batches")


def run_python(code: str, timeout: float = 60, env: dict | None = None, argv: list[str] | None = None) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter (so a hang or crash fails one test); return the result.

    The child finds ``slipstream`` in ``src/`` and the modules of ``tests/support`` (``from finishdata import ...``);
    ``env`` is added to (and may override) the environment, ``PYTHONPATH`` included."""
    full_env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, SUPPORT, os.environ.get("PYTHONPATH", "")]), **(env or {})}
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *(argv or [])], capture_output=True, text=True, timeout=timeout, env=full_env
    )


@contextlib.contextmanager
def no_seqcore() -> Iterator[None]:
    """The compiled sequence kernels switched off (SLIPSTREAM_NO_SEQCORE=1) inside the block; the
    variable is restored (or removed) after it."""
    before = os.environ.get("SLIPSTREAM_NO_SEQCORE")
    os.environ["SLIPSTREAM_NO_SEQCORE"] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ["SLIPSTREAM_NO_SEQCORE"]
        else:
            os.environ["SLIPSTREAM_NO_SEQCORE"] = before


def overwrite_offsets(path, stored, offsets, dtype) -> None:
    """Overwrite the first run of ``stored`` offsets (of ``dtype``) in the file at ``path`` with ``offsets``: damage that Arrow's cheap validation lets through."""
    raw = bytearray(path.read_bytes())
    old = np.array(stored, dtype).tobytes()
    at = raw.find(old)
    assert at > 0
    raw[at : at + len(old)] = np.array(offsets, dtype).tobytes()
    path.write_bytes(bytes(raw))
