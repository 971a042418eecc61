"""Default collation: ``default_collate(samples)`` stacks a list of observations into one batch.

Nested dicts (any mapping), tuples, namedtuples and lists are kept (``core.nested``'s rule; the
batch holds plain dicts, tuples and lists, and namedtuples of their own type); each array leaf
(NumPy arrays and scalars, Python numbers, anything with ``__array__``) becomes one
``(n, *shape)`` array, each other leaf (strings, bytes, None, objects) a list. Every sample must
have the first sample's structure, shapes and safely castable dtypes; a mismatch raises
``ValueError`` / ``TypeError`` naming the sample and the field.

The rules live in the batch structure, ``core.spec.Spec``, which the loader also uses to
preallocate reusable batch buffers (``core.slots``) and write samples straight into them, so its
batches equal ``default_collate`` of the same samples.
"""

from __future__ import annotations

from typing import Any

from .spec import Spec

__all__ = ["default_collate"]


def default_collate(samples: list[Any]) -> Any:
    """Stack observations: nested dicts/tuples/lists kept, arrays and numbers stacked, other objects listed.

    Every sample must have the first sample's structure, shapes and (safely castable) dtypes;
    a mismatch raises ``ValueError``/``TypeError`` naming the sample and the field.
    """
    if not samples:
        raise ValueError("cannot collate an empty list of samples")
    spec = Spec.of(samples[0])
    storage = spec.allocate(len(samples))
    for j, sample in enumerate(samples):
        spec.write(storage, j, sample, f"sample {j}")
    return spec.build(storage)
