"""core.collate and core.spec: the default collate stacks nested samples like ``default_collate`` (safe casts
only, mismatches named by sample and field), lists what it cannot stack, and a spec builds and cuts batches."""

from collections import namedtuple

import numpy as np
import pytest

import slipstream as ss
from slipstream.core.spec import Spec, spec_of_data

Point = namedtuple("Point", "x y")


def test_default_collate_stacks_nested_structures_and_lists_strings():
    samples = [
        {"image": np.full((2, 2), i, np.uint8), "meta": (i, float(i) / 2, True), "name": f"s{i}", "pt": Point(i, -i)}
        for i in range(3)
    ]
    batch = ss.default_collate(samples)
    assert batch["image"].shape == (3, 2, 2) and batch["image"].dtype == np.uint8
    np.testing.assert_array_equal(batch["image"][:, 0, 0], [0, 1, 2])
    ints, floats, flags = batch["meta"]
    assert ints.dtype == np.int64 and floats.dtype == np.float64 and flags.dtype == np.bool_
    np.testing.assert_array_equal(floats, [0.0, 0.5, 1.0])
    assert batch["name"] == ["s0", "s1", "s2"]
    assert isinstance(batch["pt"], Point)
    np.testing.assert_array_equal(batch["pt"].y, [0, -1, -2])


def test_lists_inside_samples_collate_per_position():
    batch = ss.default_collate([[np.zeros(2), 1], [np.ones(2), 2]])
    assert isinstance(batch, list) and batch[0].shape == (2, 2)
    np.testing.assert_array_equal(batch[1], [1, 2])


def test_numpy_scalars_keep_their_dtype():
    batch = ss.default_collate([np.float16(1), np.float16(2)])
    assert batch.dtype == np.float16 and batch.shape == (2,)


def test_a_shape_mismatch_names_the_sample_and_the_field():
    samples = [{"x": np.zeros(3)}, {"x": np.zeros(3)}, {"x": np.zeros(4)}]
    with pytest.raises(ValueError, match=r"sample 2\['x'\] has shape \(4,\) but the first sample had shape \(3,\)"):
        ss.default_collate(samples)


def test_a_lossy_cast_is_refused_instead_of_truncating():
    with pytest.raises(TypeError, match=r"sample 1\[0\] cannot be stored as int64 like the first sample"):
        ss.default_collate([(1, "a"), (2.5, "b")])


def test_an_int_into_a_float_field_is_a_safe_cast():
    np.testing.assert_array_equal(ss.default_collate([0.5, 2]), [0.5, 2.0])


def test_structure_mismatches_are_reported():
    with pytest.raises(ValueError, match=r"sample 1 has keys \['b'\] but the first sample had \['a'\]"):
        ss.default_collate([{"a": 1}, {"b": 1}])
    with pytest.raises(ValueError, match="does not match the first sample's tuple of 2 members"):
        ss.default_collate([(1, 2), (1, 2, 3)])
    with pytest.raises(ValueError, match="empty"):
        ss.default_collate([])


def test_object_arrays_and_arbitrary_objects_become_lists():
    sentinel = object()
    batch = ss.default_collate([(sentinel, None), (sentinel, None)])
    assert batch == ([sentinel, sentinel], [None, None])


def test_spec_of_data_is_known_for_arrays_and_groups_of_arrays_only():
    spec = spec_of_data({"a": np.zeros((4, 2), np.float32), "b": (np.zeros(4, np.int8),)})
    assert [leaf.shape for leaf in spec.array_leaves] == [(2,), ()]
    assert spec_of_data([1, 2]) is None
    assert spec_of_data((np.zeros(3), [1, 2, 3])) is None


def test_build_cuts_a_short_batch_from_full_size_storage():
    spec = Spec.of({"v": np.zeros(2), "s": "x"})
    storage = spec.allocate(4)
    for j in range(3):
        spec.write(storage, j, {"v": np.full(2, j), "s": str(j)}, f"sample {j}")
    batch = spec.build(storage, 3)
    assert batch["v"].shape == (3, 2) and batch["v"].base is storage[0]


def test_numpy_strings_are_listed_not_cut_to_the_first_ones_width():
    batch = ss.default_collate([np.str_("a"), np.str_("longer")])
    assert batch == ["a", "longer"]


def test_numpy_values_must_cast_safely_and_python_ints_must_fit():
    with pytest.raises(TypeError, match="has dtype int64 but the first sample had int8"):
        ss.default_collate([np.int8(1), np.int64(1000)])
    with pytest.raises(ValueError, match=r"sample 1\['n'\] is 1180591620717411303424, out of range for int64"):
        ss.default_collate([{"n": 1}, {"n": 2**70}])
    np.testing.assert_array_equal(ss.default_collate([np.float32(1), np.float16(2)]), [1, 2])  # a safe cast


def test_containers_follow_one_rule_mappings_as_dicts_tuples_as_tuples_namedtuples_kept():
    from collections import OrderedDict

    class Pair(tuple):
        pass

    samples = [OrderedDict([("b", Pair((i, [i, "x"]))), ("a", Point(i, i))]) for i in range(2)]
    batch = ss.default_collate(samples)
    assert type(batch) is dict and list(batch) == ["b", "a"]
    assert type(batch["b"]) is tuple and type(batch["b"][1]) is list and type(batch["a"]) is Point
    np.testing.assert_array_equal(batch["b"][1][0], [0, 1])
    assert batch["b"][1][1] == ["x", "x"]


def test_a_pickled_spec_writes_views_and_names_its_variable_fields_as_before():
    import pickle

    from slipstream.core.nodes import ArrayLeaf, VarNode

    spec = pickle.loads(pickle.dumps(Spec({"a": (ArrayLeaf((), np.int64), VarNode((2,), np.float32))})))
    assert list(spec.tree) == ["a"] and isinstance(spec.tree["a"][1], VarNode)
    storage = spec.allocate(2)
    spec.write(storage, 0, {"a": (1, np.zeros(2, np.float32))}, 0)
    views = spec.views(storage, 1)
    assert views["a"][0].base is storage[0] and views["a"][1].shape == (2,)
    views["a"][1][:] = 7
    spec.settle(storage, 1, {"a": (2, views["a"][1])}, views, 1)
    batch = spec.build(storage)
    np.testing.assert_array_equal(batch["a"][0], [1, 2])
    np.testing.assert_array_equal(batch["a"][1], [[0, 0], [7, 7]])
    spec.write(storage, 1, {"a": (2, np.zeros(3))}, 5)  # kept aside: it does not fit the buffer
    with pytest.raises(ValueError, match=r"sample 5, field \['a'\]\[1\], has shape \(3,\) but the first sample had shape \(2,\)"):
        spec.build(storage)
