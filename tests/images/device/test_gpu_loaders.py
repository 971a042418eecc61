"""The device stage through the loaders: ss.open(p).map(image=[...],
device=...) with several iterators, elastic and drop-in resume, shards, quasi-random orders, views,
abandoned iterators, and a sample's pixels independent of its batch mates. Run on device="cpu" (the
same code as CUDA but the side stream)."""

from __future__ import annotations

import gc

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gpudata import assert_finish_threads_end  # noqa: E402
from gpudata import same as _same  # noqa: E402
from gpudata import snap as _snap  # noqa: E402
from packed import photo_like  # noqa: E402

import slipstream as ss  # noqa: E402
from slipstream import fields as F  # noqa: E402
from slipstream import ops  # noqa: E402

N = 24
PIPE = [ops.RandomResizedCrop(16), ops.RandomHorizontalFlip()]


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    root = tmp_path_factory.mktemp("device_loaders")
    rng = np.random.default_rng(0)
    samples = [{"image": photo_like(int(rng.integers(30, 90)), int(rng.integers(30, 90)), seed=k), "label": k} for k in range(N)]
    path = ss.write(root / "jpegs.arrow", samples, {"image": F.Image(codec="jpeg", quality=90), "label": F.Int()}, progress=False)
    a = ss.write(root / "a.arrow", samples[:10], {"image": F.Image(codec="jpeg", quality=90), "label": F.Int()}, progress=False)
    b = ss.write(root / "b.arrow", samples[10:], {"image": F.Image(codec="jpeg", quality=90), "label": F.Int()}, progress=False)
    return path, a, b


# -- bugs -----------------------------------------------------------------------------------------


def test_a_normalize_with_dtype_uint8_is_refused_when_mapped_not_at_every_batch(jpegs):
    """``dtype="uint8"`` with an ``ops.Normalize`` cannot work (finalize: "mean/std need a float
    dtype"), but ``map(..., device=)`` accepts it and every batch of every epoch then fails in the
    finish thread (with keep_going: a whole epoch of errors)."""
    path, _, _ = jpegs
    pipe = [*PIPE, ops.Normalize((0.5, 0.5, 0.5), (0.2, 0.2, 0.2))]
    with pytest.raises(ValueError, match="float dtype"):
        ss.open(path).map(image=pipe, device="cpu", dtype="uint8")


# -- probes of behaviour that holds ---------------------------------------------------------------


def test_several_iterators_of_one_loader_at_once_each_get_their_epoch(jpegs):
    path, _, _ = jpegs
    mapped = ss.open(path).map(image=PIPE, device="cpu", cpu_share=0.3)
    ref = ss.DataLoader(mapped, batch_size=5, shuffle=True, seed=4, workers=2)
    e0, e1 = _snap(ref), _snap(ref)
    loader = ss.DataLoader(mapped, batch_size=5, shuffle=True, seed=4, workers=2)
    a, b = iter(loader), iter(loader)
    got_a, got_b = [], []
    for x, y in zip(a, b):
        got_a.append(x)
        got_b.append(y)
    _same(e0, _snap(got_a))
    _same(e1, _snap(got_b))


def test_a_samples_pixels_do_not_depend_on_its_batch_mates(jpegs):
    """The module docs promise pixels that are a pure function of (seed, epoch, index) ("a resumed
    loader continues exactly"; stage.py: "on CPU tensors the tests find them equal to the sample
    resampled alone"). They are not: ``resample`` picks the order of its two matmuls and the padded
    region shape from the whole group (stage.py ``_resample_group``), so float32 rounding, hence
    the uint8 value, changes with the other samples of the batch: the same sample differs by a
    level between batch_size=24 and batch_size=1 (or 8), i.e. after an elastic resume, or with a
    torch sampler that batches differently. Here: the same staged rows finished together and alone."""
    from slipstream.core.rng import sample_context

    path, _, _ = jpegs
    mapped = ss.open(path).map(image=PIPE, device="cpu")
    with sample_context(9, 0) as context:
        idx = np.arange(N)
        context.batch(idx)
        rows = mapped.getobs_batch_into(None, idx)["image"]
    together = mapped.finish_rows("image", rows)
    alone = torch.cat([mapped.finish_rows("image", [row]) for row in rows])
    differ = [k for k in range(N) if not torch.equal(together[k], alone[k])]
    assert not differ, f"samples {differ} differ by up to {int((together.int() - alone.int()).abs().max())} level(s) with their batch mates"


