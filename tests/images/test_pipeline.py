"""Image sources through every decode path: region (``_roijpeg``), whole image (``codecs``) and
``ds[i]``'s decode agree on the same bytes: all raise, or all give the same pixels."""

from __future__ import annotations

import io
from collections.abc import Callable, Iterator

import numpy as np
import pytest
from jpegs import encode_jpeg
from packed import photo_like
from PIL import Image

import slipstream as ss
from slipstream import ops
from slipstream.images import pipeline as _pipeline
from slipstream.images.encoded import codecs as _imaging
from slipstream.ops import Decode, Windows

try:
    from slipstream.images import _roijpeg as _roijpeg
except ImportError:  # not built: the region path is tested where it is
    _roijpeg = None


def _jpegs() -> dict[str, bytes]:
    """Baseline 4:2:0 and 4:4:4, grayscale and progressive JPEGs of one 120x88 picture."""
    image = photo_like(120, 88, seed=5)
    progressive = io.BytesIO()
    Image.fromarray(image).save(progressive, format="JPEG", quality=90, progressive=True)
    return {
        "420": encode_jpeg(image, quality=90, colorsubsampling="420"),
        "444": encode_jpeg(image, quality=90, colorsubsampling="444"),
        "gray": encode_jpeg(np.ascontiguousarray(image[:, :, :1]), quality=90, colorspace="GRAY", colorsubsampling="Gray"),
        "progressive": progressive.getvalue(),
    }


