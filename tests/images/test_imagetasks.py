"""images.imagetasks: a chunk of a batch in one compiled call gives the per-sample path's batches, bit for bit.

The compiled path (``_roijpeg.run_task``: region decode, resampling in C, flip, layout, normalize)
is compared with the per-sample path with the C resampler and with NumPy alone, on every codec and pipeline
the task path takes and on the samples it hands back (CMYK, progressive JPEGs with scans missing,
PNG, damage), with every worker count and backend.
"""

from __future__ import annotations

import ctypes
import io
import json
import warnings
from typing import Any

import numpy as np
import pytest
from helpers import assert_resumes_exactly, assert_same, run_python, snapshot
from hypothesis import given, settings
from hypothesis import strategies as st
from packed import photo_like
from PIL import Image
from pyarrow import ipc as pa_ipc

import slipstream as ss
from slipstream import fields as F
from slipstream import ops
from slipstream.images import kernels as _kernels
from slipstream.images import pipeline as _pipeline
from slipstream.images.kernels import numpy_path
from slipstream.loading.backends import BACKENDS

_roijpeg = _pipeline.region_decoder()
needs_extension = pytest.mark.skipif(_roijpeg is None, reason="the _roijpeg extension is not built")
_DTYPES = [np.uint8, np.float32, np.float16]


def _compiled_resample(src: np.ndarray, edges: np.ndarray, shape: tuple[int, ...], flip: bool, box: bool, chw: bool, dtype: Any, scale: Any, offset: Any) -> np.ndarray:
    """One raw image through ``run_task`` (the compiled resampler and writer, no decoding)."""
    height, width, channels = src.shape
    out = np.full((2, *shape), 7, dtype)  # two rows: the task writes row 1 only
    out_h, out_w = shape[1:] if chw else shape[:2]
    lut = np.empty(0, np.uint8)
    if dtype != np.uint8:
        table = np.arange(256, dtype=np.float32)[None, :] * scale[:, None] + offset[:, None]
        lut = np.ascontiguousarray(table if dtype == np.float32 else table.astype(np.float16).view(np.uint16))
    stop, why, _, _ = _roijpeg.run_task(
        np.array([src.ctypes.data], np.uint64), np.array([src.nbytes], np.uint64), np.zeros(1, np.uint8),
        np.array([[height, width, channels]], np.int32), np.ones(1, np.int32), np.zeros((1, 4), np.int64),
        edges.reshape(1, 4), np.array([flip], np.uint8), np.zeros(1, np.uint8), np.ones(1, np.int64),
        out, out[0].nbytes, out_h, out_w, channels, int(chw), _DTYPES.index(dtype), lut, int(box), 0, 0,
    )
    assert stop == 1, why
    np.testing.assert_array_equal(out[0], np.full(shape, 7, dtype))  # nothing written outside its row
    return out[1]


@needs_extension
@settings(max_examples=300, deadline=None)
@given(
    st.integers(1, 70), st.integers(1, 70), st.sampled_from([1, 3]), st.integers(0, 2**32 - 1),
    st.integers(1, 90), st.integers(1, 90), st.booleans(), st.booleans(), st.booleans(), st.sampled_from(_DTYPES),
)
def test_the_compiled_resampler_writes_the_numpy_paths_bits(height, width, channels, seed, out_h, out_w, flip, box, chw, dtype):
    rng = np.random.default_rng(seed)
    src = rng.integers(0, 256, (height, width, channels), dtype=np.uint8)
    top, left = rng.uniform(0, height * 0.9), rng.uniform(0, width * 0.9)
    box_h, box_w = rng.uniform(0.05, 1.0) * (height - top), rng.uniform(0.05, 1.0) * (width - left)
    edges = np.array([top, top + box_h, left, left + box_w], np.float32)
    if not (edges[1] > edges[0] and edges[3] > edges[2]) or edges[1] > height or edges[3] > width:
        return  # numpy_path refuses such a box; the task path never passes one (placement.valid)
    shape = (channels, out_h, out_w) if chw else (out_h, out_w, channels)
    scale = offset = None
    if dtype != np.uint8:
        scale, offset = rng.uniform(0.001, 0.05, channels).astype(np.float32), rng.uniform(-3, 3, channels).astype(np.float32)
    expected = numpy_path.resample(src, (top, left, box_h, box_w), np.empty(shape, dtype), flip=flip, filter="box" if box else "bilinear", chw=chw, scale=scale, offset=offset)
    got = _compiled_resample(src, edges, shape, flip, box, chw, dtype, scale, offset)
    np.testing.assert_array_equal(got.view(np.uint8), expected.view(np.uint8))


