"""A ``DataLoader``'s checkpoint: the dict ``state_dict()`` returns and ``load_state_dict`` reads.

The state (JSON-serializable; generator states are base64 text) holds:

* ``epoch``: epochs finished before the one in progress (the next one's number at an epoch's end);
  ``batch``: that epoch's batches handed out (a batch whose loading raised, where the epoch went
  on, counts as handed out);
* ``draws`` (None at an epoch boundary): how the epoch in progress drew, to draw again:
  ``iter`` the generators' states at its ``iter()`` (before torch's base seed), ``sampler`` their
  states before its sampler's draw, ``drew_base_seed``, and ``sampler_epochs``: the epoch of each
  sampler that keeps one (``DistributedSampler``) at the draw, which the resumed epoch draws at
  (``_samplerepochs``; a state whose ``draws`` lack it is resumed without checking those epochs);
* ``generators``: the private generators' states now (the loader's ``generator``, a sampler's own);
  torch's global generator is the user's and is not saved;
* ``base_seed``: persistent workers' base seed (drawn once, as torch does), else None;
* ``loader``: slipstream's loader's own state (map-style datasets; None before the first epoch or
  for an ``IterableDataset``; with a stateful dataset's own state as its ``data``), and
  ``loader_behind``: it describes an epoch left unfinished before the one in progress started, so
  the resumed loader moves past it first; ``data``: a stateful map-style dataset's state
  (``order.datastate``) while ``loader`` is None (before the first epoch);
* ``worker_batches``: an ``IterableDataset`` read out of order by worker processes (``in_order=False``):
  each worker's batches handed out this epoch (the resumed workers each read past their own; the
  order they came in depends on timing), else None;
* ``identity``: what the loader was built with (dataset kind, batching, sampler types, generators,
  sizes), checked on load: a loader built differently raises ``ValueError``.

``build`` makes it from a loader's ``EpochRecord``; ``read`` checks one and returns a ``Resume``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from ..order.datastate import is_stateful
from ._context import LoaderContext
from ._datasets import length
from ._record import EpochRecord
from ._rngstate import GLOBAL, decode, encode, generators, states
from ._samplerepochs import parse_epochs

FORMAT = "slipstream.torch.DataLoader"
VERSION = 1


@dataclass
class Draws:
    iter: dict[str, torch.Tensor]
    sampler: dict[str, torch.Tensor]
    drew_base_seed: bool
    sampler_epochs: dict[str, int] | None = None  # None: the state holds none (the samplers' epochs are not checked)


@dataclass
class Resume:
    """A checked state: where the next ``iter()`` starts and what it draws again."""

    state: dict[str, Any]
    epoch: int
    batch: int
    draws: Draws | None
    generators: dict[str, torch.Tensor]
    base_seed: int | None
    core: Any
    core_behind: bool
    worker_batches: list[int] | None = None


def _kind(obj: Any) -> str | None:
    return None if obj is None else f"{type(obj).__module__}.{type(obj).__qualname__}"


def identity(context: LoaderContext) -> dict[str, Any]:
    """What a state is only valid for: the same dataset kind and size, batching and sampling."""
    iterable = context.iterable
    ident: dict[str, Any] = {
        "dataset": "iterable" if iterable else "map",
        "batch_size": context.batch_size,
        "drop_last": context.drop_last,
        "sampler": _kind(context.sampler),
        "batch_sampler": _kind(context.batch_sampler),
        "seed": context.seed,
        "generators": sorted(generators(context)),
    }
    if iterable:  # the stream (which worker yields which batch) depends on the number of workers
        ident["num_workers"] = context.num_workers
    else:
        ident["num_observations"] = length(context.dataset)
        ident["num_batches"] = length(context.index_sampler)
    return ident


def _encoded(saved: Mapping[str, torch.Tensor]) -> dict[str, str]:
    return {name: encode(state) for name, state in saved.items()}


def build(context: LoaderContext, record: EpochRecord | None, core: Any, base_seed: int | None) -> dict[str, Any]:
    """The state of a loader with the settings ``context`` whose most recent epoch is ``record``
    (None: not iterated yet), whose slipstream loader is ``core`` (None: none yet) and whose
    persistent workers' base seed is ``base_seed`` (None: not drawn yet)."""
    persistent = context.persistent_workers and context.num_workers > 0
    iterable = context.iterable
    private = {name: s for name, s in states(generators(context)).items() if name != GLOBAL}
    state: dict[str, Any] = {
        "format": FORMAT,
        "version": VERSION,
        "epoch": 0,
        "batch": 0,
        "draws": None,
        "generators": _encoded(private),
        "base_seed": base_seed if persistent else None,
        "loader": None if core is None else core.state_dict(),  # (replaced below mid-epoch)
        "loader_behind": False,
        "worker_batches": None,
        "identity": identity(context),
    }
    if core is None and not iterable and is_stateful(context.dataset):  # (slipstream's loader holds it once made)
        state["data"] = context.dataset.state_dict()
    if record is None:
        return state
    if record.finished():
        state["epoch"] = record.epoch + 1
        return state
    state["epoch"], state["batch"] = record.epoch, record.handed_out()
    state["draws"] = {
        "iter": _encoded(record.iter_states),
        "sampler": _encoded(record.draw_states),
        "drew_base_seed": record.drew_base_seed,
        "sampler_epochs": dict(record.sampler_epochs),
    }
    if iterable:
        state["worker_batches"] = record.worker_batches()
    else:
        state["loader"] = record.core_state(core)
        state["loader_behind"] = record.core_behind and not record.begun
    return state


