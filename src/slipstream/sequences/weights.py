"""Mixture weights: checked, normalized, and turned into the integer pieces the interleave runs on.

A *mapping* is ``{name: weight}`` naming every source once, each weight a finite number >= 0 and
not all of them 0; weights are relative (normalized to sum 1). A *schedule* is a list of
``(position, mapping)`` with increasing positions, the first 0: piecewise constant (each mapping
holds from its position to the next one's), or with ``ramp=True`` linear between consecutive
points (constant after the last).

``Pieces`` are what the interleave runs on: the positions where each piece starts and, per piece,
integer weights summing to one ``total`` (the same for every piece). The weights are kept exact
(integers, floats as the decimal they print as: ``0.3`` is 3/10, fractions) when one common
denominator of every piece is at most ``total_limit(n)`` (``2**56 // margin(n)``: over ``2**49`` for
up to 64 sources), as tiny weights, token counts and short decimals are; otherwise each piece's weights
are rounded to multiples of ``1 / total``, ``total`` the largest power of two within that limit, so
a count drifts from the given weights by under ``n / total`` items per position (under 1 item in
``2**43`` positions for 64 sources). A positive weight never rounds to 0. A ramp between two points
is run in constant steps (``ramp_steps``), each holding the exact mean of the linear weights over
its positions, so many that inside a step the integral stays within ``1 / (2 margin(n))`` of an item
of the linear one (spans past about ``2**32 / margin(n)`` positions get more of a deviation).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from numbers import Real
from typing import Any

import numpy as np

__all__ = ["KERNEL_T_MAX", "POSITION_MAX", "RAMP_STEPS", "RAMP_STEPS_MAX", "Pieces", "canonical_schedule", "margin", "normalized", "pieces_of",
           "ramp_steps", "total_limit"]

KERNEL_T_MAX = 1 << 56  # the compiled interleave's bound on T = margin(n) * total (csrc/mixsim.h)
POSITION_MAX = 1 << 61  # the compiled interleave's last position (csrc/mixsim.h)
RAMP_STEPS = 256  # the fewest steps of a ramp (of as many positions)
RAMP_STEPS_MAX = 1 << 16

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
        if isinstance(position, bool) or not isinstance(position, int) or not 0 <= position <= POSITION_MAX:
            raise ValueError(f"mix weights: schedule entry {j}'s position must be an int 0..2**61, got {position!r}")
        if j == 0 and position != 0:
            raise ValueError(f"mix weights: the schedule must start at position 0, its first entry is at {position}")
        if schedule and position <= schedule[-1][0]:
            raise ValueError(f"mix weights: schedule positions must increase, entry {j} is at {position} after {schedule[-1][0]}")
        schedule.append((position, _checked(mapping, names, f" at position {position}")))
    return schedule


def margin(n: int) -> int:
    """M for ``n`` sources: the interleave's release margin is 1/M of an item (``sequences.interleave``)."""
    return max(2, 2 * n - 2)


def total_limit(n: int) -> int:
    """The largest ``total`` the compiled interleave runs for ``n`` sources (``margin(n) * total <= 2**56``)."""
    return KERNEL_T_MAX // margin(n)


Exact = tuple[int, list[int], int]  # (start, numerators, denominator): weights nums[i] / den, summing to 1


def _constant(position: int, w: list[Fraction]) -> Exact:
    den = math.lcm(*(x.denominator for x in w))
    return position, [x.numerator * (den // x.denominator) for x in w], den


def ramp_steps(p0: int, p1: int, w0: list[Fraction], w1: list[Fraction]) -> list[Exact]:
    """The steps of a linear ramp from ``w0`` at ``p0`` to ``w1`` at ``p1`` (each step's exact mean
    weights): ``sqrt(span * M * delta)`` of them (``delta`` the largest change of a weight), at
    least ``RAMP_STEPS`` and at most ``RAMP_STEPS_MAX`` and ``span``, so that inside a step (of at most
    ``sqrt(span / (M * delta)) + 1`` positions) the step's integral is within ``1 / (2M)`` of an item
    of the linear one (the deviation peaks mid-step at ``delta * length**2 / (8 * span)``)."""
    span, n = p1 - p0, len(w0)
    den = math.lcm(*(x.denominator for x in w0 + w1))
    a0 = [x.numerator * (den // x.denominator) for x in w0]
    a1 = [x.numerator * (den // x.denominator) for x in w1]
    delta = max(abs(y - x) for x, y in zip(a0, a1))  # the largest change, times den
    need = -(-span * margin(n) * delta // den)
    steps = min(span, max(RAMP_STEPS, min(RAMP_STEPS_MAX, math.isqrt(need - 1) + 1 if need > 0 else 0)))
    out = []
    for k in range(steps):
        a, b = p0 + k * span // steps, p0 + (k + 1) * span // steps
        ta, tb, length = a - p0, b - p0, b - a
        # sum over u in [a, b) of w0 + (w1 - w0) (u - p0) / span, divided by (b - a), over 2 span length den
        q, scale = tb * (tb - 1) - ta * (ta - 1), 2 * span * length
        out.append((a, [scale * x + (y - x) * q for x, y in zip(a0, a1)], scale * den))
    return out


def _rounded(nums: list[int], den: int, total: int) -> list[int]:
    """Integers summing to ``total``, near ``total * nums / den`` (largest remainders, ties to the
    lowest index); 0 where ``nums`` is 0, at least 1 where it is positive."""
    scaled = [x * total for x in nums]
    out = [v // den for v in scaled]
    short = total - sum(out)
    if short:
        for i in sorted(range(len(out)), key=lambda i: (-(scaled[i] % den), i))[:short]:
            out[i] += 1
    for i, x in enumerate(nums):
        if x > 0 and out[i] == 0:
            out[max(range(len(out)), key=lambda j: (out[j], -j))] -= 1
            out[i] = 1
    return out


def pieces_of(schedule: Schedule, names: Sequence[str], ramp: bool) -> Pieces:
    """The integer pieces of a canonical schedule (see the module doc)."""
    points = [(position, normalized(mapping, names)) for position, mapping in schedule]
    exact: list[Exact] = []  # the last runs on
    for j, (position, w) in enumerate(points):
        if ramp and j + 1 < len(points):
            exact += ramp_steps(position, points[j + 1][0], w, points[j + 1][1])
        else:
            exact.append(_constant(position, w))
    limit, total = total_limit(len(names)), 1
    for _, nums, den in exact:
        reduced = den // math.gcd(den, *nums)
        total = total * reduced // math.gcd(total, reduced)
        if total > limit:
            break
    if total <= limit:
        rows = [[x * total // den for x in nums] for _, nums, den in exact]
    else:
        total = 1 << (limit.bit_length() - 1)
        rows = [_rounded(nums, den, total) for _, nums, den in exact]
    starts, kept = [], []
    for (start, _, _), row in zip(exact, rows):
        if kept and kept[-1] == row:
            continue  # equal neighbours are one piece
        starts.append(start)
        kept.append(row)
    return Pieces(np.array(starts, np.int64), np.array(kept, np.int64).reshape(len(kept), len(names)), total)
