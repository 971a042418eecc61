"""The optional compiled region decoder: the same pixels as a whole decode, clear errors on bad data."""

import io

import numpy as np
import pytest
from helpers import assert_same, run_python, snapshot
from jpegs import decode_jpeg, encode_jpeg
from packed import photo_like
from PIL import Image

import slipstream as ss
from slipstream import fields as F
from slipstream import ops
from slipstream.images import pipeline as _pipeline

roi = pytest.importorskip("slipstream.images._roijpeg", reason="the _roijpeg extension is not built (no compiler or libjpeg headers)")


@pytest.mark.parametrize("subsampling, gray", [("420", False), ("444", False), ("Gray", True)])
def test_a_region_equals_the_same_window_of_a_whole_decode(subsampling, gray):
    rng = np.random.default_rng(0)
    image = photo_like(157, 211, seed=1, channels=1 if gray else 3)
    data = encode_jpeg(image, quality=90, colorspace="GRAY" if gray else "RGB", colorsubsampling=subsampling)
    whole = decode_jpeg(data, colorspace="GRAY" if gray else "RGB")
    whole = whole if whole.ndim == 3 else whole[:, :, None]
    out = np.empty(1 << 20, np.uint8)
    for _ in range(50):
        top, left = int(rng.integers(0, 150)), int(rng.integers(0, 200))
        height, width = int(rng.integers(1, 157 - top + 1)), int(rng.integers(1, 211 - left + 1))
        row0, col0, rows, cols = roi.decode_region(data, top, left, height, width, out, gray=gray)
        assert row0 <= top and col0 <= left and row0 + rows >= top + height and col0 + cols >= left + width
        got = out[: rows * cols * whole.shape[2]].reshape(rows, cols, whole.shape[2])
        window = got[top - row0 : top - row0 + height, left - col0 : left - col0 + width]  # the band's edges may differ
        np.testing.assert_array_equal(window, whole[top : top + height, left : left + width])


