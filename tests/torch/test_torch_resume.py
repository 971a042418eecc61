"""``slipstream.torch.DataLoader.state_dict()``/``load_state_dict``: a checkpoint taken at any step
resumes exactly: a fresh loader built with the same arguments yields the rest of the interrupted
epoch, then the following epochs, for every way the drop-in loads and shuffles.

``assert_resumes_exactly`` (tests/support/helpers.py) saves the state before every step of the run (through
JSON), restores each into a fresh loader and compares the rest; the comparisons with
``torch.utils.data.DataLoader`` check that the resumed rest is torch's own rest for the same seeds.
"""

from __future__ import annotations

import importlib.util
import inspect
import io
import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from helpers import assert_resumes_exactly, assert_same, run_python, snapshot
from torch.utils.data import BatchSampler, DistributedSampler, IterableDataset, RandomSampler, SequentialSampler, get_worker_info
from torch.utils.data import DataLoader as TorchLoader

from slipstream.torch import DataLoader

N = 10
WORKERS = [
    pytest.param({}, id="workers0"),
    pytest.param({"num_workers": 2, "backend": "thread"}, id="threads2"),
    pytest.param({"num_workers": 2}, id="processes2"),
]


class Rows:
    """A map-style dataset: row ``i`` is ``([i, i*i] as float32, i)``."""

    def __len__(self) -> int:
        return N

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        return np.array([i, i * i], dtype=np.float32), i


class WorkerSeed(Rows):
    """Row ``i`` and the base seed of the worker process that read it (torch seeds a worker's
    global generator with ``base_seed + worker_id``)."""

    def __getitem__(self, i: int) -> tuple[int, int]:  # type: ignore[override]
        info = get_worker_info()
        return i, torch.initial_seed() - (info.id if info is not None else 0)


class Stream(IterableDataset):
    """An iterable dataset: ``0..n-1``, each worker process its share (every k-th item)."""

    def __init__(self, n: int = 11):
        self.n = n

    def __iter__(self):
        info = get_worker_info()
        start, step = (0, 1) if info is None else (info.id, info.num_workers)
        return iter(range(start, self.n, step))


def seeded(seed: int = 5) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def roundtrip(state: dict) -> dict:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    buffer.seek(0)
    return torch.load(buffer)  # weights_only=True (torch's default): plain types only


# -- every step, restored into a fresh loader ---------------------------------------------------


@pytest.mark.parametrize("workers", WORKERS)
def test_seeds_permutation_resumes_exactly(workers):
    assert assert_resumes_exactly(lambda: DataLoader(Rows(), batch_size=3, shuffle=True, seed=3, **workers)) == 10


@pytest.mark.parametrize("workers", WORKERS)
def test_torchs_shuffle_with_a_seeded_generator_resumes_exactly(workers):
    assert assert_resumes_exactly(lambda: DataLoader(Rows(), batch_size=3, shuffle=True, generator=seeded(), **workers)) == 10


@pytest.mark.parametrize("workers", WORKERS[:2])
def test_torchs_shuffle_from_the_global_generator_resumes_the_epoch_exactly(workers):
    def make():
        torch.manual_seed(11)
        return DataLoader(Rows(), batch_size=4, shuffle=True, **workers)

    # one epoch: the epochs after a checkpoint taken at an epoch's end draw from the global
    # generator as it is then, as torch's do (see the next test for what carries over)
    assert assert_resumes_exactly(make, epochs=1) == 4


def test_a_resumed_epoch_leaves_the_global_generator_as_the_uninterrupted_run_did():
    torch.manual_seed(11)
    loader = DataLoader(Rows(), batch_size=4, shuffle=True)
    it = iter(loader)
    first = snapshot(next(it))
    state = json.loads(json.dumps(loader.state_dict()))
    rest = [snapshot(b) for b in it] + [snapshot(b) for b in loader]
    after = torch.get_rng_state()

    torch.manual_seed(11)  # the global generator where the interrupted run had it at iter()
    fresh = DataLoader(Rows(), batch_size=4, shuffle=True)
    fresh.load_state_dict(state)
    again = [snapshot(b) for b in fresh] + [snapshot(b) for b in fresh]
    assert_same(again, rest)  # the next epoch too: the replayed draws advanced it as before
    assert torch.equal(torch.get_rng_state(), after)
    assert not torch.equal(first[1], rest[0][1])


