"""What PyTorch's own ``test/test_dataloader.py`` asks of a DataLoader, as the drop-in's tests.

Each test here is one behaviour that suite found missing in ``slipstream.torch.DataLoader``
(``tests/support/run_torch_suite.py`` runs the suite itself): typing, torch's per-worker
``prefetch_factor``, dataset errors at ``next()`` rather than ``iter()`` (nothing is read before
the epoch), and the errors a torch user catches. Anything that starts worker processes, or could
hang, runs in a fresh interpreter with a timeout.
"""

from __future__ import annotations

import json
import threading

import pytest

torch = pytest.importorskip("torch")

from helpers import run_python
from torch.utils.data import Dataset

from slipstream.torch import DataLoader, DataLoaderTimeoutError


def _run_json(code: str, timeout: float = 120) -> dict:
    """Run ``code`` (which prints one JSON line last) in a fresh interpreter; return that JSON."""
    result = run_python(code, timeout=timeout)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


# -- typing ------------------------------------------------------------------------------------


def test_the_loader_class_can_be_subscripted_like_torchs():
    """torch's DataLoader is ``Generic[T_co]``: ``DataLoader[torch.Tensor]`` is a valid annotation."""
    alias = DataLoader[list[torch.Tensor]]
    assert alias.__origin__ is DataLoader

    def make() -> DataLoader[torch.Tensor]:  # evaluated at definition: must not raise
        return DataLoader([torch.zeros(1)])

    assert isinstance(make(), torch.utils.data.DataLoader)


# -- nothing is read before the epoch ------------------------------------------------------------


class _Records(Dataset):
    """Records the indices it is asked for."""

    def __init__(self, n: int = 6):
        self.n, self.reads = n, []

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int):
        self.reads.append(i)
        return torch.tensor([float(i)]), i


def test_the_dataset_sees_exactly_torchs_reads():
    """The buffers are shaped from the first batch's own samples: no read of sample 0 before the
    epoch, so a dataset with state (a stream position, a counter) sees what torch's would."""
    mine, theirs = _Records(), _Records()
    got = [b[0].tolist() for b in DataLoader(mine, batch_size=4)]
    want = [b[0].tolist() for b in torch.utils.data.DataLoader(theirs, batch_size=4)]
    assert got == want
    assert mine.reads == theirs.reads == [0, 1, 2, 3, 4, 5]


class _Broken(Dataset):
    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int):
        raise NotImplementedError(f"sample {i} cannot be read")


@pytest.mark.parametrize("num_workers, backend", [(0, None), (2, "thread")])
def test_a_dataset_error_surfaces_from_next_not_from_iter(num_workers, backend):
    """As in torch: ``iter(loader)`` reads nothing; the dataset's exception comes from ``next()``."""
    loader = DataLoader(_Broken(), batch_size=2, num_workers=num_workers, backend=backend)
    it = iter(loader)  # must not raise
    with pytest.raises(NotImplementedError, match="cannot be read"):
        next(it)


def test_a_dataset_error_surfaces_from_next_not_from_iter_with_process_workers():
    got = _run_json(
        """
        import json, torch
        from torch.utils.data import Dataset
        from slipstream.torch import DataLoader

        class Broken(Dataset):
            def __len__(self): return 4
            def __getitem__(self, i): raise NotImplementedError("cannot be read")

        with DataLoader(Broken(), batch_size=2, num_workers=2, multiprocessing_context="fork") as loader:
            it = iter(loader)
            try:
                next(it)
                where = "nowhere"
            except NotImplementedError:
                where = "next"
        print(json.dumps({"where": where}))
        """
    )
    assert got == {"where": "next"}


class _EveryThird(Dataset):
    """Samples 0, 3, 6, 9 raise; the others load."""

    def __len__(self) -> int:
        return 10

    def __getitem__(self, i: int) -> int:
        if i % 3 == 0:
            raise NotImplementedError(f"sample {i}")
        return i


def _outcomes(loader) -> list:
    """Each ``next()``'s batch (as a list) or 'error', until StopIteration (torch's test_error)."""
    it, out = iter(loader), []
    while True:
        try:
            out.append(next(it).tolist())
        except NotImplementedError:
            out.append("error")
        except StopIteration:
            return out


@pytest.mark.parametrize("num_workers, backend", [(0, None), (2, "thread")])
def test_the_epoch_goes_on_after_a_batch_that_raised(num_workers, backend):
    """torch's iterator raises a batch's error from that ``next()`` and the next ``next()`` gives
    the following batch; the drop-in's epoch goes on after the error in the same way."""
    want = _outcomes(torch.utils.data.DataLoader(_EveryThird(), batch_size=2))
    assert want == ["error", "error", [4, 5], "error", "error"]
    assert _outcomes(DataLoader(_EveryThird(), batch_size=2, num_workers=num_workers, backend=backend)) == want


