"""Device views under other views and shards: index semantics
against the CPU pipeline, process start methods, elastic and out-of-order resume, finish_ahead, JAX,
DeviceStage by hand, views that cannot finish. device="cpu" throughout."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from gpudata import snap as _snap  # noqa: E402
from packed import photo_like  # noqa: E402

import slipstream as ss  # noqa: E402
from slipstream import fields as F  # noqa: E402
from slipstream import ops  # noqa: E402

N = 24
PIPE = [ops.Decode(exact=True), ops.RandomResizedCrop(16), ops.RandomHorizontalFlip()]


@pytest.fixture(scope="module")
def jpegs(tmp_path_factory):
    root = tmp_path_factory.mktemp("device_views")
    rng = np.random.default_rng(0)
    samples = [{"image": photo_like(int(rng.integers(30, 90)), int(rng.integers(30, 90)), seed=k), "label": k} for k in range(N)]
    schema = {"image": F.Image(codec="jpeg", quality=90), "label": F.Int()}
    path = ss.write(root / "jpegs.arrow", samples, schema, progress=False)
    a = ss.write(root / "a.arrow", samples[:10], schema, progress=False)
    b = ss.write(root / "b.arrow", samples[10:], schema, progress=False)
    return path, a, b


def _compare(cpu_batches, dev_batches):
    assert len(cpu_batches) == len(dev_batches)
    worst = 0.0
    for c, d in zip(cpu_batches, dev_batches):
        np.testing.assert_array_equal(np.asarray(c["label"]), np.asarray(d["label"]))
        ci, di = np.asarray(c["image"]).astype(np.int32), d["image"].numpy().astype(np.int32)
        assert ci.shape == di.shape, (ci.shape, di.shape)
        for k in range(len(ci)):
            m = float(np.abs(ci[k] - di[k]).mean())
            worst = max(worst, m)
            assert m <= 1.0, f"label {int(np.asarray(c['label'])[k])}: mean abs diff {m:.2f}"
    return worst


def _views(data):
    """Views of ``data`` that re-index it."""
    n = len(data)
    rev = ss.obsview(data, np.arange(n)[::-1].copy())
    train, val = ss.splitobs(data, 0.5, shuffle=True, seed=5)
    nested = ss.obsview(ss.obsview(data, list(range(2, n))), [0, 3, 5, 7, 11, 1])
    return {"reversed": rev, "split_train": train, "split_val": val, "nested": nested, "repeat": ss.obsview(data, [3, 3, 3, 7, 7])}


@pytest.mark.parametrize("share", [0.0, 0.5])
@pytest.mark.parametrize("which", ["one", "shards"])
@pytest.mark.parametrize("view", ["reversed", "split_train", "split_val", "nested", "repeat"])
def test_views_of_a_device_view_draw_as_the_cpu_pipeline(jpegs, which, view, share):
    path, a, b = jpegs
    src = ss.open(path) if which == "one" else ss.open([a, b])
    src2 = ss.open(path) if which == "one" else ss.open([a, b])
    cpu = _views(src.map(image=PIPE))[view]
    dev = _views(src2.map(image=PIPE, device="cpu", cpu_share=share))[view]
    for kwargs in (dict(shuffle=True, seed=7, workers=2), dict(shuffle=False, seed=8, workers=0)):
        c = _snap(ss.DataLoader(cpu, batch_size=3, **kwargs))
        d = _snap(ss.DataLoader(dev, batch_size=3, **kwargs))
        _compare(c, d)


def _damaged(path, out, sample: int):
    """A copy of ``path`` whose sample ``sample`` has an EOI two thirds into its JPEG."""
    good = ss.open(path).encoded(sample, "image")[1].tobytes()
    raw = bytearray(path.read_bytes())
    at = raw.find(good)
    cut = at + len(good) * 2 // 3
    raw[cut : at + len(good)] = b"\xff\xd9" + bytes(at + len(good) - cut - 2)
    out.write_bytes(bytes(raw))
    return out


@pytest.mark.parametrize("share", [0.0, 1.0])
def test_a_corrupt_sample_in_the_second_shard_names_that_shard_and_the_dataset_index(jpegs, tmp_path, share):
    _, a, b = jpegs
    bad_b = _damaged(b, tmp_path / "bad_b.arrow", 3)  # dataset sample 13
    cpu = ss.obsview(ss.open([a, bad_b]).map(image=PIPE), [0, 13, 1])
    dev = ss.obsview(ss.open([a, bad_b]).map(image=PIPE, device="cpu", cpu_share=share), [0, 13, 1])
    with pytest.raises(ss.CorruptFileError) as cpu_err:
        list(ss.DataLoader(cpu, batch_size=3))
    with pytest.raises(ss.CorruptFileError) as dev_err:
        list(ss.DataLoader(dev, batch_size=3))
    assert "bad_b.arrow" in str(cpu_err.value) and "sample 13" in str(cpu_err.value), str(cpu_err.value)
    assert "bad_b.arrow" in str(dev_err.value) and "sample 13" in str(dev_err.value), str(dev_err.value)


@pytest.mark.parametrize("method, sharded", [("spawn", False), ("forkserver", True)])
def test_process_workers_started_by_spawn_or_forkserver_read_a_device_view(jpegs, method, sharded):
    """A device-mapped view pickled to process and helper workers started by spawn (a packed file) or
    forkserver (a sharded set): the same batches as the thread backend's, epochs and restarts."""
    path, a, b = jpegs
    code = f"""
    import sys, pickle
    import numpy as np, torch
    import slipstream as ss
    from slipstream import ops
    PIPE = [ops.Decode(exact=True), ops.RandomResizedCrop(16), ops.RandomHorizontalFlip()]

    def snap(loader):
        return [{{k: (v.clone() if isinstance(v, torch.Tensor) else np.array(v)) for k, v in b.items()}} for b in loader]

    def same(x, y):
        assert len(x) == len(y)
        for p, q in zip(x, y):
            assert np.array_equal(p["label"], q["label"]) and torch.equal(p["image"], q["image"])

    if __name__ == "__main__":
        for data in (ss.open([{str(a)!r}, {str(b)!r}]) if {sharded!r} else ss.open({str(path)!r}),):
            view = ss.splitobs(data.map(image=PIPE, device="cpu", cpu_share=0.5), 0.75, shuffle=True, seed=1)[0]
            ref = ss.DataLoader(view, batch_size=4, shuffle=True, seed=3, workers=2)
            loader = ss.DataLoader(view, batch_size=4, shuffle=True, seed=3, workers=2, backend="process", mp_context={method!r})
            e0, e1 = snap(ref), snap(ref)
            same(e0, snap(loader))
            pids = set(loader.worker_pids)
            loader.restart_workers()
            same(e1, snap(loader))
            assert pids.isdisjoint(loader.worker_pids), "restart_workers kept the old processes"
            loader.close()
            helper = ss.DataLoader(view, batch_size=4, shuffle=True, seed=3, workers=2, backend="helper", mp_context={method!r})
            same(e0, snap(helper))
            same(e1, snap(helper))
            helper.close()
        print("ok")
    """
    import pathlib
    import tempfile

    script = pathlib.Path(tempfile.mkdtemp()) / "probe_spawn.py"
    script.write_text(__import__("textwrap").dedent(code))
    import os
    import subprocess
    import sys

    from helpers import SRC

    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180, env=env)
    assert result.returncode == 0, result.stderr[-4000:]
    assert result.stdout.split() == ["ok"], result.stdout


