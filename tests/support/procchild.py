"""A process-backend scenario in a fresh interpreter, and the check that its workers are gone.

``child(code)`` runs ``code`` after a prelude (``json``, ``os``, ``sys``, ``time``, ``gc``, NumPy,
``slipstream as ss`` and ``from procdata import *``) with ``src/`` and ``tests/support`` on its path and a
timeout, so a hang fails one test; the child prints one JSON line last, returned as a dict with the
result. ``assert_gone(pids)`` waits for worker processes to exit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest
from helpers import SRC, SUPPORT

psutil = pytest.importorskip("psutil")


def child(code: str, timeout: float = 60, env: dict | None = None) -> tuple[subprocess.CompletedProcess, dict]:
    """Run ``code`` in a fresh interpreter; it must print one JSON line last. Returns (result, that dict)."""
    full = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, SUPPORT, os.environ.get("PYTHONPATH", "")]), **(env or {})}
    prelude = "import json, os, sys, time, gc\nimport numpy as np\nimport slipstream as ss\nfrom procdata import *\n"
    script = prelude + textwrap.dedent(code)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=timeout, env=full)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    assert lines, f"the child printed no result (rc {result.returncode}):\n{result.stdout}\n{result.stderr}"
    return result, json.loads(lines[-1])


def assert_gone(pids: list[int], within: float = 5.0) -> None:
    """Every process of ``pids`` has exited (zombies count as gone) within ``within`` seconds, or AssertionError."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        alive = [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return
        psutil.wait_procs([psutil.Process(p) for p in alive], timeout=0.1)
    raise AssertionError(f"worker processes {alive} still alive after {within} s")