@needs_extension
@pytest.mark.parametrize(("size", "out"), [((600, 450), (7, 9)), ((3, 5), (200, 150)), ((400, 30), (20, 30)), ((30, 400), (30, 20))])
def test_large_downscales_upscales_and_both_pass_orders_match(size, out):
    src = photo_like(*size, seed=1)
    edges = np.array([0, size[0], 0, size[1]], np.float32)
    for box in (False, True):
        expected = numpy_path.resample(src, (0, 0, *size), np.empty((*out, 3), np.uint8), filter="box" if box else "bilinear")
        np.testing.assert_array_equal(_compiled_resample(src, edges, (*out, 3), False, box, False, np.uint8, None, None), expected)


def _cmyk(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).convert("CMYK").save(buffer, format="JPEG", quality=90)
    return buffer.getvalue()


def _progressive_missing_scans(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="JPEG", quality=90, progressive=True)
    data = buffer.getvalue()
    scans = [i for i in range(len(data) - 1) if data[i : i + 2] == b"\xff\xda"]
    return data[: scans[2]] + b"\xff\xd9"  # two scans, then the end: valid, with scans missing


def _mixed(tmp_path: Any, n: int = 36) -> list[Any]:
    """Packed files (one per stored codec: JPEG, raw, PNG) mixing what the task path takes (baseline JPEGs in colour and gray, raw pixels)
    with what it hands to the per-sample path (CMYK, progressive with scans missing, PNG)."""
    samples, codecs = [], []
    for k in range(n):
        image = photo_like(40 + 11 * (k % 7), 64 - 5 * (k % 5), seed=k, channels=1 if k % 9 == 4 else 3)
        kind = ["jpeg", "jpeg", "raw", "jpeg", "png", "jpeg", "cmyk", "jpeg", "progressive"][k % 9]
        if kind == "cmyk" and image.shape[2] == 3:
            samples.append({"image": _cmyk(image), "label": k})
        elif kind == "progressive" and image.shape[2] == 3:
            samples.append({"image": _progressive_missing_scans(image), "label": k})
        else:
            samples.append({"image": image, "label": k})
        codecs.append("png" if kind == "png" else "raw" if kind == "raw" else "jpeg")
    writes = []
    for codec in ("jpeg", "raw", "png"):  # one file per stored codec; the samples of each kind in the mix
        writes.append(ss.write(tmp_path / f"{codec}.arrow", [s for s, c in zip(samples, codecs) if c == codec], {"image": F.Image(codec=codec, channels=3), "label": F.Int()}, progress=False))
    return [ss.open(p) for p in writes]


_PIPELINES = {
    "rrc-flip-chw": [ops.RandomResizedCrop(32), ops.RandomHorizontalFlip(), ops.ToCHW()],
    "center-normalize-f16": [ops.CenterCrop(24, resize=30), ops.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225), dtype="float16")],
    "rrc-box-f32-chw": [ops.RandomResizedCrop((20, 28), scale=(0.3, 1.0), interpolation="box"), ops.Normalize((0.5,), (0.25,)), ops.ToCHW()],
    "fast-exact": [ops.Decode(fast=True, exact=True), ops.RandomResizedCrop(16), ops.RandomHorizontalFlip(p=0.3)],
}


class _Counting:
    """The extension, counting the samples its compiled tasks write (a stand-in for ``_pipeline._roi``)."""

    def __init__(self, module: Any):
        self.module, self.done = module, 0
        self.decode_region, self.place = module.decode_region, module.place

    def run_task(self, *args: Any) -> tuple[int, str, float, float]:
        result = self.module.run_task(*args)
        self.done += result[0] - args[-1]
        return result


def _epochs(ds: Any, pipeline: list[Any], workers: int = 0, backend: str = "thread", epochs: int = 2) -> list[Any]:
    with ss.DataLoader(ds.map(image=pipeline), 8, shuffle=True, seed=11, workers=workers, backend=backend) as loader:
        return [[snapshot(b) for b in loader] for _ in range(epochs)]


