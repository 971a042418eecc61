"""tools/architecture.py: the layout rules, each broken once in a small tree, a clean tree, and the real sources."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOL = ROOT / "tools" / "architecture.py"


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    """A package ``slipstream`` under tmp_path with these files (path -> source); every folder gets an __init__.py."""
    src = tmp_path / "slipstream"
    for rel, text in {"__init__.py": "", **files}.items():
        path = src / rel
        for folder in [path.parent, *path.parent.parents]:
            if folder == tmp_path:
                break
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "__init__.py").touch()
        path.write_text(textwrap.dedent(text))
    return src


def _check(src: Path, *flags: str) -> tuple[int, str]:
    """The tool's exit status and output on src."""
    done = subprocess.run([sys.executable, str(TOOL), str(src), *flags], check=False, capture_output=True, text=True,
                          timeout=120)
    return done.returncode, done.stdout + done.stderr


def _findings(out: str, kind: str) -> list[str]:
    """The lines listed under ``== kind``."""
    lines = out.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith(f"== {kind} (")), None)
    if start is None:
        return []
    listed = lines[start + 1:]
    return listed[:listed.index("")] if "" in listed else listed


CLEAN = {
    "__init__.py": "from . import fields\nfrom .files.packed import PackedDataset\nfrom .images.mapfields import mapfields\n",
    "fields.py": "from .files.kinds import Image  # noqa: F401 - the public name\n",
    "core/containers.py": """
        import os

        def _helper():
            return os.sep

        def numobs(data):
            import numpy  # a third-party import inside a function: informational
            return _helper(), numpy
        """,
    "files/kinds.py": "class Image:\n    pass\n",
    "files/packed.py": """
        from typing import TYPE_CHECKING

        from ..core.containers import numobs
        from ..images.mapfields import mapfields

        if TYPE_CHECKING:  # never runs: no edge, so no cycle with images/ below
            from ..loading.loader import DataLoader

        class PackedDataset:
            def __len__(self):
                return numobs(self)
        """,
    "images/mapfields.py": """
        def mapfields(data):
            # lazy: breaks the cycle images.mapfields -> files.packed -> images.mapfields
            from ..files.packed import PackedDataset
            return PackedDataset

        def other(data):
            from ..files.packed import (  # lazy: breaks the same cycle, the comment on a continued line
                PackedDataset,
            )
            return PackedDataset
        """,
    "loading/loader.py": "from ..files.packed import PackedDataset\n\nclass DataLoader(PackedDataset):\n    pass\n",
    "core/big.c": "int x;\n" * 500,
}


def test_a_clean_tree_has_no_findings(tmp_path):
    rc, out = _check(_tree(tmp_path, CLEAN), "--list")
    assert rc == 0, out
    assert "findings: 0" in out
    breaks = _findings(out, "lazy own imports that break a cycle")
    assert len(breaks) == 2 and all("modules images.mapfields -> files.packed -> images.mapfields" in b for b in breaks), out
    assert _findings(out, "third-party imports inside functions") == ["core/containers.py:8: import numpy"], out


def test_a_package_cycle_is_a_finding_with_its_path(tmp_path):
    rc, out = _check(_tree(tmp_path, {
        "core/a.py": "from ..files.b import x\n",
        "core/d.py": "y = 1\n",
        "files/b.py": "x = 1\n",
        "files/c.py": "from ..core.d import y\n",
    }))
    assert rc == 1, out
    [cycle] = _findings(out, "1 package cycles")
    assert cycle.startswith("core/a.py:1: cycle core -> files -> core"), out
    assert "files -> core: files/c.py:1" in cycle
    assert _findings(out, "2 module cycles") == []


def test_a_lazy_own_import_without_a_comment_is_an_edge(tmp_path):
    rc, out = _check(_tree(tmp_path, {
        "core/a.py": "def f():\n    from ..files.b import x\n    return x\n",
        "core/d.py": "y = 1\n",
        "files/b.py": "x = 1\n",
        "files/c.py": "from ..core.d import y\n",
    }))
    assert rc == 1, out
    [cycle] = _findings(out, "1 package cycles")
    assert "cycle core -> files -> core" in cycle and "core/a.py:2 lazy" in cycle
    [lazy] = _findings(out, "5 lazy own imports without a cycle comment")
    assert lazy.startswith("core/a.py:2: from ..files.b import x") and "cycle of packages core -> files -> core" in lazy


def test_a_package_importing_the_root_is_a_finding(tmp_path):
    rc, out = _check(_tree(tmp_path, {
        "fields.py": "x = 1\n",
        "files/b.py": "import slipstream\nfrom .. import fields\nfrom ..core import a\n",
        "core/a.py": "z = 1\n",
    }))
    assert rc == 1, out
    found = _findings(out, "1 package imports of the root")
    assert [line.split(":")[:2] for line in found] == [["files/b.py", "1"], ["files/b.py", "2"]], out


