"""benchmarks/bench_remote.py --quick: it starts the local S3 (moto + latency proxy), measures local, cold and warm
epochs of the packed folder and local and cold epochs of the Parquet file and the tar shards, and writes every figure
to its JSON (positive numbers; no thresholds on speed)."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")  # the benchmark needs torch to start at all

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_remote.py"
NEEDS = ("skimage", "PIL", "pyarrow", "s3fs", "moto", "boto3", "psutil")


@pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in NEEDS), reason=f"needs {', '.join(NEEDS)}")
def test_quick_run_writes_every_figure(tmp_path):
    out = tmp_path / "remote.json"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--json", str(out)], capture_output=True, text=True, timeout=280, check=False
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "goals met" in result.stdout, result.stdout
    figures = json.loads(out.read_text())

    def positive(value):
        return isinstance(value, (int, float)) and math.isfinite(value) and value > 0

    runs = figures["runs"]
    assert set(runs) == {"local", "cold", "warm", "parquet local", "parquet cold", "tar local", "tar cold", "tar cold indexed"}
    for run in runs:
        median = runs[run]["median"]
        for key in ("img/s", "img/s after 1st", "img/s with open", "1st batch ms", "open ms", "client CPU ms/img"):
            assert positive(median[key]), (run, key, median)
    cold, warm = figures["cold"], figures["warm"]
    for key in ("img_s", "requests_s", "mb_s", "hit_rate", "first_batch_ms", "open_ms"):
        assert positive(cold[key]), (key, cold)
    assert figures["runs"]["cold"]["median"]["GETs"] >= figures["config"]["pages"]  # every page came over the network
    assert positive(figures["runs"]["cold"]["median"]["S3 CPU ms/img"])
    assert warm["hit_rate"] == 1.0 and figures["runs"]["warm"]["median"]["GETs"] == 0  # the disk cache served every page
    config = figures["config"]
    row_groups = -(-config["images"] // config["row_group"])
    assert runs["parquet cold"]["median"]["GETs"] >= row_groups  # every row group came over the network
    assert runs["tar cold"]["median"]["GETs"] >= config["tar_shards"] + runs["tar cold indexed"]["median"]["GETs"]
    assert runs["tar cold indexed"]["median"]["open MB"] < runs["tar cold"]["median"]["open MB"]  # no index pass
    assert runs["tar cold indexed"]["median"]["GETs"] >= config["tar_shards"]  # the parts still came over the network
    for key in ("cold", "parquet_cold", "tar_cold", "tar_cold_indexed"):
        for suffix in ("", "_after_first", "_with_open", "_s3_cpu_discounted"):
            assert positive(figures["ratios"][f"{key}_local{suffix}"]), (key, suffix, figures["ratios"])
    assert positive(figures["ratios"]["warm_local"])
    assert len(figures["verdicts"]) == 5 and all(v.startswith(("PASS", "MISS")) for v in figures["verdicts"])


def test_unknown_source_is_refused():
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--quick", "--sources", "packed,zarr"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 2, result.stdout[-3000:] + result.stderr[-3000:]
    assert "--sources" in result.stderr and "'packed,zarr'" in result.stderr, result.stderr