def test_a_resume_puts_the_global_generator_back_when_it_is_elsewhere():
    torch.manual_seed(11)
    loader = DataLoader(Rows(), batch_size=4, shuffle=True)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    want = [snapshot(b) for b in it]

    torch.manual_seed(99)
    mine = torch.get_rng_state()
    fresh = DataLoader(Rows(), batch_size=4, shuffle=True)
    fresh.load_state_dict(state)
    assert_same([snapshot(b) for b in fresh], want)
    assert torch.equal(torch.get_rng_state(), mine)  # the user's RNG is not disturbed


@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: DataLoader(Rows(), sampler=RandomSampler(Rows(), generator=seeded(2)), batch_size=3), id="sampler"),
        pytest.param(
            lambda: DataLoader(Rows(), batch_sampler=BatchSampler(RandomSampler(Rows(), generator=seeded(2)), 3, True)),
            id="batch_sampler",
        ),
        pytest.param(
            lambda: DataLoader(
                Rows(), batch_sampler=BatchSampler(SequentialSampler(Rows()), 4, False), num_workers=2, backend="thread"
            ),
            id="batch_sampler-threads",
        ),
        pytest.param(
            lambda: DataLoader(Rows(), batch_size=None, shuffle=True, generator=seeded(), collate_fn=lambda row: row[1] * 10),
            id="batch_size_none-collate_fn",
        ),
        pytest.param(
            lambda: DataLoader(
                Rows(), batch_size=3, shuffle=True, seed=4, drop_last=True, in_order=False, num_workers=2, backend="thread"
            ),
            id="out-of-order",
        ),
    ],
)
def test_samplers_batch_samplers_and_collate_fns_resume_exactly(make):
    assert assert_resumes_exactly(make) > 6


@pytest.mark.parametrize("persistent", [False, True], ids=["fresh-workers", "persistent-workers"])
def test_process_workers_are_seeded_again_with_the_interrupted_epochs_base_seed(persistent):
    def make():
        return DataLoader(
            WorkerSeed(), batch_size=5, shuffle=True, generator=seeded(), num_workers=2, persistent_workers=persistent
        )

    assert assert_resumes_exactly(make) == 6


@pytest.mark.parametrize("workers", [WORKERS[0], WORKERS[2]])
def test_an_iterable_dataset_resumes_by_reading_its_stream_again(workers):
    assert assert_resumes_exactly(lambda: DataLoader(Stream(), batch_size=2, **workers)) > 12


def test_a_prefetcher_a_batch_ahead_does_not_count_the_batch_it_holds(monkeypatch):
    """``device="cuda"`` takes batch k+1 from the epoch before handing out batch k: the state counts
    only what the user has (checked on a CPU: the CUDA copy replaced by a one-ahead pass-through)."""
    from slipstream.torch import _dataloader

    def one_ahead(source, device):
        end = object()
        try:
            held = next(source, end)
            while held is not end:
                following = next(source, end)
                yield held
                held = following
        finally:
            source.close()

    monkeypatch.setattr(_dataloader, "_to_cuda", one_ahead)

    def make():
        loader = DataLoader(Rows(), batch_size=3, shuffle=True, generator=seeded())
        loader.device = torch.device("cuda")
        return loader

    assert assert_resumes_exactly(make) == 10


# -- torch's own loader ------------------------------------------------------------------------


def torchs(epochs: int, **kwargs) -> list:
    loader = TorchLoader(Rows(), **kwargs)
    return [snapshot(b) for _ in range(epochs) for b in loader]


