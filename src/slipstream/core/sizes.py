"""Byte sizes as people write them: ``parse_size(8 << 20)``, ``parse_size("1GB")``, ``"512MiB"``.

The one reading of sizes in slipstream: ``ss.write(shard_size=, ...)``, the cache limits and the
command line's ``--shard-size`` / ``--page-size`` all parse through ``parse_size``. A size is a
plain number of bytes (``1000``, ``"1000"``, ``20e9``) or a number (a decimal point allowed)
and a unit, case-insensitive, an optional space between them:

* decimal units, powers of 1000 as disks and object stores count: ``K``/``KB`` = 10**3,
  ``M``/``MB`` = 10**6, ``G``/``GB`` = 10**9, ``T``/``TB`` = 10**12 (so ``"1G"`` is ``"1GB"``,
  1,000,000,000 bytes);
* binary units, powers of 1024: ``Ki``/``KiB`` = 2**10, ``Mi``/``MiB`` = 2**20, ``Gi``/``GiB``
  = 2**30, ``Ti``/``TiB`` = 2**40;
* ``B`` = 1 byte.

A letter means one size whether or not ``B`` follows it; an ``i`` makes it binary. Anything else
is a ``ValueError`` naming the setting.
"""

from __future__ import annotations

import re

__all__ = ["parse_size"]

_UNITS = {"": 1, "b": 1} | {
    letter + suffix: base**power
    for power, letter in enumerate("kmgt", start=1)
    for suffix, base in (("", 1000), ("b", 1000), ("i", 1024), ("ib", 1024))
}
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
