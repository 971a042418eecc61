"""The compiled image core's status and warning (``images.compiled``), the build report behind them
(``core.buildreport``), and a source build without a compiler: it succeeds and says loudly what it skipped."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers import SRC, run_python

from slipstream.core import buildreport

ROOT = Path(SRC).parent  # the checkout: setup.py, pyproject.toml, src/
NAME = "slipstream.images._roijpeg"

# the child hides the extension (a finder that refuses to find it), then uses the image code twice
_HIDDEN = """
    import importlib.abc, sys, warnings
    class Refuse(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "slipstream.images._roijpeg":
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None
    sys.meta_path.insert(0, Refuse())
    if len(sys.argv) > 2:  # the build report read from argv[1]: core.buildreport (file argv[2]) loaded first, pointed there
        import importlib.util
        from pathlib import Path
        spec = importlib.util.spec_from_file_location("slipstream.core.buildreport", sys.argv[2])
        buildreport = sys.modules[spec.name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(buildreport)
        buildreport.REPORT = Path(sys.argv[1])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # every warn() call is recorded: the once-only rule is slipstream's own
        import numpy as np
        from slipstream import ops
        from slipstream.images import compiled, kernels
        from slipstream.images.pipeline import Pipeline
        for _ in range(2):
            Pipeline([ops.RandomResizedCrop(8)])
            kernels.resample_into(np.zeros((16, 16, 3), np.uint8), (0, 0, 16, 16), np.empty((8, 8, 3), np.uint8))
    print("STATUS", compiled.STATUS)
    print("WARNINGS", len([w for w in caught if issubclass(w.category, RuntimeWarning)]))
    for w in caught:
        print("TEXT", w.category.__name__, w.message)
"""


def _report(path: Path, reason: str | None) -> Path:
    extensions = {NAME: {"built": True} if reason is None else {"built": False, "reason": reason, "errors": ["cc: not found"]}}
    path.write_text(json.dumps({"extensions": extensions, "libjpeg": "system"}))
    return path


def test_not_built_names_the_builds_reason_when_the_report_has_one(tmp_path):
    report = _report(tmp_path / "_build.json", "no C compiler: 'gcc' was not found")
    assert buildreport.not_built(NAME, report) == "not built (no C compiler: 'gcc' was not found)"
    assert buildreport.read(report)["libjpeg"] == "system"


@pytest.mark.parametrize("content", [None, "not json", "[1, 2]", json.dumps({"extensions": {NAME: {"built": True}}})])
def test_not_built_stays_plain_without_a_reason(tmp_path, content):
    report = tmp_path / "_build.json"
    if content is not None:
        report.write_text(content)
    assert buildreport.not_built(NAME, report) == "not built"
    assert buildreport.not_built("slipstream.sequences._mixing", report) == "not built"


def test_a_missing_extension_warns_once_with_the_builds_reason(tmp_path):
    report = _report(tmp_path / "_build.json", "the libjpeg headers are missing (jpeglib.h not found)")
    result = run_python(_HIDDEN, argv=[str(report), buildreport.__file__], env={"SLIPSTREAM_NO_ROIJPEG": ""})
    assert result.returncode == 0, result.stderr
    assert "STATUS not built (the libjpeg headers are missing (jpeglib.h not found))" in result.stdout
    assert "WARNINGS 1" in result.stdout, result.stdout
    text = next(line for line in result.stdout.splitlines() if line.startswith("TEXT RuntimeWarning"))
    assert NAME in text and "jpeglib.h not found" in text and "NumPy" in text
    assert "--only-binary slipstream" in text and "libjpeg62-turbo-dev" in text


def test_a_missing_extension_without_a_report_says_not_built(tmp_path):
    result = run_python(_HIDDEN, argv=[str(tmp_path / "absent.json"), buildreport.__file__], env={"SLIPSTREAM_NO_ROIJPEG": ""})
    assert result.returncode == 0, result.stderr
    assert "STATUS not built\n" in result.stdout and "WARNINGS 1" in result.stdout, result.stdout


def test_switching_the_extension_off_does_not_warn():
    result = run_python(_HIDDEN, env={"SLIPSTREAM_NO_ROIJPEG": "1"})
    assert result.returncode == 0, result.stderr
    assert "STATUS disabled by SLIPSTREAM_NO_ROIJPEG" in result.stdout and "WARNINGS 0" in result.stdout, result.stdout


def test_info_shows_the_compiled_core_and_the_reason(tmp_path):
    report = _report(tmp_path / "_build.json", "no C compiler: 'gcc' was not found")
    code = _HIDDEN.split("    with warnings")[0] + "\n    from slipstream.cli.main import main\n    main(['info'])\n"
    result = run_python(code, argv=[str(report), buildreport.__file__], env={"SLIPSTREAM_NO_ROIJPEG": ""})
    assert result.returncode == 0, result.stderr
    row = next(line for line in result.stdout.splitlines() if line.startswith("compiled core"))
    assert "images._roijpeg not built (no C compiler: 'gcc' was not found)" in row and "--only-binary slipstream" in row
    assert "pixel kernels        not built (no C compiler" in result.stdout


def _source_copy(tmp_path: Path) -> Path:
    """setup.py, pyproject.toml, README.md and src/ of the checkout, without built extensions or a build report."""
    if not (ROOT / "setup.py").is_file():
        pytest.skip("no setup.py next to the tested package (an installed wheel): nothing to build")
    copy = tmp_path / "source"
    copy.mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md"):
        if (ROOT / name).exists():
            shutil.copy(ROOT / name, copy / name)
    shutil.copytree(ROOT / "src", copy / "src", ignore=shutil.ignore_patterns("*.so", "__pycache__", "_build.json", "*.egg-info"))
    return copy


def test_a_build_without_a_compiler_succeeds_and_explains_what_it_skipped(tmp_path):
    copy = _source_copy(tmp_path)
    env_cc = {"CC": str(tmp_path / "no-such-compiler"), "LDSHARED": str(tmp_path / "no-such-compiler") + " -shared"}
    build_lib = tmp_path / "lib"
    command = [sys.executable, "setup.py", "build_ext", "--build-lib", str(build_lib), "--build-temp", str(tmp_path / "temp")]
    result = subprocess.run(command, cwd=copy, capture_output=True, text=True, timeout=300, env={**_env(), **env_cc})
    assert result.returncode == 0, result.stderr
    assert "slipstream: some C extensions were NOT built" in result.stderr
    for name in (NAME, "slipstream.sequences._packing", "slipstream.sequences._mixing"):
        assert f"{name}: not built" in result.stderr
    assert "reason: no C compiler: " in result.stderr and "libjpeg62-turbo-dev" in result.stderr
    assert "--only-binary slipstream" in result.stderr
    report = json.loads((build_lib / "slipstream" / "_build.json").read_text())
    assert not report["extensions"][NAME]["built"] and "no C compiler" in report["extensions"][NAME]["reason"]
    assert not list(build_lib.rglob("*.so"))


@pytest.mark.skipif(importlib.util.find_spec("pip") is None, reason="pip is not installed here")
def test_a_wheel_built_without_a_compiler_carries_the_report(tmp_path):
    copy = _source_copy(tmp_path)
    env_cc = {"CC": str(tmp_path / "no-such-compiler"), "LDSHARED": str(tmp_path / "no-such-compiler") + " -shared"}
    command = [
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "-v",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        str(tmp_path / "out"),
        str(copy),
    ]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300, env={**_env(), **env_cc})
    if (
        result.returncode != 0
        and "setuptools" in result.stderr + result.stdout
        and "No module named" in result.stderr + result.stdout
    ):
        pytest.skip("no setuptools in this environment to build with")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert "slipstream: some C extensions were NOT built" in result.stdout + result.stderr  # pip shows it with -v only
    (wheel,) = (tmp_path / "out").glob("slipstream-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "slipstream/_build.json" in names and not [name for name in names if name.endswith(".so")]
    report = json.loads(zipfile.ZipFile(wheel).read("slipstream/_build.json"))
    assert all(not entry["built"] for entry in report["extensions"].values()), report


def _env() -> dict:
    # no SLIPSTREAM_REQUIRE_EXTENSIONS or static libjpeg from a wheel build's shell: this is the plain source build
    return {
        key: value for key, value in os.environ.items() if key not in ("SLIPSTREAM_REQUIRE_EXTENSIONS", "SLIPSTREAM_JPEG_STATIC")
    }