@pytest.mark.parametrize("backend", ["thread", "process"])
def test_elastic_resume_of_a_device_view_loses_and_repeats_nothing(jpegs, backend):
    path, _, _ = jpegs
    mapped = ss.open(path).map(image=PIPE, device="cpu", cpu_share=0.4)
    seen = []
    loaders = [ss.DataLoader(mapped, batch_size=3, shuffle=True, seed=9, workers=2, backend=backend, rank=r, world_size=2) for r in range(2)]
    its = [iter(loader) for loader in loaders]
    for _ in range(2):
        for it in its:
            seen.append(next(it))
    states = [loader.state_dict() for loader in loaders]
    for it in its:
        it.close()
    resumed = ss.DataLoader(mapped, batch_size=4, shuffle=True, seed=9, workers=2, backend=backend)
    resumed.load_state_dict(states)
    rest = list(resumed)
    labels = sorted(int(v) for b in seen + rest for v in b["label"])
    assert labels == list(range(N))
    # the windows are a pure function of (seed, epoch, loader index): within a level of a whole run's
    whole = {int(lab): img for b in ss.DataLoader(mapped, batch_size=N, shuffle=True, seed=9) for lab, img in zip(b["label"], b["image"])}
    for b in seen + rest:
        for lab, img in zip(b["label"], b["image"]):
            assert int((img.int() - whole[int(lab)].int()).abs().max()) <= 1


def test_the_torch_loader_resumes_a_device_view_exactly(jpegs):
    from slipstream.torch import DataLoader

    path, _, _ = jpegs
    mapped = ss.open(path).map(image=PIPE, device="cpu", cpu_share=0.3)
    for workers, persistent in ((0, False), (2, True)):
        kwargs = dict(batch_size=4, shuffle=True, num_workers=workers, persistent_workers=persistent, seed=3)
        whole = _snap(DataLoader(mapped, **kwargs))
        loader = DataLoader(mapped, **kwargs)
        it = iter(loader)
        head = _snap([next(it) for _ in range(2)])
        state = loader.state_dict()
        del it
        again = DataLoader(mapped, **kwargs)
        again.load_state_dict(state)
        _same(whole, head + _snap(again))


def test_shards_quasi_random_and_obsview_of_obsview(jpegs):
    _, a, b = jpegs
    shards = ss.open([a, b]).map(image=PIPE, device="cpu")
    got = _snap(ss.DataLoader(shards, batch_size=4, order="quasi_random", seed=2, workers=2))
    assert sorted(int(v) for g in got for v in g["label"]) == list(range(N))
    view = ss.obsview(ss.obsview(shards, list(range(2, 20))), [0, 3, 5, 7, 11])
    got = _snap(ss.DataLoader(view, batch_size=2, seed=2))
    assert all(isinstance(g["image"], torch.Tensor) for g in got)


def test_abandoned_iterators_leave_no_finish_threads(jpegs):
    path, _, _ = jpegs
    loader = ss.DataLoader(ss.open(path).map(image=PIPE, device="cpu"), batch_size=2, workers=2, prefetch=3)
    for _ in range(10):
        it = iter(loader)
        next(it)
        del it  # garbage-collected mid-epoch
        for b in loader:  # a loop left early
            break
    gc.collect()
    assert_finish_threads_end()
