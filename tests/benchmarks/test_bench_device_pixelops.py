"""benchmarks/bench_device_pixelops.py runs tiny through every case (the figures mean nothing, the paths run)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_device_pixelops.py"


def test_a_tiny_run_reports_every_case():
    cmd = [sys.executable, str(SCRIPT), "--batch", "3", "--size", "16", "--repeats", "1"]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for case in ("BRIGHTNESS", "EQUALIZE", "AFFINE bilinear", "ERASE", "RandAugment(2,9)+ColorJitter"):
        assert case in result.stdout