def resumed_after(k: int, epochs: int, workers: dict, **kwargs) -> list:
    """The batches after the first ``k`` of ``epochs`` epochs, by a loader resumed from the state saved there."""
    loader = DataLoader(Rows(), **kwargs, **workers)
    taken = 0
    for _ in range(epochs):
        for _ in loader:
            taken += 1
            if taken == k:
                state = roundtrip(loader.state_dict())
                fresh = DataLoader(Rows(), **kwargs, **workers)
                fresh.load_state_dict(state)
                return [snapshot(b) for _ in range(epochs - state["epoch"]) for b in fresh]
    raise AssertionError(f"fewer than {k} batches")


@pytest.mark.parametrize("workers", WORKERS)
def test_the_resumed_rest_is_torchs_for_the_same_generator(workers):
    want = torchs(2, batch_size=3, shuffle=True, generator=seeded(8))
    for k in (1, 4, 6):
        assert_same(resumed_after(k, 2, workers, batch_size=3, shuffle=True, generator=seeded(8)), want[k:])


def test_the_resumed_rest_is_torchs_for_the_same_global_seed():
    torch.manual_seed(3)
    want = torchs(2, batch_size=3, shuffle=True)
    for k in (1, 3, 5):
        torch.manual_seed(3)
        assert_same(resumed_after(k, 2, {}, batch_size=3, shuffle=True), want[k:])


# -- when the state is taken, and what it is -----------------------------------------------------


def test_state_before_any_epoch_after_an_epoch_and_after_leaving_the_loop():
    def make():
        return DataLoader(Rows(), batch_size=3, shuffle=True, generator=seeded())

    loader = make()
    assert (loader.state_dict()["epoch"], loader.state_dict()["batch"]) == (0, 0)
    first = [snapshot(b) for b in loader]
    after_epoch = loader.state_dict()
    assert (after_epoch["epoch"], after_epoch["batch"], after_epoch["draws"]) == (1, 0, None)
    for k, _ in enumerate(loader):
        if k == 1:
            break
    after_break = loader.state_dict()
    assert (after_break["epoch"], after_break["batch"]) == (1, 2)
    want = [snapshot(b) for b in loader]  # epoch 2

    fresh = make()
    fresh.load_state_dict(after_epoch)
    second = [snapshot(b) for b in fresh]
    fresh = make()
    fresh.load_state_dict(after_break)
    assert_same([snapshot(b) for b in fresh], second[2:])
    assert_same([snapshot(b) for b in fresh], want)
    assert not all(torch.equal(a[1], b[1]) for a, b in zip(first, second))  # a new permutation each epoch


@pytest.mark.parametrize("shuffling", [{}, {"seed": 6}], ids=["torchs-sampler", "seeds-permutation"])
def test_leaving_an_epoch_then_saving_before_the_next_epochs_first_batch(shuffling):
    def make():
        return DataLoader(Rows(), batch_size=3, shuffle=True, generator=seeded(), **shuffling)

    loader = make()
    for _ in loader:
        break  # epoch 0 left after one batch
    it = iter(loader)  # epoch 1, nothing drawn yet (torch draws at the first next())
    state = loader.state_dict()
    assert (state["epoch"], state["batch"]) == (1, 0)
    want = [snapshot(b) for b in it] + [snapshot(b) for b in loader]

    fresh = make()
    fresh.load_state_dict(json.loads(json.dumps(state)))
    assert_same([snapshot(b) for b in fresh] + [snapshot(b) for b in fresh], want)


def test_state_after_load_and_before_iter_is_the_loaded_one():
    loader = DataLoader(Rows(), batch_size=3, shuffle=True, generator=seeded())
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    fresh = DataLoader(Rows(), batch_size=3, shuffle=True, generator=seeded())
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state


def test_a_batch_that_raised_counts_as_handed_out():
    class Faulty(Rows):
        def __getitem__(self, i):
            if i == 4:
                raise KeyError(i)
            return super().__getitem__(i)

    loader = DataLoader(Faulty(), batch_size=2)
    it = iter(loader)
    next(it), next(it)
    with pytest.raises(KeyError):
        next(it)
    state = loader.state_dict()
    assert state["batch"] == 3
    fresh = DataLoader(Faulty(), batch_size=2)
    fresh.load_state_dict(state)
    assert [b[1].tolist() for b in fresh] == [[6, 7], [8, 9]]


