"""Argument checks shared by every public entry point: one wording for one mistake.

Each check returns the value normalised (a NumPy integer becomes an ``int``) or raises
``TypeError`` (wrong kind of value) / ``ValueError`` (right kind, out of range), naming the
argument and what was given.
"""

from __future__ import annotations

from typing import Any, overload

import numpy as np

from .cpus import usable_cores

__all__ = ["check_callable", "check_flag", "check_int", "check_timeout", "check_workers"]


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


@overload
def check_workers(value: Any, *, minimum: int = ..., auto: bool = ..., default: None = None, unit: str | None = ...) -> int: ...
@overload
def check_workers(value: Any, *, minimum: int = ..., auto: bool = ..., default: str, unit: str | None = ...) -> int | None: ...
def check_workers(
    value: Any, *, minimum: int = 0, auto: bool = True, default: str | None = None, unit: str | None = None
) -> int | None:
    """``workers``: how many workers, by one rule for every entry point that takes a worker count.

    Accepted: an integer (Python's or NumPy's, not a bool) >= ``minimum``, returned as an ``int``;
    ``"auto"`` where ``auto``: the cores this process may use (``core.cpus.usable_cores``: its
    affinity mask capped by the cgroup CPU quota, not ``os.cpu_count()``); None where ``default``
    says what None means, returned as None for the caller to apply that default.

    ``unit`` names what one worker is ("processes", "tasks in flight") in the messages. Raises
    ``ValueError`` for an integer below ``minimum``, or a string other than "auto" where "auto" is
    accepted; ``TypeError`` for anything else. The message lists what is accepted.
    """
    if value is None and default is not None:
        return None
    if auto and isinstance(value, str) and value == "auto":
        return usable_cores()
    if unit is None:
        count = f"an integer >= {minimum}"
    else:
        count = f"a positive number of {unit}" if minimum == 1 else f"a number >= {minimum} of {unit}"
    accepted = count + (" or 'auto'" if auto else "") + ("" if default is None else f" (or None: {default})")
    if auto and isinstance(value, str):
        raise ValueError(f"workers must be {accepted}, got {value!r}")
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"workers must be {accepted}, got {type(value).__name__} {value!r}")
    if value < minimum:
        raise ValueError(f"workers must be {count}, got {value}")
    return int(value)
