"""Mixture weights: checked, normalized, and turned into the integer pieces the interleave runs on.

A *mapping* is ``{name: weight}`` naming every source once, each weight a finite number >= 0 and
not all of them 0; weights are relative (normalized to sum 1). A *schedule* is a list of
``(position, mapping)`` with increasing positions, the first 0: piecewise constant (each mapping
holds from its position to the next one's), or with ``ramp=True`` linear between consecutive
points (constant after the last).

``Pieces`` are what the interleave runs on: the positions where each piece starts and, per piece,
integer weights summing to one ``total`` (the same for every piece). Weights given as integers or
short decimals (``0.3``: read as the decimal it prints as) are kept exact when one common
denominator up to ``2**24`` holds them; otherwise (and for ramps) they are rounded to multiples of
``2**-24``, with the rounding carried from piece to piece so that the integral of the weights at
each piece's end is within one item per ``2**24`` positions of the piece of the exact one. A
positive weight never rounds to 0. A ramp between two points is run in at most ``RAMP_STEPS``
constant steps, each holding the exact mean of the linear weights over its positions (the
integral at every step's end is the linear one's, up to that rounding).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from numbers import Real
from typing import Any

import numpy as np

__all__ = ["RAMP_STEPS", "TOTAL_MAX", "Pieces", "canonical_schedule", "normalized", "pieces_of"]

TOTAL_MAX = 1 << 24
RAMP_STEPS = 256

Schedule = list[tuple[int, dict[str, Any]]]


@dataclass(frozen=True)
class Pieces:
    """Integer weights: piece ``k`` covers positions ``starts[k] .. starts[k+1]-1`` (the last one
    runs on), source ``i`` has weight ``weights[k, i] / total`` there; rows sum to ``total``."""

    starts: np.ndarray
    weights: np.ndarray
    total: int


def _number(value: Any, name: str, where: str) -> Fraction:
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (Real, Fraction)):
        raise TypeError(f"mix weights{where}: the weight of {name!r} must be a number, got {type(value).__name__} {value!r}")
    if isinstance(value, float):
        if not math.isfinite(value) or value < 0:
            raise ValueError(f"mix weights{where}: the weight of {name!r} must be a finite number >= 0, got {value!r}")
        return Fraction(repr(value))  # the decimal it prints as: 0.3 is 3/10
    try:
        fraction = Fraction(value)
    except (TypeError, ValueError, OverflowError) as exc:
        raise ValueError(f"mix weights{where}: the weight of {name!r} must be a finite number >= 0, got {value!r}") from exc
    if fraction < 0:
        raise ValueError(f"mix weights{where}: the weight of {name!r} must be a finite number >= 0, got {value!r}")
    return fraction


def _checked(weights: Any, names: Sequence[str], where: str) -> dict[str, Any]:
    """``weights`` as a plain dict in ``names``' order (ints kept, other numbers as floats), checked."""
    if not isinstance(weights, Mapping):
        raise TypeError(f"mix weights{where}: expected a mapping of source name to weight, got {type(weights).__name__}")
    unknown = [key for key in weights if key not in names]
    missing = [name for name in names if name not in weights]
    if unknown or missing:
        parts = ([f"unknown sources {unknown}"] if unknown else []) + ([f"no weight for sources {missing}"] if missing else [])
        raise ValueError(f"mix weights{where}: {' and '.join(parts)} (the sources are {list(names)})")
    out: dict[str, Any] = {}
    for name in names:
        exact = _number(weights[name], name, where)
        value = weights[name].item() if isinstance(weights[name], np.generic) else weights[name]
        out[name] = value if isinstance(value, int) and not isinstance(value, bool) else float(exact)
    if all(value == 0 for value in out.values()):
        raise ValueError(f"mix weights{where}: every weight is 0; at least one source needs a positive weight")
    return out


def normalized(weights: Mapping[str, Any], names: Sequence[str]) -> list[Fraction]:
    """The weights of a (checked) mapping as exact fractions summing to 1, in ``names``' order."""
    values = [_number(weights[name], name, "") for name in names]
    total = sum(values)
    return [value / total for value in values]


