"""Whole tasks: a chunk of a batch of images through a pipeline in one compiled call, without the GIL.

``run_task(pipeline, table, draws, target, one)`` fills ``target`` (n rows, C-contiguous) with the
pipeline's output for the n encoded images of ``table`` (an ``ImageTable``: codec, address, size,
stored shape and decode mark of each). The Python part is a fixed number of NumPy operations per
task, whatever n; the counter-based draws, the geometry's windows and where they lie in the decoded
pixels are computed in C for the built-in ops (``csrc/place.c``, the same bits as ``Draws.block``,
``Pipeline.windows`` and ``placement.place``, which place any other op's). Then one call into the
compiled ``_roijpeg`` extension (``csrc/task.c``) decodes each JPEG around its window at a reduced
DCT scale (or reads raw pixels in place), resamples, mirrors, lays out and normalizes it into its
row, with the GIL released for the whole chunk.

Samples it does not handle go through ``one(j)`` (the per-sample path, which computes the same
windows from the same draws and so the same pixels, or raises the error that names the sample):
other codecs (PNG, QOI), raw pixels of another channel count, outputs of another shape than the
batch's, a window an op cannot place, CMYK or progressive JPEGs with scans missing, a JPEG whose
stored shape is more than its bytes can encode (no canvas is sized for it: the per-sample path
refuses it, see ``codecs.check_encoded_size``), and any JPEG the compiled decoder refuses.
The pixel ops (``images.pixelops``) compile each sample's steps in Python (``Pipeline.pixel_program``),
which the compiled call runs on the sample's uint8 pixels before laying them out (``csrc/pixel.c``,
the NumPy executor's bits); a step that cannot apply (a blur wider than the output) sends its
sample to ``one``, which raises naming it. Without the extension (not built, or
``SLIPSTREAM_NO_ROIJPEG=1``), with an extension whose tasks do not run steps (no ``PIXEL_TASKS``),
for pipelines with custom ops and for a ``Grayscale(1)`` every sample goes through ``one``: the
same batches, slower.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from ..core import timings
from ..core.draws import Draws
from .encoded.codecs import CODECS
from .imageops import CenterCrop, Normalize, Op, RandomHorizontalFlip, RandomResizedCrop, Resize, WindowError
from .pipeline import REGION, WHOLE, Pipeline, region_decoder
from .placement import place

__all__ = ["ImageTable", "run_task"]

_RAW, _JPEG = CODECS["raw"], CODECS["jpeg"]
_DTYPES = {np.dtype(np.uint8): 0, np.dtype(np.float32): 1, np.dtype(np.float16): 2}
assert (REGION, WHOLE) == (1, 2)  # the marks csrc/task.h reads and writes


class ImageTable:
    """n encoded images: ``codecs`` uint8 (``codecs.CODECS``), ``addrs`` and ``sizes`` uint64 (where
    the bytes are, kept alive by ``keep``), ``shapes`` int32 (n, 3) stored (H, W, C); ``marks``
    (uint8, shared by every sample of the source) holds ``ImageSource.checked`` of sample ``i`` at
    ``marks[slots[i]]``, read and updated where the compiled path decodes one by region."""

    __slots__ = ("codecs", "addrs", "sizes", "shapes", "marks", "slots", "keep")

    def __init__(
        self,
        codecs: np.ndarray,
        addrs: np.ndarray,
        sizes: np.ndarray,
        shapes: np.ndarray,
        marks: np.ndarray,
        slots: np.ndarray,
        keep: Any,
    ):
        self.codecs, self.addrs, self.sizes, self.shapes, self.keep = codecs, addrs, sizes, shapes, keep
        self.marks, self.slots = marks, slots

    def __len__(self) -> int:
        return len(self.codecs)


def _lut(pipeline: Pipeline, channels: int, dtype: np.dtype) -> np.ndarray:
    """The normalized value of each uint8 value per channel, as the output dtype (float16 as its
    bits): what the resamplers compute, ``float32(v) * scale[c] + offset[c]`` cast to the dtype."""
    if dtype == np.uint8 or pipeline.normalize is None:
        return _NO_TABLE
    return _table(pipeline.normalize.mean, pipeline.normalize.std, channels, dtype.name)


_NO_TABLE = np.empty(0, np.uint8)


@functools.lru_cache(maxsize=64)
def _table(mean: tuple[float, ...], std: tuple[float, ...], channels: int, dtype: str) -> np.ndarray:
    """``_lut`` for these settings, made once (a task reuses it read-only)."""
    scale, offset = Normalize(mean, std, dtype).coefficients(channels)
    table = np.arange(256, dtype=np.float32)[None, :] * scale[:, None] + offset[:, None]
    with np.errstate(over="ignore"):
        table = np.ascontiguousarray(table if dtype == "float32" else table.astype(np.float16).view(np.uint16))
    table.flags.writeable = False
    return table


_OP_WORDS = 12  # csrc/place.h's SS_OP_WORDS
_RRC, _RESIZE, _CENTER, _FLIP = 1, 2, 3, 4
_programs: dict[Any, Any] = {}  # what the ops' settings compile to (ops may be changed between epochs)


def _settings(op: Any) -> Any:
    """An op's settings as a hashable value (an op held by an op, CenterCrop's Resize, expanded)."""
    return (type(op), tuple((k, _settings(v) if isinstance(v, Op) else v) for k, v in vars(op).items()))


def _program(pipeline: Pipeline) -> tuple[np.ndarray, tuple[tuple[int, int], ...]] | None:
    """The pipeline's geometry as csrc/place.h's program, with the draws it reads (``Draws.block``'s
    streams); None when an op is not one of the built-in ones (its windows are placed in NumPy).
    Cached by the ops' current settings: an op changed between epochs compiles anew."""
    key = tuple((stream, _settings(op)) for stream, op in pipeline.geometry)
    if key in _programs:
        return _programs[key]
    rows, column = [], 0
    program: Any = None
    for _, op in pipeline.geometry:
        row = [0.0] * _OP_WORDS
        row[1] = column
        if type(op) is RandomResizedCrop:
            halvings = op.halvings
            log_lo, log_hi = math.log(op.ratio[0]), math.log(op.ratio[1])
            row[0] = _RRC
            row[2:12] = [
                *op.size,
                op.scale[0],
                op.scale[1] - op.scale[0],
                log_lo,
                log_hi - log_lo,
                halvings,
                *op.ratio,
                0.5**halvings,
            ]
        elif type(op) is Resize:
            row[0] = _RESIZE
            row[2:5] = [op.size, 0, 0] if isinstance(op.size, int) else [0, *op.size]
        elif type(op) is CenterCrop and (op.resize is None or isinstance(op.resize.size, int)):
            row[0] = _CENTER
            row[2:5] = [*op.size, 0 if op.resize is None else op.resize.size]
        elif type(op) is RandomHorizontalFlip:
            row[0] = _FLIP
            row[2] = op.p
        else:
            break
        rows.append(row)
        column += op.draws
    else:
        program = (np.array(rows, np.float64).reshape(len(rows), _OP_WORDS), pipeline.draw_streams)
    if len(_programs) > 256:  # (settings that keep changing: a schedule)
        _programs.clear()
    _programs[key] = program
    return program


