"""``mapfields(data, image=[ops...])`` (and ``ss.open(...).map(...)``): fields through image pipelines.

A view of a container of dict samples in which each named field is replaced by the output of its
pipeline (``slipstream.ops``); the other fields pass through. On a packed file the pipeline reads
the stored bytes zero-copy and decodes them itself (fused with the crop); on any other container
the field may hold encoded image bytes (JPEG, PNG, QOI...) or an image array. In a loader the
output is written straight into the batch slot (``getobs_into``), and random parameters come from
``ss.sample_rng()``: the same seed gives the same batches with any number of workers.

A mapped packed file declares its batch structure (``batch_spec``): the file's own for the other
fields, and for each mapped one the pipeline's output shape and dtype as far as the ops state it
(a guess checked per row, so every batch still equals ``default_collate`` of its samples). It also
reads a chunk of a batch at once (``getobs_batch_into``): per mapped field, one compiled call
decodes and augments the chunk's images without the GIL (``images.imagetasks``), with the windows and
pixels the per-sample path gives.
"""

from __future__ import annotations

import mmap
from collections.abc import Mapping
from typing import Any

import numpy as np

from ..core.containers import getobs, numobs, origin_note, write_obs
from ..core.draws import Draws
from ..core.errors import CorruptFileError
from ..core.nodes import CollatedNode, VarNode
from ..core.rng import one_sample, sample_draws
from ..core.spec import Spec
from .image_index import ImageIndex
from .imageops import WindowError
from .imagetasks import run_task
from .kernels.pixel_steps import StepError
from .pipeline import ImageDecodeError, ImageSource, Pipeline

__all__ = ["MappedFields", "mapfields"]