def test_in_order_false_with_finish_ahead_beyond_prefetch_resumes_losing_and_repeating_nothing(jpegs, monkeypatch):
    import time

    from slipstream.images.device import hostfield as staged

    path, _, _ = jpegs
    rows = staged.StagedField.rows

    def slow(self, indices, draws):
        if 0 in np.asarray(indices).tolist():
            time.sleep(0.6)  # the batch holding sample 0 is overtaken
        return rows(self, indices, draws)

    monkeypatch.setattr(staged.StagedField, "rows", slow)
    view = ss.open(path).map(image=PIPE[1:], device="cpu", cpu_share=0.3)
    kwargs = dict(batch_size=2, workers=2, prefetch=2, in_order=False, finish_ahead=6, seed=1)
    loader = ss.DataLoader(view, **kwargs)
    it = iter(loader)
    head = [int(v) for _ in range(5) for v in next(it)["label"]]
    state = loader.state_dict()
    it.close()
    assert 0 not in head and state["batch"] == 0 and len(state["done_ahead"]) == 5, state
    again = ss.DataLoader(view, **kwargs)
    again.load_state_dict(state)
    rest = [int(v) for b in again for v in b["label"]]
    assert sorted(head + rest) == list(range(N))


def test_finish_ahead_is_checked_and_fixed(jpegs):
    path, _, _ = jpegs
    view = ss.open(path).map(image=PIPE[1:], device="cpu")
    for bad, error in ((0, ValueError), (-1, ValueError), (1.5, TypeError), (True, TypeError), ("2", TypeError)):
        with pytest.raises(error, match="finish_ahead"):
            ss.DataLoader(view, batch_size=2, finish_ahead=bad)
    loader = ss.DataLoader(view, batch_size=2, prefetch=5)
    assert loader.finish_ahead == 5
    with pytest.raises(AttributeError, match="fixed"):
        loader.finish_ahead = 1


