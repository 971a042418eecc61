"""``ss.open(p).map(image=[ops...], device="cuda")``: image fields whose pixel work runs on a torch device.

A ``DeviceMapped`` view of a packed dataset (one file or shards) is read by any loader like the
CPU-mapped one, split where the loader splits work:

- in the loader's workers (threads or processes; NumPy only, torch is not imported there), each
  mapped field of a chunk of a batch becomes a list of ``StagedImage`` rows (``hostfield``): stored
  bytes and the CPU pipeline's windows, or CPU-resampled pixels for the images the device does not
  decode and for ``cpu_share`` of the JPEGs; the other fields are read as the file reads them;
- in the consumer's process, the loader hands each batch to ``batch_finisher()`` (a
  ``images.device.finisher.DeviceFinisher``: ``loading.finishing``), which decodes, resamples, normalizes and
  lays out each mapped field's rows into one tensor on the device, ahead of the consumer on a side
  stream.

A batch is a dict: each mapped field a tensor on ``device`` (dtype the ``Normalize``'s, or uint8;
``dtype=`` may say "bfloat16" too; layout "NCHW" with ``ops.ToCHW``, else "NHWC"; ``layout=`` may
say "channels_last"), the other fields as the loader batches them (NumPy arrays from
``ss.DataLoader``, tensors from ``slipstream.torch.DataLoader``, which also moves them with
``device=``). Windows, flips and the CPU share are pure functions of (seed, epoch, index): the same
seed gives the same batches with any number of workers, and a resumed loader continues exactly.

``ds[i]`` (outside a loader) returns the sample with each mapped field as its ``StagedImage`` row
(fresh random windows, as the CPU pipeline's ``ds[i]``); ``finish_rows(field, rows)`` turns rows into
a batch tensor by hand.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ...core.containers import numobs
from ...core.devices import device_name
from ...core.nodes import ObjectLeaf
from ...core.rng import sample_draws
from ...core.spec import Spec
from .. import device as device_package
from ..pipeline import Pipeline
from .batchformats import DTYPE_NAMES, LAYOUT_NAMES
from .hostfield import StagedField

__all__ = ["DeviceMapped", "device_map"]


class DeviceMapped:
    """A view of packed ``data`` whose fields ``pipelines`` (name -> Pipeline) run on ``device``
    (module doc). Built by ``device_map``."""

    def __init__(self, data: Any, pipelines: dict[str, Pipeline], device: Any, cpu_share: float, dtype: str | None, layout: str | None):
        self._n = numobs(data)
        self.data, self.pipelines, self.device = data, pipelines, str(device)
        self.cpu_share = float(cpu_share)
        self.staged = {name: StagedField(data, name, pipeline, cpu_share) for name, pipeline in pipelines.items()}
        self.dtypes = {name: dtype or (p.normalize.dtype if p.normalize else "uint8") for name, p in pipelines.items()}
        self.layouts = {name: layout or ("NCHW" if p.chw else "NHWC") for name, p in pipelines.items()}
        self._others = [name for name in data.fields if name not in pipelines]

    @property
    def fields(self) -> Any:
        return self.data.fields

    def __len__(self) -> int:
        return self._n

    def source_of(self, index: int) -> str:
        return self.data.source_of(index)

    @property
    def remote(self) -> bool:
        return bool(getattr(self.data, "remote", False))

    def prefetch(self, indices: Any) -> None:
        """The packed file's read-ahead hint (its pages, for samples ``indices``)."""
        self.data.prefetch(indices)

    def page_starts(self) -> np.ndarray:
        """The packed file's pages, for ``order="quasi_random"``."""
        return self.data.page_starts()

    def _rows(self, name: str, idx: np.ndarray) -> list[Any]:
        return self.staged[name].rows(idx, sample_draws(len(idx)))

    def __getitem__(self, index: int) -> dict[str, Any]:
        idx, _ = self.data.locate_many([index])
        sample = self.data.getobs_into(None, int(idx[0]), fields=self._others)
        for name in self.pipelines:
            sample[name] = self._rows(name, idx)[0]
        return sample

    def getobs_batch_into(self, buffer: Any, indices: Any) -> dict[str, Any]:
        """Samples ``indices``: the other fields read into ``buffer`` by the file, each mapped field
        a list of ``StagedImage`` rows (module doc)."""
        get = buffer.get if isinstance(buffer, Mapping) else (lambda name: None)
        out = self.data.getobs_batch_into({name: get(name) for name in self._others}, indices, fields=self._others)
        idx, _ = self.data.locate_many(indices)
        for name in self.pipelines:
            out[name] = self._rows(name, idx)
        return out

    def batch_spec(self) -> Spec | None:
        """The file's batch structure with each mapped field a list of rows (the finisher makes
        it a tensor); None for an empty file."""
        spec = self.data.batch_spec()
        if spec is None:
            return None
        tree = dict(spec.tree)
        for name in self.pipelines:
            tree[name] = ObjectLeaf()
        return Spec(tree)

    def batch_finisher(self) -> Any:
        """A new ``images.device.finisher.DeviceFinisher`` for this view (imports torch; the loader calls it once
        per epoch, in the consumer's process)."""
        # through the package's lazy table: finisher (and torch) load on first use, never in a worker
        return device_package.DeviceFinisher(self)

    def finish_rows(self, name: str, rows: list[Any]) -> Any:
        """Rows of mapped field ``name`` as one tensor on the device, by hand (no side stream)."""
        return self.batch_finisher().field(name, rows)

    def map(self, **pipelines: Any) -> Any:
        raise TypeError("a device-mapped view maps no more fields: map them all in one .map(..., device=...) call")

    def __repr__(self) -> str:
        return f"DeviceMapped({self.data!r}, {sorted(self.pipelines)} on {self.device!r}, cpu_share={self.cpu_share})"


