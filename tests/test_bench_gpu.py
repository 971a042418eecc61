"""benchmarks/bench_gpu.py: without CUDA it runs tiny on the CPU through every section (device stage, CPU
pipelines, torchvision or its skip note, training, report, JSON); the figures mean nothing, the paths run."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")  # the benchmark needs torch to start at all

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "bench_gpu.py"
SMOKE_NEEDS = ("skimage", "simplejpeg", "PIL", "pyarrow")  # bench_images' photos and the packed file


@pytest.mark.timeout(300)  # the first run makes bench_images' 2,000 JPEGs (~40 s on 2 cores); later runs reuse them
@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is here: the benchmark would run for minutes")
@pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in SMOKE_NEEDS), reason=f"needs {', '.join(SMOKE_NEEDS)}")
def test_cpu_run_measures_every_section(tmp_path):
    from slipstream.loading.backends import BACKENDS

    out = tmp_path / "gpu.json"
    cmd = [sys.executable, str(SCRIPT), "--json", str(out)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=280, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    text = result.stdout
    for line in ("(1) device stage alone", "(2) CPU pipelines", "(3) torchvision", "(4) ", "img/s (CPU cores used):", "goals met"):
        assert line in text, text
    results = json.loads(out.read_text())
    positive = lambda r: (r.get("img_s") or 0) > 0 and (r.get("cores") or 0) > 0
    assert set(results["stage"]) == {"1", "2"} and all(positive(r) for r in results["stage"].values()), results["stage"]
    assert positive(results["device_only"]), results["device_only"]
    assert set(results["cpu"]) == set(BACKENDS) and all(positive(r) for r in results["cpu"].values()), results["cpu"]
    tv = results["torchvision"]
    assert "skipped" in tv or (positive(tv["decode"]) and positive(tv["per_image"])), tv
    training = results["training"]["resnet18"]
    for key in ("ceiling", "device_stage", "ceiling_uint8", "cpu_process"):
        assert positive(training[key]), training
    assert 0 < training["device_stage"]["fraction"] and 0 < training["cpu_process"]["fraction"], training
    assert results["verdicts"] and all(v.startswith(("PASS", "MISS")) for v in results["verdicts"])
    assert results["seconds"] < 240