def test_finish_ahead_takes_a_numpy_integer_as_prefetch_does(jpegs):
    """``prefetch=np.int64(3)`` is accepted (check_options), ``finish_ahead=np.int64(3)`` is not."""
    path, _, _ = jpegs
    view = ss.open(path).map(image=PIPE[1:], device="cpu")
    loader = ss.DataLoader(view, batch_size=2, prefetch=np.int64(3), workers=1)
    assert loader.prefetch == 3
    loader = ss.DataLoader(view, batch_size=2, finish_ahead=np.int64(3))
    assert loader.finish_ahead == 3


@pytest.mark.parametrize("order", ["quasi_random", "random"])
def test_elastic_resume_of_a_device_view_over_shards_gives_the_whole_runs_pixels(jpegs, order):
    _, a, b = jpegs
    view = ss.open([a, b]).map(image=PIPE[1:], device="cpu", cpu_share=0.4)
    whole = {}
    for batch in _snap(ss.DataLoader(view, batch_size=5, order=order, seed=9, workers=2)):
        whole.update({int(lab): img for lab, img in zip(batch["label"], batch["image"])})
    loaders = [ss.DataLoader(view, batch_size=2, order=order, seed=9, workers=2, rank=r, world_size=3) for r in range(3)]
    its = [iter(loader) for loader in loaders]
    seen = []
    for step in range(2):
        for r, it in enumerate(its):
            if step == 0 or r != 2:  # ranks stopped at different steps: all states, as a list
                seen += _snap([next(it)])
    states = [loader.state_dict() for loader in loaders]
    for it in its:
        it.close()
    rest = []
    for r in range(2):
        resumed = ss.DataLoader(view, batch_size=3, order=order, seed=9, workers=1, rank=r, world_size=2)
        resumed.load_state_dict(states)
        rest += _snap(resumed)
    labels = [int(v) for bt in seen + rest for v in bt["label"]]
    assert set(labels) == set(range(N)) and len(labels) - N < 2, sorted(labels)  # padding only
    for bt in seen + rest:
        for lab, img in zip(bt["label"], bt["image"]):
            assert torch.equal(img, whole[int(lab)]), int(lab)


@pytest.mark.parametrize("wrap", ["joinobs", "mapobs"])
def test_a_device_view_under_joinobs_or_mapobs_is_finished_or_refused(jpegs, wrap):
    """The loader finds the finisher through an ``obsview`` only (``finishing.finisher_of``); under
    ``joinobs`` or ``mapobs`` the batches come out with the image field a list of ``StagedImage``
    rows, silently (the torch drop-in raises a clear TypeError for ConcatDataset)."""
    path, _, _ = jpegs
    view = ss.open(path).map(image=PIPE[1:], device="cpu")
    data = ss.joinobs(view, view) if wrap == "joinobs" else ss.mapobs(lambda s: s, view)
    try:
        batch = next(iter(ss.DataLoader(data, batch_size=2)))
    except (TypeError, ValueError) as exc:  # refused, naming the cause: acceptable
        assert "device" in str(exc), str(exc)
    else:
        assert isinstance(batch["image"], torch.Tensor), f"image is {type(batch['image']).__name__} of {type(batch['image'][0]).__name__}"