def _check(dtype: Any, layout: Any, share: Any) -> None:
    if dtype is not None and dtype not in DTYPE_NAMES:
        raise ValueError(f"dtype must be one of {DTYPE_NAMES}, got {dtype!r}")
    if layout is not None and layout not in LAYOUT_NAMES:
        raise ValueError(f"layout must be one of {LAYOUT_NAMES}, got {layout!r}")
    if not isinstance(share, (int, float)) or not 0.0 <= float(share) <= 1.0:
        raise ValueError(f"cpu_share must be a number between 0 and 1, got {share!r}")


def device_map(data: Any, pipelines: dict[str, Any], device: Any, *, cpu_share: float = 0.0, dtype: str | None = None, layout: str | None = None) -> DeviceMapped:
    """``data`` (a packed file or shards: ``encoded``, ``source_of``, ``locate_many``,
    ``getobs_batch_into``) with ``pipelines`` (name -> list of ops) run on ``device`` (module doc)."""
    if not all(callable(getattr(data, name, None)) for name in ("encoded", "source_of", "locate_many", "getobs_batch_into")):
        raise TypeError(f"device= maps fields of packed files (ss.open(path)), got {type(data).__name__}")
    if not pipelines:
        raise TypeError("map needs at least one field=[ops...]")
    _check(dtype, layout, cpu_share)
    missing = [name for name in pipelines if name not in data.fields]
    if missing:
        raise KeyError(f"no field {missing[0]!r} to map; the data has {list(data.fields)}")
    compiled = {name: ops if isinstance(ops, Pipeline) else Pipeline(list(ops)) for name, ops in pipelines.items()}
    if dtype == "uint8":
        normalized = [name for name, pipeline in compiled.items() if pipeline.normalize is not None]
        if normalized:
            raise ValueError(f"field {normalized[0]!r}: dtype='uint8' cannot hold the output of its ops.Normalize; give a float dtype, or drop the Normalize")
    where = device_name(device)  # its form only: torch says whether it exists, at iter()
    if where is None:
        raise ValueError("device must be a torch device such as 'cuda', 'cuda:1' or 'cpu', or a CUDA index, got None")
    return DeviceMapped(data, compiled, where, cpu_share, dtype, layout)
