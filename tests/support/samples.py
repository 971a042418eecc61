"""Hypothesis strategies for packed files: samples with one to three fields of any kind, and those fields.

``packed_samples()`` draws ``(samples, fields)``: 1-10 samples whose fields are drawn from every kind
(``F.Int``, ``F.Float``, ``F.Bool``, ``F.Text``, ``F.Bytes``, ``F.JSON``, fixed and ragged ``F.Array``,
``F.Image`` as raw, PNG or JPEG), ready for ``ss.write(path, samples, fields)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from slipstream import fields as F

JSON_SCALARS = st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=4)
JSON_VALUES = st.recursive(JSON_SCALARS, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("abc"), inner, max_size=3), max_leaves=6)
DTYPES = st.sampled_from([np.uint8, np.int16, np.int64, np.float16, np.float32, np.float64, np.bool_])


def _array_values(draw: Any, n: int) -> tuple[Any, list[Any]]:
    dtype, shape = draw(DTYPES), draw(hnp.array_shapes(min_dims=0, max_dims=2, max_side=3))
    values = [draw(hnp.arrays(dtype, shape)) for _ in range(n)]
    return F.Array(shape=shape), values


def _ragged_values(draw: Any, n: int) -> tuple[Any, list[Any]]:
    dtype, ndim = draw(DTYPES), draw(st.integers(0, 2))
    shapes = st.sampled_from([(2,) * ndim, (2,) * ndim, (1,) * ndim, (0,) * ndim])  # often equal, sometimes not
    return F.Array(shape=None), [draw(hnp.arrays(dtype, draw(shapes))) for _ in range(n)]


def _image_values(draw: Any, n: int) -> tuple[Any, list[Any]]:
    codec = draw(st.sampled_from(["raw", "png", "jpeg"]))
    channels = draw(st.sampled_from([1, 3]))
    sizes = st.sampled_from([(8, 8), (8, 8), (9, 8)])  # mostly one size: batches in place, some spilled
    values = [draw(hnp.arrays(np.uint8, (*draw(sizes), channels))) for _ in range(n)]
    return F.Image(codec=codec), values


@st.composite
def packed_samples(draw: Any) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Samples with one to three fields of drawn kinds, and those fields."""
    n = draw(st.integers(1, 10))
    kinds = draw(st.lists(st.sampled_from(["int", "float", "bool", "text", "bytes", "json", "array", "ragged", "image"]), min_size=1, max_size=3, unique=True))
    fields, columns = {}, {}
    for kind in kinds:
        if kind == "int":
            fields[kind], columns[kind] = F.Int(), draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=n, max_size=n))
        elif kind == "float":
            fields[kind], columns[kind] = F.Float(), draw(st.lists(st.floats(), min_size=n, max_size=n))
        elif kind == "bool":
            fields[kind], columns[kind] = F.Bool(), draw(st.lists(st.booleans(), min_size=n, max_size=n))
        elif kind == "text":
            fields[kind], columns[kind] = F.Text(), draw(st.lists(st.text(max_size=5), min_size=n, max_size=n))
        elif kind == "bytes":
            fields[kind], columns[kind] = F.Bytes(), draw(st.lists(st.binary(max_size=5), min_size=n, max_size=n))
        elif kind == "json":
            same_type = draw(st.booleans())  # one JSON type for all samples (batches), or any mix (errors)
            values = st.lists(JSON_VALUES, min_size=3, max_size=3) if same_type else JSON_VALUES
            fields[kind], columns[kind] = F.JSON(), draw(st.lists(values, min_size=n, max_size=n))
        else:
            fields[kind], columns[kind] = {"array": _array_values, "ragged": _ragged_values, "image": _image_values}[kind](draw, n)
    samples = [{k: columns[k][i] for k in kinds} for i in range(n)]
    return samples, fields
