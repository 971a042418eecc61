"""The field kinds (``slipstream.fields``): every scalar, bytes, text, JSON and array kind round-trips
through a packed file, wrong values and settings are refused naming sample and field, and field specs
round-trip through JSON (unknown kinds and newer versions refused)."""

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from packed import roundtrip

from slipstream import fields as F
from slipstream.fields import field_from_spec

DTYPES = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "float16", "float32", "float64", "complex64"]


def test_scalar_bytes_text_and_json_fields_round_trip(tmp_path):
    samples = [
        {"i": -(2**40) + k, "f": k / 7, "b": k % 3 == 0, "raw": bytes(range(k)), "t": "naïve ☃" * k, "j": {"k": [k, None, "x"], "ok": True}}
        for k in range(20)
    ]
    fields = {"i": F.Int(), "f": F.Float(), "b": F.Bool(), "raw": F.Bytes(), "t": F.Text(), "j": F.JSON()}
    ds = roundtrip(tmp_path, samples, fields, page_size=64)
    assert ds.num_pages > 1
    for k, sample in enumerate(samples):
        assert ds[k] == sample


@pytest.mark.parametrize("dtype", DTYPES)
def test_fixed_arrays_of_every_dtype_round_trip(tmp_path, dtype):
    rng = np.random.default_rng(1)
    arrays = [(rng.normal(size=(2, 3)) * 50).astype(dtype) for _ in range(9)]
    ds = roundtrip(tmp_path, [{"a": a} for a in arrays], {"a": F.Array(shape=(2, 3))}, page_size=40)
    for k, a in enumerate(arrays):
        assert ds[k]["a"].dtype == a.dtype and ds[k]["a"].shape == (2, 3)
        np.testing.assert_array_equal(ds[k]["a"], a)


@given(
    hnp.arrays(
        dtype=st.sampled_from(DTYPES).map(np.dtype),
        shape=hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=5),
    ).flatmap(lambda first: st.lists(hnp.arrays(first.dtype, hnp.array_shapes(min_dims=first.ndim, max_dims=first.ndim, min_side=0, max_side=5)), max_size=6).map(lambda rest: [first, *rest]))
)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_ragged_arrays_keep_their_own_shapes_and_values(tmp_path, arrays):
    ds = roundtrip(tmp_path, [{"a": a} for a in arrays], {"a": F.Array(shape=None)}, page_size=32)
    assert len(ds) == len(arrays)
    for k, a in enumerate(arrays):
        got = ds[k]["a"]
        assert got.shape == a.shape and got.dtype == a.dtype
        np.testing.assert_array_equal(got, a)


def test_big_endian_input_is_stored_little_endian_and_read_back_equal(tmp_path):
    a = np.arange(6, dtype=">i4").reshape(2, 3)
    ds = roundtrip(tmp_path, [{"a": a}], {"a": F.Array()})
    np.testing.assert_array_equal(ds[0]["a"], a)
    assert ds[0]["a"].dtype == np.dtype("<i4")




def test_wrong_values_raise_naming_the_sample_and_field(tmp_path):
    cases = [
        ({"x": F.Int()}, [{"x": 1}, {"x": 2.5}], TypeError, r"sample 1, field 'x': int field expects an integer, got float"),
        ({"x": F.Int()}, [{"x": True}], TypeError, "got bool"),
        ({"x": F.Float()}, [{"x": 1.5}, {"x": True}], TypeError, r"sample 1, field 'x': float field expects a number, got bool True \(use F.Bool\(\)\)"),
        ({"x": F.Text()}, [{"x": b"b"}], TypeError, "text field expects a str"),
        ({"x": F.JSON()}, [{"x": {1, 2}}], TypeError, "json field cannot store set"),
        ({"x": F.Array(shape=(2,))}, [{"x": np.zeros(2)}, {"x": np.zeros(3)}], ValueError, r"sample 1, field 'x': array field expects shape \(2,\), got \(3,\)"),
        ({"x": F.Array()}, [{"x": np.zeros(2, np.int8)}, {"x": np.zeros(2, np.float32)}], TypeError, "cannot store float32"),
        ({"x": F.Array(shape=None)}, [{"x": np.zeros(2)}, {"x": np.zeros((2, 2))}], ValueError, "ragged array field has 1 dimensions"),
        ({"x": F.Int()}, [{"y": 1}], ValueError, r"sample 0 lacks field 'x' \(it has \['y'\]\)"),
    ]
    for k, (fields, samples, error, message) in enumerate(cases):
        with pytest.raises(error, match=message):
            roundtrip(tmp_path, samples, fields, name=f"bad{k}.arrow")
        assert not (tmp_path / f"bad{k}.arrow").exists()


