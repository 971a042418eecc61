"""Argument checks shared by every public entry point: one wording for one mistake.

Each check returns the value normalised (a NumPy integer becomes an ``int``) or raises
``TypeError`` (wrong kind of value) / ``ValueError`` (right kind, out of range), naming the
argument and what was given.
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["check_callable", "check_flag", "check_int", "check_timeout"]


def check_int(name: str, value: Any, minimum: int) -> int:
    """``value`` as an ``int`` >= ``minimum`` (bools are not integers here)."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer >= {minimum}, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, got {value}")
    return int(value)


def check_flag(name: str, value: Any) -> bool:
    """``value`` as a ``bool`` (Python's or NumPy's; not 0/1 or None)."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {value!r}")
    return bool(value)


def check_callable(name: str, value: Any, what: str = "a callable") -> Any:
    """``value`` if it is callable or None."""
    if value is not None and not callable(value):
        raise TypeError(f"{name} must be {what} or None, got {type(value).__name__}")
    return value


def check_timeout(value: Any) -> float | None:
    """A timeout: None (no limit) or a number of seconds > 0."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0):
        raise ValueError(f"timeout must be None or a number of seconds > 0, got {value!r}")
    return value
