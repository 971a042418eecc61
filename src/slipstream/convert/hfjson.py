"""``F.JSON`` as Hugging Face's ``Json`` feature, checked: would ``datasets`` decode each row to the stored value?

``datasets`` decodes ``Json`` with pandas' ujson, which does not always read back what
``json.loads`` reads: it rounds many floats (0.13436424411240122 reads as 0.134364244112401),
drops a lone high surrogate (``"\\ud800x"`` reads as ``"x"``) and refuses integers beyond 64 bits.
``check_json`` decodes the rows that could differ (those holding a float, a long integer or an
escaped surrogate: the others read back the same) both ways, and raises ``ValueError`` naming the
first that differs, with the way out (``json_as_text=True``, or leaving the field out).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..files.field import pyarrow_module as _pa

__all__ = ["check_json"]

# a float (a digit, then "." or an exponent), a long integer, an escaped surrogate (backslash, u, D800..DFFF)
_RISKS = r"[0-9][.eE]|[0-9]{16}|\\u[dD][89a-fA-F]"


def check_json(array: Any, decode: Callable[[str], Any], where: Callable[[int], str]) -> None:
    """``ValueError`` naming (``where(row)``) the first row of ``array`` (JSON text) that ``decode``
    (the ``Json`` feature's) reads otherwise than ``json.loads``."""
    import pyarrow.compute as pc

    pa = _pa()
    rows = np.flatnonzero(pc.match_substring_regex(array, _RISKS).to_numpy(zero_copy_only=False))
    if not len(rows):
        return
    for row, text in zip(rows.tolist(), array.take(pa.array(rows.astype(np.int64))).to_pylist()):
        stored = json.loads(text)
        try:
            decoded: Any = decode(text)
        except Exception as exc:  # noqa: BLE001 - ujson refuses what json.loads reads (integers beyond 64 bits)
            decoded = exc
        if not _same(decoded, stored):
            got = f"raises {type(decoded).__name__}: {decoded}" if isinstance(decoded, Exception) else f"gives {_short(decoded)}"
            raise ValueError(
                f"{where(row)}: datasets' Json feature decodes JSON with pandas' ujson, which {got} for the stored "
                f"{_short(stored)} (it rounds floats, drops lone surrogates and refuses integers beyond 64 bits): pass "
                "json_as_text=True to get the JSON text (json.loads(text) gives the stored value), or leave the field out "
                "with fields=[...]"
            )


def _same(a: Any, b: Any) -> bool:
    """Whether two decoded JSON values are the same: equal, of the same types all the way down
    (``1`` is not ``1.0``, ``0.0`` is not ``-0.0``)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, float):
        return a == b and math.copysign(1.0, a) == math.copysign(1.0, b)
    return a == b


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."
