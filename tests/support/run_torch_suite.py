"""Run PyTorch's own ``test/test_dataloader.py`` against ``slipstream.torch.DataLoader``.

    python tests/support/run_torch_suite.py PATH/test_dataloader.py                  # stock torch, then the drop-in
    python tests/support/run_torch_suite.py PATH/test_dataloader.py --only slipstream -k "timeout or seed"

PyTorch's test file is not part of this repository (take it from pytorch/pytorch at the tag of
the installed torch). It needs ``expecttest`` (``torch.testing._internal`` imports it): install it
anywhere (``pip install --target DIR expecttest``) and pass ``--pythonpath DIR``.

The swap: a ``sitecustomize`` put first on ``PYTHONPATH`` waits until ``torch`` has been imported
(in this process and in every process started from it: spawned DataLoader workers, the suite's
``ErrorTrackingProcess`` children, its ``python -c`` subprocesses), then sets
``torch.utils.data.DataLoader = slipstream.torch.DataLoader``, so the suite's
``from torch.utils.data import DataLoader`` and ``torch.utils.data.DataLoader(...)`` both get the
drop-in. torch's own modules keep the original class (the drop-in subclasses it).

Each run writes a JUnit XML report; the script prints the pass counts of both and every test that
passes on stock torch but not on the drop-in. Exit status: 0 when there is none, else 1.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

# Installed as sitecustomize.py when the drop-in is swapped in.
_HOOK = '''
import importlib.abc
import importlib.machinery
import sys


def _swap(dropin=None):
    import importlib
    import torch.utils.data
    if dropin is None:
        dropin = importlib.import_module("slipstream.torch")
    torch.utils.data.DataLoader = dropin.DataLoader


class _After(importlib.abc.MetaPathFinder):
    """Swaps the DataLoader once ``torch`` has finished importing, or ``slipstream.torch`` has
    when torch finished while it was importing (a spawned worker unpickling the drop-in's parts)."""

    def find_spec(self, name, path=None, target=None):
        if name not in ("torch", "slipstream.torch"):
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return spec
        real = spec.loader.exec_module

        def exec_module(module):
            real(module)
            if name == "slipstream.torch":
                _swap(module)  # (not yet an attribute of its package)
            elif "slipstream.torch" not in sys.modules:
                _swap()

        spec.loader.exec_module = exec_module
        return spec


if "torch" in sys.modules:
    _swap()
else:
    sys.meta_path.insert(0, _After())
'''


def _run(suite: Path, impl: str, report: Path, extra: list[str], pythonpath: list[str], timeout: int) -> int:
    env = dict(os.environ)
    paths = [*pythonpath, str(SRC)]
    hook_dir = None
    if impl == "slipstream":
        hook_dir = tempfile.mkdtemp(prefix="slipstream-torch-hook-")
        Path(hook_dir, "sitecustomize.py").write_text(_HOOK)
        paths.insert(0, hook_dir)
    env["PYTHONPATH"] = os.pathsep.join(paths + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    command = [
        sys.executable, "-m", "pytest", str(suite), "-q", "-p", "no:cacheprovider", "-W", "ignore::pytest.PytestCollectionWarning",
        f"--rootdir={suite.parent}", f"--timeout={timeout}", f"--junitxml={report}", *extra,
    ]
    print(f"== {impl}: {' '.join(command)}", flush=True)
    return subprocess.call(command, env=env, cwd=suite.parent)


def _outcomes(report: Path) -> dict[str, str]:
    """test id -> 'passed' | 'failed' | 'skipped' from a JUnit XML report."""
    if not report.exists():
        return {}
    outcomes = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        name = f"{case.get('classname', '').rsplit('.', 1)[-1]}::{case.get('name')}"
        tags = {child.tag for child in case}
        if "failure" in tags or "error" in tags:
            outcomes[name] = "failed"
        elif "skipped" in tags:
            outcomes[name] = "skipped"
        else:
            outcomes[name] = "passed"
    return outcomes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("suite", type=Path, help="path to a copy of PyTorch's test/test_dataloader.py")
    parser.add_argument("--only", choices=("torch", "slipstream"), help="run one implementation only")
    parser.add_argument("--pythonpath", action="append", default=[], help="extra import path (e.g. where expecttest is)")
    parser.add_argument("--timeout", type=int, default=300, help="seconds per test (pytest-timeout)")
    parser.add_argument("--reports", type=Path, default=None, help="folder for the JUnit reports (default: a temporary one)")
    args, extra = parser.parse_known_args(argv)
    suite = args.suite.resolve()
    reports = args.reports or Path(tempfile.mkdtemp(prefix="torch-suite-"))
    reports.mkdir(parents=True, exist_ok=True)
    impls = [args.only] if args.only else ["torch", "slipstream"]
    results = {}
    for impl in impls:
        report = reports / f"{impl}.xml"
        _run(suite, impl, report, extra, args.pythonpath, args.timeout)
        results[impl] = _outcomes(report)
    print()
    for impl, outcomes in results.items():
        passed = sum(o == "passed" for o in outcomes.values())
        failed = sorted(t for t, o in outcomes.items() if o == "failed")
        print(f"{impl}: {passed} passed, {len(failed)} failed, {sum(o == 'skipped' for o in outcomes.values())} skipped")
    if len(results) == 2:
        regressions = sorted(t for t, o in results["torch"].items() if o == "passed" and results["slipstream"].get(t) != "passed")
        print(f"\npass on stock torch, not on the drop-in ({len(regressions)}):")
        for test in regressions:
            print(f"  {test}")
        return 1 if regressions else 0
    only = results[impls[0]]
    failed = sorted(t for t, o in only.items() if o == "failed")
    for test in failed:
        print(f"  failed: {test}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