def test_the_state_survives_torch_save_and_load_and_json():
    loader = DataLoader(Rows(), batch_size=3, shuffle=True, generator=seeded(), num_workers=2, backend="thread")
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    assert roundtrip(state) == state
    assert json.loads(json.dumps(state)) == state
    assert len(json.dumps(state)) < 40_000


# -- mismatches ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "other",
    [
        pytest.param({"batch_size": 4}, id="batch_size"),
        pytest.param({"drop_last": True}, id="drop_last"),
        pytest.param({"shuffle": False}, id="no-shuffle"),
        pytest.param({"generator": None}, id="no-generator"),
        pytest.param({"seed": 1}, id="seed"),
        pytest.param({"dataset": list(range(12))}, id="dataset-size"),
    ],
)
def test_loading_into_a_loader_built_differently_raises(other):
    kwargs = {"dataset": Rows(), "batch_size": 3, "shuffle": True, "generator": seeded()}
    loader = DataLoader(**kwargs)
    next(iter(loader))
    state = loader.state_dict()
    with pytest.raises(ValueError, match="state was saved by a DataLoader with"):
        DataLoader(**{**kwargs, **other}).load_state_dict(state)


def test_loading_something_else_raises():
    loader = DataLoader(Rows(), batch_size=3)
    with pytest.raises(TypeError):
        loader.load_state_dict([1, 2])
    with pytest.raises(ValueError, match="not a slipstream.torch.DataLoader state"):
        loader.load_state_dict({"epoch": 0, "batch": 0})


def test_the_methods_have_the_signatures_lightning_and_torchdata_call():
    assert list(inspect.signature(DataLoader.state_dict).parameters) == ["self"]
    assert list(inspect.signature(DataLoader.load_state_dict).parameters) == ["self", "state_dict"]


@pytest.mark.skipif(importlib.util.find_spec("pytorch_lightning") is None, reason="needs pytorch_lightning")
def test_lightnings_combined_loader_saves_and_restores_it():
    # in a child: importing Lightning takes seconds and its modules should not be in the forking test process
    result = run_python(
        """
        import io, torch
        from lightning_fabric.utilities.types import _Stateful
        from pytorch_lightning.utilities.combined_loader import CombinedLoader
        from slipstream.torch import DataLoader

        def make():
            return DataLoader(list(range(10)), batch_size=3, shuffle=True, generator=torch.Generator().manual_seed(1))

        loader = make()
        assert isinstance(loader, _Stateful)
        it = iter(loader)
        next(it)
        buffer = io.BytesIO()
        torch.save({"combined_loader": CombinedLoader(loader)._state_dicts()}, buffer)
        rest = [b.tolist() for b in it]
        buffer.seek(0)
        fresh = make()
        CombinedLoader(fresh)._load_state_dicts(torch.load(buffer)["combined_loader"])
        assert [b.tolist() for b in fresh] == rest, rest
        print("resumed")
        """,
        timeout=120,
    )
    assert result.returncode == 0 and "resumed" in result.stdout, result.stderr[-3000:]


# -- leaving an epoch in other ways --------------------------------------------------------------


@pytest.mark.parametrize("seed", [4, None], ids=["seeds-permutation", "torchs-sampler"])
def test_next_on_a_closed_iterator_is_not_the_epochs_end(seed):
    """``it.close()`` mid-epoch, then ``next(it)`` (a for loop whose body closes it): the
    StopIteration marked the epoch as ended although the user left it after two batches, and the
    resumed loader yielded the rest of slipstream's epoch as if it were the next one. Closing is
    leaving the loop early (as ``break``): the state resumes the rest of the epoch left."""

    def make():
        return DataLoader(Rows(), batch_size=3, shuffle=True, seed=seed, generator=seeded(3))

    uninterrupted = [[snapshot(b) for b in loader] for loader in [make()] for _ in range(2)]
    loader = make()
    it = iter(loader)
    next(it), next(it)
    it.close()
    closed = json.loads(json.dumps(loader.state_dict()))
    with pytest.raises(StopIteration):
        next(it)
    state = json.loads(json.dumps(loader.state_dict()))
    assert state == closed and (state["epoch"], state["batch"]) == (0, 2)
    fresh = make()
    fresh.load_state_dict(state)
    assert_same([snapshot(b) for b in fresh] + [snapshot(b) for b in fresh], uninterrupted[0][2:] + uninterrupted[1])
    assert_same([snapshot(b) for b in loader], uninterrupted[1])  # the original goes on with epoch 1