def test_a_module_circle_is_a_finding(tmp_path):
    rc, out = _check(_tree(tmp_path, {
        "core/a.py": "from . import b\n",
        "core/b.py": "from .a import x\n",
    }))
    assert rc == 1, out
    [cycle] = _findings(out, "2 module cycles")
    assert cycle.startswith("core/a.py:1: cycle core.a -> core.b -> core.a"), out
    assert _findings(out, "1 package cycles") == []


def test_a_module_circle_through_a_package_init_is_found(tmp_path):
    """files -> images/encoded is no package cycle, but importing images.encoded runs images/__init__."""
    rc, out = _check(_tree(tmp_path, {
        "images/__init__.py": "from .ops import resize\n",
        "images/ops.py": "from ..files.packed import read\n\ndef resize(): pass\n",
        "images/encoded/codecs.py": "def decode(): pass\n",
        "files/packed.py": "from ..images.encoded.codecs import decode\n\ndef read(): pass\n",
    }))
    assert rc == 1, out
    assert _findings(out, "1 package cycles") == []
    [cycle] = _findings(out, "2 module cycles")
    assert "cycle files.packed -> images -> images.ops -> files.packed" in cycle
    assert "files.packed -> images: files/packed.py:1 runs the __init__" in cycle


def test_a_private_name_across_packages_is_a_finding(tmp_path):
    rc, out = _check(_tree(tmp_path, {
        "core/a.py": "def _hidden(): pass\n\ndef _helper(): pass\n",
        "files/b.py": "from ..core.a import _hidden\nfrom ..core import a\n\ndef f():\n    return a._helper()\n",
    }))
    assert rc == 1, out
    assert _findings(out, "3a cross-package private imports") == ["files/b.py:1: from ..core.a import _hidden"]
    assert _findings(out, "3b cross-package private attribute accesses") == ["files/b.py:5: return a._helper()  [_helper]"]


def test_a_module_name_used_twice_is_a_finding(tmp_path):
    rc, out = _check(_tree(tmp_path, {"core/util.py": "", "files/util.py": "", "files/other.py": ""}))
    assert rc == 1, out
    assert _findings(out, "4 module names used twice") == ["core/util.py:1: util.py also at files/util.py",
                                                          "files/util.py:1: util.py also at core/util.py"]


def test_a_lazy_own_import_whose_claimed_cycle_does_not_exist_is_a_finding(tmp_path):
    rc, out = _check(_tree(tmp_path, {
        "core/a.py": "def f():\n    from .b import x  # lazy: breaks the cycle core.a -> core.b -> core.a\n    return x\n",
        "core/b.py": "x = 1\n",
    }))
    assert rc == 1, out
    [found] = _findings(out, "5 lazy own imports whose cycle does not exist")
    assert found.startswith("core/a.py:2: from .b import x  [nothing it imports leads back to core.a or core]"), out


def test_a_cycle_comment_belongs_to_its_own_statement(tmp_path):
    """A comment line just above an import counts for it; another statement's trailing comment does not."""
    rc, out = _check(_tree(tmp_path, {**CLEAN, "images/pipeline.py": """
        def run():
            from ..files.packed import PackedDataset  # lazy: breaks the cycle images -> files -> images
            from .mapfields import mapfields
            return PackedDataset, mapfields
        """}), "--list")
    assert rc == 1, out
    assert "images/pipeline.py:3: from ..files.packed import PackedDataset  [packages images -> files -> images]" in \
        _findings(out, "lazy own imports that break a cycle"), out
    assert _findings(out, "5 lazy own imports without a cycle comment") == [
        "images/pipeline.py:4: from .mapfields import mapfields  [no cycle: it can be a top-level import]"], out


def test_a_lazy_own_import_without_a_cycle_says_what_its_laziness_keeps_unimported(tmp_path):
    rc, out = _check(_tree(tmp_path, {
        "core/a.py": "def f():\n    from ..files.b import x\n    return x\n",
        "files/b.py": "import torch\n\nx = torch\n",
    }))
    assert rc == 1, out
    assert _findings(out, "5 lazy own imports without a cycle comment") == [
        "core/a.py:2: from ..files.b import x  [no cycle: it can be a top-level import; lazy, it keeps torch unimported]"]


def test_a_long_file_is_a_question_not_a_finding(tmp_path):
    rc, out = _check(_tree(tmp_path, {"core/big.py": "x = 1\n" * 700}))
    assert rc == 0, out
    assert "   ? core/big.py: 700 lines: one concept?" in out.splitlines()


def test_an_unparsable_file_fails_the_check(tmp_path):
    rc, out = _check(_tree(tmp_path, {"core/broken.py": "def (:\n"}))
    assert rc == 1, out
    assert _findings(out, "unparsable files")[0].startswith("core/broken.py:1: SyntaxError"), out


def test_a_missing_directory_is_an_error(tmp_path):
    rc, out = _check(tmp_path / "nothing")
    assert rc == 2 and "no such directory" in out


def test_the_sources_keep_the_layout_rules():
    rc, out = _check(ROOT / "src" / "slipstream")  # without --list: the summary and the findings
    assert rc == 0, out
