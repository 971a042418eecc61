"""benchmarks/bench_gpu_feed.py: without CUDA it says in one line that it skipped and exits 0; ``--cpu-smoke``
goes through its code paths (ceiling, feeds, workers sweep, report, JSON) on the CPU."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")  # the benchmark needs torch to start at all

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_gpu_feed.py"
SMOKE_NEEDS = ("skimage", "PIL", "pyarrow")  # bench_images' photos and the packed file


def run(*args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout, check=False)


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is here: the benchmark would run for minutes")
def test_without_cuda_it_says_it_skipped_and_exits_0(tmp_path):
    out = tmp_path / "gpu.json"
    result = run("--json", str(out), timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1 and "skipped" in lines[0] and "CUDA" in lines[0], result.stdout
    assert "CUDA" in json.loads(out.read_text())["skipped"]


@pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in SMOKE_NEEDS), reason=f"needs {', '.join(SMOKE_NEEDS)}")
def test_cpu_smoke_measures_every_feed_and_the_sweep(tmp_path):
    from slipstream.loading.backends import BACKENDS

    out = tmp_path / "gpu.json"
    result = run("--cpu-smoke", "--json", str(out), timeout=280)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    text = result.stdout
    for line in (
        "ceiling",
        "workers sweep: each loader alone",
        "feeding training, img/s and fraction of the ceiling:",
        "goals met",
    ):
        assert line in text, text
    assert any(row.split()[:1] == ["1"] for row in text.splitlines()), text  # the sweep's 1-worker row
    results = json.loads(out.read_text())
    assert results["ceiling"]["resnet18"]["img_s"] > 0
    feeds = results["feeds"]["resnet18"]
    assert set(feeds) == {"default", *BACKENDS, "torch"}
    assert all(feed.get("img_s", 0) > 0 for feed in feeds.values()), feeds
    assert set(results["sweep"]) == {*BACKENDS, "torch"}
    assert all(r.get("img_s", 0) > 0 for rates in results["sweep"].values() for r in rates.values()), results["sweep"]
    assert results["verdicts"] and all(v.startswith(("PASS", "MISS")) for v in results["verdicts"])