def _damaged(data: bytes) -> Iterator[tuple[str, bytes]]:
    """Truncations at several cut points (past the header), progressive scans dropped, and single
    flipped bytes in the scan."""
    for fraction in (0.35, 0.5, 0.7, 0.9):
        yield f"cut at {fraction}", data[: int(len(data) * fraction)]
    for missing in (1, 2, 5):
        yield f"last {missing} bytes cut", data[:-missing]
    scans = [i for i in range(len(data) - 1) if data[i : i + 2] == b"\xff\xda"]
    for k in scans[1:4]:  # a progressive file ending early, but cleanly: later scans missing
        yield f"scans from byte {k} dropped", data[:k] + b"\xff\xd9"
    rng = np.random.default_rng(len(data))
    for position in rng.integers(len(data) // 4, len(data) - 2, size=12):
        flipped = bytearray(data)
        flipped[position] ^= 0xFF
        yield f"byte {position} flipped", bytes(flipped)


def _paths() -> dict[str, Callable[[bytes, Windows], np.ndarray]]:
    """Each decode path as ``f(data, window) -> the pixels under the window`` (raises on bad data)."""

    def through(roi: object) -> Callable[[bytes, Windows], np.ndarray]:
        def run(data: bytes, window: Windows) -> np.ndarray:
            saved, _pipeline._roi = _pipeline._roi, roi
            try:
                source = _pipeline.ImageSource.of(data)
                image, (top, left, height, width) = source.decode(window, Decode(exact=True))
            finally:
                _pipeline._roi = saved
            return image[int(top) : int(top + height), int(left) : int(left + width)].copy()

        return run

    def whole_image(data: bytes, windows: Windows) -> np.ndarray:
        image = _imaging.decode("jpeg", data, None)
        window = windows.row(0)
        return image[int(window.top) : int(window.top + window.height), int(window.left) : int(window.left + window.width)]

    paths = {"whole image": through(None), "ds[i] decode": whole_image}
    if _roijpeg is not None:
        paths["region (_roijpeg)"] = through(_roijpeg)
    return paths


def _outcome(run: Callable[[bytes, Windows], np.ndarray], data: bytes, window: Windows) -> np.ndarray | str:
    try:
        return run(data, window)
    except ValueError:
        return "raises ValueError"


@pytest.mark.parametrize("kind", ["420", "444", "gray", "progressive"])
def test_damaged_jpegs_give_the_same_result_on_every_decode_path(kind):
    data = _jpegs()[kind]
    windows = {"top rows": (0, 0, 16, 40), "middle": (40, 20, 30, 40), "bottom rows": (104, 48, 16, 40)}
    checked = raised = 0
    for damage, bad in _damaged(data):
        for name, (top, left, height, width) in windows.items():
            window = Windows([120], [88])
            window.crop(top, left, height, width, height, width)
            outcomes = {path: _outcome(run, bad, window) for path, run in _paths().items()}
            first = next(iter(outcomes.values()))
            for path, outcome in outcomes.items():
                where = f"{kind} JPEG, {damage}, {name} window: {path} gives {outcome if isinstance(outcome, str) else 'pixels'}"
                if isinstance(first, str) or isinstance(outcome, str):
                    assert isinstance(first, str) and isinstance(outcome, str), where
                else:
                    np.testing.assert_array_equal(outcome, first, err_msg=where)
            checked += 1
            raised += isinstance(first, str)
    assert raised >= checked // 3  # the damage is real: most cuts and many flips are refused


@pytest.mark.parametrize("roi", ["region", "whole"])
def test_a_truncated_jpeg_in_a_pipeline_raises_naming_the_sample_and_field(roi, monkeypatch):
    if roi == "region" and _roijpeg is None:
        pytest.skip("the _roijpeg extension is not built")
    monkeypatch.setattr(_pipeline, "_roi", _roijpeg if roi == "region" else None)
    good = _jpegs()["420"]
    data = [{"image": good, "label": 0}, {"image": good[: len(good) * 3 // 4], "label": 1}]
    mapped = ss.mapfields(data, image=[ops.CenterCrop(16, resize=20)])
    assert mapped[0]["image"].shape == (16, 16, 3)
    with pytest.raises(ValueError, match=r"sample 1, field 'image': cannot decode jpeg image: .*Premature end of JPEG file"):
        mapped[1]
    with pytest.raises(ValueError, match=r"sample 1, field 'image'"):
        list(ss.DataLoader(mapped, 2))


def test_a_damaged_jpeg_in_a_packed_file_raises_what_ds_i_raises(tmp_path, monkeypatch):
    good = _jpegs()["420"]
    path = ss.write(tmp_path / "d.arrow", [{"image": good}] * 2, {"image": ss.fields.Image(codec="jpeg")}, progress=False)
    raw = bytearray(path.read_bytes())
    second = raw.find(good, raw.find(good) + 1)
    cut = second + len(good) * 2 // 3
    raw[cut : second + len(good)] = b"\xff\xd9" + bytes(second + len(good) - cut - 2)  # an EOI two thirds in
    path.write_bytes(bytes(raw))
    with pytest.raises(ss.CorruptFileError, match=r"sample 1\b.*field 'image'") as plain:
        ss.open(path)[1]
    for roi in ({_roijpeg, None} if _roijpeg is not None else {None}):
        monkeypatch.setattr(_pipeline, "_roi", roi)
        mapped = ss.open(path).map(image=[ops.CenterCrop(16, resize=20)])
        assert mapped[0]["image"].shape == (16, 16, 3)
        with pytest.raises(ss.CorruptFileError, match=r"d\.arrow: sample 1, field 'image': cannot decode jpeg image") as piped:
            mapped[1]
        assert str(plain.value).split(": ")[-1] == str(piped.value).split(": ")[-1]  # libjpeg's words, alike


@pytest.mark.parametrize("stored", [(88, 120, 3), (60, 176, 3), (1200, 880, 3), (120, 88, 1)], ids=["swapped", "same-size", "larger", "gray"])
def test_a_stored_shape_that_disagrees_with_the_jpeg_raises_on_every_path(stored, monkeypatch):
    data = _jpegs()["420"]  # 120x88, colour
    for roi in ([_roijpeg, None] if _roijpeg is not None else [None]):
        monkeypatch.setattr(_pipeline, "_roi", roi)
        window = Windows([stored[0]], [stored[1]])
        window.crop(0, 0, 16, 16, 16, 16)
        source = _pipeline.ImageSource("jpeg", data, stored)
        if stored[:2] == (120, 88):  # the size agrees: a colour JPEG may be read as gray (its luma)
            image, _ = source.decode(window, Decode())
            assert image.shape == (120, 88, 1)
            continue
        with pytest.raises(_pipeline.ImageDecodeError, match=r"the jpeg image is 120x88 but its stored shape is"):
            source.decode(window, Decode())


def test_a_cmyk_jpeg_decodes_alike_on_every_path(monkeypatch):
    cmyk = io.BytesIO()
    Image.fromarray(photo_like(40, 32, seed=3)).convert("CMYK").save(cmyk, format="JPEG", quality=90)
    window = Windows([40], [32])
    window.crop(0, 0, 16, 16, 16, 16)
    outcomes = []
    for roi in ([_roijpeg, None] if _roijpeg is not None else [None]):
        monkeypatch.setattr(_pipeline, "_roi", roi)
        image, (top, left, height, width) = _pipeline.ImageSource("jpeg", cmyk.getvalue(), (40, 32, 3)).decode(window, Decode())
        outcomes.append(image[: int(height), : int(width)].copy())
    np.testing.assert_array_equal(outcomes[0], outcomes[-1])
    np.testing.assert_array_equal(outcomes[0], _imaging.decode("jpeg", cmyk.getvalue(), (40, 32, 3))[:16, :16])