def test_the_epoch_goes_on_after_a_batch_that_raised_with_process_workers():
    got = _run_json(
        """
        import json
        from torch.utils.data import Dataset
        from slipstream.torch import DataLoader

        class EveryThird(Dataset):
            def __len__(self): return 10
            def __getitem__(self, i):
                if i % 3 == 0:
                    raise NotImplementedError(i)
                return i

        out = []
        for persistent in (False, True):
            with DataLoader(EveryThird(), batch_size=2, num_workers=2, persistent_workers=persistent,
                            multiprocessing_context="fork") as loader:
                for epoch in range(2):
                    it, seen = iter(loader), []
                    while True:
                        try:
                            seen.append(next(it).tolist())
                        except NotImplementedError:
                            seen.append("error")
                        except StopIteration:
                            break
                    out.append(seen)
        print(json.dumps({"epochs": out}))
        """
    )
    assert got["epochs"] == [["error", "error", [4, 5], "error", "error"]] * 4


# -- prefetch_factor ---------------------------------------------------------------------------


class _Barrier(Dataset):
    """Every read waits until ``parties`` reads are under way at once (torch's test_worker_seed)."""

    def __init__(self, parties: int):
        self.parties = parties
        self.barrier = threading.Barrier(parties, timeout=20)

    def __len__(self) -> int:
        return self.parties

    def __getitem__(self, i: int) -> int:
        self.barrier.wait()  # BrokenBarrierError if fewer reads are ever in flight
        return i


@pytest.mark.parametrize("prefetch_factor", [None, 1])
def test_prefetch_factor_counts_per_worker(prefetch_factor):
    """torch keeps ``prefetch_factor`` batches in flight per worker (``num_workers *
    prefetch_factor`` in all); the drop-in used it as the total, so 4 workers with
    ``prefetch_factor=1`` had one sample in flight: datasets whose workers synchronise hung, and
    slow ones loaded 4x slower."""
    loader = DataLoader(_Barrier(4), batch_size=1, num_workers=4, backend="thread", prefetch_factor=prefetch_factor)
    assert sorted(int(b) for b in loader) == [0, 1, 2, 3]


def test_workers_that_synchronise_each_load_one_sample_with_process_workers():
    """torch's test_worker_seed: 4 samples, 4 worker processes, a barrier across them; each worker
    loads one sample (and sees its own seed)."""
    got = _run_json(
        """
        import json, multiprocessing as mp, torch
        from torch.utils.data import Dataset
        from slipstream.torch import DataLoader

        class Synced(Dataset):
            def __init__(self, parties):
                self.parties = parties
                self.count = mp.Value("i", 0, lock=True)
                self.barrier = mp.Semaphore(0)
            def __len__(self): return self.parties
            def __getitem__(self, i):
                with self.count.get_lock():
                    self.count.value += 1
                    if self.count.value == self.parties:
                        self.barrier.release()
                self.barrier.acquire()
                self.barrier.release()
                return torch.initial_seed()

        with DataLoader(Synced(4), batch_size=1, num_workers=4, multiprocessing_context="fork") as loader:
            seeds = {int(b) for b in loader}
        print(json.dumps({"seeds": len(seeds)}))
        """,
        timeout=90,
    )
    assert got == {"seeds": 4}


# -- the errors a torch user catches --------------------------------------------------------------


class _Stuck(Dataset):
    """Every read waits for ``release`` (set by the test once the loader gave up)."""

    def __init__(self):
        self.release = threading.Event()

    def __len__(self) -> int:
        return 4

    def __getitem__(self, i: int) -> int:
        self.release.wait(30)
        return i


def test_a_timeout_is_a_runtime_error_with_torchs_words():
    """torch raises ``RuntimeError('DataLoader timed out after 1 seconds')``; the drop-in's
    timeout is that ``RuntimeError`` (and still a ``TimeoutError``) with slipstream's detail."""
    dataset = _Stuck()
    loader = DataLoader(dataset, batch_size=2, num_workers=2, backend="thread", timeout=1)
    try:
        with pytest.raises(RuntimeError, match=r"^DataLoader timed out after 1 seconds") as caught:
            next(iter(loader))
    finally:
        dataset.release.set()
    assert isinstance(caught.value, TimeoutError)
    assert isinstance(caught.value, DataLoaderTimeoutError)
    assert "batch 0" in str(caught.value)  # slipstream's detail: which batch was late


def test_a_timeout_with_process_workers_is_a_runtime_error_with_torchs_words():
    got = _run_json(
        """
        import json, threading, time
        from torch.utils.data import Dataset
        from slipstream.torch import DataLoader

        class Sleepy(Dataset):  # torch's SleepDataset
            def __len__(self): return 10
            def __getitem__(self, i):
                threading.Event().wait(30)
                return i

        with DataLoader(Sleepy(), batch_size=2, num_workers=2, timeout=1, multiprocessing_context="fork") as loader:
            try:
                next(iter(loader))
                got = {"raised": None}
            except RuntimeError as exc:
                got = {"raised": str(exc), "timeout": isinstance(exc, TimeoutError)}
        print(json.dumps(got))
        """
    )
    assert got["raised"].startswith("DataLoader timed out after 1 seconds"), got
    assert got["timeout"]