class _Placed:
    """What csrc/place.c computes for a task (the windows' outputs the task path needs)."""

    __slots__ = ("factor", "region", "edges", "flip", "out_hw", "valid")


def _place(
    pipeline: Pipeline, heights: np.ndarray, widths: np.ndarray, shapes: np.ndarray, jpeg: np.ndarray, draws: Draws
) -> _Placed:
    """The task's windows and placements: in C for the built-in ops, else with ``Pipeline.windows``
    and ``placement.place`` (the same numbers either way)."""
    n = len(jpeg)
    placed = _Placed()
    program = _program(pipeline)
    if program is not None:
        ops_, streams = program
        rows, keys, columns, counters = draws.counters(streams)  # the draws themselves are made in C
        placed.factor, placed.region = np.empty(n, np.int32), np.empty((n, 4), np.int64)
        placed.edges, placed.flip = np.empty((n, 4), np.float32), np.empty(n, np.uint8)
        placed.out_hw, placed.valid = np.empty((n, 2), np.int64), np.empty(n, np.uint8)
        region_decoder().place(
            shapes,
            rows,
            keys,
            columns,
            counters,
            ops_,
            jpeg.view(np.uint8),
            pipeline.decode.exact,
            placed.factor,
            placed.region,
            placed.edges,
            placed.flip,
            placed.out_hw,
            placed.valid,
        )
        placed.valid = placed.valid.view(bool)
        return placed
    try:
        windows = pipeline.windows(heights, widths, draws)
    except WindowError:  # the per-sample path raises for the sample
        placed.valid = np.zeros(n, bool)
        return placed
    placement = place(windows, heights, widths, jpeg, pipeline.decode.exact)
    placed.factor, placed.region, placed.edges = placement.factor.astype(np.int32), placement.region, placement.edges
    placed.flip, placed.out_hw = windows.flip.astype(np.uint8), np.stack([windows.out_h, windows.out_w], axis=1)
    placed.valid = placement.valid
    return placed


def run_task(pipeline: Pipeline, table: ImageTable, draws: Draws, target: np.ndarray | None, one: Callable[[int], Any]) -> Any:
    """Fill ``target``'s rows (see the module doc). Returns ``target`` when every row was written
    into it, else a list of the n rows' values (the rows written in place as views of ``target``),
    for the caller to check and collate; ``target`` None gives that list."""
    n = len(table)
    handled = np.zeros(n, bool)
    compiled_steps = not pipeline.pixel or getattr(region_decoder(), "PIXEL_TASKS", False)
    if (
        target is not None and region_decoder() is not None and not pipeline.tail and compiled_steps and pipeline.out_channels != 1
        and target.shape[:1] == (n,) and target.flags.c_contiguous
    ):  # fmt: skip
        handled = _compiled(pipeline, table, draws, target, one)
    values: list[Any] | None = None
    for j in np.flatnonzero(~handled).tolist():
        result = one(j)
        if (
            values is None
            and target is not None
            and isinstance(result, np.ndarray)
            and result.shape == target.shape[1:]
            and result.dtype == target.dtype
        ):
            if not np.shares_memory(result, target[j]):
                target[j] = result
            continue
        if values is None:
            values = [target[k] for k in range(n)] if target is not None else [None] * n
        values[j] = result
    return target if values is None else values