class MappedFields:
    """A container whose fields ``pipelines`` (name -> Pipeline) are transformed on access."""

    def __init__(self, data: Any, pipelines: dict[str, Pipeline]):
        self._n = numobs(data)
        self.data, self.pipelines = data, pipelines
        self._packed = callable(getattr(data, "encoded", None)) and callable(getattr(data, "source_of", None)) and hasattr(data, "fields")
        self._declared = callable(getattr(data, "batch_spec", None))  # the batch nodes check each row
        if self._packed:
            missing = [name for name in pipelines if name not in data.fields]
            if missing:
                raise KeyError(f"no field {missing[0]!r} to map; the data has {list(data.fields)}")
            self._others = [name for name in data.fields if name not in pipelines]
            # per mapped field and sample, how its stored bytes decoded strictly before (ImageSource.
            # checked): a region decode then reads only the rows it needs, and no header is parsed
            # again (the bytes of a file open for reading do not change; the reader refuses one
            # changed in place). Anonymous shared memory: marks made in forked worker processes
            # are seen by the parent and by the workers of later epochs.
            self._checked = {name: _marks(self._n) for name in pipelines}

    def __getstate__(self) -> dict[str, Any]:  # spawned workers: the marks travel as bytes (a copy)
        state = dict(self.__dict__)
        if "_checked" in state:
            state["_checked"] = {name: bytes(marks) for name, marks in state["_checked"].items()}
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        if "_checked" in state:
            state["_checked"] = {name: _marks(len(marks), marks) for name, marks in state["_checked"].items()}
        self.__dict__.update(state)

    def __len__(self) -> int:
        return self._n

    def _source(self, index: int, name: str, sample: Mapping | None) -> ImageSource:
        if self._packed:
            codec, data, shape = self.data.encoded(index, name, check=False)  # getobs_into checked the file
            source = ImageSource(codec, data, shape)
            source.checked = self._checked[name][index]
            return source
        try:
            value = sample[name]  # type: ignore[index]
        except (KeyError, TypeError):
            raise KeyError(f"sample {index}{origin_note(self.data, index)} has no field {name!r} to map") from None
        try:
            return ImageSource.of(value, f"sample {index}{origin_note(self.data, index)}, field {name!r}")
        except ValueError as exc:
            if not isinstance(value, (bytes, bytearray, memoryview)):
                raise
            raise ValueError(f"{exc}: {_DAMAGED_HINT}") from exc

    def sample_origin(self, index: int) -> str | None:
        """Where sample ``index`` comes from (the data's ``sample_origin``, such as ``ss.imagefolder``'s
        "file root/cat/1.jpg"), for error messages; None when the data does not say."""
        origin = getattr(self.data, "sample_origin", None)
        if not callable(origin):
            return None
        try:
            return str(origin(index))
        except Exception:  # noqa: BLE001 - naming the sample must not hide the error itself
            return None

    def _run(self, index: int, name: str, sample: Mapping | None, out: Any = None, draws: Draws | None = None) -> Any:
        """Field ``name`` of sample ``index`` through its pipeline (with ``draws``, default the
        sample being loaded's). Bytes that do not decode raise ``ValueError`` naming the sample and
        field (``CorruptFileError`` naming the file too, for a packed file: what ``ds[index]``
        raises on the same bytes)."""
        source = self._source(index, name, sample)
        pipeline = self.pipelines[name]
        if self._declared and pipeline.tail:
            out = None  # custom ops' output would be cast into a guessed buffer; the batch node copies exact fits
        try:
            result = pipeline.run(source, out=out, draws=draws)
        except ImageDecodeError as exc:
            if self._packed:
                raise CorruptFileError(self.data.source_of(index), f"sample {index}, field {name!r}: {exc}") from exc
            raise ValueError(f"sample {index}{origin_note(self.data, index)}, field {name!r}: {exc}: {_DAMAGED_HINT}") from exc
        except (WindowError, StepError) as exc:  # an op that cannot apply to this image (a crop larger than it, a blur wider)
            raise ValueError(f"sample {index}{origin_note(self.data, index)}, field {name!r}: {exc}") from exc
        if self._packed:
            self._checked[name][index] = source.checked
        if not self._declared and out is not None and result is not out and _channels_differ(np.shape(result), out.shape):
            raise ValueError(
                f"sample {index}{origin_note(self.data, index)}, field {name!r}: the pipeline gives shape {np.shape(result)} but the batch holds "
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

    def batch_spec(self) -> Spec | None:
        """The batch structure, when the data declares its own (a packed file): its nodes for the
        other fields, and for each mapped field a ``VarNode`` shaped like the pipeline's output on
        the first sample (its stored size through the geometry, channels, layout and dtype), which
        rows that match fill in place and others are collated from. None otherwise."""
        declare = getattr(self.data, "batch_spec", None)
        spec = declare() if callable(declare) else None
        if spec is None or not isinstance(spec.tree, dict) or any(name not in spec.tree for name in self.pipelines):
            return None
        tree = dict(spec.tree)
        for name, pipeline in self.pipelines.items():
            tree[name] = self._output_node(name, pipeline)
        return Spec(tree)

    def _output_node(self, name: str, pipeline: Pipeline) -> Any:
        """The batch node of mapped field ``name`` (see ``batch_spec``)."""
        try:
            height, width, channels = self.data.encoded(0, name)[2]
        except (AttributeError, TypeError):  # not an image field: every read raises, naming the sample
            return CollatedNode()
        shape, dtype = _output_guess(pipeline, int(height), int(width), int(channels))
        return _MappedImageNode(shape, dtype)

    def page_starts(self) -> np.ndarray:
        """The packed file's pages, for ``order="quasi_random"``."""
        return self.data.page_starts()

    def map(self, **pipelines: Any) -> Any:
        """More fields through pipelines (a field can be mapped once)."""
        if "device" in pipelines:
            raise TypeError("fields already mapped on the CPU cannot be joined by device fields: map the device fields on ss.open(path) itself")
        again = [name for name in pipelines if name in self.pipelines]
        if again:
            raise ValueError(f"field {again[0]!r} is mapped already; put all its ops in one list")
        return mapfields(self.data, **self.pipelines, **pipelines)

    def __repr__(self) -> str:
        return f"MappedFields({self.data!r}, {self.pipelines!r})"


_DAMAGED_HINT = (
    "the image is damaged or not an image at all: replace or remove it (slipstream convert --skip-bad, or "
    "ss.write(..., on_error='skip'), packs the others and lists the ones it leaves out)"
)
_CHANNELS_HINT = "the images mix 1 and 3 channels: put ops.ToRGB() in the pipeline, or pack with F.Image(channels=3)"
_SIZES_HINT = (
    "to batch the images, give them one shape and dtype: a fixed-size ops.RandomResizedCrop, ops.CenterCrop or "
    "ops.Resize((h, w)) in the pipeline, and custom ops that return one dtype"
)


def _marks(n: int, initial: bytes = b"") -> mmap.mmap:
    """``n`` bytes of anonymous shared memory (shared with forked children), set from ``initial``."""
    marks = mmap.mmap(-1, max(n, 1))
    marks[: len(initial)] = initial
    return marks


class _MappedImageNode(VarNode):
    """A mapped image field in a batch: a ``VarNode`` whose hint names the fix for what differs."""

    __slots__ = ()

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype):
        super().__init__(shape, dtype, _SIZES_HINT)

    def __reduce__(self) -> tuple[Any, ...]:
        return (_MappedImageNode, (self.array.shape, self.array.dtype))

    def hint_for(self, rows: list[Any]) -> str:
        first = np.shape(rows[0]) if rows else ()
        return _CHANNELS_HINT if any(_channels_differ(np.shape(row), first) for row in rows) else self.hint


