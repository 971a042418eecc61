"""Nested samples: the one rule for what is a container, and flatten / unflatten over it.

A sample is a tree. Its *nodes* are, and only these:

* namedtuples (a tuple with ``_fields``): children in field order, rebuilt as their own type
  (``type(*values)``);
* other tuples (tuple subclasses too): rebuilt as plain tuples;
* lists (list subclasses too): rebuilt as plain lists;
* mappings (any ``collections.abc.Mapping``: dict, OrderedDict, defaultdict, a custom one):
  children in the mapping's own iteration order (keys are not sorted, unlike
  ``jax.tree_util``), rebuilt as plain dicts in that order.

Everything else is a leaf: arrays, tensors, numbers, strings, bytes, None, sets, custom sequences.
This is the rule of ``default_collate`` (whose batches are plain dicts, tuples, lists and
namedtuples); walkers that must keep a container's own type (the JAX and torch device movers,
which keep an OrderedDict an OrderedDict) use the same rule to find the nodes and pass their own
``node`` function to ``map_nodes``.

The model is ``jax.tree_util``'s: ``flatten(tree)`` gives the leaves, depth first, and a
``Structure`` whose ``unflatten(leaves)`` rebuilds the tree; two structures compare equal when
their trees have the same shape (the same node types, namedtuple classes, keys in the same order,
and numbers of members), so the leaves of one can be unflattened with the other. ``is_leaf``
(as in JAX) makes more values leaves: the data containers use it for lists, which are containers
of samples there, never groups.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from itertools import islice
from typing import Any

__all__ = [
    "Structure",
    "flatten",
    "is_namedtuple",
    "is_node",
    "items",
    "leaves",
    "map_nodes",
    "map_structure",
    "node_type",
    "rebuild",
    "structure",
    "unflatten",
]

IsLeaf = Callable[[Any], bool]


def is_namedtuple(x: Any) -> bool:
    """Whether ``x`` is a namedtuple (a tuple whose type has ``_fields``)."""
    return isinstance(x, tuple) and hasattr(x, "_fields")


def node_type(x: Any) -> type | None:
    """The type ``x`` is rebuilt as when it is a node (dict, list, tuple or its namedtuple class), else None."""
    if isinstance(x, Mapping):  # first, as everywhere: a mapping that is also a sequence is a mapping
        return dict
    if isinstance(x, tuple):
        return type(x) if hasattr(x, "_fields") else tuple
    if isinstance(x, list):
        return list
    return None


def is_node(x: Any) -> bool:
    """Whether ``x`` is a node (a tuple, list or mapping), not a leaf."""
    return isinstance(x, (tuple, list, Mapping))


def items(node: Any) -> list[tuple[Any, Any]]:
    """A node's members with their keys: a mapping's items, a sequence's ``enumerate``."""
    return list(node.items()) if isinstance(node, Mapping) else list(enumerate(node))


def rebuild(original: Any, values: Any) -> Any:
    """The node ``original`` rebuilt with new members ``values`` as the rule says: a dict, a list,
    a tuple, or a namedtuple of ``original``'s type. ``values``: a list in member order, or for a
    mapping a dict, key for key."""
    if isinstance(original, Mapping):
        return values if type(values) is dict else dict(zip(original.keys(), values))
    if isinstance(original, tuple):
        return type(original)(*values) if hasattr(original, "_fields") else tuple(values)
    return values if type(values) is list else list(values)


class Structure:
    """The shape of a tree: ``type`` (dict, list, tuple, a namedtuple class; None for a leaf),
    ``keys`` (a mapping's, in order; None otherwise), ``children`` (the members' structures) and
    ``num_leaves``. Immutable and hashable; equal iff the shapes are equal."""

    __slots__ = ("_builder", "_hash", "children", "keys", "num_leaves", "type")

    def __init__(self, type: type | None, keys: tuple[Any, ...] | None = None, children: tuple[Structure, ...] = ()):
        self.type, self.keys = type, keys
        self.children = children = children if children.__class__ is tuple else tuple(children)
        self.num_leaves = 1 if type is None else sum([c.num_leaves for c in children])
        self._hash: int | None = None
        self._builder: Callable[[Iterator[Any]], Any] | None = None

    @property
    def is_leaf(self) -> bool:
        return self.type is None

    def unflatten(self, leaves: Sequence[Any]) -> Any:
        """The tree of this shape with ``leaves`` (in ``flatten``'s order) at its leaves."""
        if len(leaves) != self.num_leaves:
            raise ValueError(f"{self!r} has {self.num_leaves} leaves, got {len(leaves)}")
        builder = self._builder
        if builder is None:
            builder = self._builder = _builder(self)
        return builder(iter(leaves))

    def flatten_up_to(self, tree: Any) -> list[Any]:
        """The parts of ``tree`` at this structure's leaves, in leaf order: ``tree`` has this shape
        down to them (a mapping's members are taken by this structure's keys; a part may be a tree)."""
        if self.type is None:
            return [tree]
        if self.type is dict:
            return [part for k, child in zip(self.keys or (), self.children) for part in child.flatten_up_to(tree[k])]
        if len(tree) != len(self.children):
            raise ValueError(f"{self!r} has {len(self.children)} members, got {len(tree)}")
        return [part for member, child in zip(tree, self.children) for part in child.flatten_up_to(member)]

    def paths(self) -> list[tuple[Any, ...]]:
        """Each leaf's path from the root: the keys and indices that reach it, in leaf order."""
        if self.type is None:
            return [()]
        names = self.keys if self.keys is not None else range(len(self.children))
        return [(name, *path) for name, child in zip(names, self.children) for path in child.paths()]

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        if not isinstance(other, Structure):
            return NotImplemented
        return self.type is other.type and self.keys == other.keys and self.children == other.children

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash((self.type, self.keys, self.children))
        return self._hash

    def __reduce__(self) -> tuple[Any, ...]:
        return (Structure, (self.type, self.keys, self.children))

    def __repr__(self) -> str:
        return f"Structure({self._show()})"

    def _show(self) -> str:
        if self.type is None:
            return "*"
        shown = [c._show() for c in self.children]
        if self.type is dict:
            return "{" + ", ".join(f"{k!r}: {s}" for k, s in zip(self.keys or (), shown)) + "}"
        if self.type is list:
            return "[" + ", ".join(shown) + "]"
        if self.type is tuple:
            return "(" + ", ".join(shown) + ("," if len(shown) == 1 else "") + ")"
        return f"{self.type.__name__}(" + ", ".join(f"{f}={s}" for f, s in zip(self.type._fields, shown)) + ")"


