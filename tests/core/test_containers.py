"""core.containers, the data container protocol: ``numobs``, ``getobs`` and ``getobs_into`` on arrays, plain
containers and groups (tuples and mappings of containers), and ``write_obs`` refusing shape mismatches and
lossy casts."""

from collections import namedtuple

import numpy as np
import pytest

import slipstream as ss
from slipstream.core.containers import write_obs

Pair = namedtuple("Pair", "x y")


class Squares:
    def __len__(self):
        return 5

    def __getitem__(self, i):
        return i * i


def test_numobs_counts_arrays_on_axis_zero_and_plain_containers_by_len():
    assert ss.numobs(np.zeros((7, 3))) == 7
    assert ss.numobs([1, 2, 3]) == 3
    assert ss.numobs(Squares()) == 5
    assert ss.numobs(range(4)) == 4


def test_numobs_of_a_group_is_the_common_length():
    assert ss.numobs((np.zeros((4, 2)), np.arange(4))) == 4
    assert ss.numobs({"a": np.zeros(3), "b": ["x", "y", "z"]}) == 3


def test_a_group_of_unequal_lengths_raises_value_error_naming_the_members():
    with pytest.raises(ValueError, match=r"member 'b' has 2 but member 'a' has 3"):
        ss.numobs({"a": np.zeros(3), "b": np.zeros(2)})
    with pytest.raises(ValueError, match="member 1 has 5 but member 0 has 4"):
        ss.numobs((np.zeros(4), np.zeros(5)))


def test_non_containers_raise_type_error_saying_what_was_expected():
    with pytest.raises(TypeError, match="expected a data container"):
        ss.numobs(42)
    with pytest.raises(TypeError, match="0-d array"):
        ss.numobs(np.array(1.0))
    with pytest.raises(TypeError, match="not a data container"):
        ss.numobs("abc")


def test_lists_are_containers_of_observations_not_groups():
    images = [np.zeros((2, 2)), np.ones((2, 2))]
    assert ss.numobs(images) == 2
    np.testing.assert_array_equal(ss.getobs(images, 1), np.ones((2, 2)))


def test_getobs_of_one_index_returns_one_observation_of_each_member():
    data = {"x": np.arange(12).reshape(4, 3), "y": ["a", "b", "c", "d"]}
    obs = ss.getobs(data, 2)
    np.testing.assert_array_equal(obs["x"], [6, 7, 8])
    assert obs["y"] == "c"
    assert ss.getobs(Pair(np.arange(3), np.arange(3) * 10), -1) == Pair(2, 20)


def test_getobs_of_many_indices_returns_a_batch():
    x = np.arange(10) * 2
    np.testing.assert_array_equal(ss.getobs(x, [3, 1]), [6, 2])
    assert ss.getobs(Squares(), [1, 3]) == [1, 9]
    batch = ss.getobs((x, Squares()), np.array([4, 0]))
    np.testing.assert_array_equal(batch[0], [8, 0])
    assert batch[1] == [16, 0]


def test_getobs_uses_getitems_for_many_indices_when_present():
    class Batched(Squares):
        calls = []

        def __getitems__(self, indices):
            self.calls.append(list(indices))
            return [-i for i in indices]

    data = Batched()
    assert ss.getobs(data, [2, 4]) == [-2, -4]
    assert data.calls == [[2, 4]]


def test_getobs_rejects_out_of_range_indices_with_index_error():
    with pytest.raises(IndexError, match="index 9 is out of range for a container of 4"):
        ss.getobs(np.zeros(4), 9)
    with pytest.raises(IndexError):
        ss.getobs((np.zeros(4),), -5)


