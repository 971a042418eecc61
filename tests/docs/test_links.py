"""The README's links into the repository lead somewhere: GitHub renders them, and mkdocs never sees the README.

(Links between the pages of docs/ are checked by ``mkdocs build --strict``, anchors included.)
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_the_readmes_relative_links_name_files_that_exist():
    text = (ROOT / "README.md").read_text()
    targets = [target for target in LINK.findall(text) if not re.match(r"[a-z]+:", target) and not target.startswith("#")]
    assert targets, "the README links into docs/"
    missing = [target for target in targets if not (ROOT / target.split("#", 1)[0]).exists()]
    assert not missing, f"README.md links to files that do not exist: {missing}"


def test_every_page_of_docs_is_in_the_sites_navigation():
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = sorted(str(page.relative_to(ROOT / "docs")) for page in (ROOT / "docs").rglob("*.md"))
    missing = [page for page in pages if f": {page}\n" not in nav]
    assert not missing, f"pages missing from mkdocs.yml's nav: {missing}"