@needs_extension
@pytest.mark.parametrize("name", list(_PIPELINES))
def test_compiled_tasks_give_the_per_sample_paths_batches(tmp_path, name, monkeypatch):
    for ds in _mixed(tmp_path):
        counting = _Counting(_roijpeg)
        monkeypatch.setattr(_pipeline, "_roi", counting)
        compiled = _epochs(ds, _PIPELINES[name])
        if ds.fields["image"].codec != "png":
            assert counting.done >= len(ds), f"{ds.path.name}: the compiled path wrote {counting.done} samples"
        monkeypatch.setattr(_pipeline, "_roi", None)  # whole JPEG decodes, C resampling per sample
        assert_same(_epochs(ds, _PIPELINES[name]), compiled, f"{ds.path.name}, {name}: per-sample path (C)")
        monkeypatch.setattr(_kernels.c_path, "AVAILABLE", False)  # and NumPy resampling
        assert_same(_epochs(ds, _PIPELINES[name], epochs=1), compiled[:1], f"{ds.path.name}, {name}: per-sample path (NumPy)")
        monkeypatch.undo()


@pytest.mark.parametrize("backend", list(BACKENDS))
def test_the_same_batches_with_0_1_and_8_workers_on_every_backend(tmp_path, backend):
    ds = _mixed(tmp_path)[0]
    pipeline = _PIPELINES["rrc-flip-chw"]
    expected = _epochs(ds, pipeline)
    for workers in (1, 8):
        assert_same(_epochs(ds, pipeline, workers, backend), expected, f"{backend}, {workers} workers")


@needs_extension
def test_the_image_index_points_at_each_samples_stored_bytes(tmp_path):
    ds = _mixed(tmp_path)[0]
    mapped = ds.map(image=[ops.CenterCrop(8)])
    idx = np.array([5, 0, len(ds) - 1, 3])
    index, marks = mapped._task_state("image")
    table = index.table(idx, ds.locate_many(idx)[1], marks)
    for j, i in enumerate(idx.tolist()):
        codec, data, shape = ds.encoded(i, "image")
        assert ctypes.string_at(int(table.addrs[j]), int(table.sizes[j])) == data.tobytes()
        assert tuple(table.shapes[j]) == shape and table.codecs[j] == {"jpeg": 1, "raw": 0}[codec]


