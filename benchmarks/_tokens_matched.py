"""Case (1) of ``bench_tokens.py``, the matched-output comparison with LitData's ``TokensLoader``.

LitData hands out only the tokens (uint16 here, 2 bytes a token, no document boundaries); the full
slipstream case writes tokens, segment ids and positions (three int32 arrays, 12 bytes a token). The
matched case asks slipstream for what LitData gives: ``ss.pack(data, length, method="concat",
dtype="uint16", segments=False)``, through ``ss.DataLoader`` with 0 (in process), 1 and 2 worker
threads, against LitData at the same worker counts.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _common import Verdicts, verdict

import slipstream as ss

MATCHED = "slipstream concat uint16 tokens only"


def matched_runs(path: Path, length: int, batch: int) -> dict[str, tuple[Callable[[], Any], Callable[[Any], int]]]:
    """label -> (make a loader, tokens of a batch) for the matched case at 0, 1 and 2 workers."""

    def loader(workers: int) -> tuple[Callable[[], Any], Callable[[Any], int]]:
        def make() -> Any:
            packed = ss.pack(ss.open(path), length, method="concat", dtype="uint16", segments=False)
            return ss.DataLoader(packed, batch_size=batch, workers=workers, shuffle=True, seed=0, drop_last=True)

        return make, lambda b: int(b["tokens"].size)

    return {f"{MATCHED}, {w} thread{'s' * (w != 1)}": loader(w) for w in (0, 1, 2)}


def matched_verdicts(
    rates: dict[str, list[float]],
    best: Callable[[str, list[int]], tuple[float, str] | None],
    verdicts: Verdicts,
    goal: float,
    workers_of: Callable[[str], int],
) -> None:
    """Ratios of the matched case: 1 and 2 workers against LitData's best of in process and the same
    count (the goal's, PASS/MISS against ``goal``); 0, 1, 2 against LitData at the same count (info).
    The full-output case's verdicts are the lines ``concat {w}w vs litdata TokensLoader``."""
    print("  matched output (uint16 tokens only, as LitData hands out; the 'concat ... litdata' lines above: full output, "
          "int32 tokens + segment ids + positions):")  # fmt: skip
    for w in (0, 1, 2):
        ours = next((r for label, r in rates.items() if label.startswith(MATCHED) and workers_of(label) == w), None)
        if ours is None:
            continue
        if w and (peer := best("litdata", [0, w])) is not None:
            verdict(f"matched concat {w}w vs litdata [0,{w}]", statistics.median(ours) / peer[0], goal, verdicts)
        if (peer := best("litdata", [w])) is not None:
            verdict(f"matched concat {w}w vs litdata [{w}]", statistics.median(ours) / peer[0], None, verdicts)
