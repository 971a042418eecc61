"""Beta(a, b) variates from a fixed number of uniforms: the lambda of the batch augmentations.

``beta_from_uniforms(u, a, b)`` turns each row of ``u`` (``BETA_DRAWS`` uniforms in [0, 1), the
last axis) into one Beta(a, b) variate, as ``X / (X + Y)`` with ``X ~ Gamma(a)`` and ``Y ~ Gamma(b)``
(each from its half of the row). A Gamma(s) variate is drawn by Marsaglia and Tsang's method (2000,
"A simple method for generating gamma variables"): for ``s >= 1``, ``d = s - 1/3``, ``c = 1/sqrt(9d)``,
a standard normal ``x`` (Box-Muller from two uniforms) gives ``v = (1 + c x)^3``, accepted when
``v > 0`` and ``log(1 - u) < x^2/2 + d - d v + d log v``; the variate is ``d v``. For ``s < 1`` it is
a Gamma(s + 1) variate times ``U^(1/s)`` (their section 6). Each Gamma gets ``GAMMA_ATTEMPTS``
attempts of three uniforms (normal pair, acceptance) and one uniform for the boost, whether it uses
them or not, so the count of draws is fixed; the first accepted attempt is taken. If every attempt
is rejected (probability below 0.05^12 for any shape: Marsaglia and Tsang's rejection rate is under
5% for ``s >= 1``), the variate is ``d`` (``v = 1``, the mode): a deterministic fallback that moves
the distribution by less than 1e-15.

Everything is done on logarithms (``log X - log Y``, then the logistic function), so small shapes
(``a = 0.01``: ``U^100`` underflows in float64) still give a variate in [0, 1] rather than 0/0.
NumPy only (no SciPy); vectorized over the leading axes, so tests draw thousands at once.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["BETA_DRAWS", "GAMMA_ATTEMPTS", "GAMMA_DRAWS", "beta_from_uniforms", "log_gamma_from_uniforms"]

GAMMA_ATTEMPTS = 12
GAMMA_DRAWS = 1 + 3 * GAMMA_ATTEMPTS  # the boost uniform, then (normal, normal, acceptance) per attempt
BETA_DRAWS = 2 * GAMMA_DRAWS


def _check_shape(name: str, value: float) -> float:
    value = float(value)
    if not (value > 0 and math.isfinite(value)):
        raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
    return value


def log_gamma_from_uniforms(u: np.ndarray, shape: float) -> np.ndarray:
    """``log`` of one Gamma(``shape``, 1) variate per row of ``u`` (``GAMMA_DRAWS`` uniforms on
    the last axis), by Marsaglia and Tsang (module doc)."""
    shape = _check_shape("shape", shape)
    u = np.asarray(u, np.float64)
    if u.shape[-1] != GAMMA_DRAWS:
        raise ValueError(f"a Gamma variate takes {GAMMA_DRAWS} uniforms on the last axis, got shape {u.shape}")
    b = shape + 1.0 if shape < 1.0 else shape
    d = b - 1.0 / 3.0
    c = 1.0 / math.sqrt(9.0 * d)
    attempts = u[..., 1:].reshape(*u.shape[:-1], GAMMA_ATTEMPTS, 3)
    u1, u2, u3 = attempts[..., 0], attempts[..., 1], attempts[..., 2]
    with np.errstate(divide="ignore", invalid="ignore"):
        x = np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * np.pi * u2)  # 1 - u1 in (0, 1]
        v = (1.0 + c * x) ** 3
        positive = v > 0
        log_v = np.log(np.where(positive, v, 1.0))
        accept = positive & (np.log1p(-u3) < 0.5 * x * x + d - d * v + d * log_v)
    first = np.argmax(accept, axis=-1)[..., None]
    chosen = np.take_along_axis(log_v, first, axis=-1)[..., 0]
    out = math.log(d) + np.where(accept.any(axis=-1), chosen, 0.0)  # none accepted: v = 1
    if shape < 1.0:
        with np.errstate(divide="ignore"):
            out = out + np.log1p(-u[..., 0]) / shape  # U = 1 - u in (0, 1]
    return out


def beta_from_uniforms(u: np.ndarray, a: float, b: float) -> np.ndarray:
    """One Beta(``a``, ``b``) variate (float64 in [0, 1]) per row of ``u`` (``BETA_DRAWS`` uniforms
    in [0, 1) on the last axis): ``X / (X + Y)`` of two Gamma variates (module doc)."""
    u = np.asarray(u, np.float64)
    if u.shape[-1] != BETA_DRAWS:
        raise ValueError(f"a Beta variate takes {BETA_DRAWS} uniforms on the last axis, got shape {u.shape}")
    log_x = log_gamma_from_uniforms(u[..., :GAMMA_DRAWS], a)
    log_y = log_gamma_from_uniforms(u[..., GAMMA_DRAWS:], b)
    with np.errstate(over="ignore", invalid="ignore"):
        diff = log_y - log_x
        lam = 1.0 / (1.0 + np.exp(diff))
    # both -inf (two underflowed boosts): the smaller log wins outright; equal infinities: 1/2
    lam = np.where(np.isnan(diff), 0.5, lam)
    return lam
