"""The data container protocol: ``numobs``, ``getobs`` and ``getobs_into``.

Anything with ``__len__`` and ``__getitem__(int)`` is a container of observations. NumPy arrays
hold observations on axis 0. Tuples (named or not) and dicts *group* containers of equal length:
observation ``i`` of a group is the group of the members' observations ``i``. Lists are plain
containers (a list of samples), never groups: a list of equal-length arrays is ambiguous, and a
list of file names or dicts is the common case.

Two optional methods make a container faster, and the loader uses them when present:
``__getitems__(indices)`` returns a list of observations in one call, and
``getobs_into(buffer, index)`` writes observation ``index`` into a preallocated ``buffer``
(a nested structure of arrays shaped like one observation) instead of returning a new one.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from . import nested

__all__ = ["getobs", "getobs_into", "is_group", "numobs", "origin_note", "write_obs"]


def origin_note(data: Any, index: int) -> str:
    """`` (file x.jpg)``: where observation ``index`` of ``data`` comes from, for error messages,
    when the container says (the optional ``data.sample_origin(index)``, as ``ss.imagefolder``
    has), else "". Never raises: naming a sample must not hide its error."""
    origin = getattr(data, "sample_origin", None)
    if not callable(origin):
        return ""
    try:
        found = origin(index)
    except Exception:  # noqa: BLE001 - naming the sample must not hide the error itself
        return ""
    return f" ({found})" if found else ""


def is_group(data: Any) -> bool:
    """True for the structures that group containers: tuples (named too) and mappings (a mapping
    that is also a list too: ``core.nested`` counts it a mapping), not lists."""
    return isinstance(data, (tuple, Mapping))


def flatten_group(data: Any) -> tuple[list[Any], nested.Structure]:
    """The containers a group holds, depth first (nested groups included), and the structure that
    regroups them; a container that is not a group is its own single member."""
    return nested.flatten(data, is_leaf=_not_group)


def _not_group(data: Any) -> bool:
    return isinstance(data, list)  # a list is a container of samples, never a group


def numobs(data: Any) -> int:
    """The number of observations in ``data``.

    Raises ``ValueError`` when the members of a group differ in length (naming them) and
    ``TypeError`` when ``data`` is not a container.
    """
    if isinstance(data, np.ndarray):
        if data.ndim == 0:
            raise TypeError("a 0-d array holds no observations: expected an array with at least one axis")
        return data.shape[0]
    if is_group(data):
        items = nested.items(data)
        if not items:
            raise ValueError(f"an empty {type(data).__name__} groups no containers: expected at least one member")
        counts = [(key, numobs(member)) for key, member in items]
        first_key, first = counts[0]
        for key, count in counts[1:]:
            if count != first:
                raise ValueError(
                    f"the members of a {type(data).__name__} must hold equal numbers of observations: "
                    f"member {key!r} has {count} but member {first_key!r} has {first}"
                )
        return first
    if isinstance(data, (str, bytes)):
        raise TypeError(f"a {type(data).__name__} is not a data container: wrap it in a list to make one observation")
    try:
        return len(data)
    except TypeError:
        raise TypeError(
            f"expected a data container (an object with __len__ and __getitem__, a NumPy array, "
            f"or a tuple/dict of those), got {type(data).__name__}"
        ) from None


def _check_index(data: Any, index: Any) -> int:
    """Normalise one integer index (negative counts from the end) and bounds-check it."""
    try:
        i = int(index)
    except TypeError:
        raise TypeError(f"observation index must be an integer, got {type(index).__name__}") from None
    if i != index or isinstance(index, bool):
        raise TypeError(f"observation index must be an integer, got {index!r}")
    n = numobs(data)
    if i < 0:
        i += n
    if not 0 <= i < n:
        raise IndexError(f"observation index {index} is out of range for a container of {n} observations")
    return i


def _is_many(index: Any) -> bool:
    return isinstance(index, (Sequence, np.ndarray, range)) and not isinstance(index, (str, bytes))


def getobs(data: Any, index: Any) -> Any:
    """Observation ``index`` of ``data``, or the observations at a sequence of indices.

    One index gives one observation. A sequence of indices gives a batch: a sub-array for arrays,
    a group of batches for groups, the result of ``__getitems__`` when the container has one,
    else a list of observations.
    """
    if _is_many(index):
        return _getobs_many(data, index)
    if isinstance(data, np.ndarray):
        return data[_check_index(data, index)]
    if is_group(data):
        i = _check_index(data, index)
        return nested.rebuild(data, [getobs(member, i) for _, member in nested.items(data)])
    return data[index]


def _getobs_many(data: Any, indices: Any) -> Any:
    if isinstance(data, np.ndarray):
        return data[np.asarray(indices, dtype=np.intp)]
    if is_group(data):
        return nested.rebuild(data, [_getobs_many(member, indices) for _, member in nested.items(data)])
    many = getattr(data, "__getitems__", None)
    if many is not None:
        return many([int(i) for i in indices])
    return [data[int(i)] for i in indices]


def write_obs(buffer: Any, value: Any, where: str = "observation") -> Any:
    """Write ``value`` into the nested array structure ``buffer``; return what the caller should keep.

    Array leaves are written in place (shapes must match exactly; NumPy values must cast safely and
    Python numbers must fit, as ``default_collate`` requires: nothing wraps or rounds silently). Leaves that are not arrays
    (strings, objects) cannot be written in place and are returned as they are.
    """
    if isinstance(buffer, np.ndarray):
        shape = np.shape(value)
        if shape != buffer.shape:
            raise ValueError(f"{where} has shape {shape} but the buffer expects {buffer.shape}")
        # NumPy values must cast safely (int64 -> int8 would wrap), as default_collate requires;
        # Python numbers only need to fit, which copyto checks as it stores them
        source = value.dtype if isinstance(value, (np.ndarray, np.generic)) else None
        try:
            if source is not None and not np.can_cast(source, buffer.dtype, casting="safe"):
                raise TypeError(f"{source} to {buffer.dtype} is not a safe cast")
            np.copyto(buffer, value, casting="same_kind")
        except (TypeError, OverflowError) as exc:
            raise TypeError(
                f"{where} has dtype {np.asarray(value).dtype} which cannot be written into a buffer "
                f"of dtype {buffer.dtype} without losing information"
            ) from exc
        return buffer
    kind = nested.node_type(buffer)
    if kind is None:
        return value
    if kind is dict:
        if not isinstance(value, Mapping) or value.keys() != buffer.keys():
            found = sorted(value.keys()) if isinstance(value, Mapping) else type(value).__name__
            raise ValueError(f"{where} has keys {found} but the buffer expects {sorted(buffer.keys())}")
        return {k: write_obs(buffer[k], value[k], f"{where}[{k!r}]") for k in buffer}
    if not isinstance(value, (tuple, list)) or len(value) != len(buffer):
        raise ValueError(f"{where} is {type(value).__name__} of {_len_or(value)} but the buffer expects {len(buffer)} members")
    out = [write_obs(b, v, f"{where}[{k}]") for k, (b, v) in enumerate(zip(buffer, value))]
    if kind is tuple:
        return type(buffer)(out)  # a user's tuple subclass of a buffer keeps its type here
    return nested.rebuild(buffer, out)


def _len_or(value: Any) -> str:
    try:
        return f"length {len(value)}"
    except TypeError:
        return "no length"


def getobs_into(buffer: Any, data: Any, index: int) -> Any:
    """Write observation ``index`` of ``data`` into ``buffer`` and return the observation.

    ``buffer`` is a nested structure of arrays shaped like one observation. Containers that define
    ``getobs_into(buffer, index)`` write in place themselves; others fall back to ``getobs`` and a
    checked copy. Array leaves of the result are the buffer's own arrays; leaves that cannot be
    written in place (strings, objects) are returned fresh.
    """
    if isinstance(data, np.ndarray):
        return write_obs(buffer, data[_check_index(data, index)], f"observation {index}")
    if is_group(data):
        i = _check_index(data, index)
        items = nested.items(data)
        if nested.node_type(data) is dict:
            if not isinstance(buffer, Mapping) or buffer.keys() != data.keys():
                raise ValueError(f"buffer keys {sorted(buffer) if isinstance(buffer, Mapping) else type(buffer).__name__} do not match the data's keys {sorted(data.keys())}")
            return {k: getobs_into(buffer[k], member, i) for k, member in items}
        if not isinstance(buffer, (tuple, list)) or len(buffer) != len(items):
            raise ValueError(f"buffer does not match a group of {len(items)} containers")
        return nested.rebuild(data, [getobs_into(b, member, i) for b, (_, member) in zip(buffer, items)])
    into = getattr(data, "getobs_into", None)
    if into is not None:
        result = into(buffer, index)
        return buffer if result is None else result
    return write_obs(buffer, getobs(data, index), f"observation {index}")
