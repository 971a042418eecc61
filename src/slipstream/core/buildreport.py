"""What the build said about slipstream's C extensions: ``slipstream/_build.json``, written by ``setup.py``.

The build writes it into the package (into the wheel, and into ``src/`` for in-place and editable builds):
``{"extensions": {"slipstream.images._roijpeg": {"built": false, "reason": "...", "errors": [...]}, ...},
"libjpeg": "static" | "system"}``. An extension that is not there is then explained by its ``reason``
("no C compiler: 'gcc' was not found", "the libjpeg headers are missing (jpeglib.h not found)", ...).
A package built without that ``setup.py`` has no report: the status then stays plain "not built".
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["REPORT", "not_built", "read"]

REPORT = Path(__file__).resolve().parents[1] / "_build.json"


def read(report: Path | None = None) -> dict[str, Any]:
    """The build report (``REPORT`` by default), or {} when there is none or it does not parse."""
    try:
        data = json.loads((report or REPORT).read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def not_built(extension: str, report: Path | None = None) -> str:
    """The status of ``extension`` (a dotted module name) that did not import: "not built (<the build's reason>)",
    or "not built" when the report has no reason for it."""
    entry = read(report).get("extensions", {})
    entry = entry.get(extension) if isinstance(entry, dict) else None
    reason = entry.get("reason") if isinstance(entry, dict) and not entry.get("built", True) else None
    return f"not built ({reason})" if isinstance(reason, str) and reason else "not built"
