"""The fields a sample's values imply: what ``ss.write`` stores when it is given no fields and the data names none.

``infer_fields(sample)`` maps each key of a dict sample to a field by its value's type: bools,
ints, floats, strings and bytes to their scalar kinds, a numeric NumPy array to ``F.Array`` of its
dtype and shape (fixed), a PIL image to ``F.Image(codec="png")`` (lossless), anything else to
``F.JSON``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from . import field_kinds as F
from .field import Field

__all__ = ["infer_fields"]


def infer_fields(sample: Any) -> dict[str, Field]:
    """Fields for a sample's values: ints, floats, bools, strings, bytes, arrays (fixed shape), JSON otherwise."""
    if not isinstance(sample, Mapping):
        raise TypeError(f"samples must be dicts of field values to infer fields, got {type(sample).__name__}; pass fields=")
    out: dict[str, Field] = {}
    for name, value in sample.items():
        if isinstance(value, (bool, np.bool_)):
            out[name] = F.Bool()
        elif isinstance(value, (int, np.integer)):
            out[name] = F.Int()
        elif isinstance(value, (float, np.floating)):
            out[name] = F.Float()
        elif isinstance(value, str):
            out[name] = F.Text()
        elif isinstance(value, (bytes, bytearray, memoryview)):
            out[name] = F.Bytes()
        elif isinstance(value, np.ndarray) and value.dtype.kind in "biufc":
            out[name] = F.Array(dtype=value.dtype, shape=value.shape)
        elif _is_pil_image(value):
            out[name] = F.Image(codec="png")  # lossless: pass fields= for JPEG (photos)
        else:
            out[name] = F.JSON()
    return out


def _is_pil_image(value: Any) -> bool:
    return any(cls.__module__.startswith("PIL.") and cls.__name__ == "Image" for cls in type(value).__mro__)
