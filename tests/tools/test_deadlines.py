"""The suite's own deadlines: no test allows less time than the children it waits for (tools/deadlines.py)."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools"))
import deadlines


def test_every_test_allows_more_than_its_children_are_allowed():
    assert deadlines.findings(ROOT / "tests") == []


def _suite(tmp_path: Path, body: str, timeout: int = 120) -> Path:
    (tmp_path / "pyproject.toml").write_text(f"[tool.pytest.ini_options]\ntimeout = {timeout}\n")
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "support").mkdir()
    (tests / "support" / "helpers.py").write_text("def run_python(code, timeout=60):\n    return subprocess.run([code], timeout=timeout)\n")
    (tests / "test_probe.py").write_text(textwrap.dedent(body))
    return tests


def test_a_child_allowed_longer_than_the_test_is_found_through_wrappers_loops_and_marks(tmp_path):
    tests = _suite(
        tmp_path,
        """
        import subprocess, pytest
        from helpers import run_python

        pytestmark = pytest.mark.timeout(200)

        def child(code, timeout=30):
            return run_python(code, timeout=timeout)

        def test_direct():
            subprocess.run(["x"], timeout=600)

        def test_through_a_wrapper_in_a_loop():
            for _ in range(5):
                child("x")

        @pytest.mark.timeout(900)
        def test_marked_wide_enough():
            subprocess.run(["x"], timeout=600)

        def test_within_its_deadline():
            run_python("x")
            child("y", timeout=60)
        """,
    )
    found = deadlines.findings(tests)
    assert [row.split()[1].rstrip(":") for row in found] == ["test_direct", "test_through_a_wrapper_in_a_loop"], found
    assert "allows 200 s, its children 600 s" in found[0] and "its children 150 s" in found[1], found


def test_the_suite_wide_timeout_applies_where_no_mark_does(tmp_path):
    tests = _suite(tmp_path, "from helpers import run_python\n\ndef test_default():\n    run_python('x', timeout=100)\n", timeout=120)
    assert [row.split()[1] for row in deadlines.findings(tests)] == ["test_default:"]


def test_a_wrapper_imported_from_a_support_module_is_followed_under_its_imported_name(tmp_path):
    tests = _suite(tmp_path, "from childrun import child as run_child\n\ndef test_imported():\n    run_child('x')\n", timeout=120)
    (tests / "support" / "childrun.py").write_text("from helpers import run_python\n\ndef child(code, timeout=90):\n    return run_python(code, timeout=timeout)\n")
    found = deadlines.findings(tests)
    assert [row.split()[1] for row in found] == ["test_imported:"] and "its children 90 s" in found[0], found