@pytest.mark.parametrize("batch", [1, 2])
def test_a_resumed_epoch_left_before_its_first_batch_is_not_the_next_epoch(batch):
    """A resumed mid-epoch state, ``iter()`` left before its first batch (torch's sampler,
    ``num_workers=0``: nothing drawn yet), then the next epoch: it was only the rest of the
    interrupted epoch (slipstream's loader was still loaded inside it). The next epoch is a full one."""

    def make():
        return DataLoader(Rows(), batch_size=3, shuffle=True, generator=seeded(3))

    loader = make()
    it = iter(loader)
    for _ in range(batch):
        next(it)
    state = json.loads(json.dumps(loader.state_dict()))
    fresh = make()
    fresh.load_state_dict(state)
    iter(fresh)  # left before its first batch
    following = [snapshot(b) for b in fresh]
    assert sorted(int(i) for b in following for i in b[1]) == list(range(N))
    saved = json.loads(json.dumps(fresh.state_dict()))  # and a checkpoint there resumes the epoch after it
    again = make()
    again.load_state_dict(saved)
    assert saved["epoch"] == state["epoch"] + 2 or saved["draws"] is None
    assert sorted(int(i) for b in again for i in b[1]) == list(range(N))


class _FaultyStream(IterableDataset):
    """``0..5``; reading item 3 raises once per pass, and the iterator goes on after it."""

    def __iter__(self):
        items = iter(range(6))

        class Items:
            def __iter__(self):
                return self

            def __next__(self):
                item = next(items)
                if item == 3:
                    raise KeyError("item 3")
                return item

        return Items()


def test_a_failed_iterable_batch_counts_as_handed_out():
    """``num_workers=0``, an ``IterableDataset`` whose iterator raises for one batch and goes on
    (torch's iterator goes on past it): the failed batch was not counted, unlike map-style, so the
    resumed loader raised it again. It counts, and the resumed stream skips it."""

    def drain(it, n=None):
        out = []
        while n is None or len(out) < n:
            try:
                out.append(snapshot(next(it)).tolist())
            except StopIteration:
                return out
            except KeyError:
                out.append("ERR")
        return out

    assert drain(iter(TorchLoader(_FaultyStream(), batch_size=1))) == [[0], [1], [2], "ERR", [4], [5]]
    loader = DataLoader(_FaultyStream(), batch_size=1)
    it = iter(loader)
    assert drain(it, 4) == [[0], [1], [2], "ERR"]
    state = json.loads(json.dumps(loader.state_dict()))
    assert state["batch"] == 4
    fresh = DataLoader(_FaultyStream(), batch_size=1)
    fresh.load_state_dict(state)
    assert drain(iter(fresh)) == drain(it) == [[4], [5]]