def test_getobs_into_writes_arrays_in_place_and_falls_back_to_getobs():
    buffer = np.zeros(3)
    out = ss.getobs_into(buffer, np.arange(12.0).reshape(4, 3), 1)
    assert out is buffer
    np.testing.assert_array_equal(buffer, [3, 4, 5])

    class Rows:
        def __len__(self):
            return 2

        def __getitem__(self, i):
            return {"v": np.full(2, i, np.int32), "name": f"row{i}"}

    buf = {"v": np.zeros(2, np.int32), "name": None}
    out = ss.getobs_into(buf, Rows(), 1)
    np.testing.assert_array_equal(buf["v"], [1, 1])
    assert out["name"] == "row1" and out["v"] is buf["v"]


def test_getobs_into_calls_the_containers_own_method():
    class InPlace:
        def __len__(self):
            return 3

        def __getitem__(self, i):
            raise AssertionError("getobs_into should have been used")

        def getobs_into(self, buffer, i):
            buffer[...] = i + 100

    buffer = np.zeros(2)
    assert ss.getobs_into(buffer, InPlace(), 2) is buffer
    np.testing.assert_array_equal(buffer, [102, 102])


def test_write_obs_refuses_shape_mismatches_instead_of_broadcasting():
    with pytest.raises(ValueError, match=r"shape \(1,\) but the buffer expects \(3,\)"):
        write_obs(np.zeros(3), np.ones(1))


def test_write_obs_refuses_lossy_casts():
    with pytest.raises(TypeError, match="float64 which cannot be written into a buffer of dtype int64"):
        write_obs(np.zeros(2, np.int64), np.array([1.5, 2.5]))
    with pytest.raises(ValueError, match="keys"):
        write_obs({"a": np.zeros(1)}, {"b": np.zeros(1)})


def test_groups_are_tuples_and_mappings_flattened_to_their_containers_lists_stay_members():
    from collections import OrderedDict

    from slipstream.core.containers import flatten_group, is_group

    Pair = namedtuple("Pair", "x y")
    data = OrderedDict(a=np.zeros((3, 2)), b=Pair(np.ones(3), ["p", "q", "r"]))
    assert is_group(data) and is_group(data["b"]) and not is_group(data["b"].y)
    members, structure = flatten_group(data)
    assert [type(m) for m in members] == [np.ndarray, np.ndarray, list] and structure.num_leaves == 3
    obs = ss.getobs(data, 1)
    assert type(obs) is dict and type(obs["b"]) is Pair and obs["b"].y == "q"


def test_write_obs_rebuilds_the_buffers_nesting():
    class Row(tuple):
        pass

    Pair = namedtuple("Pair", "x y")
    buffer = {"p": Pair(np.zeros(2), np.zeros(1)), "r": Row((np.zeros(1), None)), "l": [np.zeros(1)]}
    out = write_obs(buffer, {"p": Pair([1, 2], [3]), "r": ([4], "s"), "l": [[5]]})
    assert type(out["p"]) is Pair and type(out["r"]) is Row and type(out["l"]) is list
    assert out["p"].x is buffer["p"].x and out["r"][1] == "s"
    np.testing.assert_array_equal(buffer["p"].x, [1, 2])


def test_a_mapping_that_is_also_a_list_is_still_a_group():
    """``core.nested`` says "a mapping that is also a sequence is a mapping"; before, ``is_group``
    agreed (``isinstance(data, (tuple, Mapping))``). ``containers.is_group`` now rules lists out
    before looking for a mapping, so such a group became a plain container of its keys."""
    from collections.abc import Mapping

    class ListMapping(list, Mapping):  # e.g. a record type that subclasses list for speed
        def __init__(self, d):
            super().__init__(d.values())
            self.d = d

        def __getitem__(self, k):
            return self.d[k]

        def keys(self):
            return self.d.keys()

        def items(self):
            return self.d.items()

        def values(self):
            return self.d.values()

        def __iter__(self):
            return iter(self.d)

        def __len__(self):
            return len(self.d)

    group = ListMapping({"a": np.arange(4), "b": np.arange(4) * 2})
    assert ss.numobs(group) == 4
    assert ss.getobs(group, 1) == {"a": 1, "b": 2}
