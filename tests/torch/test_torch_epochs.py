"""``slipstream.torch.DataLoader`` across epochs as training scripts use it: each test is a usage of
``torch.utils.data.DataLoader`` where the drop-in must behave as torch's does.

Each test builds torch's loader and the drop-in with the same arguments and expects the same
batches (or, where torch's behaviour cannot be matched, the error slipstream's docstring promises).
Anything that starts worker processes runs in a fresh interpreter with a timeout, so a hang fails
one test instead of the run.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from helpers import run_python
from torch.utils.data import DataLoader as TorchLoader
from torch.utils.data import Dataset

from slipstream.torch import DataLoader


def _run_json(code: str, timeout: float = 120) -> dict:
    """Run ``code`` (which prints one JSON line last) in a fresh interpreter; return that JSON."""
    result = run_python(code, timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


# -- 1. a dataset whose length changes between epochs ------------------------------------------


class _Growing(Dataset):
    """A replay buffer / active-learning pool: samples are appended between epochs."""

    def __init__(self, n: int):
        self.items = [torch.full((2,), float(i)) for i in range(n)]

    def grow(self, n: int) -> None:
        self.items += [torch.full((2,), float(i)) for i in range(len(self.items), len(self.items) + n)]

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> torch.Tensor:
        return self.items[i]


def test_a_dataset_that_grows_between_epochs_is_loaded_in_full():
    """A map-style dataset that grows between epochs (a replay buffer, an active-learning pool, a list
    the script appends to) is loaded in full, as torch's sampler sees the new ``len(dataset)``: each
    epoch indexes the dataset as it is at that epoch's ``iter()`` (the second epoch has batches of
    sizes [4, 4, 4] like torch's), with any ``num_workers``, instead of checking its indices against
    the first epoch's count (``IndexError: ... out of range for 5 observations``). A shrinking
    dataset is the same."""
    sizes = {}
    for name, cls in (("torch", TorchLoader), ("slipstream", DataLoader)):
        dataset = _Growing(5)
        loader = cls(dataset, batch_size=4)
        first = [len(b) for b in loader]
        dataset.grow(7)
        try:
            second = [len(b) for b in loader]
        except IndexError as exc:
            second = f"IndexError: {exc}"
        sizes[name] = (first, second, len(loader))
        if cls is DataLoader:
            loader.close()
    assert sizes["torch"] == ([4, 1], [4, 4, 4], 3)
    assert sizes["slipstream"] == sizes["torch"]


# -- 2. the sampler is drawn at iter() by torch's multi-process iterator ----------------------


def test_zip_of_two_shuffled_loaders_with_workers_gives_torchs_permutations():
    """With ``num_workers > 0``, two shuffled loaders iterated together under ``torch.manual_seed``
    (``zip(labeled_loader, unlabeled_loader)``, or FixMatch's ``labeled_iter = iter(a);
    unlabeled_iter = iter(b)`` then ``next()`` on each) give torch's permutations (torch: [2, 0, 5, 3],
    [1, 4, 7, 6] for the first), and so does any global-RNG draw between ``iter(loader)`` and the
    first ``next()``.

    torch's multi-process iterator primes ``prefetch_factor * num_workers`` indices inside ``iter()``
    (``_MultiProcessingDataLoaderIter._reset``, "prime the prefetch loop"), so ``RandomSampler`` draws
    its seed from the global RNG at ``iter()``, right after the base seed: the draws are ordered
    base(a), sampler(a), base(b), sampler(b). The drop-in draws the epoch's batches inside ``iter()``
    with ``num_workers > 0`` too, and lazily, at the first ``next()``, for ``num_workers=0`` (as torch
    does there)."""
    code = """
        import json, torch
        from torch.utils.data import DataLoader as TorchLoader
        from slipstream.torch import DataLoader

        def run(cls):
            torch.manual_seed(0)
            kw = dict(batch_size=4, shuffle=True, num_workers=2, multiprocessing_context="fork")
            a = cls(list(range(8)), **kw)
            b = cls(list(range(100, 108)), **kw)
            out = [[x.tolist(), y.tolist()] for x, y in zip(a, b)]
            if cls is DataLoader:
                a.close(); b.close()
            return out

        print(json.dumps({"torch": run(TorchLoader), "slipstream": run(DataLoader)}))
    """
    got = _run_json(code)
    assert got["slipstream"] == got["torch"]


# -- 3. non-persistent process workers never see the dataset change ---------------------------


def test_process_workers_see_the_dataset_as_it_is_at_each_epoch_without_persistent_workers():
    """A training script that updates its dataset between epochs (``dataset.set_epoch(e)``, a
    curriculum level, progressive resizing, a new transform) gets each epoch's behaviour with the
    default ``backend`` and ``num_workers > 0``, as torch's: [[0, 0, 0, 0]], [[1, 1, 1, 1]],
    [[2, 2, 2, 2]], never epoch 0's batches again without an error or a warning.

    torch's default (``persistent_workers=False``) starts new workers, with a fresh copy of the
    dataset, at every ``iter()``; with ``persistent_workers=False`` each epoch's workers of the drop-in
    see the dataset as it is at that ``iter()`` too. Only with ``persistent_workers=True`` are the
    workers kept, and there torch's are stale too."""
    code = """
        import json, torch
        from torch.utils.data import Dataset, DataLoader as TorchLoader
        from slipstream.torch import DataLoader

        class Curriculum(Dataset):
            def __init__(self):
                self.epoch = 0
            def set_epoch(self, epoch):
                self.epoch = epoch
            def __len__(self):
                return 4
            def __getitem__(self, i):
                return torch.tensor([i, self.epoch])

        def run(cls):
            dataset = Curriculum()
            loader = cls(dataset, batch_size=4, num_workers=2, multiprocessing_context="fork")
            out = []
            for epoch in range(3):
                dataset.set_epoch(epoch)
                out.append([b[:, 1].tolist() for b in loader])
            if cls is DataLoader:
                loader.close()
            return out

        print(json.dumps({"torch": run(TorchLoader), "slipstream": run(DataLoader)}))
    """
    got = _run_json(code)
    assert got["torch"] == [[[0, 0, 0, 0]], [[1, 1, 1, 1]], [[2, 2, 2, 2]]]
    assert got["slipstream"] == got["torch"]


