"""Helpers for packed-file tests: sample data and a write-then-open round trip."""

from __future__ import annotations

import numpy as np

import slipstream as ss


def photo_like(height: int, width: int, seed: int = 0, channels: int = 3) -> np.ndarray:
    """A smooth, deterministic uint8 image (gradients plus mild noise) that compresses like a photo."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    planes = [
        128 + 60 * np.sin(x / (7 + 3 * c) + seed) + 50 * np.cos(y / (11 + 2 * c)) + rng.normal(0, 4, (height, width))
        for c in range(channels)
    ]
    return np.clip(np.stack(planes, axis=2), 0, 255).astype(np.uint8)


def roundtrip(tmp_path, samples, fields, name="data.arrow", **write_kwargs):
    path = tmp_path / name
    ss.write(path, samples, fields, progress=False, **write_kwargs)
    return ss.open(path)
