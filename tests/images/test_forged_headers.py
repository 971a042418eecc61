"""An image header that declares more pixels than its bytes can encode sizes no buffer, on any
path: for a 2.5 KB JPEG declaring 30000x30000 (its stored shape saying the same, as a forged or
damaged page does), ``ds[i]``, the fallback pipeline and the device stage each raise
``CorruptFileError`` naming the file, sample and field from the header alone, before allocating
anything the size of the declared image (``images.encoded.codecs.check_encoded_size``), with and without the compiled
region decoder. Peak memory is measured in a fresh interpreter (``ru_maxrss``), with a wide bound.
"""

from __future__ import annotations

import importlib.util
import io
import json
import struct
import zlib

import numpy as np
import pytest
from helpers import run_python
from jpegs import encode_jpeg
from PIL import Image

import slipstream as ss
from slipstream import fields as F
from slipstream.images.encoded import codecs

SIDE = 30000  # 30000 x 30000 x 3: 2.7 GB of pixels


def _jpeg(**options) -> bytes:
    return encode_jpeg(np.random.default_rng(0).integers(0, 255, (32, 32, 3), dtype=np.uint8), quality=90, **options)


def forge_jpeg(data: bytes, height: int, width: int) -> bytes:
    """``data`` with its frame header (SOFn) declaring ``height`` x ``width``."""
    out = bytearray(data)
    i = 2
    while True:
        marker, length = out[i + 1], int.from_bytes(out[i + 2 : i + 4], "big")
        if 0xC0 <= marker <= 0xC3:
            out[i + 5 : i + 9] = struct.pack(">HH", height, width)
            return bytes(out)
        i += 2 + length


def forge_png(data: bytes, height: int, width: int) -> bytes:
    """``data`` with its IHDR declaring ``height`` x ``width`` (its CRC made to match: Pillow checks it)."""
    out = bytearray(data)
    out[16:24] = struct.pack(">II", width, height)
    out[29:33] = struct.pack(">I", zlib.crc32(bytes(out[12:29])))
    return bytes(out)


def _png() -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (32, 32, 3), dtype=np.uint8)).save(buffer, format="PNG")
    return buffer.getvalue()


def forged_file(path, codec: str, data: bytes, height: int, width: int):
    """A packed file whose one image is ``data`` with the stored shape (height, width, 3), as a writer
    that trusted the header would store it (slipstream's own refuses it: see the last test)."""
    original = F.Image.encode
    F.Image.encode = lambda self, value, index, where: (codecs.CODECS[codec], height, width, 3, data)  # type: ignore[method-assign]
    try:
        return ss.write(path, [{"image": b"x", "label": 0}], {"image": F.Image(codec=codec), "label": F.Int()}, progress=False)
    finally:
        F.Image.encode = original  # type: ignore[method-assign]


@pytest.fixture(scope="module")
def forged(tmp_path_factory):
    root = tmp_path_factory.mktemp("forged")
    return {
        "jpeg": forged_file(root / "jpeg.arrow", "jpeg", forge_jpeg(_jpeg(), SIDE, SIDE), SIDE, SIDE),
        "png": forged_file(root / "png.arrow", "png", forge_png(_png(), 12000, 12000), 12000, 12000),
    }


_READ = {
    "getitem": "ds[0]",
    "loader": "next(iter(ss.DataLoader(ds, batch_size=2)))",
    "pipeline": "ds.map(image=[ops.CenterCrop(16)])[0]",  # a whole decode at full scale
    "pipeline-loader": "next(iter(ss.DataLoader(ds.map(image=[ops.RandomResizedCrop(16)]), batch_size=1)))",
    "device": "next(iter(ss.DataLoader(ds.map(image=[ops.Resize((16, 16))], device='cpu'), batch_size=1)))",
}

_CODE = """
import json, resource, sys
import slipstream as ss
from slipstream import ops
from slipstream.core.errors import CorruptFileError
if sys.argv[2] == "device":
    import torch
ds = ss.open(sys.argv[1])
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    exec(sys.argv[3])
    error = None
except Exception as exc:
    error = (type(exc).__name__, str(exc))
grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
print(json.dumps({"error": error, "grown_mb": grown}))
"""


def _read_in_a_fresh_interpreter(path, how: str, fallback: bool) -> dict:
    env = {"SLIPSTREAM_NO_ROIJPEG": "1"} if fallback else {}
    out = run_python(_CODE, timeout=300, env=env, argv=[str(path), how, _READ[how]])
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("fallback", [False, True], ids=["compiled", "no-roijpeg"])
@pytest.mark.parametrize("how", list(_READ))
def test_a_jpeg_declaring_30000x30000_is_refused_before_anything_is_allocated(forged, how, fallback):
    spec = importlib.util.find_spec("torch")
    if how == "device" and (spec is None or spec.origin is None):  # (tests/torch/ is found as a namespace package)
        pytest.skip("the device stage needs torch")
    got = _read_in_a_fresh_interpreter(forged["jpeg"], how, fallback)
    assert got["error"] is not None, "the forged image was read"
    kind, message = got["error"]
    assert kind == "CorruptFileError", got
    assert str(forged["jpeg"]) in message and "sample 0" in message and "field 'image'" in message, message
    assert got["grown_mb"] < 300, f"{how}: peak memory grew by {got['grown_mb']:.0f} MB reading a forged 2.5 KB image"
    assert f"declares a {SIDE}x{SIDE} image" in message and "the header is damaged" in message, message


