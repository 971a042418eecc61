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

from torch.utils.data import DistributedSampler  # noqa: E402

import slipstream.torch as sst  # noqa: E402

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


# -- Lightning ------------------------------------------------------------------------------------
def lightning_module(pl: Any, make_loader: Any) -> Any:
    """A one-weight model whose ``train_dataloader`` is ``make_loader()``; it records the samples it trains on."""

    class Tiny(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.weight = torch.nn.Linear(1, 1)
            self.seen: list[int] = []

        def train_dataloader(self) -> Any:
            return make_loader()

        def training_step(self, batch: dict[str, Any], index: int) -> Any:
            self.seen += [int(v) for v in batch["x"]]
            return self.weight(batch["x"].float().unsqueeze(-1)).pow(2).mean()

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    return Tiny()


def lightning_trainer(pl: Any, **kwargs: Any) -> Any:
    kwargs.setdefault("enable_checkpointing", False)
    return pl.Trainer(
        accelerator="cpu", devices=1, logger=False, enable_progress_bar=False, enable_model_summary=False, **kwargs
    )


def test_lightning_trains_on_the_slipstream_loader():
    pl = pytest.importorskip("pytorch_lightning")
    data = Recorded()
    model = lightning_module(pl, lambda: loader(data, shuffle=True, seed=5))
    trainer = lightning_trainer(pl, max_epochs=2)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*(num_workers|bottleneck).*")
        trainer.fit(model)
    assert isinstance(trainer.train_dataloader, sst.DataLoader)
    first, second = model.seen[:N], model.seen[N:]
    assert sorted(first) == sorted(second) == list(range(N)) and first != second  # two epochs, two permutations
    assert data.read_by_slipstream()


def test_lightning_distributed_sampler_keeps_the_slipstream_loader():
    """With use_distributed_sampler (several processes), Lightning rebuilds the loader from the
    arguments it captured while ``train_dataloader()`` ran, with a DistributedSampler of the rank's:
    done here for two ranks with Lightning's own functions (private ones: if they move, this test
    says so)."""
    pytest.importorskip("pytorch_lightning")
    from lightning_fabric.utilities.data import _replace_dunder_methods
    from pytorch_lightning.trainer.states import RunningStage
    from pytorch_lightning.utilities.data import _update_dataloader

    data = Recorded()
    with _replace_dunder_methods(torch.utils.data.DataLoader, "dataset"):  # as Lightning calls train_dataloader()
        ours = loader(data, shuffle=True, seed=5, batch_size=4)
    halves = []
    for rank in range(2):
        sampler = DistributedSampler(data, num_replicas=2, rank=rank, shuffle=True, seed=0)
        rebuilt = _update_dataloader(ours, sampler, mode=RunningStage.TRAINING)
        assert isinstance(rebuilt, sst.DataLoader)
        assert (rebuilt.backend, rebuilt.seed, rebuilt.num_workers, rebuilt.batch_size) == ("thread", 5, 1, 4)
        assert rebuilt.sampler is sampler
        sampler.set_epoch(2)  # Lightning sets the epoch on a DistributedSampler each epoch
        halves.append(samples(rebuilt))
    assert sorted(halves[0] + halves[1]) == list(range(N)) and len(halves[0]) == N // 2
    assert data.read_by_slipstream()


@NEEDS_STATE
def test_lightning_resumes_mid_epoch_from_a_checkpoint(tmp_path):
    """A checkpoint saved after 3 of the epoch's 10 steps; the run resumed from it trains on exactly
    the epoch's other samples (Lightning saves and restores the loader's state_dict)."""
    pl = pytest.importorskip("pytorch_lightning")
    from pytorch_lightning.callbacks import ModelCheckpoint

    def make() -> sst.DataLoader:
        return loader(Recorded(), shuffle=True, seed=11)

    whole = samples(make())  # epoch 0 of seed 11: slipstream's permutation, the same in every run
    first = lightning_module(pl, make)
    saving = ModelCheckpoint(dirpath=tmp_path, every_n_train_steps=3, save_top_k=-1)
    lightning_trainer(pl, max_steps=3, enable_checkpointing=True, callbacks=[saving]).fit(first)
    (checkpoint,) = tmp_path.glob("*step=3*.ckpt")
    second = lightning_module(pl, make)
    lightning_trainer(pl, max_epochs=1).fit(second, ckpt_path=str(checkpoint))
    assert first.seen == whole[: 3 * BATCH]
    assert second.seen == whole[3 * BATCH :]


# -- transformers' Trainer ------------------------------------------------------------------------
class TinyModel(torch.nn.Module):
    """What the Trainer needs: a forward taking the batch's keys and returning the loss."""

    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Linear(1, 1)
        self.seen: list[int] = []

    def forward(self, x: Any) -> dict[str, Any]:
        self.seen += [int(v) for v in x]
        return {"loss": self.weight(x.float().unsqueeze(-1)).pow(2).mean()}


def train_with(tmp_path: Any, dataloader: Any, steps: int) -> tuple[Any, TinyModel]:
    """A transformers Trainer whose ``get_train_dataloader`` is ``dataloader(trainer)``, trained ``steps`` steps."""
    transformers = pytest.importorskip("transformers")

    class Overridden(transformers.Trainer):
        def get_train_dataloader(self) -> Any:
            return dataloader(self)

    arguments = transformers.TrainingArguments(
        output_dir=str(tmp_path),
        use_cpu=True,
        max_steps=steps,
        per_device_train_batch_size=BATCH,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
    )
    model = TinyModel()
    trainer = Overridden(model=model, args=arguments, train_dataset=Recorded())
    trainer.train()
    return trainer, model


def test_trainer_trains_on_the_slipstream_loader(tmp_path):
    data = Recorded()

    def slipstream_loader(trainer: Any) -> Any:
        ours = loader(data, shuffle=True, seed=trainer.args.seed, device=trainer.accelerator.device)
        return sst.prepare(trainer.accelerator, ours)

    caught = no_bypass()
    try:
        trainer, model = train_with(tmp_path, slipstream_loader, steps=4)
    finally:
        caught.__exit__(None, None, None)
    assert isinstance(trainer.callback_handler.train_dataloader, sst.DataLoader)
    assert len(model.seen) == 4 * BATCH and len(set(model.seen)) == 4 * BATCH
    assert data.read_by_slipstream()


def test_trainer_preparing_the_loader_itself_warns(tmp_path):
    data = Recorded()

    def prepared_by_accelerate(trainer: Any) -> Any:
        return trainer.accelerator.prepare(sst.DataLoader(data, batch_size=BATCH))

    with pytest.warns(sst.AccelerateBypassWarning):
        trainer, model = train_with(tmp_path, prepared_by_accelerate, steps=2)
    assert not isinstance(trainer.callback_handler.train_dataloader, sst.DataLoader)
    assert model.seen == list(range(2 * BATCH))
    assert data.threads == {"MainThread"}


# -- the bypass warning, device indices, whole-dataset samplers ----------------------------------------


def test_the_bypass_warning_is_for_accelerate_only():
    """Plain introspection reads ``_is_accelerate_prepared`` too (hasattr, inspect.getmembers,
    mock.create_autospec): it warned with no accelerate involved. Only accelerate's read warns."""
    import inspect
    import unittest.mock

    ours = sst.DataLoader(Recorded(), batch_size=BATCH)
    caught = no_bypass()
    try:
        assert hasattr(ours, "_is_accelerate_prepared")
        inspect.getmembers(ours)
        unittest.mock.create_autospec(ours)
        assert ours._is_accelerate_prepared is False
    finally:
        caught.__exit__(None, None, None)
    with pytest.warns(sst.AccelerateBypassWarning):
        accelerate.Accelerator(cpu=True).prepare_data_loader(ours)


def test_prepare_takes_cuda_for_the_accelerators_cuda_0(monkeypatch):
    """A loader built with ``device="cuda"`` was refused by an accelerator on ``cuda:0`` (the same
    GPU): device indices are compared, "cuda" being the current CUDA device."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    ours = sst.DataLoader(Recorded(), batch_size=BATCH, device="cuda")
    assert sst.prepare(fake_accelerator(0, 1, device="cuda:0"), ours) is ours
    with pytest.raises(ValueError, match="device=accelerator.device"):
        sst.prepare(fake_accelerator(0, 1, device="cuda:1"), ours)
    ours = sst.DataLoader(Recorded(), batch_size=BATCH, device="cuda:0")
    assert sst.prepare(fake_accelerator(0, 1, device="cuda"), ours) is ours


@pytest.mark.parametrize(
    "make",
    [
        lambda d: loader(d, sampler=torch.utils.data.SubsetRandomSampler(range(N))),
        lambda d: loader(d, sampler=torch.utils.data.WeightedRandomSampler([1.0] * N, N)),
        lambda d: loader(d, sampler=list(range(N))),
        lambda d: loader(
            d, batch_sampler=type("MyBatches", (torch.utils.data.BatchSampler,), {})(torch.utils.data.RandomSampler(d), BATCH, False),
            batch_size=1,
        ),
    ],
    ids=["subset-of-everything", "weighted", "list-of-every-index", "batch_sampler-subclass"],
)
def test_prepare_refuses_torchs_samplers_that_read_the_same_indices_in_every_process(make):
    with pytest.raises(ValueError, match="process 1 of 2"):
        sst.prepare(fake_accelerator(1, 2), make(Recorded()))


def test_prepare_takes_a_subset_of_the_indices():
    """A ``SubsetRandomSampler`` (or list) over part of the dataset is this process's share, as the user made it."""
    mine = list(range(1, N, 2))
    for sampler in (torch.utils.data.SubsetRandomSampler(mine), mine):
        ours = loader(Recorded(), sampler=sampler)
        assert sst.prepare(fake_accelerator(1, 2), ours) is ours
