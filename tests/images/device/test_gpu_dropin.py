"""slipstream.torch.DataLoader over device-mapped views, on device="cpu": exact resume at every
batch, samplers, collate, batch_size=None, views and splits of a device view, the finish depth."""

from __future__ import annotations

import json
import warnings

import pytest

torch = pytest.importorskip("torch")

from gpudata import N_IMAGES, data_fixture  # noqa: E402, F401 - the fixture ``data``
from gpudata import snap as _snap  # noqa: E402
from helpers import assert_resumes_exactly  # noqa: E402

import slipstream as ss  # noqa: E402
from slipstream import ops  # noqa: E402

N = N_IMAGES
PIPE = [ops.RandomResizedCrop(16), ops.RandomHorizontalFlip()]



# -- the drop-in ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "backend, workers, persistent",
    [("thread", 0, False), ("thread", 2, False), ("thread", 2, True), ("process", 2, False), ("process", 2, True)],
)
@pytest.mark.parametrize("device", [None, "cpu"])
def test_dropin_resumes_exactly_at_every_batch_torch_sampler(data, backend, workers, persistent, device):
    from slipstream.torch import DataLoader

    mapped = ss.open(data["jpeg"]).map(image=PIPE, device="cpu", cpu_share=0.3)

    def make():
        g = torch.Generator().manual_seed(5)
        return DataLoader(
            mapped, batch_size=3, shuffle=True, generator=g, num_workers=workers, persistent_workers=persistent,
            backend=backend, device=device,
        )  # fmt: skip

    assert assert_resumes_exactly(make, epochs=2) > 10


@pytest.mark.parametrize("workers", [0, 2])
def test_dropin_seeded_drop_last_len_and_reiteration(data, workers):
    from slipstream.torch import DataLoader

    mapped = ss.open(data["jpeg"]).map(image=PIPE, device="cpu")
    loader = DataLoader(mapped, batch_size=3, shuffle=True, seed=2, drop_last=True, num_workers=workers)
    assert len(loader) == N // 3
    e0, e1 = _snap(loader), _snap(loader)
    assert len(e0) == len(e1) == N // 3
    assert all(b["image"].shape == (3, 16, 16, 3) for b in e0)
    labels0 = sorted(int(v) for b in e0 for v in b["label"])
    assert len(set(labels0)) == 18
    assert [b["label"].tolist() for b in e0] != [b["label"].tolist() for b in e1]
    assert_resumes_exactly(lambda: DataLoader(mapped, batch_size=3, shuffle=True, seed=2, drop_last=True, num_workers=workers))


def test_dropin_pin_memory_without_accelerator_warns_as_torch_and_works(data):
    from slipstream.torch import DataLoader

    mapped = ss.open(data["jpeg"]).map(image=PIPE, device="cpu")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = _snap(DataLoader(mapped, batch_size=4, pin_memory=True))
    assert len(got) == 5
    messages = [str(w.message) for w in caught]
    assert any("pin_memory" in m for m in messages), messages


def test_dropin_batch_size_none_gives_each_sample_finished(data):
    """torch's batch_size=None yields each sample unbatched (collate_fn=default_convert). With a
    device view each sample's image is a StagedImage row, not a list of rows: the finisher refuses it
    at every sample, saying a collate= changed it (none was given)."""
    from slipstream.torch import DataLoader

    mapped = ss.open(data["jpeg"]).map(image=PIPE, device="cpu")
    it = iter(DataLoader(mapped, batch_size=None))
    sample = next(it)
    assert isinstance(sample["image"], torch.Tensor)


def test_dropin_user_collate_fn_keeping_rows_works(data):
    from slipstream.torch import DataLoader

    mapped = ss.open(data["jpeg"]).map(image=PIPE, device="cpu")

    def collate(samples):
        return {"image": [s["image"] for s in samples], "label": torch.tensor([int(s["label"]) for s in samples])}

    got = list(DataLoader(mapped, batch_size=4, collate_fn=collate, num_workers=2))
    assert len(got) == 5 and got[0]["image"].shape == (4, 16, 16, 3)


def test_dropin_user_default_collate_error_is_clear(data):
    """collate_fn=torch's default_collate (common in code ported from torch): what error?"""
    from torch.utils.data import default_collate

    from slipstream.torch import DataLoader

    mapped = ss.open(data["jpeg"]).map(image=PIPE, device="cpu")
    with pytest.raises(Exception) as info:
        next(iter(DataLoader(mapped, batch_size=4, collate_fn=default_collate)))
    print(type(info.value).__name__, info.value)
    assert "device" in str(info.value) or "StagedImage" in str(info.value)


