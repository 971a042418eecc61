"""Counter-based random numbers: the draws of the built-in augmentations, a pure function of
(seed, epoch, index, stream, k), computed for a whole chunk of a batch at once.

``Draws(seed, epoch, indices).uniforms(stream, count)`` is an (n, count) float64 array in [0, 1):
row ``i`` belongs to sample ``indices[i]``, column ``k`` is its ``k``-th number in ``stream`` (an
op's position in its pipeline). Each number is a SplitMix64 output (Steele, Lea and Flood 2014:
the finalizer of a 64-bit counter) keyed by a chain of the same mixer over (seed, epoch, stream,
index), 53 bits of it as a double. No state is carried from one sample to the next, so the numbers
do not depend on which worker draws them, how many samples a call draws, or in what order, and
they are the same bits wherever uint64 arithmetic is (NumPy here; the same function in C or CUDA).
``sample_rng()`` (a NumPy ``Generator`` per sample) stays the generator for user code.
"""

from __future__ import annotations

import numpy as np

from . import streams

__all__ = ["Draws"]

_MASK = (1 << 64) - 1
_GOLDEN = 0x9E3779B97F4A7C15  # the Weyl increment of SplitMix64
_DRAW = 0xD1B54A32D192ED03  # another odd constant, for the draws of one sample
_M1, _M2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB
_UNIT = 2.0**-53


def _mix(z: int) -> int:
    """SplitMix64's finalizer on a Python int (mod 2**64)."""
    z = ((z ^ (z >> 30)) * _M1) & _MASK
    z = ((z ^ (z >> 27)) * _M2) & _MASK
    return z ^ (z >> 31)


def _mix_array(z: np.ndarray) -> np.ndarray:
    """SplitMix64's finalizer on a uint64 array, in place (integer arrays wrap silently)."""
    z ^= z >> np.uint64(30)
    z *= np.uint64(_M1)
    z ^= z >> np.uint64(27)
    z *= np.uint64(_M2)
    z ^= z >> np.uint64(31)
    return z


def _chain(key: int, value: int) -> int:
    return _mix((key + _GOLDEN * ((value & _MASK) + 1)) & _MASK)


_layouts: dict[tuple[tuple[int, int], ...], tuple[np.ndarray, np.ndarray]] = {}


def _layout(streams: tuple[tuple[int, int], ...]) -> tuple[np.ndarray, np.ndarray]:
    """For each column of ``Draws.block(streams)``: its stream's position, and its counter times
    the draw constant (cached: a pipeline asks for the same streams every time)."""
    layout = _layouts.get(streams)
    if layout is None:
        columns = np.repeat(np.arange(len(streams)), [count for _, count in streams])
        counts = [np.arange(1, count + 1, dtype=np.uint64) for _, count in streams]
        counters = (np.concatenate(counts) if counts else np.zeros(0, np.uint64)) * np.uint64(_DRAW)
        layout = _layouts[streams] = (columns, counters[None, :])
    return layout


class Draws:
    """The random numbers of samples ``indices`` of ``epoch`` under ``seed`` (see the module doc)."""

    __slots__ = ("_key", "_rows")

    def __init__(self, seed: int, epoch: int, indices: np.ndarray | list[int]):
        key = _mix(streams.DRAWS)
        seed = int(seed)
        if seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed}")
        while True:  # every 64 bits of a large seed count
            key = _chain(key, seed & _MASK)
            seed >>= 64
            if not seed:
                break
        self._key = _chain(key, int(epoch))
        self._rows = np.asarray(indices, np.int64).astype(np.uint64) + np.uint64(1)

    @classmethod
    def fresh(cls, n: int) -> Draws:
        """Draws for ``n`` samples outside any loader: a random key, as ``sample_rng()`` gives there."""
        seed = int(np.random.default_rng().integers(0, 1 << 63))
        return cls(seed, 0, np.arange(n))

    def __len__(self) -> int:
        return len(self._rows)

    def uniforms(self, stream: int, count: int) -> np.ndarray:
        """(n, count) float64 in [0, 1): sample ``i``'s first ``count`` numbers of ``stream``."""
        return self.block(((stream, count),))

    def block(self, streams: tuple[tuple[int, int], ...]) -> np.ndarray:
        """``uniforms(stream, count)`` of each (stream, count), side by side in one (n, total)
        array, computed at once (what a pipeline draws for all its ops)."""
        keys = np.array([_chain(self._key, stream) for stream, _ in streams], np.uint64)
        h = _mix_array(self._rows[:, None] * np.uint64(_GOLDEN) + keys[None, :])
        columns, counters = _layout(streams)
        z = _mix_array(h.take(columns, axis=1) + counters)  # (take: C order, as csrc/place reads it)
        z >>= np.uint64(11)
        return z.astype(np.float64) * _UNIT

    def counters(self, streams: tuple[tuple[int, int], ...]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """What compiled code needs to compute ``block(streams)`` itself, row by row: the samples'
        counters (uint64 ``index + 1``), each stream's key (uint64), and per column its stream's
        position (int64) and draw counter (uint64, times the draw constant). Column ``c`` of sample
        ``i`` is ``mix(mix(rows[i] * GOLDEN + keys[columns[c]]) + counters[c]) >> 11``, times 2**-53
        (``mix`` SplitMix64's finalizer, uint64 arithmetic wrapping)."""
        keys = np.array([_chain(self._key, stream) for stream, _ in streams], np.uint64)
        columns, counters = _layout(streams)
        return self._rows, keys, columns.astype(np.int64), np.ascontiguousarray(counters[0])

    def indices(self) -> list[int]:
        """The samples' indices (as given)."""
        return (self._rows - np.uint64(1)).astype(np.int64).tolist()

    def take(self, positions: np.ndarray | slice) -> Draws:
        """The draws of a subset of these samples (the same numbers for each)."""
        other = Draws.__new__(Draws)
        other._key, other._rows = self._key, self._rows[positions]
        return other