def canonical_schedule(weights: Any, names: Sequence[str]) -> Schedule:
    """A mapping or a schedule, checked, as a schedule of plain dicts (``ValueError``/``TypeError``
    naming the position and the source for anything wrong)."""
    if isinstance(weights, Mapping):
        return [(0, _checked(weights, names, ""))]
    if isinstance(weights, (str, bytes)) or not isinstance(weights, Sequence) or not weights:
        raise TypeError(f"mix weights: expected a mapping of source name to weight or a non-empty list of (position, mapping), got {type(weights).__name__}")
    schedule: Schedule = []
    for j, point in enumerate(weights):
        if not isinstance(point, Sequence) or isinstance(point, (str, bytes)) or len(point) != 2:
            raise TypeError(f"mix weights: schedule entry {j} must be a (position, mapping) pair, got {point!r}")
        position, mapping = point
        if isinstance(position, np.integer):
            position = int(position)
        if isinstance(position, bool) or not isinstance(position, int) or position < 0:
            raise ValueError(f"mix weights: schedule entry {j}'s position must be an int >= 0, got {position!r}")
        if j == 0 and position != 0:
            raise ValueError(f"mix weights: the schedule must start at position 0, its first entry is at {position}")
        if schedule and position <= schedule[-1][0]:
            raise ValueError(f"mix weights: schedule positions must increase, entry {j} is at {position} after {schedule[-1][0]}")
        schedule.append((position, _checked(mapping, names, f" at position {position}")))
    return schedule


def _ramp_steps(p0: int, p1: int, w0: list[Fraction], w1: list[Fraction]) -> list[tuple[int, int, list[Fraction]]]:
    """(start, end, exact mean weights) of the steps of a linear ramp from ``w0`` at ``p0`` to ``w1`` at ``p1``."""
    span = p1 - p0
    steps = min(span, RAMP_STEPS)
    out = []
    for k in range(steps):
        a, b = p0 + k * span // steps, p0 + (k + 1) * span // steps
        # sum over u in [a, b) of w0 + (w1 - w0) (u - p0) / span, divided by (b - a)
        ramp = Fraction((b - p0 - 1) * (b - p0) - (a - p0 - 1) * (a - p0), 2 * span * (b - a))
        out.append((a, b, [x + (y - x) * ramp for x, y in zip(w0, w1)]))
    return out


def _rounded(targets: list[Fraction], total: int, positive: list[bool]) -> list[int]:
    """Integers summing to ``total``, near ``targets`` (largest remainders, ties to the lowest index);
    0 where ``positive`` is False, at least 1 where it is True."""
    clipped = [max(t, Fraction(0)) if keep else Fraction(0) for t, keep in zip(targets, positive)]
    scale = sum(clipped)
    clipped = [c * total / scale for c in clipped] if scale > 0 else [Fraction(total * keep, sum(positive)) for keep in positive]
    out = [math.floor(c) for c in clipped]
    order = sorted(range(len(out)), key=lambda i: (-(clipped[i] - out[i]), i))
    for i in order[: total - sum(out)]:
        out[i] += 1
    for i, keep in enumerate(positive):
        if keep and out[i] == 0:
            out[max(range(len(out)), key=lambda j: (out[j], -j))] -= 1
            out[i] = 1
    return out


def pieces_of(schedule: Schedule, names: Sequence[str], ramp: bool) -> Pieces:
    """The integer pieces of a canonical schedule (see the module doc)."""
    points = [(position, normalized(mapping, names)) for position, mapping in schedule]
    exact: list[tuple[int, list[Fraction]]] = []  # (start, weights); the last runs on
    for j, (position, w) in enumerate(points):
        if ramp and j + 1 < len(points):
            exact += [(a, mean) for a, _, mean in _ramp_steps(position, points[j + 1][0], w, points[j + 1][1])]
        else:
            exact.append((position, w))
    denominator = 1
    for x in (x for _, w in exact for x in w):
        denominator = denominator * x.denominator // math.gcd(denominator, x.denominator)
        if denominator > TOTAL_MAX:
            break
    if denominator <= TOTAL_MAX:
        total = denominator
        rows = [[int(x * total) for x in w] for _, w in exact]
    else:
        total, rows, carry = TOTAL_MAX, [], [Fraction(0)] * len(names)
        for k, (start, w) in enumerate(exact):
            positive = [x > 0 for x in w]
            if k + 1 == len(exact):
                rows.append(_rounded([x * total for x in w], total, positive))
                continue
            span = exact[k + 1][0] - start
            ideal = [x * total * span + c for x, c in zip(w, carry)]
            row = _rounded([v / span for v in ideal], total, positive)
            carry = [v - r * span if keep else Fraction(0) for v, r, keep in zip(ideal, row, positive)]
            rows.append(row)
    starts, kept = [], []
    for (start, _), row in zip(exact, rows):
        if kept and kept[-1] == row:
            continue  # equal neighbours are one piece
        starts.append(start)
        kept.append(row)
    return Pieces(np.array(starts, np.int64), np.array(kept, np.int64).reshape(len(kept), len(names)), total)
