"""The torch generators an epoch of a ``DataLoader`` draws from: found, saved and drawn from again.

An epoch draws torch's base seed (and an ``IterDataPipe``'s seed) at ``iter()``, then its sampler's
indices, from the loader's ``generator``, a sampler's own ``generator`` or torch's global (default)
generator. To resume an epoch exactly, the states those generators had before the draws are kept
and the draws are made again from them.

* ``generators(loader)``: the generators by name: ``"global"`` (``torch.default_generator``)
  always, then the private ones, each generator once: ``"generator"`` (the loader's),
  ``"sampler"``, ``"batch_sampler"`` and ``"batch_sampler.sampler"`` (a sampler's ``.generator``).
* ``states(generators)``: their states now (copies).
* ``encode``/``decode``: a state as an ASCII string (base64 of its bytes) and back, so a
  ``state_dict()`` is JSON-serializable and survives ``torch.save``/``torch.load(weights_only=True)``.
* ``replayed(generators, saved)``: a context in which each generator is at its saved state; on
  leaving it, each is put back as it was before, unless it already was exactly at the saved state:
  then the draws made inside have advanced it as they advanced it in the interrupted run.
* ``restart_from(generators, saved)``: the private generators set to their saved states and left
  there (draws made later, lazily, follow from them); the global one is not touched.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import torch

GLOBAL = "global"


def generators(loader: Any) -> dict[str, torch.Generator]:
    """The generators an epoch of ``loader`` (a torch DataLoader) may draw from, by name."""
    batch_sampler = getattr(loader, "batch_sampler", None)
    candidates = (
        ("generator", getattr(loader, "generator", None)),
        ("sampler", getattr(getattr(loader, "sampler", None), "generator", None)),
        ("batch_sampler", getattr(batch_sampler, "generator", None)),
        ("batch_sampler.sampler", getattr(getattr(batch_sampler, "sampler", None), "generator", None)),
    )
    found: dict[str, torch.Generator] = {GLOBAL: torch.default_generator}
    for name, generator in candidates:
        if isinstance(generator, torch.Generator) and all(generator is not known for known in found.values()):
            found[name] = generator
    return found


def states(gens: Mapping[str, torch.Generator]) -> dict[str, torch.Tensor]:
    """Each generator's state now (a copy: drawing later does not change it)."""
    return {name: g.get_state() for name, g in gens.items()}


def encode(state: torch.Tensor) -> str:
    """A generator state as ASCII text."""
    return base64.b64encode(state.numpy().tobytes()).decode("ascii")


def decode(text: str) -> torch.Tensor:
    """The generator state ``encode`` wrote (ValueError if ``text`` is not one)."""
    if not isinstance(text, str):
        raise ValueError(f"a generator state must be the text state_dict() wrote, got {type(text).__name__}")
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError) as exc:
        raise ValueError(f"not a generator state written by state_dict(): {exc}") from None
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8)


@contextmanager
def replayed(gens: Mapping[str, torch.Generator], saved: Mapping[str, torch.Tensor]) -> Iterator[None]:
    """Draw from the ``saved`` states inside; afterwards each generator is as it was before the
    context, except one that was exactly at its saved state: that one keeps the draws' advance."""
    before: dict[str, torch.Tensor | None] = {}
    try:
        for name, state in saved.items():
            g = gens[name]
            now = g.get_state()
            before[name] = None if _same(now, state) else now
            g.set_state(state)
        yield
    finally:
        for name, now in before.items():
            if now is not None:
                gens[name].set_state(now)


def restart_from(gens: Mapping[str, torch.Generator], saved: Mapping[str, torch.Tensor]) -> None:
    """Set the private generators to their ``saved`` states and leave them there."""
    for name, state in saved.items():
        if name != GLOBAL:
            gens[name].set_state(state)


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and bool(torch.equal(a, b))
