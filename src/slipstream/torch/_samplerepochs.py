"""The epochs of a loader's samplers that keep one (``DistributedSampler``: ``epoch`` and ``set_epoch``).

torch leaves ``set_epoch`` to the user, and such a sampler's permutation is a function of its
epoch: a resumed epoch drawn at another epoch than the interrupted one would hand out another
permutation's rest (repeating some samples, losing others). So a mid-epoch state records each
such sampler's epoch when the epoch drew (``draws.sampler_epochs``), ``load_state_dict`` sets the
samplers to it, and the resumed epoch refuses to draw from a sampler moved to another epoch since
(``set_epoch`` called after ``load_state_dict`` with another number): ``ValueError`` saying which
``set_epoch`` call the resumed epoch needs. A sampler with ``set_epoch`` whose epoch cannot be
read (no integer ``epoch`` attribute) cannot be put back at its epoch, so a mid-epoch state is
refused for it (``check_readable``) rather than resumed from whatever epoch it is at.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["check_epochs", "check_readable", "epoch_samplers", "epochs_of", "parse_epochs", "set_epochs"]


def _keeps_epoch(obj: Any) -> bool:
    epoch = getattr(obj, "epoch", None)
    return isinstance(epoch, int) and not isinstance(epoch, bool) and callable(getattr(obj, "set_epoch", None))


_DEPTH = 4  # sampler wrappers looked through (accelerate's BatchSamplerShard(BatchSampler(DistributedSampler)): 3)


def _samplers(loader: Any) -> list[tuple[str, Any]]:
    """The loader's samplers and those they wrap (their ``sampler`` and ``batch_sampler``), each
    object once, by the path it is reached by: "sampler", "batch_sampler", "batch_sampler.sampler",
    "batch_sampler.batch_sampler.sampler"..., at most ``_DEPTH`` attributes deep."""
    found: list[tuple[str, Any]] = []
    seen: set[int] = set()
    todo = [(name, getattr(loader, name, None)) for name in ("sampler", "batch_sampler")]
    while todo:
        name, obj = todo.pop(0)
        if obj is None or id(obj) in seen:
            continue
        seen.add(id(obj))
        found.append((name, obj))
        if name.count(".") + 1 < _DEPTH:
            todo += [(f"{name}.{inner}", getattr(obj, inner, None)) for inner in ("sampler", "batch_sampler")]
    return found


def check_readable(loader: Any) -> None:
    """``ValueError`` when one of the loader's samplers has ``set_epoch`` but no integer ``epoch``
    to read it by (a mid-epoch state cannot put it back at the epoch the interrupted epoch drew at)."""
    for name, obj in _samplers(loader):
        if obj is not None and callable(getattr(obj, "set_epoch", None)) and not _keeps_epoch(obj):
            kind = type(obj).__name__
            raise ValueError(
                f"cannot resume mid-epoch: loader.{name} ({kind}) has set_epoch() but no integer `epoch` attribute, so the "
                f"loader can neither record the epoch its order was drawn at nor set it back, and the rest of the epoch could "
                f"come from another epoch's permutation (repeating some samples, losing others). Keep the epoch in "
                f"`self.epoch` (as DistributedSampler does) and the state records and restores it; or resume at an epoch's start"
            )


def epoch_samplers(loader: Any) -> dict[str, Any]:
    """The loader's samplers that keep an epoch, by where they are (see ``_samplers``: a
    ``DistributedSampler`` under a ``BatchSampler``, or under accelerate's ``BatchSamplerShard``
    too); each object once."""
    return {name: obj for name, obj in _samplers(loader) if _keeps_epoch(obj)}


def epochs_of(samplers: Mapping[str, Any]) -> dict[str, int]:
    """Each sampler's epoch now."""
    return {name: int(obj.epoch) for name, obj in samplers.items()}


def parse_epochs(value: Any) -> dict[str, int] | None:
    """``state["draws"]["sampler_epochs"]`` checked (None where the state holds none)."""
    if value is None:
        return None
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0 for k, v in value.items()
    ):
        raise ValueError(f"state['draws']['sampler_epochs'] must map sampler names to epochs >= 0, got {value!r:.200}")
    return dict(value)


def set_epochs(samplers: Mapping[str, Any], saved: Mapping[str, int]) -> None:
    """Put each sampler the resumed epoch drew from back at the epoch it drew at."""
    for name, epoch in saved.items():
        obj = samplers.get(name)
        if obj is not None and obj.epoch != epoch:
            obj.set_epoch(epoch)


def check_epochs(samplers: Mapping[str, Any], saved: Mapping[str, int]) -> None:
    """``ValueError`` unless every sampler the resumed epoch drew from is at the epoch it drew at."""
    for name, epoch in saved.items():
        obj = samplers.get(name)
        if obj is not None and obj.epoch != epoch:
            kind = type(obj).__name__
            raise ValueError(
                f"the resumed epoch was drawn from loader.{name} ({kind}) at set_epoch({epoch}), but it is now at epoch "
                f"{obj.epoch} (set_epoch({obj.epoch}) was called after load_state_dict, which set it to {epoch}): the rest "
                f"of the epoch would come from another permutation, repeating some samples and losing others. Call "
                f"set_epoch({epoch}) for the resumed epoch (or leave it: load_state_dict sets it), then the next epoch's number"
            )
