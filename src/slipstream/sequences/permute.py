"""Random-access seeded permutations of ``[0, n)``: ``permute(x, n, keys)`` maps each ``x[j] < n[j]``
to its image under the permutation keyed by ``keys[j]``, in O(1) memory and vectorized.

The permutation is a keyed Feistel network on ``b`` bits (``2**b`` the smallest power of two at
least ``max(n, 4)``: the domain is under twice ``n``), the two halves (``b - b//2`` high bits and
``b//2`` low bits) updated alternately, six times, by a keyed splitmix64 mix of the other half;
values that land at ``n`` or above are sent through the network again (cycle walking), so the map
restricted to ``[0, n)`` is a bijection onto ``[0, n)``. Every step is integer arithmetic modulo
``2**64``: the compiled kernel (``slipstream.sequences._mixing``) and the NumPy reference here give
identical results bit for bit.

``pass_keys(seed, source, passes)`` names one permutation per (seed, source, pass): a mixture reads
its source ``source`` in the order of pass ``p``'s permutation on its ``p``-th pass, a fresh order each
time; ``jitter_keys(seed, blocks)`` keys the permutations inside a mixture's jitter blocks.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..core.optional import probe

__all__ = ["ROUNDS", "items", "items_reference", "jitter_keys", "mix64", "pass_keys", "permute", "permute_reference", "source_keys"]

_kernel, KERNEL_STATUS = probe("slipstream.sequences._mixing", disable_env="SLIPSTREAM_NO_SEQCORE", missing="not built")

ROUNDS = 6
MASK = (1 << 64) - 1
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = 0x9E3779B97F4A7C15
_JITTER_SALT = 0x6A09E667F3BCC909  # a constant apart from every source number


def mix64(z: Any) -> Any:
    """splitmix64's finalizer on a uint64 array (wrapping arithmetic), or on a Python int."""
    if isinstance(z, int):
        z &= MASK
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
        return z ^ (z >> 31)
    z = np.asarray(z, np.uint64)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def _base(seed: int, salt: int) -> int:
    return mix64(mix64(seed & MASK) ^ mix64((salt * _GOLDEN) & MASK))


def source_keys(seed: int, count: int) -> np.ndarray:
    """The base keys (uint64) of sources ``0 .. count-1`` under ``seed``."""
    return np.array([_base(seed, s + 1) for s in range(count)], np.uint64)


def pass_keys(seed: int, source: int, passes: Any) -> np.ndarray:
    """The keys (uint64) of source ``source``'s permutations on passes ``passes`` (ints >= 0)."""
    return _pass_keys(np.uint64(_base(seed, source + 1)), np.asarray(passes, np.int64))


def _pass_keys(base: Any, passes: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return mix64(base ^ mix64((passes.astype(np.uint64) + np.uint64(1)) * np.uint64(_GOLDEN)))


def items_reference(src: np.ndarray, count: np.ndarray, lengths: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """``items`` in NumPy (the reference the compiled kernel matches)."""
    local = np.empty(len(count), np.int64)
    for s in np.unique(src).tolist():
        sel = src == s
        passes, within = np.divmod(count[sel], lengths[s])
        local[sel] = permute_reference(within, lengths[s], _pass_keys(keys[s], passes))
    return local


def items(src: np.ndarray, count: np.ndarray, lengths: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """The index in its source of each item: source ``src[j]`` (of ``lengths[s]`` items, base key
    ``keys[s]``, see ``source_keys``) reads its item number ``count[j]`` (counting over all its
    passes) at ``permute(count % length, length, pass_keys(seed, s, count // length))``."""
    if _kernel is None:
        return items_reference(src, count, lengths, keys)
    out = np.empty(len(count), np.int64)
    _kernel.items(src, count, lengths, keys, out)
    return out


def jitter_keys(seed: int, blocks: Any) -> np.ndarray:
    """The keys (uint64) of the permutations inside jitter blocks ``blocks`` (ints >= 0)."""
    b = np.asarray(blocks, np.int64).astype(np.uint64)
    with np.errstate(over="ignore"):
        return mix64(np.uint64(_base(seed, _JITTER_SALT)) ^ mix64((b + np.uint64(1)) * np.uint64(_GOLDEN)))


def _bits(n: np.ndarray) -> np.ndarray:
    """b per element: the smallest b >= 2 with 2**b >= n (n >= 1), i.e. the bit length of max(n, 4) - 1."""
    v = np.maximum(n, 4) - 1
    b = np.zeros_like(v)
    for s in (32, 16, 8, 4, 2, 1):
        big = v >= (1 << s)
        b += big * s
        v = np.where(big, v >> s, v)
    return b + (v > 0)


def _rounds(y: np.ndarray, keys: np.ndarray, lo_bits: np.ndarray, hi_mask: np.ndarray, lo_mask: np.ndarray) -> np.ndarray:
    """One pass of the network over uint64 values ``y`` (the caller keeps them in range)."""
    hi, lo = y >> lo_bits, y & lo_mask
    with np.errstate(over="ignore"):
        for r in range(ROUNDS):
            k = mix64(keys + np.uint64(((r + 1) * _GOLDEN) & MASK))
            if r % 2 == 0:
                hi = hi ^ (mix64(lo ^ k) & hi_mask)
            else:
                lo = lo ^ (mix64(hi ^ k) & lo_mask)
    return (hi << lo_bits) | lo


def permute_reference(x: Any, n: Any, keys: Any) -> np.ndarray:
    """``permute`` in NumPy (the reference the compiled kernel matches)."""
    x, n, keys = _arguments(x, n, keys)
    bits = _bits(n)
    lo_bits = (bits // 2).astype(np.uint64)
    hi_mask = (np.uint64(1) << (bits.astype(np.uint64) - lo_bits)) - np.uint64(1)
    lo_mask = (np.uint64(1) << lo_bits) - np.uint64(1)
    y = x.astype(np.uint64)
    un = n.astype(np.uint64)
    todo = np.arange(len(y))
    while len(todo):
        y[todo] = _rounds(y[todo], keys[todo], lo_bits[todo], hi_mask[todo], lo_mask[todo])
        todo = todo[y[todo] >= un[todo]]
    return y.astype(np.int64)


def permute(x: Any, n: Any, keys: Any) -> np.ndarray:
    """The images (int64) of ``x`` under the permutations of ``[0, n)`` keyed by ``keys``
    (elementwise; ``n`` and ``keys`` broadcast against ``x``). ``ValueError`` unless
    ``0 <= x < n``; the compiled kernel when built, else ``permute_reference``."""
    if _kernel is None:
        return permute_reference(x, n, keys)
    x, n, keys = _arguments(x, n, keys)
    out = np.empty(len(x), np.int64)
    _kernel.permute(x, n, keys, out)
    return out


def _arguments(x: Any, n: Any, keys: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    x = np.asarray(x)
    if x.dtype.kind not in "iu":
        raise TypeError(f"permute: positions must be integers, got dtype {x.dtype}")
    x = np.ascontiguousarray(x.ravel(), np.int64)
    n = np.ascontiguousarray(np.broadcast_to(np.asarray(n, np.int64), x.shape))
    keys = np.ascontiguousarray(np.broadcast_to(np.asarray(keys, np.uint64), x.shape))
    if len(x) and (n.min() < 1 or x.min() < 0 or (x >= n).any()):
        bad = int(np.flatnonzero((x < 0) | (x >= n))[0]) if (n.min() >= 1) else int(np.argmin(n))
        raise ValueError(f"permute: position {int(x[bad])} is not in [0, {int(n[bad])})")
    return x, n, keys