def _compiled(pipeline: Pipeline, table: ImageTable, draws: Draws, target: np.ndarray, one: Callable[[int], Any]) -> np.ndarray:
    """The compiled path over the samples it can take; returns which those were (each written
    into its row, or passed to ``one``, which wrote it or raised)."""
    n = len(table)
    none = np.zeros(n, bool)
    if n == 0:
        return none
    heights, widths, own = table.shapes[:, 0], table.shapes[:, 1], table.shapes[:, 2]
    _, dtype = pipeline.output(1, 1, 1)
    rows = target.shape[1:]
    if target.dtype != dtype or len(rows) != 3:
        return none
    channels, out_h, out_w = rows if pipeline.chw else (rows[2], rows[0], rows[1])
    if channels not in (1, 3) or (pipeline.channels or channels) != channels:
        return none
    possible = (heights >= 1) & (widths >= 1) & ((own == 1) | (own == 3))
    if not possible.all():  # damaged shapes: the per-sample path names the sample
        return none
    jpeg, raw = table.codecs == _JPEG, table.codecs == _RAW
    # a JPEG whose stored shape (as its header, checked in C) declares more than its bytes can encode
    # would size a canvas for nothing: the per-sample path refuses it (``codecs.check_encoded_size``;
    # this is that bound at its loosest, 1 bit per block of a component sampled at 1/4 each way, and
    # an arithmetic-coded JPEG it sends there is decoded there as any other)
    blocks = ((heights.astype(np.uint64) + 31) // 32) * ((widths.astype(np.uint64) + 31) // 32)
    plausible = ~jpeg | (table.sizes * np.uint64(8) >= blocks)
    placed = _place(pipeline, heights, widths, table.shapes, jpeg, draws)
    if not placed.valid.any():
        return placed.valid
    eligible = (
        placed.valid
        & plausible
        & (placed.out_hw[:, 0] == out_h)
        & (placed.out_hw[:, 1] == out_w)
        & ((pipeline.channels is not None) | (own == channels))
        & ((jpeg & (table.marks[table.slots] != WHOLE)) | (raw & (own == channels)))
    )
    picked = np.flatnonzero(eligible)
    if not len(picked):
        return eligible
    slots = table.slots[picked]
    before = table.marks[slots]
    marks = before.copy()
    if len(picked) == n:  # (the usual case: every sample, the arrays as they are)
        chosen = (table.addrs, table.sizes, table.codecs, table.shapes, placed.factor, placed.region, placed.edges, placed.flip)
    else:  # (fancy indexing gives new C-contiguous arrays)
        chosen = tuple(
            array[picked]
            for array in (
                table.addrs,
                table.sizes,
                table.codecs,
                table.shapes,
                placed.factor,
                placed.region,
                placed.edges,
                placed.flip,
            )
        )
    args = (
        *chosen,
        marks,
        picked,
        target,
        target[0].nbytes,
        out_h,
        out_w,
        channels,
        int(pipeline.chw),
        _DTYPES[dtype],
        _lut(pipeline, channels, dtype),
        int(pipeline.filter == "box"),
        int(pipeline.decode.fast),
    )
    extra: dict[str, Any] = {}
    if pipeline.pixel:  # each sample's steps, run in C on its uint8 pixels (one it refuses goes to one())
        program = pipeline.pixel_program(draws, np.full(n, out_h), np.full(n, out_w))
        extra["steps"] = np.ascontiguousarray(program if len(picked) == n else program[picked], np.float64)
    run = region_decoder().run_task
    start = 0
    written = np.ones(len(picked), bool)  # by the compiled call (not by one())
    try:
        while start < len(picked):
            stop, _why, decoding, resampling = run(*args, start, **extra)
            timings.add("decode", decoding)
            timings.add("augment", resampling)
            if stop < len(picked):
                written[stop] = False
                one(int(picked[stop]))  # decodes it on its own (and marks it), or raises naming it
            start = stop + 1
    finally:
        decoded = marks != before  # only what the compiled path marked: one() marks its own
        table.marks[slots[decoded]] = marks[decoded]
    if pipeline.erasing:  # RandomErasing after the formats: on the rows written here (one() erased its own)
        untouched = np.ones(n, bool)
        untouched[picked[written]] = False
        for op, boxes in pipeline.erase_boxes(draws, np.full(n, out_h), np.full(n, out_w)):
            boxes[untouched, 2] = -1
            op.erase(target, boxes, pipeline.chw)
    return eligible