LEAF = Structure(None)


def _builder(s: Structure) -> Callable[[Iterator[Any]], Any]:
    """A function that rebuilds a tree of shape ``s`` from an iterator of its leaves (made once per
    structure: the rebuild then does no type dispatch)."""
    if s.type is None:
        return next
    count = len(s.children)
    kind, keys = s.type, s.keys
    if all(c.type is None for c in s.children):  # members are all leaves: one slice of the iterator
        if kind is dict:
            return lambda it: dict(zip(keys, it))  # zip stops at the last key without taking more
        if kind is list:
            return lambda it: list(islice(it, count))
        if kind is tuple:
            return lambda it: tuple(islice(it, count))
        return lambda it: kind(*islice(it, count))
    members = [_builder(c) for c in s.children]
    if kind is dict:
        pairs = list(zip(keys, members))
        return lambda it: {k: member(it) for k, member in pairs}
    if kind is list:
        return lambda it: [member(it) for member in members]
    if kind is tuple:
        return lambda it: tuple([member(it) for member in members])
    return lambda it: kind(*[member(it) for member in members])


def flatten(tree: Any, is_leaf: IsLeaf | None = None) -> tuple[list[Any], Structure]:
    """The leaves of ``tree``, depth first, and the ``Structure`` that rebuilds it from them."""
    out: list[Any] = []
    return out, _flatten(tree, out, is_leaf)


def _flatten(x: Any, out: list[Any], is_leaf: IsLeaf | None) -> Structure:
    kind = None if is_leaf is not None and is_leaf(x) else node_type(x)
    if kind is None:
        out.append(x)
        return LEAF
    if kind is dict:
        keys = []
        children = []
        for k, v in x.items():
            keys.append(k)
            children.append(_flatten(v, out, is_leaf))
        return Structure(dict, tuple(keys), tuple(children))
    return Structure(kind, None, tuple([_flatten(v, out, is_leaf) for v in x]))


def unflatten(structure: Structure, leaves: Sequence[Any]) -> Any:
    """``structure.unflatten(leaves)``."""
    return structure.unflatten(leaves)


def leaves(tree: Any, is_leaf: IsLeaf | None = None) -> list[Any]:
    """The leaves of ``tree``, depth first."""
    return flatten(tree, is_leaf)[0]


def structure(tree: Any, is_leaf: IsLeaf | None = None) -> Structure:
    """The ``Structure`` of ``tree``."""
    return flatten(tree, is_leaf)[1]


def map_structure(fn: Callable[..., Any], tree: Any, *rest: Any, is_leaf: IsLeaf | None = None) -> Any:
    """``fn`` applied leaf by leaf to trees of one shape, rebuilt in that shape (as ``rebuild`` does).

    Raises ``ValueError`` when a tree in ``rest`` has another structure than ``tree``."""
    first, shape = flatten(tree, is_leaf)
    columns = [first]
    for other in rest:
        values, other_shape = flatten(other, is_leaf)
        if other_shape != shape:
            raise ValueError(f"map_structure needs trees of one structure: {shape!r} and {other_shape!r}")
        columns.append(values)
    return shape.unflatten([fn(*args) for args in zip(*columns)])


def map_nodes(
    tree: Any,
    leaf: Callable[[Any], Any],
    node: Callable[[Any, Any], Any] = rebuild,
    is_leaf: IsLeaf | None = None,
) -> Any:
    """Rebuild ``tree`` bottom up: ``leaf(x)`` at each leaf, ``node(original, values)`` at each
    node, where ``values`` are its mapped members (a dict for a mapping, a list for a sequence).
    The default ``node`` is ``rebuild``; the device movers pass one that keeps container types."""

    def walk(x: Any) -> Any:
        if is_leaf is not None and is_leaf(x):
            return leaf(x)
        if isinstance(x, Mapping):
            return node(x, {k: walk(v) for k, v in x.items()})
        if isinstance(x, (tuple, list)):
            return node(x, [walk(v) for v in x])
        return leaf(x)

    return walk(tree)
