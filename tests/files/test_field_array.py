"""F.Array's round-trip rule: a value is stored only if it reads back as written (floats: as rounded)."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from packed import roundtrip

from slipstream import fields as F

INTS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
FLOATS = ["float16", "float32", "float64"]


@pytest.mark.parametrize(
    "value, dtype, found, lost",
    [
        (np.array([1, 1000], np.int64), "int8", "1000 at [1]", "-24"),
        (np.array([70000], np.int64), "int16", "70000", "4464"),
        (np.array([-1], np.int64), "uint8", "-1", "255"),
        (np.array([1e6], np.float64), "float16", "1000000.0", "inf"),
        (np.array([3e38, 1e39], np.float64), "float32", "1e+39", "inf"),
        (np.array([2**24 + 1], np.int64), "float32", "16777217", "16777216.0"),
        (np.array([2**63 - 1], np.int64), "float64", "9223372036854775807", "9.223372036854776e+18"),
        (np.array([70000], np.int32), "float16", "70000", "inf"),
        (np.array([2**53 + 1], np.int64), "complex128", "9007199254740993", "(9007199254740992+0j)"),
    ],
)
def test_casts_that_cannot_round_trip_are_refused_naming_sample_field_and_values(tmp_path, value, dtype, found, lost):
    samples = [{"x": np.zeros(value.shape, value.dtype)}, {"x": value}]
    with pytest.raises(ValueError) as caught:
        roundtrip(tmp_path, samples, {"x": F.Array(dtype=dtype, shape=value.shape)})
    message = str(caught.value)
    assert "F.Array(dtype=...)" in message
    assert message.startswith("sample 1, field 'x': array field of dtype ")
    assert f"{value.dtype} value {found}" in message and f"read back as {lost}" in message and dtype in message
    assert not (tmp_path / "data.arrow").exists()


def test_narrowing_floats_round_and_nan_and_inf_stay(tmp_path):
    values = np.array([0.1, 1 / 3, np.nan, np.inf, -np.inf, 65504.0, 1e-9], np.float64)
    ds = roundtrip(tmp_path, [{"x": values}], {"x": F.Array(dtype="float16", shape=(7,))})
    np.testing.assert_array_equal(ds[0]["x"], values.astype(np.float16))
    ds = roundtrip(tmp_path, [{"x": values}], {"x": F.Array(dtype="float32", shape=None)}, name="ragged.arrow")
    np.testing.assert_array_equal(ds[0]["x"], values.astype(np.float32))


def test_integers_that_fit_are_stored_whatever_their_source_dtype(tmp_path):
    samples = [{"x": np.array([-128, 127], np.int64)}, {"x": [0, 5]}, {"x": np.array([2**24, -(2**24)], np.int64)}]
    ds = roundtrip(tmp_path, samples[:2], {"x": F.Array(dtype="int8", shape=(2,))})
    assert ds[0]["x"].tolist() == [-128, 127] and ds[1]["x"].tolist() == [0, 5]
    ds = roundtrip(tmp_path, samples[1:2], {"x": F.Array(dtype="uint8", shape=(2,))}, name="u.arrow")  # int64 in range: fits uint8
    assert ds[0]["x"].tolist() == [0, 5] and ds[0]["x"].dtype == np.uint8
    ds = roundtrip(tmp_path, samples[2:], {"x": F.Array(dtype="float32", shape=(2,))}, name="f.arrow")
    assert ds[0]["x"].tolist() == [2**24, -(2**24)]


def _castable_pairs():
    """Every integer to every integer (signed and unsigned alike), integers to floats, floats to floats."""
    return [(s, t) for s in INTS for t in INTS + FLOATS] + [(s, t) for s in FLOATS for t in FLOATS]


@given(
    st.sampled_from(_castable_pairs()).flatmap(
        lambda pair: st.tuples(st.just(pair[1]), hnp.arrays(np.dtype(pair[0]), hnp.array_shapes(min_dims=1, max_dims=2, max_side=4)))
    ),
    st.booleans(),
)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_every_accepted_value_reads_back_as_written_and_only_lossy_ones_are_refused(tmp_path, case, ragged):
    target, array = case
    field = F.Array(dtype=target, shape=None if ragged else array.shape)
    with np.errstate(all="ignore"):
        cast = array.astype(target)
    if array.dtype.kind in "iu":  # exact: compare as Python ints
        fits = [int(v) for v in array.reshape(-1)] == [int(v) if np.isfinite(v) else None for v in cast.reshape(-1)]
        expected = array
    else:
        fits = not (np.isfinite(array) & ~np.isfinite(cast)).any()
        expected = cast
    try:
        ds = roundtrip(tmp_path, [{"x": array}], {"x": field}, name="p.arrow")
    except ValueError as exc:
        assert not fits, f"{array!r} refused for {target}: {exc}"
        assert "sample 0, field 'x'" in str(exc)
        return
    assert fits, f"{array!r} stored in {target} as {ds[0]['x']!r}"
    got = ds[0]["x"]
    assert got.dtype == np.dtype(target) and got.shape == array.shape
    np.testing.assert_array_equal(got, expected)
    if array.dtype.kind in "iu":
        assert [int(v) for v in got.reshape(-1)] == [int(v) for v in array.reshape(-1)]