# -- 4. sample 0 is not read before the epoch ----------------------------------------------------


class _OwnRng(Dataset):
    """Draws from its own generator and records the indices it is asked for."""

    def __init__(self, n: int = 6):
        self.n, self.reads, self.rng = n, [], np.random.default_rng(0)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        self.reads.append(i)
        return torch.tensor([float(self.rng.random())]), i


def test_sample_zero_is_not_read_before_the_epoch_with_num_workers_0():
    """Shaping the buffers and planning the conversion to torch's output take the first batch's
    own samples (sample 0 is not read once more before the epoch): a dataset with its own
    state sees torch's reads and gives torch's values."""
    mine, theirs = _OwnRng(), _OwnRng()
    got = [b[0].tolist() for b in DataLoader(mine, batch_size=2)]
    want = [b[0].tolist() for b in TorchLoader(theirs, batch_size=2)]
    assert mine.reads == theirs.reads == [0, 1, 2, 3, 4, 5]
    assert got == want


# -- 5. tensor samples skip the safe-cast check ------------------------------------------------


class _Labels(Dataset):
    """Sample 0 is an int32 tensor; the others are int64 tensors whose values need 64 bits."""

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> torch.Tensor:
        if i == 0:
            return torch.tensor([1, 1], dtype=torch.int32)
        return torch.tensor([2**40 + i, 2**40 + i], dtype=torch.int64)


def test_a_tensor_sample_wider_than_sample_zero_is_not_silently_wrapped():
    """A later sample that is a tensor of a wider dtype than sample 0's (int64 after int32, float64
    after float32, uint16 after uint8 images) is never cast silently into sample 0's dtype (int64
    values 2**40 + i wrapped to int32 ``i``, float64 values rounded to float32): it raises the
    ``TypeError`` naming the sample that the same samples as NumPy arrays raise ("sample 1 has dtype
    int64 but the first sample had int32; casting could lose information"), or the batch equals
    torch's (``num_workers=0`` promotes and returns the exact values as int64)."""
    expected = [b.tolist() for b in TorchLoader(_Labels(), batch_size=2)]
    assert expected[0][1] == [2**40 + 1, 2**40 + 1]
    try:
        got = [b.tolist() for b in DataLoader(_Labels(), batch_size=2)]
    except TypeError as exc:
        assert "sample 1" in str(exc)
        return
    assert got == expected


# -- 6. an epoch goes on after a batch that raises, from its own position, reading nothing twice --


