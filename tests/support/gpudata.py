"""Data and comparisons shared by the device-stage tests (tests/images/device/test_gpu_*.py, tests/jax/test_jax.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from packed import photo_like

import slipstream as ss
from slipstream import fields as F


def image_sets(root: Path, n: int = 20, seed: int = 1) -> dict[str, Path]:
    """Packed files of ``n`` photo-like samples ("image", "label"): RGB as JPEG ("jpeg") and PNG ("png"),
    grayscale as PNG ("gray_png") and JPEG ("gray_jpeg"), grayscale and RGB alternating as JPEG
    ("mixed_jpeg"); "root" is the folder."""
    rng = np.random.default_rng(seed)
    jpeg, png = F.Image(codec="jpeg", quality=90), F.Image(codec="png")
    samples = [{"image": photo_like(int(rng.integers(30, 70)), int(rng.integers(30, 70)), seed=k), "label": k} for k in range(n)]
    gray = [{"image": photo_like(int(rng.integers(30, 70)), int(rng.integers(30, 70)), seed=k, channels=1), "label": k} for k in range(n)]
    mixed = [gray[k] if k % 2 else samples[k] for k in range(n)]

    def write(name: str, rows: list[dict], image: Any) -> Path:
        return ss.write(root / name, rows, {"image": image, "label": F.Int()}, progress=False)

    return {
        "jpeg": write("j.arrow", samples, jpeg),
        "png": write("p.arrow", samples, png),
        "gray_png": write("gp.arrow", gray, png),
        "gray_jpeg": write("gj.arrow", gray, F.Image(codec="jpeg")),
        "mixed_jpeg": write("mj.arrow", mixed, F.Image(codec="jpeg")),
        "root": root,
    }


N_IMAGES = 20  # image_sets' default


@pytest.fixture(scope="module", name="data")
def data_fixture(tmp_path_factory: Any) -> dict[str, Path]:
    """``image_sets`` once per test module, as the fixture ``data`` (import this to use it)."""
    return image_sets(tmp_path_factory.mktemp("gpu"), N_IMAGES)


def snap(batches: Any) -> list[dict]:
    """The batches, copied (tensors cloned, arrays copied): safe from buffer reuse."""
    import torch

    return [{k: (v.clone() if isinstance(v, torch.Tensor) else np.array(v)) for k, v in b.items()} for b in batches]


def same(a: list[dict], b: list[dict]) -> None:
    """Two lists of batches hold the same labels and bit-identical images."""
    import torch

    assert len(a) == len(b), (len(a), len(b))
    for x, y in zip(a, b):
        assert x.keys() == y.keys()
        np.testing.assert_array_equal(np.asarray(x["label"]), np.asarray(y["label"]))
        assert torch.equal(torch.as_tensor(x["image"]), torch.as_tensor(y["image"]))


def assert_finish_threads_end(timeout: float = 5.0) -> None:
    """Every loader finish thread ends within ``timeout`` seconds (joined, not polled)."""
    import threading

    for thread in [t for t in threading.enumerate() if t.name.startswith("slipstream-finish")]:
        thread.join(timeout)
    alive = [t for t in threading.enumerate() if t.name.startswith("slipstream-finish")]
    assert not alive, alive
