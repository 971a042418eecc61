"""benchmarks/bench_gpu.py: without CUDA it runs tiny on the CPU through every section (the loader over the
device-mapped view with each backend and cpu_share, the device stage by hand, CPU pipelines, torchvision or its
skip note, training fed both ways, report, JSON); the figures mean nothing, the paths run."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")  # the benchmark needs torch to start at all

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_gpu.py"
SMOKE_NEEDS = ("skimage", "PIL", "pyarrow")  # bench_images' photos and the packed file


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is here: the benchmark would run for minutes")
@pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in SMOKE_NEEDS), reason=f"needs {', '.join(SMOKE_NEEDS)}")
def test_cpu_run_measures_every_section(tmp_path):
    from slipstream.loading.backends import BACKENDS

    out = tmp_path / "gpu.json"
    cmd = [sys.executable, str(SCRIPT), "--json", str(out)]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=280, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    text = result.stdout
    for line in ("(1b) the loader", "(1) device stage by hand", "(2) CPU pipelines", "(3) torchvision", "(4) ", "goals met"):
        assert line in text, text
    for line in ("(1b) ss.DataLoader over the device-mapped view, img/s", "other runs, img/s", "training, img/s"):
        assert line in text, text
    assert text.index("(1b) the loader") < text.index("(4) ") < text.index("(1) device stage by hand"), text  # most important first
    results = json.loads(out.read_text())
    positive = lambda r: (r.get("img_s") or 0) > 0 and (r.get("cores") or 0) > 0
    loader = results["loader"]  # (1b): backend/workers/cpu_share, the smoke run's --host-workers 1,2 and --cpu-shares 0,0.25
    assert set(loader) == {f"{b}/{w}/{s}" for b in ("thread", "process") for w in (1, 2) for s in ("0", "0.25")}, loader
    assert next(iter(loader)) == "thread/2/0", list(loader)  # the first run of all
    for key, r in loader.items():
        assert positive(r) and r["last_epoch"]["samples"] > 0, (key, r)
        assert r["epochs"] >= 1 and (r["epochs"] == 1 or r["epoch_first_batch_s"] > 0), (key, r)  # 4 batches an epoch here
        assert f"{r['backend']}/{r['workers']}/{r['cpu_share']:g}" == key, (key, r)
    assert set(results["stage"]) == {"1", "2"} and all(positive(r) for r in results["stage"].values()), results["stage"]
    assert positive(results["device_only"]), results["device_only"]
    assert set(results["cpu"]) == set(BACKENDS) and all(positive(r) for r in results["cpu"].values()), results["cpu"]
    tv = results["torchvision"]
    assert "skipped" in tv or (positive(tv["decode"]) and positive(tv["per_image"])), tv
    training = results["training"]["resnet18"]
    for key in ("ceiling", "loader", "device_stage", "ceiling_uint8", "cpu_process"):
        assert positive(training[key]), training
    assert all(0 < training[key]["fraction"] for key in ("loader", "device_stage", "cpu_process")), training
    best = results["best"]  # the runs the goals used: the best within 4 cores of (1b) and (1), the better feed
    assert best["stage"]["key"] in {*loader, *(f"stage/{w}" for w in results["stage"])}, best
    assert best["resnet18"]["run"] in ("loader", "device_stage"), best
    verdicts = results["verdicts"]
    assert len(verdicts) == 2 and all(v.startswith(("PASS", "MISS")) for v in verdicts), verdicts
    assert ("(loader: " in verdicts[0] or "(by hand: " in verdicts[0]) and " fed by the " in verdicts[1], verdicts
    assert results["seconds"] < 240
