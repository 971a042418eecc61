"""Data for the engine tests (test_engines, test_ray): module-level, so spawned worker processes can
import them (Ray's workers cannot, tests/support not being on their path: engine="ray" sends this module
by value, ``write.engine_ray.ship_modules``)."""

from __future__ import annotations

import io
import os
import threading
from pathlib import Path
from typing import Any

import numpy as np
from packed import photo_like

import slipstream as ss
from slipstream import fields as F

IMAGE_FIELDS = {"image": F.Image(codec="jpeg", quality=85), "label": F.Int(), "path": F.Text()}


def image_tree(root: Path, per_class: int = 16) -> Path:
    """``root/<class>/<images>``: three classes of small JPEG and PNG files of varied sizes."""
    from jpegs import encode_jpeg
    from PIL import Image

    for label, name in enumerate(["ant", "bee", "cow"]):
        (root / name).mkdir(parents=True)
        for k in range(per_class):
            seed = 100 * label + k
            pixels = photo_like(24 + 5 * (k % 4), 30 + 3 * (k % 5), seed=seed)
            if k % 3 == 2:
                buffer = io.BytesIO()
                Image.fromarray(pixels).save(buffer, format="PNG")
                (root / name / f"{k:03d}.png").write_bytes(buffer.getvalue())
            else:
                (root / name / f"{k:03d}.jpg").write_bytes(encode_jpeg(pixels, quality=80))
    return root


def parquet_set(folder: Path, files: int = 3, rows: int = 40) -> Path:
    """``folder`` of ``files`` Parquet files of ``rows`` rows each, in row groups of 7: an id, a
    float, a string, a list (JSON) and PNG image bytes."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from PIL import Image

    folder.mkdir(parents=True)
    for f in range(files):
        ids = list(range(f * rows, (f + 1) * rows))
        images = []
        for i in ids:
            buffer = io.BytesIO()
            Image.fromarray(photo_like(16 + i % 5, 20, seed=i)).save(buffer, format="PNG")
            images.append(buffer.getvalue())
        table = pa.table(
            {
                "id": ids,
                "score": [i / 7 for i in ids],
                "name": [f"row-{i}" * (1 + i % 3) for i in ids],
                "tags": [[i, i + 1][: 1 + i % 2] for i in ids],
                "image": images,
            }
        )
        pq.write_table(table, folder / f"part-{f}.parquet", row_group_size=7)
    return folder


def files_of(folder: Path) -> dict[str, bytes]:
    """Every file in ``folder`` by name, with its bytes."""
    return {path.name: path.read_bytes() for path in sorted(folder.iterdir())}


def assert_reads_back(folder: Path, data: Any) -> None:
    """``ss.open(folder)`` holds every sample of ``data`` (a container) as written: equal fields."""
    ds = ss.open(folder)
    assert len(ds) == len(data)
    for i in range(len(data)):
        got, want = ds[i], data[i]
        for name in ds.fields:
            if name == "image":
                continue  # re-encoded PNGs are lossy: compared as the single-process write's bytes instead
            assert got[name] == want[name], (i, name)
    ds.validate()


class Labels:
    """``n`` small samples (an int and an array), a plain container."""

    fields = {"label": F.Int(), "x": F.Array("float32", (32,))}

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> dict[str, Any]:
        if not 0 <= index < self.n:
            raise IndexError(index)
        return {"label": index, "x": np.full(32, index, np.float32)}


class _OneBad:
    """``data`` whose sample ``index`` goes wrong as ``bad()`` says; the others read as they are."""

    def __init__(self, data: Any, index: int):
        self.data, self.index = data, index

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> Any:
        if index == self.index:
            self.bad()
        return self.data[index]

    def bad(self) -> None:
        raise NotImplementedError


class DiesOnce(_OneBad):
    """``data`` whose sample ``index`` kills the process reading it (``os._exit``) the first time
    only: the first reader creates ``marker`` (exclusively) and dies; later readers see it."""

    def __init__(self, data: Any, index: int, marker: Path):
        super().__init__(data, index)
        self.marker = marker

    def bad(self) -> None:
        try:
            with open(self.marker, "x"):
                pass
        except FileExistsError:
            return
        os._exit(3)


class Dies(_OneBad):
    """``data`` whose sample ``index`` kills the process reading it, every time."""

    def bad(self) -> None:
        os._exit(3)


class Refuses(_OneBad):
    """``data`` whose sample ``index`` cannot be read: a ``KeyError`` from the container itself."""

    def bad(self) -> None:
        raise KeyError(f"no record {self.index} in the catalogue")


class LabelError(Exception):
    """A typical user exception: two constructor arguments, so it pickles but cannot be unpickled."""

    def __init__(self, path: str, reason: str):
        super().__init__(f"{path}: {reason}")
        self.path, self.reason = path, reason


class Unsendable:
    """``data`` whose sample ``index`` raises an exception that cannot cross to another process as
    itself: ``kind`` "init", a ``LabelError`` (cannot be rebuilt); "lock", a ``ValueError`` holding
    a lock (cannot be pickled)."""

    def __init__(self, data: Any, index: int, kind: str):
        self.data, self.index, self.kind = data, index, kind

    def __len__(self) -> int:
        return len(self.data)

    def __getitem__(self, index: int) -> Any:
        if index == self.index:
            if self.kind == "init":
                raise LabelError(f"img{index}.jpg", "bad label")
            error = ValueError("bad sample")
            error.lock = threading.Lock()  # type: ignore[attr-defined]
            raise error
        return self.data[index]


class Blocks:
    """Samples that never come: reading one in a worker process creates ``folder/reading-<pid>``,
    then waits for ever (for a test that kills the driver meanwhile); the driver's probe reads them."""

    def __init__(self, folder: str, n: int = 8):
        self.folder, self.n = folder, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, index: int) -> dict[str, Any]:
        import multiprocessing

        if multiprocessing.parent_process() is not None:
            Path(self.folder, f"reading-{os.getpid()}").touch()
            threading.Event().wait()
        return {"x": index}
