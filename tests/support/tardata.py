"""WebDataset-style tar shards for the tests: written by Python's tarfile (``write_tar``), and a
small set of image shards (``image_shards``: a JPEG and a class label per sample)."""

from __future__ import annotations

import io
import tarfile
from pathlib import Path

import numpy as np
from packed import photo_like


def write_tar(
    path: Path, members: list[tuple[str, bytes | None]], fmt: int = tarfile.GNU_FORMAT, encoding: str = "utf-8"
) -> Path:
    """A tar of ``members`` ((name, bytes), or (name, None) for a folder), written by tarfile."""
    with tarfile.open(path, "w", format=fmt, encoding=encoding) as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            if data is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
    return path


def jpeg(image: np.ndarray) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(image).save(out, "JPEG", quality=90)
    return out.getvalue()


def image_shards(folder: Path, shards: int = 2, n: int = 14) -> list[Path]:
    paths = []
    for s in range(shards):
        members = []
        for k in range(n):
            key = f"part{s}/{k:05d}"
            members += [
                (f"{key}.jpg", jpeg(photo_like(40 + k % 5, 44 + 3 * s, seed=100 * s + k))),
                (f"{key}.cls", str(k % 4).encode()),
            ]
        paths.append(write_tar(folder / f"shard-{s:04d}.tar", members))
    return paths
