"""Hugging Face test data: a ``datasets.Dataset.save_to_disk`` folder written without ``datasets``.

``save_to_disk(folder, tables, features)`` writes what ``save_to_disk`` writes (Arrow IPC stream
shards, state.json, dataset_info.json with ``features``, or none when ``features`` is None);
``hf_table(start, n)`` is a table of rows ``start .. start + n - 1`` holding every feature kind of
``HF_FEATURES`` (an image struct, a ClassLabel, a string, a float32, a Sequence, an Array2D).
``pixels``/``jpeg`` are the smooth seeded images its rows (and other conversion tests) hold.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.ipc
from jpegs import encode_jpeg


def pixels(seed: int, height: int, width: int, channels: int = 3) -> np.ndarray:
    """A smooth image (JPEG keeps it close) with a seeded offset."""
    y, x = np.mgrid[0:height, 0:width]
    base = x * 100 // max(1, width - 1) + y * 50 // max(1, height - 1) + seed % 20 * 5
    image = np.stack([base, base // 2 + 60, 200 - base // 2], axis=2)[:, :, :channels]
    return image.astype(np.uint8)


def jpeg(seed: int, height: int, width: int, channels: int = 3) -> bytes:
    """``pixels(seed, height, width, channels)`` as a quality-85 JPEG (4:2:0 for colour, grayscale for one channel)."""
    image = pixels(seed, height, width, channels)
    return encode_jpeg(image, quality=85, colorspace="RGB" if channels == 3 else "GRAY", colorsubsampling="420" if channels == 3 else "Gray")


def save_to_disk(folder: Path, tables: list[pa.Table], features: dict | None) -> None:
    """What ``datasets.Dataset.save_to_disk`` writes: Arrow IPC stream shards, state.json, dataset_info.json."""
    folder.mkdir()
    names = [f"data-{k:05d}-of-{len(tables):05d}.arrow" for k in range(len(tables))]
    for name, table in zip(names, tables):
        with pa.OSFile(str(folder / name), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as writer:
            writer.write_table(table, max_chunksize=2)
    state = {"_data_files": [{"filename": n} for n in names], "_fingerprint": "0", "_format_columns": None, "_format_kwargs": {},
             "_format_type": None, "_output_all_columns": False, "_split": "train"}  # fmt: skip
    (folder / "state.json").write_text(json.dumps(state))
    if features is not None:
        (folder / "dataset_info.json").write_text(json.dumps({"citation": "", "description": "", "features": features}))


HF_FEATURES = {
    "img": {"decode": True, "id": None, "_type": "Image"},
    "label": {"names": ["cat", "dog"], "_type": "ClassLabel"},
    "text": {"dtype": "string", "id": None, "_type": "Value"},
    "score": {"dtype": "float32", "_type": "Value"},
    "tokens": {"feature": {"dtype": "int64", "_type": "Value"}, "length": -1, "_type": "Sequence"},
    "emb": {"shape": [2, 2], "dtype": "float32", "_type": "Array2D"},
}


def hf_table(start: int, n: int) -> pa.Table:
    """Rows ``start .. start + n - 1`` of a table with a column per ``HF_FEATURES`` kind (row i's values derive from i)."""
    rows = range(start, start + n)
    return pa.table(
        {
            "img": pa.array([{"bytes": jpeg(i, 8, 12), "path": None} for i in rows], pa.struct([("bytes", pa.binary()), ("path", pa.string())])),
            "label": pa.array([i % 2 for i in rows], pa.int64()),
            "text": pa.array([f"t{i}" for i in rows], pa.string()),
            "score": pa.array([i / 2 for i in rows], pa.float32()),
            "tokens": pa.array([list(range(i % 3)) for i in rows], pa.list_(pa.int64())),
            "emb": pa.array([[[i, 1.5], [2.0, -i]] for i in rows], pa.list_(pa.list_(pa.float32(), 2), 2)),
        }
    )
