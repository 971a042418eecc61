"""``mapfields(data, image=[ops...])`` (and ``ss.open(...).map(...)``): fields through image pipelines.

A view of a container of dict samples in which each named field is replaced by the output of its
pipeline (``slipstream.ops``); the other fields pass through. On a packed file the pipeline reads
the stored bytes zero-copy and decodes them itself (fused with the crop); on any other container
the field may hold encoded image bytes (JPEG, PNG, QOI...) or an image array. In a loader the
output is written straight into the batch slot (``getobs_into``), and random parameters come from
``ss.sample_rng()``: the same seed gives the same batches with any number of workers.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from ._containers import getobs, numobs, write_obs
from ._errors import CorruptFileError
from ._pipeline import ImageDecodeError, ImageSource, Pipeline

__all__ = ["MappedFields", "mapfields"]


class MappedFields:
    """A container whose fields ``pipelines`` (name -> Pipeline) are transformed on access."""

    def __init__(self, data: Any, pipelines: dict[str, Pipeline]):
        self._n = numobs(data)
        self.data, self.pipelines = data, pipelines
        self._packed = callable(getattr(data, "encoded", None)) and hasattr(data, "fields")
        if self._packed:
            missing = [name for name in pipelines if name not in data.fields]
            if missing:
                raise KeyError(f"no field {missing[0]!r} to map; the data has {list(data.fields)}")
            self._others = [name for name in data.fields if name not in pipelines]

    def __len__(self) -> int:
        return self._n

    def _source(self, index: int, name: str, sample: Mapping | None) -> ImageSource:
        if self._packed:
            codec, data, shape = self.data.encoded(index, name)
            return ImageSource(codec, data, shape)
        try:
            value = sample[name]  # type: ignore[index]
        except (KeyError, TypeError):
            raise KeyError(f"sample {index} has no field {name!r} to map") from None
        return ImageSource.of(value, f"sample {index}, field {name!r}")

    def _run(self, index: int, name: str, sample: Mapping | None, out: Any = None) -> Any:
        """Field ``name`` of sample ``index`` through its pipeline. Bytes that do not decode raise
        ``ValueError`` naming the sample and field (``CorruptFileError`` naming the file too, for
        a packed file: what ``ds[index]`` raises on the same bytes)."""
        source = self._source(index, name, sample)
        try:
            result = self.pipelines[name].run(source, out=out)
        except ImageDecodeError as exc:
            if self._packed:
                raise CorruptFileError(self.data.path, f"sample {index}, field {name!r}: {exc}") from exc
            raise ValueError(f"sample {index}, field {name!r}: {exc}") from exc
        if out is not None and result is not out and _channels_differ(np.shape(result), out.shape):
            raise ValueError(
                f"sample {index}, field {name!r}: the pipeline gives shape {np.shape(result)} but the batch holds "
                f"{out.shape} (the first sample's): the images mix 1 and 3 channels; put ops.ToRGB() in the "
                f"pipeline, or pack with F.Image(channels=3)"
            )
        return result

    def __getitem__(self, index: int) -> dict[str, Any]:
        if self._packed:
            sample = self.data.getobs_into(None, index, fields=self._others)
        else:
            sample = dict(_as_mapping(getobs(self.data, index), index))
        for name in self.pipelines:
            sample[name] = self._run(index, name, sample)
        return sample

    def getobs_into(self, buffer: Any, index: int) -> dict[str, Any]:
        """Write sample ``index`` into ``buffer`` (pipelines write their output in place)."""
        get = buffer.get if isinstance(buffer, Mapping) else (lambda name: None)
        if self._packed:
            sample = self.data.getobs_into(buffer, index, fields=self._others)
            raw = None
        else:
            raw = _as_mapping(getobs(self.data, index), index)
            sample = {k: write_obs(get(k), v, f"sample {index}, field {k!r}") if get(k) is not None else v for k, v in raw.items() if k not in self.pipelines}
        for name in self.pipelines:
            sample[name] = self._run(index, name, raw, out=get(name))
        return sample

    def page_starts(self) -> np.ndarray:
        """The packed file's pages, for ``order="quasi_random"``."""
        return self.data.page_starts()

    def map(self, **pipelines: Any) -> MappedFields:
        """More fields through pipelines (a field can be mapped once)."""
        again = [name for name in pipelines if name in self.pipelines]
        if again:
            raise ValueError(f"field {again[0]!r} is mapped already; put all its ops in one list")
        return MappedFields(self.data, {**self.pipelines, **_compile(pipelines)})

    def __repr__(self) -> str:
        return f"MappedFields({self.data!r}, {self.pipelines!r})"


def _channels_differ(got: tuple[int, ...], expected: tuple[int, ...]) -> bool:
    """Whether two image shapes differ only in one axis holding 1 and 3 (channels)."""
    if len(got) != 3 or len(expected) != 3:
        return False
    differ = [(a, b) for a, b in zip(got, expected) if a != b]
    return len(differ) == 1 and set(differ[0]) == {1, 3}


def _as_mapping(sample: Any, index: int) -> Mapping:
    if not isinstance(sample, Mapping):
        raise TypeError(f"sample {index}: mapping fields needs dict samples, got {type(sample).__name__}")
    return sample


def _compile(pipelines: dict[str, Any]) -> dict[str, Pipeline]:
    if not pipelines:
        raise TypeError("map needs at least one field=[ops...]")
    return {name: ops if isinstance(ops, Pipeline) else Pipeline(list(ops)) for name, ops in pipelines.items()}


def mapfields(data: Any, **pipelines: Any) -> MappedFields:
    """A view of ``data`` (dict samples) with each ``field=[ops...]`` transformed by that pipeline."""
    return MappedFields(data, _compile(pipelines))
