"""Byte sizes as people write them: ``parse_size(8 << 20)``, ``parse_size("1GB")``, ``"512MiB"``.

Decimal units (KB, MB, GB, TB: powers of 1000, as disks and object stores count) and binary ones
(KiB, MiB, GiB, TiB: powers of 1024), case-insensitive, an optional space, a plain number of
bytes (``"1000"``, ``1000`` or ``20e9``). Anything else is a ``ValueError`` naming the setting.
"""

from __future__ import annotations

import re

__all__ = ["parse_size"]

_UNITS = {"": 1, "b": 1, "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12, "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$", re.IGNORECASE)


def parse_size(value: int | str, what: str = "size") -> int:
    """``value`` in bytes (a non-negative int, or a string such as ``"20GB"``); ``what`` names the
    setting in the ``ValueError``/``TypeError`` for anything else."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(f"{what} must be a number of bytes or a string such as '20GB', got {value!r}")
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"{what} must be a whole number of bytes, got {value!r}")
        value = int(value)
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"{what} must be >= 0 bytes, got {value}")
        return value
    match = _SIZE.match(value)
    unit = match.group(2).lower() if match else None
    if match is None or unit not in _UNITS:
        raise ValueError(f"{what} must be a number of bytes or a string such as '20GB' or '512MiB', got {value!r}")
    number = match.group(1)
    if "." not in number:  # exact for any integer (a float would round above 2**53)
        return int(number) * _UNITS[unit]
    return int(float(number) * _UNITS[unit])
