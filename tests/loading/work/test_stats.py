"""DataLoader.stats() (loading/stats.py): what an epoch's input pipeline is doing."""

import time

import numpy as np
import pytest

import slipstream as ss


class Slow:
    """A container whose samples take ``seconds`` each (simulated I/O)."""

    def __init__(self, n, seconds):
        self.n, self.seconds = n, seconds

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        time.sleep(self.seconds)
        return np.full(2, i)


def test_before_an_epoch_there_are_no_stats_and_after_one_they_count_what_was_handed_out():
    loader = ss.DataLoader(np.arange(50), 8, workers=2)
    assert loader.stats() is None
    it = iter(loader)
    next(it), next(it)
    partial = loader.stats()
    assert (partial["epoch"], partial["batches"], partial["samples"]) == (0, 2, 16)
    list(it)
    done = loader.stats()
    assert (done["batches"], done["samples"]) == (7, 50)
    assert 0 <= done["wait_fraction"] <= 1 and 0 <= done["worker_busy"] <= 1
    assert done["samples_per_s"] == pytest.approx(50 / done["seconds"])
    list(loader)
    assert loader.stats()["epoch"] == 1


def test_an_input_bound_epoch_waits_most_of_the_time_and_its_workers_are_busy():
    loader = ss.DataLoader(Slow(40, 0.005), 4, workers=1)
    list(loader)
    stats = loader.stats()
    assert stats["wait_fraction"] > 0.7 and stats["worker_busy"] > 0.7, stats


def test_a_consumer_bound_epoch_hardly_waits():
    loader = ss.DataLoader(np.zeros((40, 2)), 4, workers=1, prefetch=4)
    for _ in loader:
        time.sleep(0.01)  # the training step
    stats = loader.stats()
    assert stats["wait_fraction"] < 0.3 and stats["worker_busy"] < 0.3, stats
    assert stats["batches"] == 10


def test_without_workers_there_is_no_busy_share():
    with ss.DataLoader(np.zeros((20, 2)), 5, workers=0) as loader:
        list(loader)
        stats = loader.stats()
    assert stats["batches"] == 4 and stats["worker_busy"] is None and stats["us_per_sample"] is None


@pytest.mark.parametrize("backend", ["process", "helper"])
def test_worker_processes_report_their_busy_share_and_stages(backend):
    """Was: the process backend reported neither (its answers carried only the results)."""
    with ss.DataLoader(Slow(40, 0.005), 4, workers=2, backend=backend) as loader:
        list(loader)
        stats = loader.stats()
    assert stats["worker_busy"] > 0.5, stats
    assert stats["us_per_sample"]["read"] > 4000, stats  # each sample sleeps 5 ms in a worker


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled tasks", "per-sample path"])
def test_worker_time_per_sample_is_split_into_the_stages_the_image_pipeline_reports(tmp_path, compiled, monkeypatch):
    from packed import photo_like

    from slipstream import fields as F
    from slipstream import ops
    from slipstream.images import pipeline as _pipeline

    if compiled and _pipeline.region_decoder() is None:
        pytest.skip("the _roijpeg extension is not built")
    if not compiled:
        monkeypatch.setattr(_pipeline, "_roi", None)
    images = [{"image": photo_like(120, 100, seed=k), "label": k} for k in range(32)]
    path = ss.write(tmp_path / "d.arrow", images, {"image": F.Image(codec="jpeg"), "label": F.Int()}, progress=False)
    loader = ss.DataLoader(ss.open(path).map(image=[ops.RandomResizedCrop(64), ops.ToCHW()]), 8, workers=2)
    list(loader)
    stages = loader.stats()["us_per_sample"]
    assert set(stages) == {"read", "decode", "augment", "collate"}, stages
    assert stages["decode"] > 0 and stages["augment"] > 0 and stages["read"] >= 0
    assert stages["decode"] + stages["augment"] > stages["collate"]  # the images are the work


def test_plain_arrays_report_their_time_as_reading():
    loader = ss.DataLoader(np.zeros((64, 8)), 8, workers=2)
    list(loader)
    assert set(loader.stats()["us_per_sample"]) == {"read"}
    with ss.DataLoader(np.zeros((64, 8)), 8, workers=0) as inline:
        list(inline)
        assert inline.stats()["us_per_sample"] is None  # no worker threads: nothing measured
