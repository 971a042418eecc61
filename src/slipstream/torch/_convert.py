"""The collate plan: slipstream's default-collated NumPy batches turned into exactly what torch's
``default_collate`` returns.

``collate_plan(sample)`` looks at one sample (sample 0) and returns a function from slipstream's
default collation of samples shaped like it (NumPy buffers nested as the sample is) to
``default_collate``'s output: tensors viewing the buffers (``torch.from_numpy``, no copy; a
read-only array is copied), strings and bytes as torch's list (a tuple inside a tuple or list
sample), tuples as lists, namedtuples, dicts, and other mappings and list subclasses cloned as torch
clones them. It returns None where the buffers cannot reproduce torch's result (tensor subclasses,
``requires_grad``, bfloat16, ``uint64`` scalars, ``None``, custom sequences, ...): the loader then
collates with torch's ``default_collate`` itself. ``keep`` is the identity plan.

A packed file's ``F.JSON`` fields (and any object-typed value) can differ in structure from batch
to batch: every step of a plan checks that its batch still has the structure it was made for (a
list's length, a dict's keys, an array where an array was) and converts a batch that does not by
its own structure (``_by_structure``), so no member or key is ever dropped.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

import numpy as np
import torch
from torch.utils.data import default_collate as _torch_collate

from ..core import nested
from ..images.device.hostfield import StagedImage

# NumPy dtypes that ``torch.from_numpy`` turns into the tensor dtype default_collate gives
_ARRAY_DTYPES = frozenset(
    np.dtype(t)
    for t in (np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64)
    + (np.float16, np.float32, np.float64, np.complex64, np.complex128)
)
# torch.as_tensor([np.uint64(...), ...]) raises in torch, so those scalars go to torch's collate
_SCALAR_DTYPES = _ARRAY_DTYPES - {np.dtype(np.uint64)}
_TENSOR_DTYPES = frozenset(
    (torch.bool, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8, torch.uint16, torch.uint32)
    + (torch.uint64, torch.float16, torch.float32, torch.float64, torch.complex64, torch.complex128)
)

Convert = Callable[[Any], Any]


def _as_tensor(array: np.ndarray) -> torch.Tensor:
    if type(array) is not np.ndarray or array.dtype not in _ARRAY_DTYPES:  # not the plan's structure
        return _by_structure(array)
    # zero copy: the tensor keeps the batch buffer (and so its slot) reserved while it lives
    return torch.from_numpy(array) if array.flags.writeable else torch.tensor(array)


def keep(value: Any) -> Any:
    return value


def _objects(in_sequence: bool) -> Convert:
    """The plan of a string leaf: slipstream's list of the batch's values, as torch's list (a tuple
    inside a tuple or list sample). Values that are not strings in a later batch (a JSON field)
    are collated by torch's ``default_collate``, as torch would have collated them."""

    def objects(rows: Any) -> Any:
        if type(rows) is not list:
            return _by_structure(rows, in_sequence)
        return _rows(rows, in_sequence)

    return objects


def _rows(rows: list[Any], in_sequence: bool) -> Any:
    """An object leaf's values (strings, None...) as torch's ``default_collate`` gives them: the
    batch itself for strings (torch's ``zip`` tuple inside a sequence), torch's result or error else."""
    batch = tuple(rows) if in_sequence else rows
    if rows and isinstance(rows[0], (str, bytes)):
        return batch
    return _torch_collate(batch)


def _collated(value: Any) -> bool:
    """Whether ``value`` is a collated member of a batch (an array, or a sequence or dict of
    them), not one sample's value in an object leaf's list."""
    if isinstance(value, np.ndarray):
        return value.dtype != object
    return isinstance(value, (list, tuple, dict))


def _by_structure(batch: Any, in_sequence: bool = False) -> Any:
    """slipstream's default collation of a batch converted by the batch's own structure into what
    torch's ``default_collate`` gives for the same samples (for batches whose structure is not the
    plan's: a JSON field's list of another length, a dict with other keys, numbers where the
    first sample had strings...)."""
    if isinstance(batch, np.ndarray):
        if batch.dtype in _ARRAY_DTYPES:
            return _as_tensor(batch)
        return _torch_collate(list(batch))  # torch's result (or error) for these values
    if isinstance(batch, dict):
        return {k: _by_structure(v) for k, v in batch.items()}
    if isinstance(batch, tuple):
        members = [_by_structure(v, True) for v in batch]
        return type(batch)(*members) if hasattr(batch, "_fields") else members  # torch: tuples as lists
    if isinstance(batch, list):
        if all(_collated(v) for v in batch):  # a sequence's members ([] too: torch gives [])
            return [_by_structure(v, True) for v in batch]
        return _rows(batch, in_sequence)
    return batch


