"""The shape of ``ss.mix``'s state (``Mixture.state_dict``) and the check of a state against a mixture.

A state is ``{"mixture": identity, "changes": [[position, weights], ...], "pending": weights or None}``,
plain Python (JSON-compatible): the identity names what makes two mixtures the same sequence (the
source names and lengths, the seed, the up-front weights, ramp, jitter, stop rule and length); the
changes are the settled runtime weight changes, in the order they hold; pending is the change
recorded but not yet settled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .weights import POSITION_MAX

__all__ = ["check_state", "identity_differences"]

_NAMES = {"names": "source names", "lengths": "source lengths", "seed": "seed", "schedule": "weights",
          "ramp": "ramp", "jitter": "jitter", "stop": "stop rule", "length": "length"}


def check_state(state: Any) -> tuple[list[tuple[int, Any]], Any]:
    """(changes, pending) of a state of the right shape; ``TypeError``/``ValueError`` saying what is wrong."""
    if not isinstance(state, Mapping) or not {"mixture", "changes", "pending"} <= set(state):
        found = sorted(state) if isinstance(state, Mapping) else type(state).__name__
        raise ValueError(f"ss.mix: not a mixture's state (expected the keys 'mixture', 'changes', 'pending'), got {found}")
    if not isinstance(state["mixture"], Mapping):
        raise ValueError(f"ss.mix: the state's 'mixture' must be a mapping, got {type(state['mixture']).__name__}")  # noqa: TRY004 - a state of other data is a ValueError (the protocol)
    changes = state["changes"]
    if isinstance(changes, (str, bytes)) or not isinstance(changes, Sequence):
        raise ValueError(f"ss.mix: the state's 'changes' must be a list of [position, weights], got {type(changes).__name__}")  # noqa: TRY004
    out = []
    for j, change in enumerate(changes):
        if isinstance(change, (str, bytes)) or not isinstance(change, Sequence) or len(change) != 2:
            raise ValueError(f"ss.mix: the state's change {j} must be [position, weights], got {change!r}")
        position, weights = change
        if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position <= POSITION_MAX:
            raise ValueError(f"ss.mix: the state's change {j} has position {position!r}; expected an int 0..2**61")
        if out and position <= out[-1][0]:
            raise ValueError(f"ss.mix: the state's changes must be at increasing positions, change {j} is at {position}")
        out.append((position, weights))
    return out, state["pending"]


def _plain(value: Any) -> Any:
    """Lists for tuples, recursively (a state may have been through JSON or pickle)."""
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def identity_differences(found: Mapping[str, Any], expected: Mapping[str, Any]) -> list[str]:
    """What differs between a state's identity and a mixture's, one phrase each."""
    out = []
    for key, expect in expected.items():
        got = _plain(found.get(key, "<missing>"))
        if got != _plain(expect):
            out.append(f"its {_NAMES.get(key, key)}: {got!r}, this mixture's: {_plain(expect)!r}")
    return out
