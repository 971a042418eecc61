"""A dataset's samples as flat lists of their leaf values (arrays as lists, dicts by their values,
strings as UTF-8 bytes), for tests that compare two readings of damaged data value by value
whatever the fields' types (a footer flip may read a text column as bytes, a list as a struct)."""

from __future__ import annotations

import os
from typing import Any

import numpy as np


def leaves(value: Any) -> list[Any]:
    """The leaf values of one sample or value, in order."""
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        return [leaf for v in value for leaf in leaves(v)]
    return [value.encode() if isinstance(value, str) else value]


def values(data: Any) -> list[list[Any]]:
    """Every sample's leaves; ``data`` a dataset, or a path that ``ss.open`` opens."""
    if isinstance(data, (str, os.PathLike)):
        import slipstream as ss

        data = ss.open(data)
    return [leaves(data[i]) for i in range(len(data))]
