"""slipstream.torch.DataLoader under accelerate, the transformers Trainer and Lightning, on one CPU process.

What is checked each time is that slipstream really loads the batches: the dataset records the
threads that read it, and a loader built with ``backend="thread", num_workers=1`` reads only in
slipstream's worker threads (named ``slipstream-...``). A replaced loader would read in torch's
worker processes (nothing recorded) or in the main thread. Several processes are simulated by
building one loader per rank, as the frameworks would give them ranks.
"""

from __future__ import annotations

import threading
import types
import warnings
from typing import Any

import pytest

torch = pytest.importorskip("torch")
accelerate = pytest.importorskip("accelerate")

import slipstream.torch as sst  # noqa: E402
from torch.utils.data import DistributedSampler  # noqa: E402

pytestmark = pytest.mark.timeout(120)

N = 20  # samples
BATCH = 2
RESUMABLE = callable(getattr(sst.DataLoader, "state_dict", None)) and callable(
    getattr(sst.DataLoader, "load_state_dict", None)
)
NEEDS_STATE = pytest.mark.skipif(
    not RESUMABLE, reason="slipstream.torch.DataLoader has no state_dict/load_state_dict yet (resume)"
)


class Recorded(torch.utils.data.Dataset):
    """``i -> {"x": i}``, recording the name of each thread that reads a sample."""

    def __init__(self, n: int = N):
        self.n = n
        self.threads: set[str] = set()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict[str, int]:
        with self._lock:
            self.threads.add(threading.current_thread().name)
        return {"x": int(i)}

    def read_by_slipstream(self) -> bool:
        return bool(self.threads) and all(name.startswith("slipstream-") for name in self.threads)


def loader(dataset: Recorded, **kwargs: Any) -> sst.DataLoader:
    kwargs.setdefault("batch_size", BATCH)
    return sst.DataLoader(dataset, backend="thread", num_workers=1, **kwargs)


def samples(batches: Any) -> list[int]:
    return [int(v) for batch in batches for v in batch["x"]]


def no_bypass() -> Any:
    """A context in which the bypass warning fails the test."""
    caught = warnings.catch_warnings()
    caught.__enter__()
    warnings.simplefilter("error", sst.AccelerateBypassWarning)
    return caught


def fake_accelerator(rank: int, world: int, device: str = "cpu", placement: bool = True) -> Any:
    """What ``prepare`` reads from an ``Accelerator`` of process ``rank`` among ``world``."""
    return types.SimpleNamespace(
        num_processes=world,
        process_index=rank,
        device=torch.device(device),
        device_placement=placement,
        prepare_data_loader=lambda dl: dl,
    )


# -- accelerate ---------------------------------------------------------------------------------
def test_accelerator_prepare_replaces_the_loader_and_warns():
    data = Recorded()
    ours = sst.DataLoader(data, batch_size=BATCH)
    with pytest.warns(sst.AccelerateBypassWarning, match="slipstream.torch.prepare"):
        prepared = accelerate.Accelerator(cpu=True).prepare(ours)
    assert not isinstance(prepared, sst.DataLoader)  # accelerate's DataLoaderShard, over torch's loader
    assert samples(prepared) == list(range(N))
    assert data.threads == {"MainThread"}  # read by torch's loader, not by slipstream


def test_prepare_keeps_the_slipstream_loader():
    data = Recorded()
    accelerator = accelerate.Accelerator(cpu=True)
    ours = loader(data)
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    caught = no_bypass()
    try:
        assert sst.prepare(accelerator, ours) is ours
        # once taken, accelerate's own prepare hands it back too (any order, with the model)
        model, optimizer, again = accelerator.prepare(model, optimizer, ours)
    finally:
        caught.__exit__(None, None, None)
    assert again is ours
    for batch in ours:
        assert batch["x"].device == accelerator.device
        model(batch["x"].float().unsqueeze(-1)).sum().backward()
        optimizer.step()
    assert samples(ours) == list(range(N))
    assert data.read_by_slipstream()


def test_prepare_refuses_other_loaders():
    with pytest.raises(TypeError, match="slipstream.torch.DataLoader"):
        sst.prepare(accelerate.Accelerator(cpu=True), torch.utils.data.DataLoader(range(4)))


def test_two_processes_share_the_epoch():
    """Two ranks, as accelerate numbers them: each loader reads its half, together the whole epoch."""
    data = Recorded()
    halves = []
    for rank in range(2):
        sampler = DistributedSampler(data, num_replicas=2, rank=rank, shuffle=True, seed=3)
        ours = sst.prepare(fake_accelerator(rank, 2), loader(data, sampler=sampler))
        sampler.set_epoch(1)
        halves.append(samples(ours))
    assert len(halves[0]) == len(halves[1]) == N // 2
    assert sorted(halves[0] + halves[1]) == list(range(N))
    assert halves[0] + halves[1] != list(range(N))  # shuffled
    assert data.read_by_slipstream()


@pytest.mark.parametrize(
    "make",
    [
        lambda d: loader(d),  # the whole dataset
        lambda d: loader(d, shuffle=True),
        lambda d: loader(d, batch_sampler=torch.utils.data.BatchSampler(torch.utils.data.SequentialSampler(d), BATCH, False), batch_size=1),
        lambda d: loader(d, sampler=DistributedSampler(d, num_replicas=2, rank=0)),  # another rank's
        lambda d: loader(d, sampler=DistributedSampler(d, num_replicas=4, rank=1)),  # another world
    ],
    ids=["sequential", "shuffled", "batch_sampler", "rank", "world"],
)
def test_prepare_refuses_a_loader_not_sharded_for_this_process(make):
    with pytest.raises(ValueError, match="process 1 of 2"):
        sst.prepare(fake_accelerator(1, 2), make(Recorded()))


def test_prepare_trusts_a_batch_sampler_of_its_own():
    class Halves(torch.utils.data.Sampler):  # rank-aware, as a user's sampler may be
        def __iter__(self):
            return iter([[1, 3], [5, 7]])

        def __len__(self):
            return 2

    ours = loader(Recorded(), batch_sampler=Halves(), batch_size=1)
    assert sst.prepare(fake_accelerator(1, 2), ours) is ours


def test_prepare_wants_batches_on_the_accelerators_device():
    ours = loader(Recorded())
    with pytest.raises(ValueError, match="device=accelerator.device"):
        sst.prepare(fake_accelerator(0, 1, device="meta"), ours)
    assert sst.prepare(fake_accelerator(0, 1, device="meta", placement=False), ours) is ours
    assert sst.prepare(fake_accelerator(0, 1, device="cpu"), ours) is ours


@NEEDS_STATE
def test_accelerator_save_state_and_load_state_resume_the_loader(tmp_path):
    accelerator = accelerate.Accelerator(cpu=True)
    first = sst.prepare(accelerator, loader(Recorded(), shuffle=True, seed=7))
    whole = samples(first)  # epoch 0
    seen = []
    for i, batch in enumerate(first):  # epoch 1, left after 3 batches
        seen += samples([batch])
        if i == 2:
            break
    accelerator.save_state(str(tmp_path))

    accelerator = accelerate.Accelerator(cpu=True)
    data = Recorded()
    second = sst.prepare(accelerator, loader(data, shuffle=True, seed=7))
    accelerator.load_state(str(tmp_path))
    rest = samples(second)
    assert sorted(seen + rest) == list(range(N))
    assert seen + rest != whole  # epoch 1's own permutation, continued
    assert data.read_by_slipstream()
