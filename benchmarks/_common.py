"""Measurement and reporting helpers shared by the benchmarks (``bench_loader.py``, ``bench_packed.py``).

A benchmark imports this module before slipstream and torch: importing it puts the checkout's ``src/``
on ``sys.path`` when slipstream is not installed, and exits with a message when torch is missing.

Measuring: ``measure`` runs every run once to warm up, then takes turns (the order rotates every
repeat); ``permutation`` is slipstream's own per-epoch order, so a copy limit gathers the same rows.
Reporting: ``rates`` and ``paired`` (the median of per-repeat ratios of runs measured back to back),
``table`` (medians with [min - max]), ``verdict`` (a ratio against a goal, PASS/MISS) and ``summary``.
"""

from __future__ import annotations

import gc
import os
import platform
import statistics
import sys
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

try:
    import slipstream as ss
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import slipstream as ss

try:
    import torch
except ImportError:
    sys.exit(f"{Path(sys.argv[0]).name} needs torch: pip install -e '.[bench]' (or run `make bench`)")

try:  # the exact per-epoch order slipstream uses, so the copy limit gathers the same rows
    from slipstream.order.orders import permutation as _ss_permutation
except ImportError:  # pragma: no cover - the private helper moved: any permutation costs the same
    _ss_permutation = None

SEED = 0

# What one run returns: a tuple whose first item is the samples it handled and whose second is seconds.
R = TypeVar("R", bound=tuple)
# A number format: a format spec (".2f") or a function of the number.
Format = str | Callable[[float], str]


def permutation(n: int, epoch: int) -> np.ndarray:
    if _ss_permutation is not None:
        return _ss_permutation(n, SEED, epoch)
    return np.random.default_rng((SEED, epoch)).permutation(n)


def set_footing() -> None:
    """The footing every benchmark shares: one torch thread, no warning about the worker count."""
    torch.set_num_threads(1)
    # the benchmarks ask for their workers on any machine; torch warns when that exceeds its suggestion
    warnings.filterwarnings("ignore", message="This DataLoader will create", category=UserWarning)


def versions(*extra: str) -> str:
    """One line: slipstream, torch and NumPy versions, then ``extra``, then Python, CPUs and load."""
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    return " | ".join(
        [
            f"slipstream {ss.__version__}",
            f"torch {torch.__version__}",
            f"numpy {np.__version__}",
            *extra,
            f"Python {platform.python_version()}",
            f"{os.cpu_count()} CPUs, load {load:.2f}",
        ]
    )


# -- measuring --------------------------------------------------------------------------------
def measure(runs: dict[str, Callable[..., R]], repeats: int, warmup: int | None = None, noun: str = "runs") -> dict[str, list[R]]:
    """A warm-up for each run (a whole epoch, or ``run(warmup)``: ``warmup`` batches), then ``repeats`` rounds in rotating
    order, each a whole epoch (``run()``). All runs must handle the same samples per epoch (else: "{noun} disagree")."""
    names = list(runs)
    for name in names:
        if warmup is None:
            runs[name]()
        else:
            runs[name](warmup)
    results: dict[str, list[R]] = {name: [] for name in names}
    for r in range(repeats):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            gc.collect()
            results[name].append(runs[name]())
    counts = {name: {res[0] for res in rs} for name, rs in results.items()}
    if len({c for cs in counts.values() for c in cs}) != 1:
        raise RuntimeError(f"{noun} disagree on samples per epoch: {counts}")
    return results


def rates(res: Sequence[tuple[Any, ...]], per_sample: float = 1.0) -> list[float]:
    """Units per second for each repeat (``per_sample`` units per sample)."""
    return [r[0] * per_sample / r[1] for r in res]


def paired(xs: list[float], ys: list[float]) -> float:
    return statistics.median(x / y for x, y in zip(xs, ys))


# -- reporting --------------------------------------------------------------------------------
def spread(values: list[float], fmt: Format) -> tuple[str, str]:
    """The median and ``[min - max]``, formatted."""
    f = fmt if callable(fmt) else (lambda x: format(x, fmt))
    return f(statistics.median(values)), "[" + f(min(values)) + " - " + f(max(values)) + "]"


def table(rows: list[tuple[str, dict[str, list[float]]]], columns: list[tuple[Any, ...]], corner: str = "") -> None:
    """rows: (label, {column: per-repeat values}); columns: (name, format) or (name, format, span). Medians with [min - max].

    ``span`` fixes the width of the column's [min - max] (default: as wide as its widest, at least 11);
    ``corner`` heads the label column."""
    width = max(len(label) for label, _ in rows)
    cells = [[spread(values[c[0]], c[1]) if c[0] in values else ("-", "") for c in columns] for _, values in rows]
    widths = [max(len(c[0]), *(len(row[k][0]) for row in cells)) for k, c in enumerate(columns)]
    spans = [c[2] if len(c) > 2 else max(11, *(len(row[k][1]) for row in cells)) for k, c in enumerate(columns)]
    heads = [c[0] for c in columns]
    print("  " + f"{corner:<{width}}" + "".join(f"  {c:>{w}}  {'[min - max]':>{s}}" for c, w, s in zip(heads, widths, spans)))
    for (label, _), row in zip(rows, cells):
        print("  " + f"{label:<{width}}" + "".join(f"  {m:>{w}}  {r:>{s}}" for (m, r), w, s in zip(row, widths, spans)))


class Verdicts(list):
    """The goals checked so far, as lines ``PASS  label`` or ``MISS  label`` (with the value and goal when ``detail``),
    and how ``verdict`` prints: labels ``label_width`` wide, values ``value_width`` wide, ``info`` after a value with no goal."""

    def __init__(self, label_width: int, value_width: int, info: str = "", detail: bool = False):
        super().__init__()
        self.label_width, self.value_width, self.info, self.detail = label_width, value_width, info, detail


def verdict(label: str, value: float, goal: float | None, verdicts: Verdicts, unit: str = "x", at_most: bool = False) -> None:
    line = f"  {label:<{verdicts.label_width}} {value:{verdicts.value_width}.2f}{unit}"
    if goal is None:
        print(line + verdicts.info)
        return
    ok = value <= goal if at_most else value >= goal
    sign = "<=" if at_most else ">="
    status = "PASS" if ok else "MISS"
    verdicts.append(f"{status}  {label}" + (f": {value:.2f}{unit} (goal {sign} {goal:g}{unit})" if verdicts.detail else ""))
    print(f"{line}  goal {sign} {goal:g}{unit}  {status}")


def summary(verdicts: Verdicts, start: float) -> None:
    """How many goals were met (and the seconds since ``start``), then each verdict."""
    misses = sum(v.startswith("MISS") for v in verdicts)
    print(f"\n{len(verdicts) - misses}/{len(verdicts)} goals met ({time.perf_counter() - start:.0f} s)")
    for v in verdicts:
        print(f"  {v}")