def test_field_specs_round_trip_through_json():
    for field in [F.Int(), F.Float(), F.Bool(), F.Bytes(), F.Text(), F.JSON(), F.Array("float16", (2, 2)), F.Array(shape=None, ndim=2, dtype="u1"),
                  F.Image(codec="jpeg", quality=80, max_side=64, policy="smart", threshold=100)]:
        assert field_from_spec(json.loads(json.dumps(field.spec()))) == field


def test_unknown_kinds_and_newer_versions_are_refused():
    with pytest.raises(ValueError, match="unknown field kind 'tensor'"):
        field_from_spec({"kind": "tensor"})
    with pytest.raises(ValueError, match="version 9 is newer"):
        field_from_spec({"kind": "int", "version": 9})


def test_bad_field_settings_are_refused_at_construction():
    with pytest.raises(ValueError, match="unknown image codec 'gif'"):
        F.Image(codec="gif")
    with pytest.raises(ValueError, match="policy must be"):
        F.Image(policy="sometimes")
    with pytest.raises(ValueError, match="quality must be in 1..100"):
        F.Image(quality=0)
    with pytest.raises(TypeError, match="numeric or bool"):
        F.Array(dtype=object)


@pytest.mark.parametrize(
    "field, value, message",
    [
        (F.Int(), 2**63, r"sample 1, field 'x': int field holds int64 values, -2\*\*63..2\*\*63-1, got 9223372036854775808"),
        (F.Int(), -(2**63) - 1, r"sample 1, field 'x': int field holds int64 values.*got -9223372036854775809"),
        (F.Int(), np.uint64(2**64 - 1), r"sample 1, field 'x': int field holds int64 values.*got 18446744073709551615"),
        (F.Int(), 10**400, r"sample 1, field 'x': int field holds int64 values.*got 100000\.\.\. \(401 digits\)"),
        (F.Float(), 2**53 + 1, r"sample 1, field 'x': float field holds float64 values, exact for integers up to 2\*\*53, got the integer 9007199254740993 \(it would read back as 9007199254740992\.0\)"),
        (F.Float(), 10**400, r"sample 1, field 'x': float field .*got the integer 100000\.\.\. \(401 digits\) \(it would read back as inf\)"),
        (F.Float(), np.longdouble("1e4000") if np.finfo(np.longdouble).max > 1e4000 else 10**400, r"sample 1, field 'x': float field holds float64 values"),
        (F.Text(), "caf\udce9", r"sample 1, field 'x': text field holds UTF-8 text, got a str with the lone surrogate '\\udce9' at position 3"),
    ],
    ids=["int-2**63", "int-below", "int-uint64", "int-huge", "float-inexact", "float-huge", "float-longdouble", "text-surrogate"],
)
def test_scalar_values_a_field_cannot_hold_raise_naming_sample_field_and_range(tmp_path, field, value, message):
    first = "ok" if isinstance(field, F.Text) else 1
    with pytest.raises(ValueError, match=message):
        roundtrip(tmp_path, [{"x": first}, {"x": value}], {"x": field})
    assert not (tmp_path / "data.arrow").exists()


def test_scalar_edge_values_that_fit_round_trip(tmp_path):
    samples = [
        {"i": -(2**63), "u": np.uint64(2**63 - 1), "f": 2**60, "n": float("nan"), "inf": np.float32("-inf"), "j": ["caf\udce9", {"k": 2**70}]},
    ]
    fields = {"i": F.Int(), "u": F.Int(), "f": F.Float(), "n": F.Float(), "inf": F.Float(), "j": F.JSON()}
    got = roundtrip(tmp_path, samples, fields)[0]
    assert got["i"] == -(2**63) and got["u"] == 2**63 - 1 and got["f"] == 2**60
    assert np.isnan(got["n"]) and got["inf"] == float("-inf")
    assert got["j"] == ["caf\udce9", {"k": 2**70}]  # a lone surrogate is kept, escaped, in JSON



def test_an_image_pages_codec_table_maps_unknown_codes_to_255_with_int8_codes(tmp_path):
    """The compiled tasks read each row's codec code as uint8 (255: not one it decodes). Arrow hands the
    codes over as int8; NumPy 2.5 refused ``np.where(int8_codes, ..., 255)`` (a Python int out of
    int8's range), so every image task failed there."""
    import slipstream as ss

    image = np.zeros((4, 5, 3), np.uint8)
    path = ss.write(tmp_path / "i.arrow", [{"image": image}] * 3, {"image": F.Image(codec="png")}, progress=False)
    column = ss.open(path).page(0)["image"]
    column.codes = np.array([column.codes[0], -1, 7], np.int8)
    codes, _, sizes, shapes = column.table()
    assert codes.dtype == np.uint8 and codes.tolist() == [int(column.codes[0]), 255, 7]
    assert shapes.tolist() == [[4, 5, 3]] * 3 and len(sizes) == 3
