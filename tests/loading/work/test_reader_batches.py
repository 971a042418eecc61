"""A packed file's batches from the loader equal ``default_collate`` of the same samples, for every
field kind (a property test), and errors the same way where ``default_collate`` refuses a batch."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import assert_batches_equal_default_collate
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from samples import packed_samples

import slipstream as ss
from slipstream import fields as F


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(packed_samples(), st.integers(1, 5), st.sampled_from([0, 2]))
def test_loader_batches_of_a_packed_file_equal_default_collate_of_its_samples(case, batch_size, workers):
    samples, fields = case
    with tempfile.TemporaryDirectory() as folder:
        ds = ss.open(ss.write(Path(folder) / "p.arrow", samples, fields, page_size=200, progress=False))
        assert_batches_equal_default_collate(ds, batch_size, workers)


def _json_file(folder: Path, values: list[Any]) -> Any:
    return ss.open(ss.write(folder / "j.arrow", [{"j": v} for v in values], {"j": F.JSON()}, progress=False))


@pytest.mark.parametrize("batch_size", [2, 4, 8])
@pytest.mark.parametrize(
    "values",
    [
        [[k, k + 1, k + 2] for k in range(16)],  # lists: were transposed, uninitialised or IndexError
        [{"a": k, "b": [k, -k]} for k in range(16)],  # dicts: TypeError
        [k / 2 for k in range(16)],  # numbers: a copyto TypeError
        [[k] * (1 + k // 8) for k in range(16)],  # list lengths that change between batches
        [k if k < 8 else k + 0.5 for k in range(16)],  # ints, then floats
    ],
    ids=["lists", "dicts", "numbers", "lengths", "ints-then-floats"],
)
def test_json_fields_batch_like_default_collate(tmp_path, values, batch_size):
    assert_batches_equal_default_collate(_json_file(tmp_path, values), batch_size, workers=0)


def test_ragged_arrays_of_zero_dimensions_and_of_changing_shapes_batch_like_default_collate(tmp_path):
    zero_d = [{"a": np.array(k, np.float32)} for k in range(8)]
    ds = ss.open(ss.write(tmp_path / "z.arrow", zero_d, {"a": F.Array(shape=None)}, progress=False))
    assert_batches_equal_default_collate(ds, 4, workers=0)
    growing = [{"a": np.full(1 + k // 4, k, np.int32)} for k in range(8)]  # batch 1's shape differs from batch 0's
    ds = ss.open(ss.write(tmp_path / "g.arrow", growing, {"a": F.Array(shape=None)}, progress=False))
    assert_batches_equal_default_collate(ds, 4, workers=2)


def test_a_mixed_json_batch_names_the_row_and_field_like_default_collate(tmp_path):
    ds = _json_file(tmp_path, [[1], 2, [3], 4])
    with pytest.raises(ValueError, match=r"row 1 of the batch, field \['j'\], is a int that does not match the first sample's list"):
        list(ss.DataLoader(ds, batch_size=4))


@pytest.mark.parametrize("start", ["fork", "spawn"])
def test_varying_fields_batch_like_default_collate_in_worker_processes(tmp_path, start):
    samples = [
        {"j": [k] * (1 + k // 4), "r": np.arange(k // 4 + 1, dtype=np.int16), "im": np.full((4 + k // 4, 3, 3), k, np.uint8)}
        for k in range(12)
    ]
    fields = {"j": F.JSON(), "r": F.Array(shape=None), "im": F.Image(codec="png")}
    ds = ss.open(ss.write(tmp_path / "v.arrow", samples, fields, page_size=300, progress=False))
    assert_batches_equal_default_collate(ds, 4, workers=2, backend="process", mp_context=start)