def test_dropin_samplers_and_batch_sampler(data):
    from torch.utils.data import BatchSampler, SequentialSampler, SubsetRandomSampler

    from slipstream.torch import DataLoader

    mapped = ss.open(data["jpeg"]).map(image=PIPE, device="cpu")
    g = torch.Generator().manual_seed(0)
    got = list(DataLoader(mapped, batch_size=4, sampler=SubsetRandomSampler(list(range(0, N, 2)), generator=g)))
    assert sorted(int(v) for b in got for v in b["label"]) == list(range(0, N, 2))

    class Uneven:
        def __iter__(self):
            yield [0]
            yield [1, 2, 3, 4, 5]
            yield [6, 7]

        def __len__(self):
            return 3

    got = list(DataLoader(mapped, batch_sampler=Uneven(), num_workers=2))
    assert [b["image"].shape[0] for b in got] == [1, 5, 2]
    got = list(DataLoader(mapped, batch_sampler=BatchSampler(SequentialSampler(range(N)), 6, True)))
    assert [b["label"].tolist() for b in got] == [list(range(k, k + 6)) for k in (0, 6, 12)]


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_dropin_in_order_false_resume_loses_and_repeats_nothing(data, backend):
    from slipstream.torch import DataLoader

    mapped = ss.open(data["jpeg"]).map(image=PIPE, device="cpu", cpu_share=0.5)

    def make():
        return DataLoader(mapped, batch_size=3, shuffle=True, seed=1, num_workers=2, in_order=False, backend=backend)

    for cut in range(0, 7):
        loader = make()
        it = iter(loader)
        head = [next(it)["label"].tolist() for _ in range(cut)]
        state = json.loads(json.dumps(loader.state_dict()))
        it.close()
        again = make()
        again.load_state_dict(state)
        rest = [b["label"].tolist() for b in again]
        labels = sorted(v for b in head + rest for v in b)
        assert labels == list(range(N)), (cut, head, rest)



# -- views, devices ----------------------------------------------------------------------------------


@pytest.mark.parametrize("workers,backend", [(0, "thread"), (2, "thread"), (2, "process")])
def test_dropin_over_a_split_of_a_device_view(data, workers, backend):
    """ss.splitobs / ss.obsview of a device view (a train/val split) through the drop-in: the core
    loader finds the finisher through an ObsView (finisher_of), but the drop-in's _finishes() and
    _Dataset.batch_finisher look through torch Subset only: with process workers the adapter
    (_BatchIntoDataset) hides the finisher and the rows reach the collate plan."""
    from slipstream.torch import DataLoader

    mapped = ss.open(data["jpeg"]).map(image=PIPE, device="cpu")
    train, _ = ss.splitobs(mapped, 0.75)
    got = list(DataLoader(train, batch_size=4, num_workers=workers, backend=backend, seed=0))
    assert [b["image"].shape[0] for b in got] == [4, 4, 4, 3]
    assert all(isinstance(b["image"], torch.Tensor) for b in got)


def test_dropin_prefetches_ahead_is_false_for_an_obsview_of_a_device_view(data):
    """The drop-in never prefetches device batches a second time onto CUDA: whether the dataset
    finishes its own batches (``_finishes(dataset)``) is seen through a Subset and through an ObsView
    of a device view, so DataLoader(ss.obsview(view), device="cuda") does not prefetch them again."""
    from slipstream.torch._datasets import _finishes

    mapped = ss.open(data["jpeg"]).map(image=PIPE, device="cpu")
    assert _finishes(torch.utils.data.Subset(mapped, [1, 2]))
    assert _finishes(ss.obsview(mapped, [1, 2, 3]))


def test_dropin_concat_of_device_views_error_is_clear(data):
    from slipstream.torch import DataLoader

    mapped = ss.open(data["jpeg"]).map(image=PIPE, device="cpu")
    with pytest.raises(Exception) as info:
        next(iter(DataLoader(torch.utils.data.ConcatDataset([mapped, mapped]), batch_size=4)))
    print(type(info.value).__name__, info.value)


def test_map_device_as_an_int_means_cuda_index(data):
    """torch.device(0) is cuda:0 and the drop-in's device= takes an int, but DeviceMapped keeps
    str(device): str(0) == "0", which torch.device() refuses ("Invalid device string: '0'") at
    the first iter(), on any machine. (A bad name, "gpu", is accepted by map() and fails only at
    iter() too.)"""
    view = ss.open(data["jpeg"]).map(image=PIPE, device=0)
    assert view.device == "cuda:0"
