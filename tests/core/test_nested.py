"""core.nested: one rule for what is a node, flatten / unflatten, and the structures' equality."""

import pickle
from collections import OrderedDict, defaultdict, namedtuple
from types import MappingProxyType

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from slipstream.core import nested
from slipstream.core.nested import Structure, flatten, map_nodes, map_structure, unflatten

Point = namedtuple("Point", "x y")
Triple = namedtuple("Triple", "a b c")
Empty = namedtuple("Empty", "")

leaf_values = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    st.text(max_size=4),
    st.binary(max_size=4),
    st.builds(lambda n: np.arange(n), st.integers(0, 3)),
)


def _containers(children):
    return st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=4).map(tuple),
        st.dictionaries(st.one_of(st.text(max_size=3), st.integers(-3, 3)), children, max_size=4),
        st.builds(Point, children, children),
        st.builds(Triple, children, children, children),
        st.just(Empty()),
    )


trees = st.recursive(leaf_values, _containers, max_leaves=20)


def _same(a, b):
    """Equal, with the same container types all the way down and the same leaf objects."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return list(a) == list(b) and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    return a is b


def _reference_leaves(tree):
    """Depth first, mappings in their own order: written out without the module."""
    if isinstance(tree, dict):
        return [leaf for v in tree.values() for leaf in _reference_leaves(v)]
    if isinstance(tree, (tuple, list)):
        return [leaf for v in tree for leaf in _reference_leaves(v)]
    return [tree]


def _shape(tree):
    """The shape of a tree, independently of the module: containers and keys, leaves as '*'."""
    if isinstance(tree, dict):
        return ("dict", tuple((k, _shape(v)) for k, v in tree.items()))
    if isinstance(tree, tuple):
        kind = type(tree) if hasattr(tree, "_fields") else tuple
        return (kind, tuple(_shape(v) for v in tree))
    if isinstance(tree, list):
        return ("list", tuple(_shape(v) for v in tree))
    return "*"


@settings(max_examples=300, deadline=None)
@given(trees)
def test_flatten_then_unflatten_is_the_identity(tree):
    leaves, structure = flatten(tree)
    assert _same(unflatten(structure, leaves), tree)
    assert _same(structure.unflatten(leaves), tree)  # twice: the compiled rebuild is reused
    assert structure.num_leaves == len(leaves)


@settings(max_examples=300, deadline=None)
@given(trees)
def test_leaves_come_depth_first_in_the_containers_own_order(tree):
    leaves = nested.leaves(tree)
    assert [id(x) for x in leaves] == [id(x) for x in _reference_leaves(tree)]
    assert [id(x) for x in leaves] == [id(x) for x in nested.leaves(tree)]


@settings(max_examples=300, deadline=None)
@given(trees, trees)
def test_structures_are_equal_iff_the_trees_have_the_same_shape(a, b):
    sa, sb = nested.structure(a), nested.structure(b)
    assert (sa == sb) == (_shape(a) == _shape(b))
    if sa == sb:
        assert hash(sa) == hash(sb)
        assert _same(sa.unflatten(nested.leaves(b)), b)


class Boxed:
    def __init__(self, value):
        self.value = value


@settings(max_examples=200, deadline=None)
@given(trees)
def test_a_tree_with_other_leaves_has_an_equal_structure(tree):
    other = map_structure(Boxed, tree)
    assert nested.structure(other) == nested.structure(tree)
    assert [id(box.value) for box in nested.leaves(other)] == [id(x) for x in nested.leaves(tree)]


@settings(max_examples=200, deadline=None)
@given(trees)
def test_map_nodes_with_the_default_rebuild_is_a_copy_and_structures_pickle(tree):
    assert _same(map_nodes(tree, lambda leaf: leaf), tree)
    structure = nested.structure(tree)
    assert pickle.loads(pickle.dumps(structure)) == structure


@settings(max_examples=200, deadline=None)
@given(trees)
def test_paths_and_flatten_up_to_reach_each_leaf(tree):
    leaves, structure = flatten(tree)
    for path, leaf in zip(structure.paths(), leaves, strict=True):
        node = tree
        for key in path:
            node = node[key]
        assert node is leaf
    assert [id(x) for x in structure.flatten_up_to(tree)] == [id(x) for x in leaves]


def test_the_rule_nodes_and_leaves():
    assert nested.node_type({}) is dict and nested.node_type(OrderedDict()) is dict
    assert nested.node_type(MappingProxyType({})) is dict
    assert nested.node_type([]) is list and nested.node_type(()) is tuple
    assert nested.node_type(Point(1, 2)) is Point
    for leaf in ("ab", b"ab", None, 3, np.zeros(2), {1, 2}, frozenset(), range(3), np.float32(1)):
        assert nested.node_type(leaf) is None
        assert not nested.is_node(leaf)
        assert flatten(leaf) == ([leaf], Structure(None))


def test_mapping_subclasses_are_rebuilt_as_dicts_in_their_own_key_order():
    tree = OrderedDict([("b", 1), ("a", defaultdict(int, z=2))])
    leaves, structure = flatten(tree)
    assert leaves == [1, 2]
    out = structure.unflatten(leaves)
    assert type(out) is dict and type(out["a"]) is dict and list(out) == ["b", "a"]
    assert structure == nested.structure({"b": 0, "a": {"z": 0}})
    assert structure != nested.structure({"a": {"z": 0}, "b": 0})  # key order is part of the shape


def test_tuple_and_list_subclasses_are_rebuilt_as_plain_ones_namedtuples_keep_their_type():
    class Pair(tuple):
        pass

    class Items(list):
        pass

    out = map_structure(lambda x: x * 10, [Pair((1, 2)), Items([3]), Point(4, 5)])
    assert type(out[0]) is tuple and type(out[1]) is list and type(out[2]) is Point
    assert out == [(10, 20), [30], Point(40, 50)]


def test_is_leaf_stops_the_walk_and_map_nodes_rebuilds_with_the_callers_rule():
    tree = {"x": [1, 2], "y": (3, [4])}
    leaves, structure = flatten(tree, is_leaf=lambda x: isinstance(x, list))
    assert leaves == [[1, 2], 3, [4]]
    assert structure.unflatten(leaves) == tree
    kept = map_nodes(OrderedDict(a=1), lambda x: x + 1, lambda node, values: type(node)(values))
    assert type(kept) is OrderedDict and kept == {"a": 2}
    assert map_nodes({"a": [1, (2,)]}, lambda x: -x) == {"a": [-1, (-2,)]}


def test_mismatches_are_errors():
    with pytest.raises(ValueError, match="one structure"):
        map_structure(lambda a, b: a + b, [1, 2], [1, 2, 3])
    with pytest.raises(ValueError, match="leaves"):
        nested.structure([1, 2]).unflatten([1])
    with pytest.raises(ValueError, match="members"):
        nested.structure([1, 2]).flatten_up_to([1])
    assert map_structure(lambda a, b: a + b, {"a": 1, "b": (2,)}, {"a": 10, "b": (20,)}) == {"a": 11, "b": (22,)}


def test_repr_shows_the_shape():
    assert repr(nested.structure({"a": [1, (2,)], "p": Point(1, 2)})) == "Structure({'a': [*, (*,)], 'p': Point(x=*, y=*)})"