def _damage_one(path: Any, ds_index: int) -> None:
    """Cut sample ``ds_index``'s JPEG two thirds in (an EOI there, the rest zeros)."""
    ds = ss.open(path)
    data = ds.encoded(ds_index, "image")[1].tobytes()
    raw = bytearray(path.read_bytes())
    start = raw.find(data)
    cut = start + len(data) * 2 // 3
    raw[cut : start + len(data)] = b"\xff\xd9" + bytes(start + len(data) - cut - 2)
    path.write_bytes(bytes(raw))


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "per-sample"])
@pytest.mark.parametrize("workers", [0, 2])
def test_a_corrupt_jpeg_in_the_middle_of_a_task_names_its_sample(tmp_path, compiled, workers, monkeypatch, request):
    if compiled and _roijpeg is None:
        pytest.skip("the _roijpeg extension is not built")
    if _roijpeg is None:  # Pillow decodes: it turns libjpeg's "premature end of data segment" warning into gray rows
        request.applymarker(pytest.mark.xfail(strict=True, reason="without the extension Pillow decodes, leniently (see codecs)"))
    if not compiled:
        monkeypatch.setattr(_pipeline, "_roi", None)
    images = [photo_like(48, 40, seed=k) for k in range(12)]
    path = ss.write(tmp_path / "d.arrow", [{"image": im} for im in images], {"image": F.Image(codec="jpeg")}, progress=False)
    _damage_one(path, 7)
    ds = ss.open(path).map(image=[ops.CenterCrop(8)])  # the window is in the rows above the damage
    with pytest.raises(ss.CorruptFileError, match=r"d\.arrow: sample 7, field 'image': cannot decode jpeg image"):
        list(ss.DataLoader(ds, 12, workers=workers))
    batches = ss.DataLoader(ds, 4, workers=workers).__iter__(keep_going=True)
    outcomes = []
    while True:
        try:
            outcomes.append(next(batches)["image"].shape)
        except StopIteration:
            break
        except ss.CorruptFileError as exc:
            outcomes.append("sample 7" in str(exc))
    assert outcomes == [(4, 8, 8, 3), True, (4, 8, 8, 3)]  # the other batches load


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_a_mapped_packed_file_resumes_exactly_mid_epoch(tmp_path, backend):
    ds = _mixed(tmp_path, n=18)[0]
    assert assert_resumes_exactly(lambda: ss.DataLoader(ds.map(image=_PIPELINES["rrc-flip-chw"]), 4, shuffle=True, seed=2, workers=2, backend=backend)) > 4


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_breaking_out_of_a_task_epoch_cancels_cleanly_and_without_the_extension_too(tmp_path, backend):
    """Runs in a fresh interpreter with a timeout: a hang fails this test only."""
    images = [photo_like(200, 160, seed=k) for k in range(64)]
    path = ss.write(tmp_path / "d.arrow", [{"image": im} for im in images], {"image": F.Image(codec="jpeg")}, progress=False)
    code = f"""
        import json, sys, numpy as np, slipstream as ss
        from slipstream import ops
        ds = ss.open({str(path)!r}).map(image=[ops.RandomResizedCrop(64), ops.RandomHorizontalFlip(), ops.ToCHW()])
        loader = ss.DataLoader(ds, 4, shuffle=True, seed=1, workers=4, prefetch=4, backend={backend!r})
        for k, batch in enumerate(loader):
            if k == 1:
                break  # mid-epoch, with tasks queued and running
        second = [b["image"].copy() for b in loader]
        fresh = ss.DataLoader(ds, 4, shuffle=True, seed=1, workers=0)
        iter(fresh)  # epoch 0, unused
        expected = [b["image"].copy() for b in fresh]
        loader.close()
        print(json.dumps({{"batches": len(second), "same": all(np.array_equal(a, b) for a, b in zip(second, expected))}}))
    """
    for env in ({}, {"SLIPSTREAM_NO_ROIJPEG": "1"}):
        result = run_python(code, timeout=90, env=env)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout.strip().splitlines()[-1]) == {"batches": 16, "same": True}, env


def _same_jpegs(tmp_path: Any, n: int = 32, same: bool = False) -> Any:
    images = [{"image": photo_like(48, 40, seed=0 if same else k), "label": k} for k in range(n)]
    return ss.write(tmp_path / "j.arrow", images, {"image": F.Image(codec="jpeg"), "label": F.Int()}, progress=False)


def test_custom_ops_drawing_from_sample_rng_get_their_own_samples_stream_with_any_worker_count(tmp_path):
    """Was: inside a chunk's per-sample path, sample_rng() belonged to the chunk's first sample."""
    path = _same_jpegs(tmp_path)

    def noise(image: np.ndarray) -> np.ndarray:
        return (image.astype(np.int16) + ss.sample_rng().integers(0, 50)).clip(0, 255).astype(np.uint8)

    ds = ss.open(path).map(image=[ops.CenterCrop(8), ops.Apply(noise)])
    runs = []
    for workers in (0, 1, 3):
        with ss.DataLoader(ds, 8, seed=0, workers=workers) as loader:
            runs.append([snapshot(b) for b in loader])
    assert_same(runs[1], runs[0], "1 worker")
    assert_same(runs[2], runs[0], "3 workers")
    plain = ss.open(path).map(image=[ops.CenterCrop(8)])
    offsets = {int(np.median(runs[0][0]["image"][i].astype(int) - plain[i]["image"].astype(int))) for i in range(8)}
    assert len(offsets) > 4  # each sample its own numbers


def test_a_getitems_container_over_a_mapped_file_crops_each_sample_its_own_way(tmp_path):
    """Was: a __getitems__ container (torch's Subset) gave every sample of a batch the first one's crop."""

    class Rows:  # a batched container over the mapped file, as torch.utils.data.Subset is
        def __init__(self, data: Any):
            self.data = data

        def __len__(self) -> int:
            return len(self.data)

        def __getitems__(self, rows: list[int]) -> list[Any]:
            return [self.data[r] for r in rows]

    ds = ss.open(_same_jpegs(tmp_path, same=True)).map(image=[ops.RandomResizedCrop(16), ops.RandomHorizontalFlip()])
    first = [snapshot(b) for b in ss.DataLoader(Rows(ds), 8, seed=0)]
    assert len({image.tobytes() for image in first[0]["image"]}) == 8
    assert_same([snapshot(b) for b in ss.DataLoader(Rows(ds), 8, seed=0, workers=2)], first, "2 workers")


