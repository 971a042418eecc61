"""After a run that included the docs' code blocks: how many blocks ran, and which were not run and why."""

from __future__ import annotations

from typing import Any

from test_code_blocks import PAGES, ROOT, blocks


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: Any) -> None:
    reports = [report for outcome in ("passed", "failed") for report in terminalreporter.stats.get(outcome, [])]
    tested = {
        report.nodeid.rsplit("[", 1)[-1].rstrip("]") for report in reports if "::test_the_pages_code_runs[" in report.nodeid
    }
    pages = [page for page in PAGES if str(page.relative_to(ROOT)) in tested]
    if not pages:
        return
    found = [block for page in pages for block in blocks(page)]
    skipped = [block for block in found if block.skip is not None]
    terminalreporter.write_sep("-", "docs code blocks")
    terminalreporter.write_line(
        f"{len(found)} python blocks in {len(pages)} pages: {len(found) - len(skipped)} run, {len(skipped)} not run"
    )
    for block in skipped:
        terminalreporter.write_line(f"  not run: {block.where}: {block.skip}")
