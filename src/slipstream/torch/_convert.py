"""The collate plan: slipstream's default-collated NumPy batches turned into exactly what torch's
``default_collate`` returns.

``_plan(sample)`` looks at one sample (sample 0) and returns a function from slipstream's
default collation of samples shaped like it (NumPy buffers nested as the sample is) to
``default_collate``'s output: tensors viewing the buffers (``torch.from_numpy``, no copy; a
read-only array is copied), strings and bytes as torch's list (a tuple inside a tuple or list
sample), tuples as lists, namedtuples, dicts, and other mappings and list subclasses cloned as torch
clones them. It returns None where the buffers cannot reproduce torch's result (tensor subclasses,
``requires_grad``, bfloat16, ``uint64`` scalars, ``None``, custom sequences, ...): the loader then
collates with torch's ``default_collate`` itself. ``_keep`` is the identity plan.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any

import numpy as np
import torch

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
    # zero copy: the tensor keeps the batch buffer (and so its slot) reserved while it lives
    return torch.from_numpy(array) if array.flags.writeable else torch.tensor(array)


def _keep(value: Any) -> Any:
    return value


def _plan(sample: Any, in_sequence: bool = False) -> Convert | None:
    """How to turn slipstream's default collation of samples shaped like ``sample`` into exactly
    what torch's ``default_collate`` returns; None when slipstream's buffers cannot reproduce it
    (the loader then collates with torch's ``default_collate`` itself).

    ``in_sequence``: the sample is a member of a tuple or list. torch hands strings back in the
    container it was given: the batch's list at the top and in a mapping, but ``zip``'s tuple in
    a sequence."""
    kind = type(sample)
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
        return tuple if in_sequence else _keep
    if kind in (bool, int, float):
        return _as_tensor
    if isinstance(sample, Mapping):
        return _plan_mapping(sample)
    if isinstance(sample, tuple):
        members = [_plan(v, True) for v in sample]
        if any(m is None for m in members):
            return None
        if hasattr(sample, "_fields"):  # namedtuple: slipstream rebuilds the type
            return lambda batch: kind(*(m(v) for m, v in zip(members, batch)))
        return lambda batch: [m(v) for m, v in zip(members, batch)]  # torch turns tuples into lists
    if isinstance(sample, list):
        members = [_plan(v, True) for v in sample]
        if any(m is None for m in members):
            return None
        if kind is list:
            return lambda batch: [m(v) for m, v in zip(members, batch)]
        proto = copy.copy(sample)  # torch clones a list subclass and fills the clone
        for i in range(len(proto)):
            proto[i] = None

        def clone_list(batch: Any) -> Any:
            out = copy.copy(proto)
            for i, (m, v) in enumerate(zip(members, batch)):
                out[i] = m(v)
            return out

        return clone_list
    return None


def _plan_mapping(sample: Mapping) -> Convert | None:
    members = {k: _plan(v) for k, v in sample.items()}
    if any(m is None for m in members.values()):
        return None
    items = list(members.items())
    if type(sample) is dict:
        return lambda batch: {k: m(batch[k]) for k, m in items}
    kind = type(sample)
    proto: Any = None
    if isinstance(sample, MutableMapping):
        try:  # torch: clone = copy.copy(first_sample); clone.update(collated)
            proto = copy.copy(sample)
            proto.update({k: None for k in members})
        except TypeError:
            proto = None

    def clone_mapping(batch: Any) -> Any:
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