def test_a_center_crop_larger_than_one_image_of_a_task_names_that_sample(tmp_path):
    images = [{"image": photo_like(48 if k != 5 else 20, 40, seed=k)} for k in range(12)]
    path = ss.write(tmp_path / "d.arrow", images, {"image": F.Image(codec="jpeg")}, progress=False)
    with pytest.raises(ValueError, match=r"sample 5, field 'image': CenterCrop of \(24, 24\) is larger than the 20x40 image"):
        list(ss.DataLoader(ss.open(path).map(image=[ops.CenterCrop(24)]), 12))


def test_mapping_a_field_that_is_not_an_image_says_so(tmp_path):
    ds = ss.open(_same_jpegs(tmp_path, n=8)).map(label=[ops.CenterCrop(4)])
    with pytest.raises(TypeError, match=r"field 'label' is not an image field"):
        list(ss.DataLoader(ds, 4))


def test_a_damaged_stored_shape_raises_what_names_the_sample_without_numpy_warnings(tmp_path):
    path = _same_jpegs(tmp_path, n=8)
    table = pa_ipc.open_file(str(path)).read_all()
    raw = bytearray(path.read_bytes())
    heights = table.column("image").chunk(0).field("height").buffers()[1]
    start = raw.find(bytes(heights)[: 8 * 4])
    assert start > 0
    raw[start + 5 * 4 : start + 6 * 4] = (0).to_bytes(4, "little")  # sample 5's stored height: 0
    path.write_bytes(bytes(raw))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(ss.CorruptFileError, match=r"sample 5\b.*field 'image'.*impossible"):
            list(ss.DataLoader(ss.open(path).map(image=[ops.RandomResizedCrop(8)]), 8))


@needs_extension
@pytest.mark.parametrize("region", [(-40, 0, 100, 48), (0, -1, 8, 8), (0, 0, 0, 8), (60, 0, 8, 48), (0, 40, 8, 9)])
def test_the_compiled_task_refuses_a_decode_region_outside_the_image(region):
    """Hardening (the private call trusts its caller, which never passes such a region): was a heap overflow."""
    buffer = io.BytesIO()
    Image.fromarray(photo_like(64, 48, seed=1)).save(buffer, format="JPEG")
    data = np.frombuffer(buffer.getvalue(), np.uint8).copy()
    out = np.zeros((1, 8, 8, 3), np.uint8)
    stop, why, _, _ = _roijpeg.run_task(
        np.array([data.ctypes.data], np.uint64), np.array([data.nbytes], np.uint64), np.ones(1, np.uint8), np.array([[64, 48, 3]], np.int32),
        np.ones(1, np.int32), np.array([region], np.int64), np.array([[0, 64, 0, 48]], np.float32), np.zeros(1, np.uint8),
        np.zeros(1, np.uint8), np.zeros(1, np.int64), out, out[0].nbytes, 8, 8, 3, 0, 0, np.empty(0, np.uint8), 0, 0, 0,
    )
    assert (stop, why) == (0, "the region to decode is not inside the image")


_GEOMETRY = st.one_of(
    st.builds(
        lambda size, s0, ds, r0, dr, box: ops.RandomResizedCrop(size, scale=(s0, s0 + ds), ratio=(r0, r0 + dr), interpolation="box" if box else "bilinear"),
        st.tuples(st.integers(1, 300), st.integers(1, 300)), st.floats(0.01, 1.0), st.floats(0, 2), st.floats(0.05, 3), st.floats(0, 20), st.booleans(),
    ),
    st.builds(ops.Resize, st.one_of(st.integers(1, 400), st.tuples(st.integers(1, 400), st.integers(1, 400)))),
    st.builds(lambda size, resize: ops.CenterCrop(size, resize=resize), st.integers(1, 120), st.one_of(st.none(), st.integers(1, 400))),
    st.builds(ops.RandomHorizontalFlip, st.floats(0, 1)),
)