@pytest.mark.parametrize("subsampling", ["420", "422", "444", "Gray"])
@pytest.mark.parametrize("height_, width_", [(157, 211), (160, 208)])  # whole iMCU rows, or not
def test_fast_regions_of_valid_jpegs_never_raise_and_equal_a_whole_fast_decode(subsampling, height_, width_):
    """fast=True selects libjpeg's merged upsampler for 2x2-subsampled files, which works on row
    pairs: checking the rows below a window that ended on an odd row (skipping from mid-iMCU) made
    libjpeg-turbo decode an iMCU row too many and call a valid file corrupt (premature end of data)."""
    rng = np.random.default_rng(1)
    gray = subsampling == "Gray"
    image = photo_like(height_, width_, seed=2, channels=1 if gray else 3)
    data = encode_jpeg(image, quality=90, colorspace="GRAY" if gray else "RGB", colorsubsampling=subsampling)
    whole = decode_jpeg(data, colorspace="GRAY" if gray else "RGB", fast=True)
    whole = whole if whole.ndim == 3 else whole[:, :, None]
    out = np.empty(1 << 20, np.uint8)
    for k in range(60):
        top, left = int(rng.integers(0, height_ - 2)), int(rng.integers(0, width_ - 2))
        height = 1 + k % 3 if k < 20 else int(rng.integers(1, height_ - top + 1))  # short windows: odd ends
        width = int(rng.integers(1, width_ - left + 1))
        row0, col0, rows, cols = roi.decode_region(data, top, left, height, width, out, fast=True, gray=gray)
        got = out[: rows * cols * whole.shape[2]].reshape(rows, cols, whole.shape[2])
        window = got[top - row0 : top - row0 + height, left - col0 : left - col0 + width]
        np.testing.assert_array_equal(window, whole[top : top + height, left : left + width])
    for scale in (2, 4, 8):  # DCT-scaled decodes: every window of the smaller image
        h, w = -(-height_ // scale), -(-width_ // scale)
        for top in range(h):
            roi.decode_region(data, top, 0, 1, w, out, fast=True, gray=gray, scale=scale)


def test_bad_input_raises_value_error_instead_of_crashing():
    result = run_python(
        """
        import numpy as np
        from jpegs import encode_jpeg
        from slipstream.images import _roijpeg as _roijpeg
        data = bytearray(encode_jpeg(np.full((64, 64, 3), 90, np.uint8), quality=90))
        out = np.empty(1 << 16, np.uint8)
        errors = 0
        for cut in (2, 20, 100, len(data) // 2):
            try:
                _roijpeg.decode_region(bytes(data[:cut]), 0, 0, 8, 8, out)
            except ValueError:
                errors += 1
        for bad in ((60, 0, 10, 10), (0, 0, 0, 5)):
            try:
                _roijpeg.decode_region(bytes(data), *bad, out)
            except ValueError:
                errors += 1
        try:
            _roijpeg.decode_region(bytes(data), 0, 0, 64, 64, np.empty(10, np.uint8))
        except ValueError:
            errors += 1
        print("ERRORS", errors)
        """
    )
    assert result.returncode == 0, result.stderr
    assert int(result.stdout.split()[-1]) >= 5


def test_pipelines_give_identical_batches_with_and_without_region_decoding(tmp_path, monkeypatch):
    images = [photo_like(90 + 9 * (k % 4), 120 - 7 * (k % 3), seed=k) for k in range(12)]
    path = ss.write(tmp_path / "r.arrow", [{"image": im} for im in images], {"image": F.Image(codec="jpeg")}, progress=False)
    for pipe in ([ops.RandomResizedCrop(48), ops.RandomHorizontalFlip(), ops.ToCHW()], [ops.CenterCrop(40, resize=50)]):
        data = ss.open(path).map(image=pipe)
        with_roi = [snapshot(b) for b in ss.DataLoader(data, 4, shuffle=True, seed=2)]
        monkeypatch.setattr(_pipeline, "_roi", None)
        without = [snapshot(b) for b in ss.DataLoader(data, 4, shuffle=True, seed=2)]
        monkeypatch.undo()
        for a, b in zip(with_roi, without):
            assert_same(a, b)


def test_with_whole_the_region_lands_in_place_in_a_whole_image_buffer():
    image = photo_like(101, 133, seed=4)
    data = encode_jpeg(image, quality=90, colorsubsampling="420")
    whole = decode_jpeg(data)
    canvas = np.zeros(101 * 133 * 3, np.uint8)
    row0, col0, rows, cols = roi.decode_region(data, 10, 40, 30, 50, canvas, whole=True)
    placed = canvas.reshape(101, 133, 3)
    np.testing.assert_array_equal(placed[10:40, 40:90], whole[10:40, 40:90])
    assert not placed[:10].any() and not placed[40:].any()  # nothing outside the decoded rows is touched
    with pytest.raises(ValueError, match="too small"):
        roi.decode_region(data, 10, 40, 30, 50, np.zeros(100, np.uint8), whole=True)


def test_damage_below_the_window_raises_as_a_whole_decode_does():
    data = encode_jpeg(photo_like(120, 88, seed=2), quality=90, colorsubsampling="420")
    out = np.empty(1 << 16, np.uint8)
    roi.decode_region(data, 0, 0, 16, 16, out)  # the intact file decodes
    for bad in (data[: len(data) // 2], data[:-2], data[:-2] + bytes(40) + b"\xff\xd9"):  # cut; no EOI; extraneous bytes
        with pytest.raises(ValueError):
            roi.decode_jpeg(bad)  # strict, as every whole decode
        with pytest.raises(ValueError, match="JPEG decode failed: (Premature end of JPEG file|Corrupt JPEG data)"):
            roi.decode_region(bad, 0, 0, 16, 16, out)  # the damage is far below rows 0..15


def test_check_rest_false_reads_only_the_rows_the_window_needs():
    """For bytes already seen to decode strictly (a packed sample in a later epoch), the rows below
    the window are not read: damage there is not looked for, and the window's pixels are the same."""
    data = encode_jpeg(photo_like(120, 88, seed=2), quality=90, colorsubsampling="420")
    out, again = np.empty(1 << 16, np.uint8), np.empty(1 << 16, np.uint8)
    region = roi.decode_region(data, 0, 0, 16, 16, out)
    assert roi.decode_region(data, 0, 0, 16, 16, again, check_rest=False) == region
    size = region[2] * region[3] * 3
    np.testing.assert_array_equal(out[:size], again[:size])
    cut = data[: len(data) // 2]
    with pytest.raises(ValueError):
        roi.decode_region(cut, 0, 0, 16, 16, out)
    roi.decode_region(cut, 0, 0, 16, 16, out, check_rest=False)  # the rows below are not read at all


def test_a_damaged_packed_jpeg_fails_in_every_epoch_not_only_the_first(tmp_path):
    """Samples are marked as checked only once they decoded strictly: a damaged one is never
    skipped, and the good ones give the same batches in every epoch as a fresh loader does."""
    images = [photo_like(96, 80, seed=s) for s in range(6)]
    path = ss.write(tmp_path / "d.arrow", [{"image": im} for im in images], {"image": F.Image(codec="jpeg")}, progress=False)
    ds = ss.open(path)
    codec, data, shape = ds.encoded(3, "image")
    raw = bytearray(path.read_bytes())
    at = bytes(raw).find(bytes(data))
    raw[at + len(data) - 200 : at + len(data) - 2] = bytes(198)  # sample 3's bottom rows zeroed: corrupt data
    path.write_bytes(bytes(raw))
    mapped = ss.open(path).map(image=[ops.CenterCrop(16)])  # the window is far above the damage
    loader = ss.DataLoader(ss.obsview(mapped, [0, 1, 2, 4, 5]), 5)
    first, second = snapshot(next(iter(loader))), snapshot(next(iter(loader)))  # epochs 0 and 1
    assert_same(first, second)
    bad = ss.DataLoader(ss.obsview(mapped, [0, 3]), 2)
    for _ in range(2):
        with pytest.raises(ss.CorruptFileError, match="sample 3"):
            next(iter(bad))


def test_a_progressive_jpeg_with_scans_missing_is_left_to_a_whole_decode():
    buffer = io.BytesIO()
    Image.fromarray(photo_like(64, 48, seed=3)).save(buffer, format="JPEG", quality=90, progressive=True)
    data = buffer.getvalue()
    second_scan = data.index(b"\xff\xda", data.index(b"\xff\xda") + 2)
    out = np.empty(1 << 16, np.uint8)
    roi.decode_region(data, 0, 0, 8, 8, out)  # complete: decoded by region
    with pytest.raises(NotImplementedError, match="decoded whole"):
        roi.decode_region(data[:second_scan] + b"\xff\xd9", 0, 0, 8, 8, out)


def test_fuzzed_jpegs_raise_value_errors_and_never_crash():
    result = run_python(
        """
        import io, numpy as np
        from jpegs import encode_jpeg
        from PIL import Image
        from slipstream.images import _roijpeg as _roijpeg
        rng = np.random.default_rng(0)
        image = np.clip(rng.normal(128, 40, (72, 56, 3)), 0, 255).astype(np.uint8)
        progressive = io.BytesIO()
        Image.fromarray(image).save(progressive, format="JPEG", quality=85, progressive=True)
        sources = [encode_jpeg(image, quality=85, colorsubsampling=s) for s in ("420", "422", "444")]
        sources.append(progressive.getvalue())
        out = np.empty(1 << 16, np.uint8)
        outcomes = {"ok": 0, "ValueError": 0, "NotImplementedError": 0}
        for trial in range(1200):
            data = bytearray(sources[trial % len(sources)])
            if trial % 3 == 0:
                data = data[: int(rng.integers(2, len(data)))]
            else:
                for _ in range(int(rng.integers(1, 4))):
                    data[int(rng.integers(0, len(data)))] = int(rng.integers(0, 256))
            scale = int(rng.choice([1, 2, 4, 8]))
            top, left = int(rng.integers(0, 72 // scale)), int(rng.integers(0, 56 // scale))
            try:
                _roijpeg.decode_region(bytes(data), top, left, 1 + int(rng.integers(0, 8)), 1 + int(rng.integers(0, 8)), out, scale=scale, whole=bool(trial % 2))
                outcomes["ok"] += 1
            except (ValueError, NotImplementedError) as exc:
                outcomes[type(exc).__name__] += 1
        print(outcomes)
        """,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "'ValueError'" in result.stdout and "'ok'" in result.stdout, result.stdout