def test_device_stage_by_hand_equals_the_loader_for_cpu_share_0(jpegs):
    from slipstream.images.device.devicestage import DeviceStage

    _, a, b = jpegs
    data = ss.open([a, b])
    view = data.map(image=PIPE[1:], device="cpu")
    stage = DeviceStage(data, "image", ops=PIPE[1:])
    loader = ss.DataLoader(view, batch_size=5, seed=11)
    for epoch in range(2):
        for k, batch in enumerate(loader):
            idx = np.arange(5 * k, min(5 * k + 5, N))
            assert torch.equal(stage(idx, 11, epoch), batch["image"]), (epoch, k)


def test_device_stage_of_a_device_view_keeps_its_dtype_layout_and_device(jpegs):
    """``DeviceStage(ss.open(p).map(image=ops, device=..., dtype=, layout=))`` takes the view's ops
    (``device._unmapped``) but not its dtype, layout or device: by hand it gives another tensor than
    the loader over the same view for the same (seed, epoch, indices)."""
    from slipstream.images.device.devicestage import DeviceStage

    path, _, _ = jpegs
    pipe = [*PIPE[1:], ops.Normalize((0.5, 0.5, 0.5), (0.2, 0.2, 0.2))]
    view = ss.open(path).map(image=pipe, device="cpu", dtype="bfloat16", layout="channels_last")
    batch = next(iter(ss.DataLoader(view, batch_size=4, seed=3)))
    by_hand = DeviceStage(view, "image")(np.arange(4), 3, 0)
    assert by_hand.dtype == batch["image"].dtype and by_hand.shape == batch["image"].shape, (by_hand.dtype, tuple(by_hand.shape), batch["image"].dtype, tuple(batch["image"].shape))
    assert torch.equal(by_hand, batch["image"])


def test_device_stage_and_host_reader_refuse_indices_the_loader_would(jpegs):
    """A negative index reads sample n-1 but keys its draws by -1 (another window than the
    loader's for that sample); a float index is truncated; a bool read as 1."""
    from slipstream.images.device.devicestage import DeviceStage

    path, _, _ = jpegs
    stage = DeviceStage(ss.open(path), "image", ops=PIPE[1:])
    for bad in ([-1], [1.5], [True]):
        with pytest.raises((IndexError, TypeError, ValueError)):
            stage(bad, 0, 0)


@pytest.mark.parametrize("workers", [0, 2])
def test_the_torch_drop_in_over_a_subset_of_a_view_draws_as_the_cpu_pipeline(jpegs, workers):
    from slipstream.torch import DataLoader

    path, _, _ = jpegs
    idx = [5, 1, 17, 3, 3, 22, 9, 0]
    cpu = torch.utils.data.Subset(ss.obsview(ss.open(path).map(image=PIPE), list(range(2, N)) + [0, 1]), idx)
    dev = torch.utils.data.Subset(ss.obsview(ss.open(path).map(image=PIPE, device="cpu", cpu_share=0.5), list(range(2, N)) + [0, 1]), idx)
    kwargs = dict(batch_size=3, shuffle=True, seed=4, num_workers=workers)
    c = [{"label": b["label"].numpy(), "image": b["image"].numpy()} for b in DataLoader(cpu, **kwargs)]
    d = _snap(DataLoader(dev, **kwargs))
    _compare(c, d)


def test_an_iter_whose_finisher_cannot_be_made_skips_no_epoch(jpegs, monkeypatch):
    """``DataLoader.__iter__`` advances ``_next`` to the next epoch before ``finisher_of`` (which may
    raise: CUDA unavailable, a bad CUDA index, the torchvision RuntimeWarning under
    ``-W error``); the failed ``iter()`` then costs an epoch: the next ``iter()`` starts epoch 1,
    while the sampler path takes care that "a sampler that fails changes nothing"."""
    from slipstream.images.device.devicemap import DeviceMapped

    path, _, _ = jpegs
    view = ss.open(path).map(image=PIPE[1:], device="cpu")
    loader = ss.DataLoader(view, batch_size=4, shuffle=True, seed=1)
    real = DeviceMapped.batch_finisher
    calls = []

    def once(self):
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("device 'cuda': CUDA is not available")
        return real(self)

    monkeypatch.setattr(DeviceMapped, "batch_finisher", once)
    with pytest.raises(RuntimeError):
        iter(loader)
    assert loader.state_dict()["epoch"] == 0
    it = iter(loader)
    assert it.epoch == 0, f"the failed iter() cost an epoch: this one is epoch {it.epoch}"