@needs_extension
@settings(max_examples=250, deadline=None)
@given(st.lists(_GEOMETRY, min_size=1, max_size=4), st.lists(st.tuples(st.integers(1, 3000), st.integers(1, 3000)), min_size=1, max_size=12), st.integers(0, 2**40), st.booleans())
def test_windows_placed_in_c_are_the_numpy_windows_bit_for_bit(geometry, sizes, seed, exact):
    from slipstream.images import imagetasks as _tasks
    from slipstream.images.placement import place

    pipeline = _pipeline.Pipeline([ops.Decode(exact=exact), *geometry])
    shapes = np.array([(h, w, 3) for h, w in sizes], np.int32)
    jpeg = np.arange(len(sizes)) % 3 != 1
    draws = ss.core.draws.Draws(seed, 3, np.arange(len(sizes)) * 7)
    placed = _tasks._place(pipeline, shapes[:, 0], shapes[:, 1], shapes, jpeg, draws)
    for i in range(len(sizes)):
        one = draws.take([i])
        try:
            windows = pipeline.windows(shapes[i : i + 1, 0], shapes[i : i + 1, 1], one)
        except ops.WindowError:
            assert not placed.valid[i]
            continue
        expected = place(windows, shapes[i : i + 1, 0], shapes[i : i + 1, 1], jpeg[i : i + 1], exact)
        assert bool(placed.valid[i]) == bool(expected.valid[0]), (i, geometry)
        if expected.valid[0]:
            assert placed.factor[i] == expected.factor[0] and placed.flip[i] == windows.flip[0]
            assert (placed.out_hw[i] == (windows.out_h[0], windows.out_w[0])).all()
            np.testing.assert_array_equal(placed.region[i], expected.region[0])
            np.testing.assert_array_equal(placed.edges[i].view(np.uint32), expected.edges[0].view(np.uint32))


def test_an_op_changed_between_epochs_applies_on_every_path(tmp_path, monkeypatch):
    """Was: the compiled path kept the ops' settings of its first use (a flip schedule did nothing)."""
    flip = ops.RandomHorizontalFlip(p=0.0)
    ds = ss.open(_same_jpegs(tmp_path, n=8)).map(image=[ops.Resize((8, 8)), flip])

    def first() -> np.ndarray:
        with ss.DataLoader(ds, 4, seed=1) as loader:
            return next(iter(loader))["image"].copy()

    before = first()
    flip.p = 1.0
    compiled = first()
    np.testing.assert_array_equal(compiled, before[:, :, ::-1])
    monkeypatch.setattr(_pipeline, "_roi", None)
    np.testing.assert_array_equal(first(), compiled)


def test_an_empty_chunk_reads_nothing(tmp_path):
    """Was: a pipeline with random ops raised on an empty index list."""
    ds = ss.open(_same_jpegs(tmp_path, n=4)).map(image=[ops.RandomResizedCrop(8), ops.RandomHorizontalFlip()])
    out = ds.getobs_batch_into({"image": np.empty((0, 8, 8, 3), np.uint8), "label": np.empty(0, np.int64)}, np.empty(0, np.int64))
    assert out["image"].shape == (0, 8, 8, 3)


@needs_extension
@pytest.mark.parametrize("bad", [(1, float("nan")), (1, 1.5), (1, 5.0), (9, 0.0), (3, 0.0, 1e30)])
def test_the_place_binding_refuses_a_program_it_cannot_trust(bad):
    """Hardening of the private call (a NaN column was read as u[0]; a huge size overflowed)."""
    program = np.zeros((1, 12))
    program[0, : len(bad)] = bad
    if bad[0] == 1:
        program[0, 2:4] = 8
    n = 2
    rows, keys, columns, counters = ss.core.draws.Draws(0, 0, np.arange(n)).counters(((0, 22), (1, 1)))
    with pytest.raises(ValueError, match="place: an op of the program"):
        _roijpeg.place(np.full((n, 3), 16, np.int32), rows, keys, columns, counters, program, np.ones(n, np.uint8), False,
                       np.empty(n, np.int32), np.empty((n, 4), np.int64), np.empty((n, 4), np.float32), np.empty(n, np.uint8),
                       np.empty((n, 2), np.int64), np.empty(n, np.uint8))