def _finished(batch: Any) -> Any:
    if not isinstance(batch, torch.Tensor):
        raise TypeError(f"a device-mapped field's batch should be the finisher's tensor, got {type(batch).__name__}")
    return batch


def collate_plan(sample: Any, in_sequence: bool = False) -> Convert | None:
    """How to turn slipstream's default collation of samples shaped like ``sample`` into exactly
    what torch's ``default_collate`` returns; None when slipstream's buffers cannot reproduce it
    (the loader then collates with torch's ``default_collate`` itself).

    ``in_sequence``: the sample is a member of a tuple or list. torch hands strings back in the
    container it was given: the batch's list at the top and in a mapping, but ``zip``'s tuple in
    a sequence."""
    kind = type(sample)
    if kind is StagedImage:  # a device stage's row: the loader's finisher made the batch a tensor
        return _finished
    if kind is torch.Tensor:  # subclasses keep their own stacking rules: torch's collate
        ok = (
            sample.layout is torch.strided
            and not sample.is_nested
            and not sample.requires_grad
            and sample.device.type == "cpu"
            and sample.dtype in _TENSOR_DTYPES
            and not sample.is_conj()
            and not sample.is_neg()
        )
        return _as_tensor if ok else None
    if kind is np.ndarray or kind is np.memmap:
        return _as_tensor if sample.dtype in _ARRAY_DTYPES else None
    if isinstance(sample, (np.bool_, np.number)):
        return _as_tensor if sample.dtype in _SCALAR_DTYPES else None
    if isinstance(sample, (str, bytes)):  # np.str_ and np.bytes_ too
        return _objects(in_sequence)
    if kind in (bool, int, float):
        return _as_tensor
    node = nested.node_type(sample)
    if node is None:  # another leaf (None, a custom sequence...): torch's collate
        return None
    if node is dict:  # any mapping
        return _plan_mapping(sample)
    members = [collate_plan(v, True) for v in sample]
    if any(m is None for m in members):
        return None
    count = len(members)
    if node is tuple:

        def as_list(batch: Any) -> Any:  # torch turns tuples into lists
            if type(batch) is not tuple or len(batch) != count:
                return _by_structure(batch, in_sequence)
            return [m(v) for m, v in zip(members, batch)]

        return as_list
    if node is not list:  # a namedtuple: slipstream rebuilds the type

        def named(batch: Any) -> Any:
            if type(batch) is not kind:
                return _by_structure(batch, in_sequence)
            return kind(*(m(v) for m, v in zip(members, batch)))

        return named
    if kind is list:

        def members_of(batch: Any) -> Any:
            if type(batch) is not list or len(batch) != count:  # a JSON list of another length
                return _by_structure(batch, in_sequence)
            return [m(v) for m, v in zip(members, batch)]

        return members_of
    proto = copy.copy(sample)  # torch clones a list subclass and fills the clone
    for i in range(len(proto)):
        proto[i] = None

    def clone_list(batch: Any) -> Any:
        if type(batch) is not list or len(batch) != count:
            return _by_structure(batch, in_sequence)
        out = copy.copy(proto)
        for i, (m, v) in enumerate(zip(members, batch)):
            out[i] = m(v)
        return out

    return clone_list


def _plan_mapping(sample: Mapping) -> Convert | None:
    members = {k: collate_plan(v) for k, v in sample.items()}
    if any(m is None for m in members.values()):
        return None
    items = list(members.items())
    keys = list(members)
    if type(sample) is dict:

        def as_dict(batch: Any) -> Any:
            if type(batch) is not dict or list(batch) != keys:  # a JSON dict with other keys
                return _by_structure(batch)
            return {k: m(batch[k]) for k, m in items}

        return as_dict
    kind = type(sample)
    proto: Any = None
    if isinstance(sample, MutableMapping):
        try:  # torch: clone = copy.copy(first_sample); clone.update(collated)
            proto = copy.copy(sample)
            proto.update({k: None for k in members})
        except TypeError:
            proto = None

    def clone_mapping(batch: Any) -> Any:
        if type(batch) is not dict or list(batch) != keys:
            return _by_structure(batch)
        values = {k: m(batch[k]) for k, m in items}
        try:
            if proto is not None:
                out = copy.copy(proto)
                out.update(values)
                return out
            return kind(values)
        except TypeError:
            return values

    return clone_mapping
