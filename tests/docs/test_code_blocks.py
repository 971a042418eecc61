"""Every ```python block of README.md and docs/ runs, page by page, as written.

A page's blocks run in order in one fresh interpreter (``python -c``, ``PYTHONPATH=src``, an empty
temporary working folder), so a later block sees what the earlier ones made, as a reader who pastes them
one after the other does. The script keeps the page's line numbers (everything between the blocks
is blank), so a traceback's line is the page's line.

A block that cannot run here (it needs CUDA, a real bucket, a cluster) says so on the line before
its fence: ``<!-- no-run: the reason -->``. It is counted and listed, never run; the README's
quick starts may not be skipped. Shell commands and printed output go in ``sh`` / ``text`` fences,
which are not run; a fence that spells Python another way (``py``, ``python3``, ``pycon``) is an
error rather than a block that silently escapes the test.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import slipstream

ROOT = Path(__file__).resolve().parents[2]
SRC = Path(slipstream.__file__).resolve().parents[1]  # where the slipstream under test is imported from
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])

FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`]*)$")
NO_RUN = re.compile(r"^<!--\s*no-run:\s*(?P<reason>.*?)\s*-->$")
OTHER_PYTHON = re.compile(r"^(py|python3|pycon|ipython|python-repl)\b", re.IGNORECASE)


@dataclass(frozen=True)
class Block:
    """One fenced Python block: where it starts (the fence's line, from 1), its code, why it is not run."""

    page: Path
    line: int
    code: str
    skip: str | None

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """The ```python blocks of ``page`` in order; raises ValueError on a fence the test would not see."""
    lines = page.read_text().splitlines()
    found: list[Block] = []
    k = 0
    while k < len(lines):
        opening = FENCE.match(lines[k])
        if not opening:
            k += 1
            continue
        fence, info = opening["fence"], opening["info"].strip()
        language = info.split()[0] if info else ""
        end = next((j for j in range(k + 1, len(lines)) if lines[j].strip() == fence[0] * len(fence)), None)
        if end is None:
            raise ValueError(f"{page.relative_to(ROOT)}:{k + 1}: a fence that is never closed")
        if OTHER_PYTHON.match(language):
            raise ValueError(
                f"{page.relative_to(ROOT)}:{k + 1}: write Python blocks as ```python (this one, {language!r}, would not be run)"
            )
        if language == "python":
            if opening["indent"]:
                raise ValueError(
                    f"{page.relative_to(ROOT)}:{k + 1}: an indented ```python block (start it at the margin so it runs)"
                )
            before = next((lines[j].strip() for j in range(k - 1, -1, -1) if lines[j].strip()), "")
            marker = NO_RUN.match(before)
            if marker and not marker["reason"]:
                raise ValueError(f"{page.relative_to(ROOT)}:{k}: a no-run marker must say why")
            found.append(Block(page, k + 1, "\n".join(lines[k + 1 : end]), marker["reason"] if marker else None))
        k = end + 1
    return found


def script(page_blocks: list[Block]) -> str:
    """The page's runnable blocks as one script whose line numbers are the page's."""
    out: list[str] = []
    for block in page_blocks:
        if block.skip is not None:
            continue
        out.extend([""] * (block.line - len(out)))  # the fence line is blank too: code starts at block.line + 1
        out.extend(block.code.splitlines())
    return "\n".join(out) + "\n"


def run_page(page: Path, tmp_path: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SRC), os.environ.get("PYTHONPATH")]))}
    env["SLIPSTREAM_CACHE_DIR"] = str(tmp_path / ".cache")  # object-storage examples cache here, not in ~/.cache
    # `python -c`: a "spawn" child (engine="processes") has no main file to run again, as from a notebook. 300 s: the
    # child's limit, which pytest's deadline below outlasts by 100 s
    return subprocess.run(
        [sys.executable, "-c", script(blocks(page))], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=300
    )


def pages_with_code() -> list[Path]:
    """The pages with a ```python block (and any whose fences are malformed: their test says how)."""
    found = []
    for page in PAGES:
        try:
            if blocks(page):
                found.append(page)
        except ValueError:
            found.append(page)
    return found


def test_the_pages_are_found_and_their_fences_are_well_formed():
    assert ROOT / "README.md" in PAGES and len(PAGES) > 10, PAGES
    total = [block for page in PAGES for block in blocks(page)]  # raises on a fence the test would not see
    skipped = [block for block in total if block.skip is not None]
    print(f"\n{len(total)} python blocks in {len(PAGES)} pages: {len(total) - len(skipped)} run, {len(skipped)} not run:")
    for block in skipped:
        print(f"  {block.where}: {block.skip}")
    assert len(skipped) <= len(total) // 10, "keep the blocks that do not run few"


def test_the_readmes_quick_starts_all_run():
    readme = blocks(ROOT / "README.md")
    assert len(readme) >= 3 and all(block.skip is None for block in readme), [block.where for block in readme if block.skip]


def test_the_readmes_quick_starts_are_the_getting_started_pages():
    """The README's blocks are docs/getting-started.md's quick starts, the same code in both places."""
    guide = [block.code for block in blocks(ROOT / "docs" / "getting-started.md")]
    missing = [block.where for block in blocks(ROOT / "README.md") if block.code not in guide]
    assert not missing, f"not in docs/getting-started.md as written: {missing}"


@pytest.mark.timeout(400)
@pytest.mark.parametrize("page", pages_with_code(), ids=lambda page: str(page.relative_to(ROOT)))
def test_the_pages_code_runs(page, tmp_path):
    result = run_page(page, tmp_path)
    skipped = [block.where for block in blocks(page) if block.skip is not None]
    print(f"{page.relative_to(ROOT)}: {len(blocks(page)) - len(skipped)} blocks run, {len(skipped)} not run {skipped}")
    assert result.returncode == 0, (
        f"{page.relative_to(ROOT)}'s code failed (exit {result.returncode}; '<string>' line N is the page's line N)\n"
        f"--- stdout\n{result.stdout[-4000:]}\n--- stderr\n{result.stderr[-8000:]}"
    )