def _int(state: Mapping[str, Any], key: str, allow_none: bool = False) -> Any:
    value = state.get(key)
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"state[{key!r}] must be an integer >= 0, got {value!r}")
    return value


def _decoded(saved: Any, key: str, names: list[str]) -> dict[str, torch.Tensor]:
    if not isinstance(saved, Mapping) or not set(saved) <= set(names):
        raise ValueError(f"state[{key!r}] must map generator names among {names} to states, got {saved!r:.200}")
    return {name: decode(text) for name, text in saved.items()}


def read(context: LoaderContext, state: Any) -> Resume:
    """Check that ``state`` is a state of a loader with the settings ``context`` (TypeError if not a
    mapping, ValueError if it is not a state_dict() or was saved by a loader built differently) and
    return what it says."""
    if not isinstance(state, Mapping):
        raise TypeError(f"state_dict must be the dict state_dict() returned, got {type(state).__name__}")
    if state.get("format") != FORMAT:
        raise ValueError(f"not a slipstream.torch.DataLoader state (its 'format' is {state.get('format')!r})")
    if state.get("version") != VERSION:
        raise ValueError(f"state version {state.get('version')!r} is not supported (expected {VERSION})")
    saved = state.get("identity")
    now = identity(context)
    if not isinstance(saved, Mapping):
        raise ValueError("state lacks its 'identity': expected the dict that state_dict() returned")
    for key in sorted(set(saved) | set(now)):
        if saved.get(key) != now.get(key):
            raise ValueError(
                f"state was saved by a DataLoader with {key}={saved.get(key)!r}, but this one has {key}={now.get(key)!r}: "
                "load it into a DataLoader built with the same dataset, batching and sampling"
            )
    names = now["generators"]
    draws = state.get("draws")
    if draws is not None:
        if not isinstance(draws, Mapping) or not isinstance(draws.get("drew_base_seed"), bool):
            raise ValueError(f"state['draws'] is malformed: {draws!r:.200}")
        draws = Draws(
            _decoded(draws.get("iter"), "draws.iter", names),
            _decoded(draws.get("sampler"), "draws.sampler", names),
            draws["drew_base_seed"],
            parse_epochs(draws.get("sampler_epochs")),
        )
    workers = _worker_batches(context, state, draws is not None)
    behind = state.get("loader_behind", False)
    if not isinstance(behind, bool):
        raise ValueError(f"state['loader_behind'] must be a bool, got {behind!r}")
    return Resume(
        state=dict(state),
        epoch=_int(state, "epoch"),
        batch=_int(state, "batch"),
        draws=draws,
        generators=_decoded(state.get("generators", {}), "generators", [n for n in names if n != GLOBAL]),
        base_seed=_int(state, "base_seed", allow_none=True),
        core=state.get("loader"),
        core_behind=behind,
        worker_batches=workers,
    )


def _worker_batches(context: LoaderContext, state: Mapping[str, Any], mid_epoch: bool) -> list[int] | None:
    """``state["worker_batches"]``, checked: one count per worker process. ValueError for a
    mid-epoch state without them loaded into a loader that reads an ``IterableDataset`` out of
    order (which batches were handed out cannot be told from their number)."""
    counts = state.get("worker_batches")
    if counts is None:
        if context.iterable and mid_epoch and context.num_workers > 0 and not context.in_order and state.get("batch"):
            raise ValueError(
                "this state was saved mid-epoch by a DataLoader reading its IterableDataset in order (in_order=True): "
                "a loader with in_order=False cannot resume it (its batches come in another order); load it into "
                "one with in_order=True"
            )
        return None
    if (
        not isinstance(counts, list)
        or len(counts) != context.num_workers
        or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 0 for c in counts)
    ):
        raise ValueError(f"state['worker_batches'] must be None or one count >= 0 per worker, got {counts!r:.200}")
    return list(counts)