@pytest.mark.parametrize("how", ["getitem", "pipeline"])
def test_a_png_declaring_12000x12000_is_refused_from_its_header(forged, how):
    got = _read_in_a_fresh_interpreter(forged["png"], how, fallback=False)
    kind, message = got["error"]
    assert kind == "CorruptFileError" and "sample 0" in message and "field 'image'" in message, got
    assert "the png header declares a 12000x12000 image" in message, message
    assert got["grown_mb"] < 300


def test_the_bound_holds_for_real_images_of_every_kind():
    """The fewest bytes of each bound are what no real image can go below: the most compressible
    images (one colour), baseline and progressive, every subsampling, optimized tables, and PNG and
    QOI's best cases, all pass, and all decode."""
    for height, width in [(1, 1), (1, 700), (9, 1), (600, 600), (8000, 16)]:
        flat = np.full((height, width, 3), 128, np.uint8)
        for options in [
            {},
            {"optimize": True},
            {"progressive": True, "optimize": True},
            {"progressive": True, "subsampling": 2, "optimize": True, "quality": 1},
        ]:
            for image in (Image.fromarray(flat), Image.fromarray(flat[:, :, 0])):
                buffer = io.BytesIO()
                image.save(buffer, format="JPEG", **options)
                assert codecs.check_encoded_size("jpeg", buffer.getvalue(), (height, width)) == (height, width)
                codecs.decode("jpeg", buffer.getvalue(), None)  # strict
        for sub in (0, 1, 2, 3):  # Pillow's 4:4:4, 4:2:2, 4:2:0, 4:1:1
            buffer = io.BytesIO()
            Image.fromarray(flat).save(buffer, format="JPEG", quality=1, subsampling=sub)
            data = buffer.getvalue()
            assert codecs.check_encoded_size("jpeg", np.frombuffer(data, np.uint8), (height, width)) == (height, width)
        for codec in ("png", "qoi"):
            for channels in (1, 3):
                data = codecs.encode(codec, np.zeros((height, width, channels), np.uint8), 90)
                assert codecs.check_encoded_size(codec, data, (height, width)) == (height, width)
                assert codecs.decode(codec, data, (height, width, channels)).shape == (height, width, channels)
        buffer = io.BytesIO()
        Image.fromarray(np.zeros((height, width), bool)).save(buffer, format="PNG", optimize=True)  # 1 bit a pixel
        assert codecs.check_encoded_size("png", buffer.getvalue(), (height, width)) == (height, width)


def test_what_the_bound_refuses_and_what_it_leaves_to_the_decoder():
    small = _jpeg()
    with pytest.raises(
        ValueError, match=r"declares a 30000x30000 image, which takes at least \d+ bytes to encode, but there are \d+"
    ):
        codecs.check_encoded_size("jpeg", forge_jpeg(small, SIDE, SIDE))
    with pytest.raises(ValueError, match="disagrees with its jpeg bytes"):  # the stored shape is checked first
        codecs.check_encoded_size("jpeg", small, (31, 32, 3))
    arithmetic = bytearray(forge_jpeg(small, SIDE, SIDE))
    sof = arithmetic.index(b"\xff\xc0")
    arithmetic[sof + 1] = 0xC9  # arithmetic coding can spend far less than a bit a block: no bound
    assert codecs.check_encoded_size("jpeg", bytes(arithmetic)) == (SIDE, SIDE)
    assert codecs.check_encoded_size("jpeg", b"\xff\xd8 not a jpeg") is None  # the decoder says why
    assert codecs.check_encoded_size("raw", b"\x00" * 12) is None
    qoi = bytearray(codecs.encode("qoi", np.zeros((8, 8, 3), np.uint8), 90))
    qoi[4:12] = struct.pack(">II", 5000, 5000)
    with pytest.raises(ValueError, match="the qoi header declares a 5000x5000 image"):
        codecs.decode("qoi", bytes(qoi), (5000, 5000, 3))


def test_the_writer_refuses_a_forged_jpeg_from_its_header(tmp_path):
    """ss.write keeps JPEG bytes as they are once they decode: a forged header is refused before
    the 1/8-scale check decodes anything."""
    forged = forge_jpeg(_jpeg(), 65000, 65000)
    with pytest.raises(
        ValueError, match="sample 0, field 'image': the JPEG bytes do not decode: the jpeg header declares a 65000x65000"
    ):
        ss.write(tmp_path / "w.arrow", [{"image": forged}], {"image": F.Image(codec="jpeg")}, progress=False)
