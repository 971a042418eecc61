"""Packaging: the slipstream under test is the build CI meant to test, and it carries its compiled core.

``make test WHEEL=<file>`` (CI's run) installs a built wheel instead of the source tree and sets
``SLIPSTREAM_TEST_INSTALLED=wheel``: then the imported package must come from site-packages, not
``src/``, and every C extension must be inside it, so a wheel that forgot a file, a package or an
extension fails the suite instead of being covered by the checkout it was built from.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import json
import os
import re
from pathlib import Path

import pytest

import slipstream

ROOT = Path(__file__).resolve().parents[1]
EXTENSIONS = ("slipstream.images._roijpeg", "slipstream.sequences._packing", "slipstream.sequences._mixing")
INSTALLED = os.environ.get("SLIPSTREAM_TEST_INSTALLED", "")


def _package_folder() -> Path:
    return Path(slipstream.__file__).resolve().parent


def test_the_installed_metadata_is_this_checkouts_version() -> None:
    version = re.search(r'^version = "([^"]+)"$', (ROOT / "pyproject.toml").read_text(), re.M)
    assert version is not None and importlib.metadata.version("slipstream") == version.group(1)


def test_the_package_carries_its_typing_marker_and_c_sources() -> None:
    folder = _package_folder()
    assert (folder / "py.typed").is_file()
    # the compiled core's sources travel with the package (an sdist-built install can be rebuilt, a wheel debugged)
    assert (folder / "images" / "_roijpeg.c").is_file()
    assert sorted(p.name for p in (folder / "images" / "csrc").glob("*.c")) == sorted(
        p.name for p in (ROOT / "src" / "slipstream" / "images" / "csrc").glob("*.c")
    )


@pytest.mark.skipif(INSTALLED != "wheel", reason="CI's wheel run only (make test WHEEL=...)")
def test_the_tested_package_is_the_installed_wheel_not_the_source_tree() -> None:
    folder = _package_folder()
    assert ROOT / "src" not in folder.parents, f"slipstream was imported from the source tree ({folder}), not the wheel"
    direct = importlib.metadata.distribution("slipstream").read_text("direct_url.json")
    if direct is not None:  # pip records how it installed: a wheel file, never an editable folder
        assert not json.loads(direct).get("dir_info", {}).get("editable", False)


@pytest.mark.skipif(INSTALLED != "wheel", reason="CI's wheel run only (make test WHEEL=...)")
@pytest.mark.parametrize("name", EXTENSIONS)
def test_every_extension_is_inside_the_installed_wheel(name: str) -> None:
    module = importlib.import_module(name)
    assert _package_folder() in Path(module.__file__).resolve().parents, f"{name} loaded from {module.__file__}"