def _output_guess(pipeline: Pipeline, height: int, width: int, channels: int) -> tuple[tuple[int, ...], np.dtype]:
    """The (shape, dtype) ``pipeline`` gives an image of that stored size: exact for the fused ops
    (fixed-size crops and resizes, ``ToRGB``, ``Normalize``, ``ToCHW``), the fused stage's output
    when custom ops follow (a guess: they may change it)."""
    try:  # random ops move the window; fixed-size ones keep its size
        window = pipeline.windows([height], [width], Draws(0, 0, [0])).row(0)
        out_h, out_w = window.out_h, window.out_w
    except WindowError:  # a crop larger than this image: it raises when read
        out_h, out_w = height, width
    return pipeline.output(pipeline.channels or channels, out_h, out_w)


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


class _MappedPacked(MappedFields):
    """A mapped packed file, which also reads a chunk of a batch at once (see the module doc)."""

    @property
    def remote(self) -> bool:
        return bool(self.data.remote)

    def prefetch(self, indices: Any) -> None:
        """The packed file's read-ahead hint (its pages, for samples ``indices``)."""
        self.data.prefetch(indices)

    def __getstate__(self) -> dict[str, Any]:  # per-process views and indexes are rebuilt on use
        state = super().__getstate__()
        state.pop("_tasks", None)
        return state

    def _task_state(self, name: str) -> tuple[ImageIndex, np.ndarray]:
        """Field ``name``'s image index and decode marks (as an array over the shared marks)."""
        tasks = self.__dict__.setdefault("_tasks", {})
        state = tasks.get(name)
        if state is None:
            state = tasks[name] = (ImageIndex(self.data, name), np.frombuffer(self._checked[name], np.uint8))
        return state

    def getobs_batch_into(self, buffer: Any, indices: Any) -> dict[str, Any]:
        """Read samples ``indices`` into ``buffer`` (a dict of per-field arrays with one row per
        index, or None where a field cannot be written in place), as ``PackedDataset``'s does: the
        other fields by the file, each mapped field by one ``images.imagetasks.run_task`` call. Returns
        a dict whose field is the buffer's array when every row was written into it, else a list
        of the rows' values, for the caller to check and collate."""
        get = buffer.get if isinstance(buffer, Mapping) else (lambda name: None)
        others = {name: get(name) for name in self._others}
        out = self.data.getobs_batch_into(others, indices, fields=self._others)  # checks the indices
        idx, pages = self.data.locate_many(indices)
        draws = sample_draws(len(idx))
        for name, pipeline in self.pipelines.items():
            target = get(name)
            target = target if isinstance(target, np.ndarray) else None
            index, marks = self._task_state(name)

            def one(j: int, name: str = name, target: np.ndarray | None = target) -> Any:
                mine = draws.take([j])
                with one_sample(mine.indices()[0]):  # custom ops' sample_rng() is this sample's (its index in the loader)
                    return self._run(int(idx[j]), name, None, out=None if target is None else target[j], draws=mine)

            out[name] = run_task(pipeline, index.table(idx, pages, marks), draws, target, one)
        return out


_DEVICE_OPTIONS = ("cpu_share", "dtype", "layout")


def mapfields(data: Any, device: Any = None, **pipelines: Any) -> Any:
    """A view of ``data`` (dict samples) with each ``field=[ops...]`` transformed by that pipeline.

    With ``device`` (a torch device: "cuda", "cuda:1", "cpu"), the fields' pixel work runs there
    (``slipstream.images.device.devicemap``: packed files only; also ``cpu_share=``, ``dtype=``, ``layout=``);
    "device", "cpu_share", "dtype" and "layout" are then not field names."""
    options = {name: pipelines.pop(name) for name in _DEVICE_OPTIONS if name in pipelines}
    if device is not None:
        # lazy: breaks the cycle images -> images/device -> images (mapfields -> device.devicemap -> pipeline)
        from .device.devicemap import device_map

        return device_map(data, pipelines, device, **options)
    if options:
        raise TypeError(f"{sorted(options)} go with device= (a device stage), not a CPU pipeline")
    packed = all(callable(getattr(data, name, None)) for name in ("encoded", "locate_many", "source_of")) and hasattr(data, "fields")
    return (_MappedPacked if packed else MappedFields)(data, _compile(pipelines))
