"""The built wheel: what a user who runs ``pip install slipstream`` gets."""

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_wheel_carries_py_typed_so_type_checkers_read_the_annotations(tmp_path):
    build = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", str(ROOT), "-w", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert build.returncode == 0, build.stderr
    (wheel,) = tmp_path.glob("slipstream-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert "slipstream/py.typed" in names and "slipstream/images/_roijpeg.c" in names
    assert "slipstream/torch/__init__.py" in names
