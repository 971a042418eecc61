"""benchmarks/bench_tokens.py --quick: it measures every slipstream figure (throughput of each packing
method with 1 and 2 threads, GIL per batch, planning, padding, the mixture's cost per item), skips the
peers that are not installed with the reason, and writes every figure to its JSON (no thresholds on speed)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")  # the benchmarks' shared module needs torch to start at all

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_tokens.py"


def positive(value: object) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value) and value > 0


def test_quick_run_measures_slipstream_and_skips_missing_peers(tmp_path):
    out = tmp_path / "tokens.json"
    command = [sys.executable, str(SCRIPT), "--quick", "--json", str(out), "--cache", str(tmp_path / "cache"),
               "--docs", "1500", "--plan-docs", "50000", "--mix-items", "20000"]  # fmt: skip
    result = subprocess.run(command, capture_output=True, text=True, timeout=400, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "goals met" in result.stdout, result.stdout
    figures = json.loads(out.read_text())
    rates = figures["tokens_per_s"]
    for method in ("concat", "best_fit", "first_fit"):
        for workers in ("1 thread", "2 threads"):
            assert positive(rates[f"slipstream {method}, {workers}"]), (method, workers, rates)
    assert not any(line.lstrip().startswith("slipstream") and "failed:" in line for line in result.stdout.splitlines()), (
        result.stdout
    )
    assert set(figures["gil_us_per_batch"]) == {"best_fit", "concat"}
    assert all(math.isfinite(v) and v >= 0 for v in figures["gil_us_per_batch"].values())
    assert (
        figures["plan"]["documents"] == 50_000 and positive(figures["plan"]["seconds"]) and 0 <= figures["plan"]["padding"] < 0.5
    )
    assert {"slipstream best_fit", "slipstream first_fit"} <= set(figures["padding"])
    assert positive(figures["mix_us_per_item"]["slipstream loader"])
    # every peer is either measured (its version) or skipped with the reason printed
    for name, state in figures["peers"].items():
        if name not in figures["available"]:
            assert f"{name}: not measured (" in result.stdout, (name, state)
    assert figures["verdicts"] and all(v.startswith(("PASS", "MISS")) for v in figures["verdicts"])
