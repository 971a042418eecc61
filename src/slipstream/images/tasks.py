"""Whole tasks: a chunk of a batch of images through a pipeline in one compiled call, without the GIL.

``run_task(pipeline, table, draws, target, one)`` fills ``target`` (n rows, C-contiguous) with the
pipeline's output for the n encoded images of ``table`` (an ``ImageTable``: codec, address, size,
stored shape and decode mark of each). The Python part is a fixed number of NumPy operations per
task, whatever n: the geometry's windows (``Pipeline.windows``, from the counter-based ``draws``)
and where they lie in the decoded pixels (``placement.place``). Then one call into the compiled
``_roijpeg`` extension (``csrc/task.c``) decodes each JPEG around its window at a reduced DCT scale
(or reads raw pixels in place), resamples, mirrors, lays out and normalizes it into its row, with
the GIL released for the whole chunk.

Samples it does not handle go through ``one(j)`` (the per-sample path, which computes the same
windows from the same draws and so the same pixels, or raises the error that names the sample):
other codecs (PNG, QOI), raw pixels of another channel count, outputs of another shape than the
batch's, a window an op cannot place, CMYK or progressive JPEGs with scans missing, and any JPEG
the compiled decoder refuses. Without the extension (not built, or ``SLIPSTREAM_NO_ROIJPEG=1``)
and for pipelines with custom ops every sample goes through ``one``: the same batches, slower.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from ..core import stages
from ..core.draws import Draws
from ..ops import WindowError
from .codecs import CODECS
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

    def __init__(self, codecs: np.ndarray, addrs: np.ndarray, sizes: np.ndarray, shapes: np.ndarray, marks: np.ndarray, slots: np.ndarray, keep: Any):
        self.codecs, self.addrs, self.sizes, self.shapes, self.keep = codecs, addrs, sizes, shapes, keep
        self.marks, self.slots = marks, slots

    def __len__(self) -> int:
        return len(self.codecs)


def _lut(pipeline: Pipeline, channels: int, dtype: np.dtype) -> np.ndarray:
    """The normalized value of each uint8 value per channel, as the output dtype (float16 as its
    bits): what the resamplers compute, ``float32(v) * scale[c] + offset[c]`` cast to the dtype."""
    if dtype == np.uint8 or pipeline.normalize is None:
        return np.empty(0, np.uint8)
    scale, offset = pipeline.normalize.coefficients(channels)
    table = np.arange(256, dtype=np.float32)[None, :] * scale[:, None] + offset[:, None]
    with np.errstate(over="ignore"):
        return np.ascontiguousarray(table if dtype == np.float32 else table.astype(np.float16).view(np.uint16))


def run_task(pipeline: Pipeline, table: ImageTable, draws: Draws, target: np.ndarray | None, one: Callable[[int], Any]) -> Any:
    """Fill ``target``'s rows (see the module doc). Returns ``target`` when every row was written
    into it, else a list of the n rows' values (the rows written in place as views of ``target``),
    for the caller to check and collate; ``target`` None gives that list."""
    n = len(table)
    handled = np.zeros(n, bool)
    if target is not None and region_decoder() is not None and not pipeline.tail and target.shape[:1] == (n,) and target.flags.c_contiguous:
        handled = _compiled(pipeline, table, draws, target, one)
    values: list[Any] | None = None
    for j in np.flatnonzero(~handled).tolist():
        result = one(j)
        if values is None and target is not None and isinstance(result, np.ndarray) and result.shape == target.shape[1:] and result.dtype == target.dtype:
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
    try:
        windows = pipeline.windows(heights, widths, draws)
    except WindowError:
        return none  # the per-sample path raises for the sample
    jpeg, raw = table.codecs == _JPEG, table.codecs == _RAW
    placement = place(windows, heights, widths, jpeg, pipeline.decode.exact)
    eligible = (
        placement.valid
        & (windows.out_h == out_h) & (windows.out_w == out_w)
        & ((pipeline.channels is not None) | (own == channels))
        & ((jpeg & (table.marks[table.slots] != WHOLE)) | (raw & (own == channels)))
    )
    picked = np.flatnonzero(eligible)
    if not len(picked):
        return eligible
    slots = table.slots[picked]
    before = table.marks[slots]
    marks = before.copy()
    args = (  # (fancy indexing gives new C-contiguous arrays)
        table.addrs[picked], table.sizes[picked], table.codecs[picked], table.shapes[picked],
        placement.factor[picked].astype(np.int32), placement.region[picked], placement.edges[picked],
        windows.flip[picked].astype(np.uint8), marks, picked.astype(np.int64),
        target, target[0].nbytes, out_h, out_w, channels, int(pipeline.chw), _DTYPES[dtype],
        _lut(pipeline, channels, dtype), int(pipeline.filter == "box"), int(pipeline.decode.fast),
    )
    run = region_decoder().run_task
    start = 0
    try:
        while start < len(picked):
            stop, _why, decoding, resampling = run(*args, start)
            stages.add("decode", decoding)
            stages.add("augment", resampling)
            if stop < len(picked):
                one(int(picked[stop]))  # decodes it on its own (and marks it), or raises naming it
            start = stop + 1
    finally:
        decoded = marks != before  # only what the compiled path marked: one() marks its own
        table.marks[slots[decoded]] = marks[decoded]
    return eligible