class _BadSample(Dataset):
    """12 samples; sample ``bad`` raises. Counts the reads of each sample (one process)."""

    def __init__(self, bad: int = 2, n: int = 12):
        self.bad, self.n, self.reads = bad, n, [0] * n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        self.reads[i] += 1
        if i == self.bad:
            raise ValueError(f"bad sample {i}")
        return torch.tensor(i)


def _drain(it, n: int | None = None) -> list:
    out: list = []
    while n is None or len(out) < n:
        try:
            out.append(next(it).tolist())
        except StopIteration:
            break
        except ValueError:
            out.append("ERR")
    return out


@pytest.mark.parametrize("kwargs", [{}, {"num_workers": 2, "backend": "thread"}], ids=["workers0", "threads2"])
def test_a_failed_batch_in_one_of_two_live_iterators_skips_nothing(kwargs):
    """Two live iterators of one loader (torch allows it: each is its own epoch): after a batch raises
    in the first, each iterator goes on from its own batch (not from the most recent iterator's
    position, which the loader's state describes), skipping nothing."""
    got = []
    for loader in (TorchLoader(_BadSample(), batch_size=2), DataLoader(_BadSample(), batch_size=2, **kwargs)):
        a = iter(loader)
        first_a = _drain(a, 1)
        b = iter(loader)
        first_b = _drain(b, 4)
        got.append((first_a + _drain(a), first_b + _drain(b)))
    assert got[1] == got[0]
    assert got[0][0] == [[0, 1], "ERR", [4, 5], [6, 7], [8, 9], [10, 11]]


@pytest.mark.parametrize("kwargs", [{}, {"num_workers": 2, "backend": "thread"}], ids=["workers0", "threads2"])
def test_an_epoch_goes_on_after_a_failed_batch_reading_each_sample_once(kwargs):
    """After a batch raised, the epoch goes on without reading again the batches already prefetched
    (a dataset with side effects sees each sample read once, as torch reads it); the failed batch
    counts as consumed in the loader's state."""
    dataset, theirs = _BadSample(bad=0, n=20), _BadSample(bad=0, n=20)
    loader = DataLoader(dataset, batch_size=2, **kwargs)
    it = iter(loader)
    assert _drain(it, 3) == ["ERR", [2, 3], [4, 5]]
    assert loader._ss.state_dict()["batch"] == 3  # the failed batch 0 was handed out
    assert _drain(it) == [[2 * k, 2 * k + 1] for k in range(3, 10)]
    assert _drain(iter(TorchLoader(theirs, batch_size=2))) == ["ERR"] + [[2 * k, 2 * k + 1] for k in range(1, 10)]
    assert dataset.reads == theirs.reads == [1, 0] + [1] * 18  # torch stops reading a batch at its error


def test_an_epoch_of_process_workers_goes_on_after_a_failed_batch_reading_each_sample_once():
    """The same with process workers (reads counted in shared memory)."""
    out = _run_json(
        """
        import json, multiprocessing as mp, torch, warnings
        from torch.utils.data import Dataset
        from slipstream.torch import DataLoader
        warnings.filterwarnings("ignore")

        class DS(Dataset):
            def __init__(s): s.reads = mp.get_context("fork").Array("i", 40)
            def __len__(s): return 40
            def __getitem__(s, i):
                with s.reads.get_lock(): s.reads[i] += 1
                if i == 0: raise ValueError("bad sample 0")
                return torch.tensor([i])

        ds = DS()
        it = iter(DataLoader(ds, batch_size=2, num_workers=2, multiprocessing_context="fork"))
        got = []
        while True:
            try: got.append(next(it).flatten().tolist())
            except StopIteration: break
            except ValueError: got.append("ERR")
        print(json.dumps({"got": got, "reads": list(ds.reads)}))
        """
    )
    assert out["got"] == ["ERR"] + [[2 * k, 2 * k + 1] for k in range(1, 20)]
    assert max(out["reads"]) == 1 and out["reads"][2:] == [1] * 38


@pytest.mark.parametrize(
    "workers", [{}, {"num_workers": 2, "backend": "thread"}, {"num_workers": 2, "persistent_workers": True}]
)
def test_close_between_epochs_goes_on_with_the_next_epochs_permutation(workers):
    """close() stops the workers; the next iter() is the next epoch, with that epoch's permutation
    (not epoch 0's again with seed=)."""

    def epochs(close: bool) -> list:
        loader = DataLoader(list(range(20)), batch_size=4, shuffle=True, seed=3, **workers)
        out = []
        for _ in range(3):
            out.append([b.tolist() for b in loader])
            if close:
                loader.close()
        return out

    kept = epochs(close=False)
    assert kept[0] != kept[1] and epochs(close=True) == kept


