"""ss.open(p).map(image=[...], device=...): the device stage through the loaders (run here with
device="cpu": the same code as CUDA but the side stream), against DeviceStage and the CPU pipeline."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from packed import photo_like  # noqa: E402

import slipstream as ss  # noqa: E402
from slipstream import fields as F  # noqa: E402
from slipstream import ops  # noqa: E402
from slipstream.gpu import DeviceStage, StagedImage  # noqa: E402

MEAN, STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
N = 40
PIPE = [ops.RandomResizedCrop(24), ops.RandomHorizontalFlip(), ops.Normalize(MEAN, STD), ops.ToCHW()]


def _samples(n: int, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    sizes = [(int(rng.integers(30, 140)), int(rng.integers(30, 140))) for _ in range(n)]
    return [{"image": photo_like(h, w, seed=k), "label": k} for k, (h, w) in enumerate(sizes)]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpumapped")
    samples = _samples(N)
    jpegs = ss.write(root / "jpegs.arrow", samples, {"image": F.Image(codec="jpeg", quality=90), "label": F.Int()}, progress=False)
    mixed = ss.write(root / "mixed.arrow", samples, {"image": F.Image(codec="jpeg", policy="proportion"), "label": F.Int()}, progress=False)
    pngs = ss.write(root / "pngs.arrow", samples[:12], {"image": F.Image(codec="png"), "label": F.Int()}, progress=False)
    return jpegs, mixed, pngs


def _epochs(data, epochs: int = 2, **kwargs) -> list[list[dict]]:
    loader = ss.DataLoader(data, batch_size=6, shuffle=True, seed=11, **kwargs)
    with loader:
        return [[{k: (v.clone() if isinstance(v, torch.Tensor) else np.array(v)) for k, v in b.items()} for b in loader] for _ in range(epochs)]


def _same(a: list[list[dict]], b: list[list[dict]]) -> None:
    assert len(a) == len(b)
    for ea, eb in zip(a, b):
        assert len(ea) == len(eb)
        for x, y in zip(ea, eb):
            np.testing.assert_array_equal(x["label"], y["label"])
            assert torch.equal(x["image"], y["image"])


def test_batches_are_device_tensors_equal_to_the_device_stage_for_the_loaders_seed_and_epoch(files):
    jpegs, _, _ = files
    mapped = ss.open(jpegs).map(image=PIPE, device="cpu")
    stage = DeviceStage(ss.open(jpegs), "image", PIPE)
    for epoch, batches in enumerate(_epochs(mapped)):
        for batch in batches:
            image = batch["image"]
            assert isinstance(image, torch.Tensor) and image.dtype == torch.float32 and image.shape[1:] == (3, 24, 24)
            assert torch.equal(image, stage(batch["label"], 11, epoch))
            assert isinstance(batch["label"], np.ndarray)  # the other fields as ss.DataLoader batches them


@pytest.mark.parametrize("kwargs", [{"workers": 2}, {"workers": 2, "backend": "process"}, {"workers": 2, "in_order": False}], ids=["threads", "processes", "unordered"])
def test_the_same_seed_gives_the_same_batches_with_any_workers(files, kwargs):
    jpegs, mixed, _ = files
    for path, share in ((jpegs, 0.0), (mixed, 0.4)):
        mapped = ss.open(path).map(image=PIPE, device="cpu", cpu_share=share)
        expected = _epochs(mapped)
        got = _epochs(mapped, **kwargs)
        if kwargs.get("in_order") is False:  # batches may overtake: compare by their first label
            key = lambda b: int(b["label"][0])  # noqa: E731
            got = [sorted(e, key=key) for e in got]
            expected = [sorted(e, key=key) for e in expected]
        _same(expected, got)


@pytest.mark.parametrize("share", [0.0, 0.5, 1.0])
def test_cpu_rows_are_the_cpu_pipelines_and_device_rows_are_within_two_levels(files, share):
    jpegs, mixed, pngs = files
    pipe = [ops.Decode(exact=True), ops.RandomResizedCrop(24), ops.RandomHorizontalFlip()]
    for path in (jpegs, mixed, pngs):
        mapped = ss.open(path).map(image=pipe, device="cpu", cpu_share=share)
        loader = ss.DataLoader(mapped, batch_size=64, seed=5)
        batch = next(iter(loader))
        labels = batch["label"]
        cpu = ss.DataLoader(ss.open(path).map(image=pipe), batch_size=64, seed=5)
        reference = next(iter(cpu))["image"]
        np.testing.assert_array_equal(next(iter(cpu))["label"], labels)
        got = batch["image"].numpy()
        assert got.dtype == np.uint8 and got.shape == reference.shape
        diff = np.abs(got.astype(np.int16) - reference).reshape(len(got), -1).mean(axis=1)
        assert diff.max() <= 2.0, (path.name, share, diff.max())
        rows = mapped.getobs_batch_into(None, labels)["image"]  # outside a loader: which rows go where
        on_cpu = np.array([not r.on_device for r in rows])
        if path is pngs or share == 1.0:
            assert on_cpu.all()
        elif share == 0.0 and path is jpegs:
            assert not on_cpu.any()


def test_the_cpu_share_is_a_pure_function_of_seed_epoch_and_index(files):
    jpegs, _, _ = files
    from slipstream.core.rng import sample_context

    mapped = ss.open(jpegs).map(image=PIPE, device="cpu", cpu_share=0.5)

    def which(seed, epoch, indices):
        with sample_context(seed, epoch) as context:
            context.batch(np.asarray(indices))
            return [not r.on_device for r in mapped.getobs_batch_into(None, indices)["image"]]

    everything = which(1, 0, list(range(N)))
    assert 0.25 * N <= sum(everything) <= 0.75 * N
    assert which(1, 0, list(range(7, 19))) == everything[7:19]  # chunked differently: the same rows
    assert which(1, 1, list(range(N))) != everything  # another epoch, another share


def test_resume_mid_epoch_continues_exactly(files):
    _, mixed, _ = files
    mapped = ss.open(mixed).map(image=PIPE, device="cpu", cpu_share=0.3)
    whole = _epochs(mapped, epochs=1, workers=2)[0]
    loader = ss.DataLoader(mapped, batch_size=6, shuffle=True, seed=11, workers=2)
    it = iter(loader)
    for _ in range(3):
        next(it)
    state = loader.state_dict()
    it.close()
    again = ss.DataLoader(mapped, batch_size=6, shuffle=True, seed=11, workers=2)
    again.load_state_dict(state)
    rest = [{k: (v.clone() if isinstance(v, torch.Tensor) else np.array(v)) for k, v in b.items()} for b in again]
    _same([whole[3:]], [rest])


def test_dtype_layout_and_bfloat16_normalize(files):
    jpegs, _, _ = files
    pipe = [ops.CenterCrop(20, resize=24), ops.Normalize(MEAN, STD, dtype="bfloat16")]
    batch = next(iter(ss.DataLoader(ss.open(jpegs).map(image=pipe, device="cpu", layout="channels_last"), batch_size=4)))
    image = batch["image"]
    assert image.dtype == torch.bfloat16 and image.shape == (4, 3, 20, 20) and image.is_contiguous(memory_format=torch.channels_last)
    plain = next(iter(ss.DataLoader(ss.open(jpegs).map(image=pipe[:1], device="cpu"), batch_size=4)))["image"]
    assert plain.dtype == torch.uint8 and plain.shape == (4, 20, 20, 3)  # the CPU pipeline's HWC
    with pytest.raises(ValueError, match="bfloat16.*device stage"):
        next(iter(ss.DataLoader(ss.open(jpegs).map(image=pipe), batch_size=4)))
    with pytest.raises(ValueError, match="layout must be one of"):
        ss.open(jpegs).map(image=pipe, device="cpu", layout="CHW")
    with pytest.raises(ValueError, match="cpu_share"):
        ss.open(jpegs).map(image=pipe, device="cpu", cpu_share=1.5)
    with pytest.raises(TypeError, match="go with device="):
        ss.open(jpegs).map(image=pipe, cpu_share=0.5)


def test_the_device_is_read_as_every_device_argument_is(files):
    jpegs, _, _ = files
    assert ss.open(jpegs).map(image=PIPE, device=1).device == "cuda:1"  # a bare index is a CUDA device
    assert ss.open(jpegs).map(image=PIPE, device=torch.device("cpu")).device == "cpu"
    for bad in ("not a device", -1, True, 2.0):
        with pytest.raises(ValueError, match="device must be"):
            ss.open(jpegs).map(image=PIPE, device=bad)


def _damaged_copy(path, tmp_path, sample: int):
    """A copy of ``path`` whose sample ``sample`` has an EOI two thirds into its JPEG."""
    good = ss.open(path).encoded(sample, "image")[1].tobytes()
    raw = bytearray(path.read_bytes())
    at = raw.find(good)
    cut = at + len(good) * 2 // 3
    raw[cut : at + len(good)] = b"\xff\xd9" + bytes(at + len(good) - cut - 2)
    out = tmp_path / "damaged.arrow"
    out.write_bytes(bytes(raw))
    return out


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_a_corrupt_jpeg_names_its_sample_and_keep_going_goes_on(files, tmp_path, share):
    jpegs, _, _ = files
    damaged = _damaged_copy(jpegs, tmp_path, 9)
    mapped = ss.open(damaged).map(image=PIPE, device="cpu", cpu_share=share)
    loader = ss.DataLoader(mapped, batch_size=4, workers=2)
    it = iter(loader)
    assert [int(next(it)["label"][0]) for _ in range(2)] == [0, 4]
    with pytest.raises(ss.CorruptFileError, match=r"damaged\.arrow: sample 9, field 'image': cannot decode jpeg image"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)  # the error ended the epoch
    it = loader.__iter__(keep_going=True)
    labels = []
    while True:
        try:
            labels.append(int(next(it)["label"][0]))
        except ss.CorruptFileError:
            labels.append(-1)
        except StopIteration:
            break
    assert labels == [-1 if k == 8 else k for k in range(0, N, 4)]


def test_getitem_gives_the_staged_row_and_finish_rows_makes_a_batch(files):
    jpegs, _, _ = files
    mapped = ss.open(jpegs).map(image=PIPE, device="cpu")
    sample = mapped[3]
    assert isinstance(sample["image"], StagedImage) and int(sample["label"]) == 3
    batch = mapped.finish_rows("image", [sample["image"], mapped[5]["image"]])
    assert batch.shape == (2, 3, 24, 24) and batch.dtype == torch.float32
    with pytest.raises(TypeError, match="no more fields"):
        mapped.map(label=[])
    with pytest.raises(TypeError, match="packed files"):
        from slipstream.images.device.devicemap import device_map

        device_map([{"image": np.zeros((4, 4, 3), np.uint8)}], {"image": PIPE}, "cpu")


def test_the_torch_drop_in_gives_torch_batches(files):
    jpegs, mixed, _ = files
    from slipstream.torch import DataLoader

    mapped = ss.open(mixed).map(image=PIPE, device="cpu", cpu_share=0.25)
    for workers in (0, 2):
        loader = DataLoader(mapped, batch_size=8, num_workers=workers, seed=2, shuffle=True)
        batches = list(loader)
        assert len(batches) == len(loader) == N // 8
        labels = torch.cat([b["label"] for b in batches])
        assert sorted(labels.tolist()) == list(range(N))
        for b in batches:
            assert isinstance(b["label"], torch.Tensor) and b["image"].shape == (8, 3, 24, 24)
        state = loader.state_dict()
        assert state is not None


def test_the_workers_side_never_imports_torch(files):
    jpegs, _, _ = files
    from helpers import run_python

    code = f"""
    import sys, pickle
    import numpy as np
    import slipstream as ss
    from slipstream import ops
    from slipstream.core.rng import sample_context
    view = pickle.loads(pickle.dumps(ss.open({str(jpegs)!r}).map(image=[ops.RandomResizedCrop(16)], device="cuda", cpu_share=0.5)))
    with sample_context(1, 0) as context:
        context.batch(np.arange(8))
        rows = view.getobs_batch_into(None, np.arange(8))["image"]
    print(len(rows), "torch" in sys.modules)
    """
    result = run_python(code, timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["8", "False"]


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@CUDA
def test_on_cuda_both_loaders_match_the_cpu_device_stage(files):  # pragma: no cover - GPU only
    _, mixed, _ = files
    pipe = [ops.RandomResizedCrop(24), ops.RandomHorizontalFlip()]  # uint8: levels
    on_cpu = _epochs(ss.open(mixed).map(image=pipe, device="cpu", cpu_share=0.25), epochs=1)[0]
    on_gpu = _epochs(ss.open(mixed).map(image=pipe, device="cuda", cpu_share=0.25), epochs=1, workers=2)[0]
    worst = 0.0
    for a, b in zip(on_cpu, on_gpu):
        np.testing.assert_array_equal(a["label"], b["label"])
        assert b["image"].is_cuda
        diff = (a["image"].double() - b["image"].cpu().double()).abs().reshape(len(a["label"]), -1).mean(dim=1)
        worst = max(worst, float(diff.max()))
    assert worst <= 2.0, worst  # nvJPEG's IDCT and upsampling against libjpeg's
    from slipstream.torch import DataLoader

    loader = DataLoader(ss.open(mixed).map(image=pipe, device="cuda"), batch_size=8, num_workers=2, device="cuda", pin_memory=True, seed=2)
    for batch in loader:
        assert batch["image"].is_cuda and batch["label"].is_cuda


def test_the_torch_drop_in_reads_a_subset_of_a_device_view(files):
    jpegs, _, _ = files
    from torch.utils.data import Subset

    from slipstream.torch import DataLoader

    mapped = ss.open(jpegs).map(image=PIPE, device="cpu")
    subset = Subset(Subset(mapped, list(range(0, N, 2))), list(range(10)))
    for workers in (0, 2):
        batches = list(DataLoader(subset, batch_size=4, num_workers=workers))
        assert [b["label"].tolist() for b in batches] == [[0, 2, 4, 6], [8, 10, 12, 14], [16, 18]]
        assert all(isinstance(b["image"], torch.Tensor) and b["image"].shape[1:] == (3, 24, 24) for b in batches)


def test_a_device_view_with_the_drop_ins_device_is_not_prefetched_twice(files):
    jpegs, _, _ = files
    from slipstream.torch import DataLoader

    mapped = ss.open(jpegs).map(image=PIPE, device="cpu")
    assert not DataLoader(mapped, batch_size=4, device="cpu")._prefetches_ahead()
    loader = DataLoader(mapped, batch_size=4)
    loader.device = torch.device("cuda")  # how a CUDA loader decides (no GPU needed to ask)
    assert not loader._prefetches_ahead()
    plain = DataLoader(list(range(8)), batch_size=4)
    plain.device = torch.device("cuda")
    assert plain._prefetches_ahead()