def test_an_iterable_dataset_read_out_of_order_resumes_each_workers_stream():
    """``in_order=False`` with worker processes: batches come in whichever order the workers
    finish, so "the first k batches" of the resumed epoch are not the ones handed out before
    (samples were repeated and lost). The state counts each worker's batches handed out, and each
    worker skips its own. Worker 1 is held back in the first run, worker 0 in the resumed one
    (until worker 1 has yielded everything): the timings differ as they may after a restart."""
    out = run_python(
        """
        import json, multiprocessing as mp
        from torch.utils.data import IterableDataset, get_worker_info
        from slipstream.torch import DataLoader

        ctx = mp.get_context("fork")

        class Gated(IterableDataset):
            def __init__(self, held, gate):
                self.held, self.gate = held, gate
            def __iter__(self):
                w = get_worker_info().id
                if w == self.held:
                    self.gate.wait(60)
                for i in range(4):
                    yield 10 * w + i
                if w != self.held:
                    self.gate.set()  # the other worker may go on

        def make(held, gate):
            return DataLoader(Gated(held, gate), batch_size=1, num_workers=2, in_order=False, multiprocessing_context="fork")

        gate = ctx.Event()
        loader = make(1, ctx.Event())  # worker 1 held until the state is saved
        it = iter(loader)
        first = [int(next(it)) for _ in range(3)]
        state = json.loads(json.dumps(loader.state_dict()))
        loader.dataset.gate.set()
        it.close()
        fresh = make(0, gate)  # after the restart, worker 0 is the slow one
        fresh.load_state_dict(state)
        rest = [int(b) for b in fresh]
        print(json.dumps({"first": first, "rest": rest}))
        """,
        timeout=60,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["first"] == [0, 1, 2]
    assert got["rest"] == [10, 11, 12, 13, 3]


# -- a sampler that keeps an epoch ---------------------------------------------------------------


def _distributed(batched: bool = False, **workers):
    """A loader over 40 rows through a DistributedSampler (rank 0 of 2), as ``sampler=`` or inside
    a ``BatchSampler`` given as ``batch_sampler=``; the sampler too."""
    sampler = DistributedSampler(range(40), num_replicas=2, rank=0, shuffle=True, seed=0)
    if batched:
        return sampler, DataLoader(list(range(40)), batch_sampler=BatchSampler(sampler, 2, False), **workers)
    return sampler, DataLoader(list(range(40)), batch_size=2, sampler=sampler, **workers)


def _interrupted(batched: bool = False, **workers):
    """Epochs 0 and 1, then 4 batches of epoch 2 (set_epoch called before each, as torch asks):
    the batches handed out, the state (through JSON) and the uninterrupted rest."""
    sampler, loader = _distributed(batched, **workers)
    for epoch in range(2):
        sampler.set_epoch(epoch)
        list(loader)
    sampler.set_epoch(2)
    it = iter(loader)
    seen = [i for _ in range(4) for i in next(it).tolist()]
    state = json.loads(json.dumps(loader.state_dict()))
    return seen, state, [i for batch in it for i in batch.tolist()]


@pytest.mark.parametrize("batched", [False, True], ids=["sampler", "batch_sampler"])
@pytest.mark.parametrize("workers", WORKERS)
def test_a_distributed_sampler_resumes_its_epoch_without_set_epoch(batched, workers):
    """Before: the resumed rest came from epoch 0's permutation (2 samples twice, 7 lost)."""
    seen, state, rest = _interrupted(batched, **workers)
    assert state["draws"]["sampler_epochs"] == {"batch_sampler.sampler" if batched else "sampler": 2}
    sampler, fresh = _distributed(batched, **workers)
    fresh.load_state_dict(state)
    assert sampler.epoch == 2  # load_state_dict set it
    got = [i for batch in fresh for i in batch.tolist()]
    reference = DistributedSampler(range(40), num_replicas=2, rank=0, shuffle=True, seed=0)
    reference.set_epoch(2)
    assert got == rest and seen + got == list(reference)  # nothing twice, nothing lost


def test_a_distributed_sampler_moved_to_another_epoch_after_loading_is_refused():
    _, state, rest = _interrupted()
    sampler, fresh = _distributed()
    fresh.load_state_dict(state)
    sampler.set_epoch(0)  # the user's loop numbered its epochs from 0 again
    with pytest.raises(ValueError, match=r"drawn from loader.sampler \(DistributedSampler\) at set_epoch\(2\), but it is now at epoch 0"):
        iter(fresh)
    sampler.set_epoch(2)  # the refusal changed nothing: the right epoch resumes
    assert [i for batch in fresh for i in batch.tolist()] == rest
    sampler.set_epoch(0)  # set_epoch between iter() and the draw (num_workers=0 draws at the first next())
    fresh.load_state_dict(state)
    it = iter(fresh)
    sampler.set_epoch(1)
    with pytest.raises(ValueError, match="at set_epoch\\(2\\), but it is now at epoch 1"):
        next(it)


def test_a_state_without_sampler_epochs_still_loads():
    """A state saved before the sampler's epoch was recorded resumes as it did (unchecked)."""
    _, state, rest = _interrupted()
    del state["draws"]["sampler_epochs"]
    sampler, fresh = _distributed()
    fresh.load_state_dict(state)
    sampler.set_epoch(2)
    assert [i for batch in fresh for i in batch.tolist()] == rest
    with pytest.raises(ValueError, match="sampler_epochs"):
        _distributed()[1].load_state_dict({**state, "draws": {**state["draws"], "sampler_epochs": {"sampler": -1}}})


EPOCH_N = 40


class EpochSampler(torch.utils.data.Sampler):
    """A sampler whose permutation is a function of the epoch it is told (``set_epoch``), as
    ``DistributedSampler``'s is, but which keeps that epoch under another name than ``epoch``."""

    def __init__(self) -> None:
        self._epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self._epoch = epoch

    def __len__(self) -> int:
        return EPOCH_N

    def __iter__(self):
        generator = torch.Generator().manual_seed(100 + self._epoch)
        return iter(torch.randperm(EPOCH_N, generator=generator).tolist())


def _make() -> tuple[DataLoader, EpochSampler]:
    sampler = EpochSampler()
    return DataLoader(list(range(EPOCH_N)), batch_size=4, sampler=sampler), sampler


def test_a_sampler_with_set_epoch_but_no_epoch_attribute_is_refused_mid_epoch_not_resumed_from_another_permutation():
    """A sampler whose epoch the drop-in cannot read cannot be put back at it: a mid-epoch state is
    refused, naming the fix; a state between epochs still loads."""
    loader, sampler = _make()
    sampler.set_epoch(1)
    whole = [i for batch in loader for i in batch.tolist()]  # epoch 1, uninterrupted
    loader, sampler = _make()
    sampler.set_epoch(1)
    it = iter(loader)
    seen = [i for _ in range(3) for i in next(it).tolist()]
    state = loader.state_dict()
    del it

    resumed, _ = _make()  # a restarted job: the sampler is back at epoch 0, as DistributedSampler's is
    with pytest.raises(ValueError, match=r"loader.sampler \(EpochSampler\) has set_epoch\(\) but no integer `epoch`"):
        resumed.load_state_dict(state)
    assert len(seen) == 12 and len(whole) == EPOCH_N
    between, _ = _make()
    list(between)
    fresh, sampler = _make()
    fresh.load_state_dict(between.state_dict())  # an epoch's start: nothing to put back
    sampler.set_epoch(1)
    assert sorted(i for batch in fresh for i in batch.tolist()) == list(range(EPOCH_N))


def test_a_distributed_sampler_under_a_batch_sampler_shard_is_resumed_at_its_epoch_or_refused():
    """accelerate's ``BatchSamplerShard(BatchSampler(DistributedSampler))`` keeps the sampler at
    ``batch_sampler.batch_sampler.sampler``: a restarted job (the sampler back at epoch 0) resumes
    the interrupted epoch's rest, from its epoch's permutation."""
    torch = pytest.importorskip("torch")
    accelerate = pytest.importorskip("accelerate.data_loader")
    from torch.utils.data import BatchSampler, DistributedSampler

    def make():
        sampler = DistributedSampler(range(40), num_replicas=1, rank=0, shuffle=True, seed=0)
        return sampler, DataLoader(list(range(40)), batch_sampler=accelerate.BatchSamplerShard(BatchSampler(sampler, 4, False)))

    sampler, loader = make()
    for epoch in range(2):
        sampler.set_epoch(epoch)
        list(loader)
    sampler.set_epoch(2)
    it = iter(loader)
    seen = [i for _ in range(3) for i in next(it).tolist()]
    state = json.loads(json.dumps(loader.state_dict()))
    rest = [i for batch in it for i in batch.tolist()]
    assert torch is not None
    _, fresh = make()
    fresh.load_state_dict(state)
    got = [i for batch in fresh for i in batch.tolist()]
    assert got == rest, f"resumed from another epoch's permutation: {len(set(seen) & set(got))} repeated, {40 - len(set(seen) | set(got))} lost"