# -- device="cuda": the batch held by the prefetcher -----------------------------------------------


@pytest.fixture
def cuda_on_cpu(monkeypatch):
    """``device="cuda"``'s prefetcher run on a CPU: torch.cuda's streams and events are no-ops and
    the copy goes to the CPU. Returns a function that sets a loader's device to "cuda"."""
    import contextlib

    from slipstream.torch import _dataloader

    class Noop:
        def __init__(self, *args, **kwargs):
            pass

        def record(self, *args):
            pass

        def synchronize(self):
            pass

        def wait_stream(self, *args):
            pass

    for name, value in {
        "Stream": Noop,
        "Event": Noop,
        "stream": lambda s: contextlib.nullcontext(),
        "current_stream": lambda device=None: Noop(),
    }.items():
        monkeypatch.setattr(torch.cuda, name, value, raising=False)
    real = _dataloader._to_cuda
    monkeypatch.setattr(_dataloader, "_to_cuda", lambda source, device: real(source, torch.device("cpu")))

    def on_cuda(loader: DataLoader) -> DataLoader:
        loader.device = torch.device("cuda")
        return loader

    return on_cuda


@pytest.mark.parametrize("kwargs", [{}, {"num_workers": 2, "backend": "thread"}], ids=["workers0", "threads2"])
def test_an_error_in_the_batch_after_does_not_lose_the_batch_the_prefetcher_holds(cuda_on_cpu, kwargs):
    """The prefetcher takes batch k+1 before handing out batch k: an error loading batch k+1 neither
    replaces batch k nor ends the epoch. Batch k is handed out, the error comes at the next
    ``next()``, and the epoch goes on after it as torch's (and the CPU path) does."""
    want = _drain(iter(TorchLoader(_BadSample(), batch_size=2)))
    assert want == [[0, 1], "ERR", [4, 5], [6, 7], [8, 9], [10, 11]]
    assert _drain(iter(cuda_on_cpu(DataLoader(_BadSample(), batch_size=2, **kwargs)))) == want
    loader = cuda_on_cpu(DataLoader(_BadSample(), batch_size=2, **kwargs))
    it = iter(loader)
    assert _drain(it, 2) == want[:2]
    state = loader.state_dict()  # the failed batch counts as handed out
    assert state["batch"] == 2
    fresh = cuda_on_cpu(DataLoader(_BadSample(), batch_size=2, **kwargs))
    fresh.load_state_dict(state)
    assert _drain(iter(fresh)) == _drain(it) == want[2:]


# -- next() after loader.close() ---------------------------------------------------------------------


class _Count(torch.utils.data.IterableDataset):
    """``0..19``, each worker process its share."""

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        return iter(range(20)) if info is None else iter(range(info.id * 10, info.id * 10 + 10))


@pytest.mark.parametrize(
    "make",
    [
        lambda: DataLoader(list(range(20)), batch_size=2, num_workers=2),
        lambda: DataLoader(list(range(20)), batch_size=2, num_workers=2, persistent_workers=True),
        lambda: DataLoader(_Count(), batch_size=2, num_workers=2, persistent_workers=True),
    ],
    ids=["map-processes", "map-persistent", "iterable-persistent"],
)
def test_next_after_the_loader_closed_its_workers_says_so(make):
    """``loader.close()`` stops the worker processes; the epoch's iterator then raises a RuntimeError
    naming ``loader.close()`` (not slipstream's internal "the worker pool is closed", and, iterable,
    not counted as a batch handed out), ends (StopIteration after), and the state still resumes the
    rest of the epoch."""
    loader = make()
    it = iter(loader)
    first = next(it).tolist()
    loader.close()
    with pytest.raises(RuntimeError, match=r"loader\.close\(\) stopped"):
        next(it)
    with pytest.raises(StopIteration):
        next(it)
    state = loader.state_dict()
    assert (state["epoch"], state["batch"]) == (0, 1)
    fresh = make()
    fresh.load_state_dict(state)
    assert sorted(first + [i for b in fresh for i in b.tolist()]) == list(range(20))