@pytest.mark.parametrize(
    "how, words",
    [
        ("os.kill(os.getpid(), signal.SIGKILL)", "is killed by signal: Killed"),
        ("ctypes.string_at(0)", "is killed by signal: Segmentation fault"),
        ("os._exit(3)", "exited unexpectedly with exit code 3"),
    ],
)
def test_a_dead_worker_is_reported_in_torchs_words_as_a_worker_error(how, words):
    """torch: ``DataLoader worker (pid(s) N) exited unexpectedly`` / ``DataLoader worker (pid N) is
    killed by signal: Segmentation fault.``; the drop-in says the same first, then slipstream's
    detail, and the error stays ``ss.WorkerError`` (a ``RuntimeError``)."""
    got = _run_json(
        f"""
        import ctypes, json, os, re, signal, sys
        from torch.utils.data import Dataset
        import slipstream as ss
        from slipstream.torch import DataLoader

        class Dies(Dataset):
            def __len__(self): return 8
            def __getitem__(self, i):
                if i == 5:
                    sys.stderr.flush()
                    os.dup2(os.open(os.devnull, os.O_WRONLY), 2)  # no faulthandler noise
                    {how}
                return i

        with DataLoader(Dies(), batch_size=2, num_workers=2, multiprocessing_context="fork") as loader:
            try:
                list(loader)
                got = {{"raised": None}}
            except ss.WorkerError as exc:
                got = {{"raised": str(exc), "runtime": isinstance(exc, RuntimeError), "pid": exc.pid}}
        print(json.dumps(got))
        """
    )
    message = got["raised"]
    assert message is not None and got["runtime"]
    assert message.startswith(f"DataLoader worker (pid(s) {got['pid']}) exited unexpectedly"), message
    assert words in message
    assert "slipstream: worker" in message  # slipstream's own detail follows


def test_an_iterable_datasets_dead_worker_is_reported_in_torchs_words():
    got = _run_json(
        """
        import json, os, signal
        from torch.utils.data import IterableDataset
        import slipstream as ss
        from slipstream.torch import DataLoader

        class Dies(IterableDataset):
            def __iter__(self):
                yield 1
                os.kill(os.getpid(), signal.SIGKILL)

        with DataLoader(Dies(), num_workers=1, multiprocessing_context="fork") as loader:
            try:
                list(loader)
                got = {"raised": None}
            except ss.WorkerError as exc:
                got = {"raised": str(exc)}
        print(json.dumps(got))
        """
    )
    assert got["raised"].startswith("DataLoader worker (pid(s) "), got
    assert "is killed by signal: Killed" in got["raised"]


# -- installing ----------------------------------------------------------------------------------


def test_importing_the_drop_in_without_torch_says_how_to_install_it():
    result = run_python(
        """
        import sys

        class NoTorch:  # as if torch were not installed
            def find_spec(self, name, path=None, target=None):
                if name == "torch" or name.startswith("torch."):
                    raise ModuleNotFoundError(f"No module named {name!r}", name=name)
                return None

        sys.meta_path.insert(0, NoTorch())
        import slipstream  # the core needs no torch
        try:
            import slipstream.torch
        except ImportError as exc:
            print("hint:", exc)
        """
    )
    assert result.returncode == 0, result.stderr
    assert "hint: slipstream.torch needs PyTorch: pip install 'slipstream[torch]' (or pip install torch)" in result.stdout


# -- DataPipes -----------------------------------------------------------------------------------


def test_a_shuffled_datapipe_is_seeded_and_sharded_as_torch_does_it():
    """torch seeds an ``IterDataPipe``'s shuffles from its generator at each ``iter()`` and shards
    it between workers (``sharding_filter``); the drop-in gave each epoch an unseeded shuffle, so
    ``torch.manual_seed`` did not make two epochs alike (torch's test_shuffler_iterdatapipe)."""
    got = _run_json(
        """
        import json, torch
        import torch.utils.data.datapipes as dp
        from slipstream.torch import DataLoader

        out = {}
        for num_workers, persistent in ((0, False), (2, False), (2, True)):
            for name, make in (("slipstream", DataLoader), ("torch", torch.utils.data.DataLoader)):
                pipe = dp.iter.IterableWrapper(list(range(30))).shuffle(buffer_size=5).sharding_filter()
                loader = make(pipe, num_workers=num_workers, shuffle=True, persistent_workers=persistent,
                              multiprocessing_context="fork" if num_workers else None)
                epochs = []
                for seed in (123, 123, 321):
                    torch.manual_seed(seed)
                    epochs.append([int(x) for x in loader])
                out[f"{name} {num_workers} {persistent}"] = epochs
        print(json.dumps(out))
        """,
        timeout=180,
    )
    for key, epochs in got.items():
        if key.startswith("torch"):
            continue
        assert epochs == got[key.replace("slipstream", "torch")], key
        assert epochs[0] == epochs[1] != epochs[2] and sorted(epochs[0]) == list(range(30)), key
