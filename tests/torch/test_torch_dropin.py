"""``slipstream.torch.DataLoader`` against ``torch.utils.data.DataLoader``: same arguments, same batches.

Every comparison builds both loaders with the same arguments (independent but identically seeded
generators, the same global seed) and checks the batches one by one: types (tuples become lists,
namedtuples and mappings keep theirs), tensor dtypes, shapes and values.
"""

from __future__ import annotations

import collections
import copy
import inspect
import os
import subprocess
import sys
import textwrap
import warnings
from typing import Any, NamedTuple

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from helpers import SRC, SUPPORT
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.utils.data import (
    BatchSampler,
    Dataset,
    DistributedSampler,
    IterableDataset,
    SubsetRandomSampler,
    TensorDataset,
    WeightedRandomSampler,
    get_worker_info,
)
from torch.utils.data import DataLoader as TorchLoader

import slipstream as ss
from slipstream.torch import DataLoader

HAS_PROCESS = "backend" in inspect.signature(ss.DataLoader).parameters
needs_process = pytest.mark.skipif(not HAS_PROCESS, reason="ss.DataLoader has no backend='process' yet")
# (num_workers, backend) for the drop-in; torch always gets num_workers only
WORKERS = [
    pytest.param((0, None), id="workers0"),
    pytest.param((2, "thread"), id="threads2"),
    pytest.param((2, "process"), id="processes2", marks=needs_process),
]
EXTRAS = ("backend", "device", "seed")


# -- comparing ---------------------------------------------------------------------------------


def assert_same(expected: Any, got: Any, where: str = "batch") -> None:
    """``got`` is what torch gave: same types all the way down, same tensors (dtype, shape, values)."""
    assert type(got) is type(expected), f"{where}: {type(got).__name__} != torch's {type(expected).__name__}"
    if isinstance(expected, torch.Tensor):
        assert got.dtype == expected.dtype, f"{where}: dtype {got.dtype} != torch's {expected.dtype}"
        assert got.shape == expected.shape, f"{where}: shape {tuple(got.shape)} != torch's {tuple(expected.shape)}"
        assert torch.equal(got.detach(), expected.detach()), f"{where}: values differ\n{got}\n{expected}"
    elif isinstance(expected, collections.abc.Mapping):
        assert list(got) == list(expected), f"{where}: keys {list(got)} != torch's {list(expected)}"
        for k in expected:
            assert_same(expected[k], got[k], f"{where}[{k!r}]")
    elif isinstance(expected, (list, tuple)):
        assert len(got) == len(expected), f"{where}: length {len(got)} != torch's {len(expected)}"
        for i, (e, g) in enumerate(zip(expected, got)):
            assert_same(e, g, f"{where}[{i}]")
    elif isinstance(expected, np.ndarray):
        np.testing.assert_array_equal(got, expected)
    else:
        assert got == expected, f"{where}: {got!r} != torch's {expected!r}"


class Twin:
    """An argument with state (a sampler with its own generator): each loader gets a fresh one."""

    def __init__(self, make: Any):
        self.make = make


def loaders(dataset: Any, seed: int = 0, **kwargs: Any) -> tuple[TorchLoader, DataLoader]:
    """torch's loader and the drop-in over ``dataset``, with twin generators when one is asked for."""
    twins = {k: v for k, v in kwargs.items() if isinstance(v, Twin)}
    kwargs.update({k: v.make() for k, v in twins.items()})
    torch_kwargs = {k: v for k, v in kwargs.items() if k not in EXTRAS}
    torch_kwargs.update({k: v.make() for k, v in twins.items()})
    if kwargs.pop("generator", None) is not None:
        torch_kwargs["generator"] = torch.Generator().manual_seed(seed)
        kwargs["generator"] = torch.Generator().manual_seed(seed)
    # each loader gets its own copy of the dataset (an IterableDataset may count its epochs)
    return TorchLoader(dataset, **torch_kwargs), DataLoader(copy.deepcopy(dataset), **kwargs)


def epochs(loader: Any, count: int, seed: int = 0) -> list[list[Any]]:
    out = []
    for e in range(count):
        torch.manual_seed(seed + e)
        out.append(list(loader))
    return out


def compare(dataset: Any, workers: tuple[int, str | None] = (0, None), epochs_: int = 1, **kwargs: Any) -> list[Any]:
    num_workers, backend = workers
    if num_workers:
        kwargs["num_workers"] = num_workers
        kwargs["backend"] = backend
    reference, dropin = loaders(dataset, **kwargs)
    try:
        expected, got = epochs(reference, epochs_), epochs(dropin, epochs_)
    finally:
        dropin.close()
    for e, (exp, out) in enumerate(zip(expected, got)):
        assert len(out) == len(exp), f"epoch {e}: {len(out)} batches, torch gave {len(exp)}"
        for k, (a, b) in enumerate(zip(exp, out)):
            assert_same(a, b, f"epoch {e} batch {k}")
    if not isinstance(dataset, IterableDataset) and (kwargs.get("batch_size", 1) is not None or "batch_sampler" in kwargs):
        assert len(dropin) == len(reference)
    return got


# -- datasets (module level: worker processes unpickle them) ------------------------------------


class Pair(NamedTuple):
    image: Any
    label: Any


class Items(Dataset):
    """``n`` samples made by ``make(i)``."""

    def __init__(self, kind: str, n: int = 11):
        self.kind, self.n = kind, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        return SAMPLES[self.kind](i)


def _nested(i: int) -> Any:
    return {
        "image": np.arange(6, dtype=np.uint8).reshape(2, 3) + i,
        "meta": {"id": i, "name": f"n{i}", "score": i / 4, "flag": i % 3 == 0},
        "pair": Pair(torch.full((2,), float(i)), (np.int16(i), [i, b"b" * (i % 3)])),
        "boxes": [np.float32(i), torch.tensor(i, dtype=torch.int32)],
    }


SAMPLES = {
    "tensor": lambda i: torch.arange(6, dtype=torch.float32).reshape(2, 3) * i,
    "tensor0d": lambda i: torch.tensor(i, dtype=torch.int64),
    "tensor_dtypes": lambda i: (
        torch.tensor([i], dtype=torch.uint8),
        torch.tensor([i], dtype=torch.float16),
        torch.tensor([i % 2], dtype=torch.bool),
    ),
    "ndarray": lambda i: np.full((3, 2), i, dtype=np.float64),
    "ndarray_dtypes": lambda i: [
        np.array([i], np.int8),
        np.array([i], np.uint16),
        np.array([i], np.complex64),
        np.array([i], np.uint64),
    ],
    "numpy_scalars": lambda i: (np.float32(i / 2), np.int32(i), np.bool_(i % 2), np.uint8(i), np.float16(i)),
    "int": lambda i: i * 1000 - 3,
    "float": lambda i: i / 7,
    "bool": lambda i: i % 2 == 0,
    "str": lambda i: f"sample {i}",
    "bytes": lambda i: bytes([i]),
    "numpy_str": lambda i: np.str_(f"s{i}"),
    "dict": lambda i: {"x": np.full(2, i, np.int64), "y": i, "name": str(i)},
    "ordereddict": lambda i: collections.OrderedDict(b=i, a=float(i)),
    "tuple": lambda i: (torch.tensor([i, i]), i, f"{i}"),
    "list": lambda i: [np.float32(i), i, [i, i + 1]],
    "namedtuple": lambda i: Pair(np.full((2, 2), i, np.float32), i % 10),
    "nested": _nested,
    # not something the buffers reproduce: torch's default_collate does it
    "bfloat16": lambda i: {"x": torch.full((2,), i, dtype=torch.bfloat16), "y": i},
    "tensor_subclass": lambda i: torch.nn.Parameter(torch.full((2,), float(i)), requires_grad=False),
    "range": lambda i: range(i, i + 2),
}
FAST = [k for k in SAMPLES if k not in ("bfloat16", "tensor_subclass", "range")]


class Many(Dataset):
    """A dataset with ``__getitems__`` (torch calls it for every batch when it exists)."""

    def __init__(self, n: int = 10, whole: bool = False):
        self.n, self.whole = n, whole

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        return {"x": torch.full((2,), i), "i": i}

    def __getitems__(self, indices: list[int]) -> Any:
        if self.whole:  # one ready-made batch, not a list of samples
            return {"x": torch.tensor(indices) * 10, "n": len(indices)}
        return [{"x": torch.full((2,), i), "i": -i} for i in indices]


class OnlyGetitem(Many):
    def __getitems__(self, indices: list[int]) -> Any:
        raise AssertionError("batch_size=None reads one index at a time: torch never calls __getitems__ then")


def identity(batch: Any) -> Any:
    return batch


def sum_collate(samples: list[Any]) -> Any:
    return {"sum": sum(int(s["x"].sum()) for s in samples), "count": len(samples)}


class Stream(IterableDataset):
    """0..n-1, split unevenly between the workers through ``get_worker_info()`` (worker 0 gets
    the most, the last the fewest, so workers end at different times); each item carries who made it
    and a draw from torch's global RNG (seeded per worker by the loader, as torch seeds it)."""

    def __init__(self, n: int = 23, fail_at: int | None = None, length: int | None = None):
        self.n, self.fail_at, self.length, self.epochs = n, fail_at, length, 0

    def __len__(self) -> int:
        if self.length is None:
            raise TypeError("no length")
        return self.length

    def __iter__(self):
        self.epochs += 1
        info = get_worker_info()
        if info is None:
            lo, hi, wid, seed = 0, self.n, -1, -1
        else:
            weights = list(range(info.num_workers, 0, -1))
            bounds = [self.n * sum(weights[:k]) // sum(weights) for k in range(info.num_workers + 1)]
            lo, hi, wid, seed = bounds[info.id], bounds[info.id + 1], info.id, info.seed
        for i in range(lo, hi):
            if i == self.fail_at:
                raise ValueError(f"item {i} is broken")
            init = getattr(self, "initialized", -2)
            yield {"i": i, "worker": wid, "seed": seed, "epoch": self.epochs, "init": init, "draw": torch.rand(()).item()}


class WorkerSeen(Dataset):
    """Each sample says which worker loaded it, as ``get_worker_info()`` told that worker."""

    def __init__(self, n: int = 12):
        self.n = n
        self.initialized = -1

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        info = get_worker_info()
        if info is None:
            return {"id": -1, "workers": 0, "base": -1, "init": -1, "mine": False, "torch_seed": -1}
        return {
            "id": info.id,
            "workers": info.num_workers,
            "base": info.seed - info.id,
            "init": info.dataset.initialized,
            "mine": info.dataset is self,
            "torch_seed": torch.initial_seed() - info.id,
        }


def mark_worker(worker_id: int) -> None:
    get_worker_info().dataset.initialized = worker_id


# -- the batches, against torch --------------------------------------------------------------


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("kind", FAST)
def test_default_collate_matches_torch_for_every_sample_kind(kind, workers):
    compare(Items(kind), workers, batch_size=4)


@pytest.mark.parametrize("workers", WORKERS)
@pytest.mark.parametrize("kind", ["bfloat16", "tensor_subclass", "range"])
def test_samples_the_buffers_cannot_reproduce_are_collated_by_torch_itself(kind, workers):
    compare(Items(kind), workers, batch_size=3)


@pytest.mark.parametrize("workers", WORKERS)
def test_shuffle_with_a_generator_gives_torchs_permutation_every_epoch(workers):
    compare(Items("dict", 30), workers, epochs_=3, batch_size=4, shuffle=True, generator=True)


def test_shuffle_without_a_generator_follows_torch_manual_seed():
    compare(Items("int", 25), epochs_=2, batch_size=3, shuffle=True)


@pytest.mark.parametrize("workers", WORKERS)
def test_samplers_and_batch_samplers_are_torchs(workers):
    data = Items("tuple", 20)
    compare(data, workers, batch_size=3, sampler=[5, 3, 3, 19, 0, 7, 8])
    compare(
        data, workers, batch_size=3, sampler=Twin(lambda: SubsetRandomSampler(range(2, 17), torch.Generator().manual_seed(1)))
    )
    weighted = Twin(lambda: WeightedRandomSampler([1.0] * 20, 13, generator=torch.Generator().manual_seed(2)))
    compare(data, workers, epochs_=2, batch_size=4, drop_last=True, sampler=weighted)
    compare(data, workers, batch_sampler=[[0, 1, 2], [19], [4, 5, 6, 7, 8], [3, 3]])
    compare(data, workers, batch_sampler=BatchSampler(range(20), 6, drop_last=False))


def test_the_user_calls_set_epoch_not_the_loader():
    data = Items("int", 20)

    def sampler() -> DistributedSampler:
        made = DistributedSampler(data, num_replicas=2, rank=1, shuffle=True, seed=4)
        made.set_epoch(3)
        return made

    compare(data, epochs_=2, batch_size=3, sampler=Twin(sampler))


@pytest.mark.parametrize("workers", WORKERS)
def test_drop_last_and_batch_size_none(workers):
    data = Items("nested", 10)
    compare(data, workers, batch_size=3, drop_last=True)
    compare(data, workers, batch_size=None)  # default_convert, one sample at a time
    compare(Items("ndarray", 7), workers, batch_size=None, shuffle=True, generator=True)


@pytest.mark.parametrize("workers", WORKERS)
def test_a_collate_fn_gets_the_samples_as_torchs_does(workers):
    compare(Items("dict", 10), workers, batch_size=4, collate_fn=identity)
    compare(Many(9), workers, batch_size=4, collate_fn=sum_collate)


@pytest.mark.parametrize("workers", WORKERS)
def test_getitems_is_used_and_its_result_reaches_collate_fn_whole(workers):
    compare(Many(10), workers, batch_size=4)  # default collate over __getitems__'s samples (i = -index)
    compare(Many(10, whole=True), workers, batch_size=4, collate_fn=identity)  # a ready-made batch
    compare(OnlyGetitem(6), workers, batch_size=None)


@pytest.mark.parametrize("workers", WORKERS)
def test_containers_torch_indexes_directly(workers):
    compare(TensorDataset(torch.arange(20).reshape(10, 2), torch.arange(10) % 3), workers, batch_size=4)
    compare(np.arange(30, dtype=np.float32).reshape(10, 3), workers, batch_size=4)
    compare(tuple(torch.full((2,), i) for i in range(5)), workers, batch_size=2)  # a tuple is a sequence of samples
    compare({i: {"v": i} for i in range(5)}, workers, batch_size=2)  # a dict indexed by 0..n-1
    compare([f"s{i}" for i in range(5)], workers, batch_size=2)


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")  # torch's loader, on read-only rows
@pytest.mark.parametrize("workers", WORKERS)
def test_a_packed_file_loads_as_torch_indexes_it(tmp_path, workers):
    samples = [{"x": np.full((2, 3), i, np.float32), "label": i % 4, "name": f"n{i}"} for i in range(13)]
    ss.write(tmp_path / "data.arrow", samples, progress=False)
    compare(ss.open(tmp_path / "data.arrow"), workers, batch_size=4, shuffle=True, generator=True)


def _json_sample(i: int) -> dict[str, Any]:
    """Samples whose JSON structure is equal within a batch of 2 and differs between batches."""
    k = i // 2
    return {
        "tags": list(range(k + 1)),  # a list that grows batch by batch
        "meta": {"a": i} if k == 0 else {"a": i, "b": [i] * k},  # keys added, a nested list
        "words": [f"w{j}" for j in range(k + 1)],  # strings inside a list: torch's tuples
        "value": "text" if k == 1 else k,  # a string in one batch, a number in the others
        "rows": [{"x": i, "y": [k] * k}] * (3 - k),  # a list of dicts that shrinks
        "tokens": np.arange(k + 1, dtype=np.int32),  # a ragged array
    }


class _Varying(Dataset):
    """Like the JSON samples above, without a packed file: values slipstream keeps as objects (a
    string in sample 0) may be numbers in a later batch."""

    def __len__(self) -> int:
        return 6

    def __getitem__(self, i: int) -> Any:
        return {"value": "text" if i < 2 else i, "pair": ("a", i)}


@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
@pytest.mark.parametrize("workers", WORKERS)
def test_json_fields_whose_structure_changes_between_batches_are_batched_as_torch_batches_them(tmp_path, workers):
    """Every list member and dict key of every batch arrives (the conversion to torch's output
    follows each batch's own structure, not the first batch's), with process workers too (the
    packed file's ``batch_spec`` reaches them)."""
    from slipstream import fields as F

    fields = {name: F.JSON() for name in ("tags", "meta", "words", "value", "rows")}
    ss.write(tmp_path / "json.arrow", [_json_sample(i) for i in range(8)], fields={**fields, "tokens": F.Array(np.int32)}, progress=False)
    got = compare(ss.open(tmp_path / "json.arrow"), workers, batch_size=2)
    assert [len(b["tags"]) for b in got[0]] == [1, 2, 3, 4]
    compare(_Varying(), workers, batch_size=2)


@pytest.mark.parametrize("workers", WORKERS[:2])
def test_out_of_order_loading_gives_the_same_batches(workers):
    reference = list(TorchLoader(Items("int", 40), batch_size=3))
    got = list(DataLoader(Items("int", 40), batch_size=3, num_workers=workers[0], backend=workers[1], in_order=False))
    assert sorted(b.tolist() for b in got) == sorted(b.tolist() for b in reference)


def test_an_empty_dataset_gives_no_batches():
    compare(Items("int", 0), batch_size=3)


@pytest.mark.parametrize("kind", ["none", "object", "complex", "uint64_scalar", "str_array"])
def test_samples_torch_cannot_collate_raise_torchs_error(kind):
    make = {
        "none": lambda i: {"x": i, "y": None},
        "object": lambda i: object(),
        "complex": lambda i: complex(i, 1),
        "uint64_scalar": lambda i: np.uint64(i),
        "str_array": lambda i: np.array([str(i)]),
    }[kind]
    SAMPLES[f"bad-{kind}"] = make
    try:
        with pytest.raises(Exception) as expected:
            list(TorchLoader(Items(f"bad-{kind}", 4), batch_size=2))
        with pytest.raises(expected.type) as got:
            list(DataLoader(Items(f"bad-{kind}", 4), batch_size=2))
        assert str(got.value) == str(expected.value)
    finally:
        del SAMPLES[f"bad-{kind}"]


# -- hypothesis: any sample structure, any batching ----------------------------------------------

_DTYPES = [
    np.bool_,
    np.int8,
    np.int16,
    np.int32,
    np.int64,
    np.uint8,
    np.uint16,
    np.uint32,
    np.float16,
    np.float32,
    np.float64,
    np.complex64,
]


def _leaf(draw: Any) -> Any:
    kind = draw(st.sampled_from(["int", "float", "bool", "str", "bytes", "np_scalar", "ndarray", "tensor"]))
    dtype = np.dtype(draw(st.sampled_from(_DTYPES)))
    shape = tuple(draw(st.lists(st.integers(0, 3), max_size=2)))
    return (kind, dtype, shape)


@st.composite
def templates(draw: Any, depth: int = 0) -> Any:
    if depth >= 2 or draw(st.booleans()):
        return ("leaf", _leaf(draw))
    shape = draw(st.sampled_from(["dict", "tuple", "list", "namedtuple"]))
    if shape == "namedtuple":
        return ("namedtuple", [draw(templates(depth + 1)), draw(templates(depth + 1))])
    children = draw(st.lists(templates(depth + 1), min_size=1, max_size=3))
    return (shape, children)


def build(template: Any, i: int) -> Any:
    shape, body = template
    if shape == "leaf":
        kind, dtype, dims = body
        if kind == "int":
            return i * 7 - 20
        if kind == "float":
            return i / 3
        if kind == "bool":
            return i % 3 == 1
        if kind == "str":
            return f"<{i}>"
        if kind == "bytes":
            return b"x" * (i % 4)
        value = np.arange(int(np.prod(dims)), dtype=np.int64).reshape(dims) + i
        value = value.astype(dtype) if dtype.kind != "b" else value % 2 == 0
        if kind == "np_scalar":
            return dtype.type(i % 2 if dtype.kind == "b" else i)
        return torch.from_numpy(np.ascontiguousarray(value)) if kind == "tensor" else value
    children = [build(c, i) for c in body]
    if shape == "dict":
        return {f"k{j}": v for j, v in enumerate(children)}
    if shape == "tuple":
        return tuple(children)
    if shape == "namedtuple":
        return Pair(*children)
    return children


class Templated(Dataset):
    def __init__(self, template: Any, n: int):
        self.template, self.n = template, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> Any:
        return build(self.template, i)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    template=templates(),
    n=st.integers(0, 13),
    batch_size=st.one_of(st.none(), st.integers(1, 5)),
    drop_last=st.booleans(),
    shuffle=st.booleans(),
    threads=st.booleans(),
)
def test_any_sample_structure_and_batching_matches_torch(template, n, batch_size, drop_last, shuffle, threads):
    if batch_size is None:
        drop_last = False
    if shuffle and n == 0:
        shuffle = False  # torch's RandomSampler refuses an empty dataset
    workers = (2, "thread") if threads else (0, None)
    compare(
        Templated(template, n), workers, epochs_=2, batch_size=batch_size, drop_last=drop_last, shuffle=shuffle, generator=True
    )


@settings(max_examples=80, deadline=None)
@given(n=st.integers(0, 40), batch_size=st.one_of(st.none(), st.integers(1, 9)), drop_last=st.booleans())
def test_len_is_torchs(n, batch_size, drop_last):
    if batch_size is None:
        drop_last = False
    reference, dropin = loaders(Items("int", n), batch_size=batch_size, drop_last=drop_last)
    assert len(dropin) == len(reference) == len(list(dropin))
    iterator = iter(dropin)
    assert len(iterator) == len(reference)


# -- slipstream's own order (seed=) ---------------------------------------------------------------


@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 30), batch_size=st.integers(1, 7), seed=st.integers(0, 2**40), drop_last=st.booleans())
def test_seed_gives_slipstreams_permutations_whatever_torchs_rng(n, batch_size, seed, drop_last):
    runs = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)
        loader = DataLoader(Items("int", n), batch_size=batch_size, shuffle=True, drop_last=drop_last, seed=seed)
        runs.append([[x for b in loader for x in b.tolist()] for _ in range(2)])
    assert runs[0] == runs[1]  # a pure function of (seed, epoch)
    keep = n - n % batch_size if drop_last else n
    values = sorted(i * 1000 - 3 for i in range(n))
    for epoch in runs[0]:
        assert len(epoch) == keep and set(epoch) <= set(values) and len(set(epoch)) == keep
    assert len(DataLoader(Items("int", n), batch_size=batch_size, shuffle=True, drop_last=drop_last, seed=seed)) == len(
        TorchLoader(Items("int", n), batch_size=batch_size, shuffle=True, drop_last=drop_last)
    )


# -- buffers ---------------------------------------------------------------------------------------


def test_batches_share_reused_buffers_and_kept_batches_are_never_overwritten():
    loader = DataLoader(Items("ndarray", 40), batch_size=4)
    addresses = set()
    for batch in loader:
        addresses.add(batch.data_ptr())
        del batch
    assert len(addresses) <= 3  # a dropped batch's buffer comes back: nothing is allocated per batch
    kept = list(loader)  # ... and batches that are kept are never written over
    for k, batch in enumerate(kept):
        assert_same(torch.stack([torch.full((3, 2), float(i), dtype=torch.float64) for i in range(4 * k, 4 * k + 4)]), batch)


# -- IterableDataset ---------------------------------------------------------------------------------


@pytest.mark.parametrize("batch_size, drop_last", [(1, False), (4, False), (4, True), (None, False), (30, False)])
def test_an_iterable_dataset_in_this_process_is_batched_as_torch_does(batch_size, drop_last):
    compare(Stream(23), epochs_=2, batch_size=batch_size, drop_last=drop_last)
    compare(Stream(23), batch_size=batch_size, drop_last=drop_last, collate_fn=identity)


@needs_process
@pytest.mark.filterwarnings("ignore:This DataLoader will create")  # 3 workers on a small machine
@pytest.mark.parametrize("num_workers", [2, 3])
@pytest.mark.parametrize("batch_size, drop_last", [(4, False), (4, True), (None, False)])
def test_iterable_workers_are_taken_round_robin_as_torch_does(num_workers, batch_size, drop_last):
    got = compare(Stream(23), (num_workers, "process"), epochs_=2, batch_size=batch_size, drop_last=drop_last, generator=True)
    workers = {int(w) for batch in got[0] for w in torch.as_tensor(batch["worker"]).reshape(-1)}
    assert workers == set(range(num_workers))  # each worker knew which it was


@needs_process
@pytest.mark.parametrize("persistent", [False, True])
def test_iterable_workers_persist_only_when_asked_as_in_torch(persistent):
    got = compare(Stream(12), (2, "process"), epochs_=2, batch_size=3, persistent_workers=persistent, generator=True)
    assert int(got[1][0]["epoch"][0]) == (2 if persistent else 1)


@needs_process
def test_iterable_worker_init_fn_sees_its_worker_info_and_dataset_copy():
    got = compare(Stream(10), (2, "process"), batch_size=2, worker_init_fn=mark_worker, generator=True)
    assert all(torch.equal(b["init"], b["worker"]) for b in got[0])  # set on the worker's copy by worker_init_fn


@needs_process
def test_an_error_in_an_iterable_worker_is_raised_at_its_place_with_its_type():
    # worker 0 streams 0..14, worker 1 15..22; worker 0's second batch raises. torch gives its first
    # batch, worker 1's first, then the error (checked once; torch's own loader then takes 5 s to
    # stop its workers, so it is not run here)
    seen = []
    with pytest.raises(ValueError, match="item 2 is broken"):
        for batch in DataLoader(Stream(23, fail_at=2), batch_size=2, num_workers=2):
            seen.append(batch["i"].tolist())
    assert seen == [[0, 1], [15, 16]]


@needs_process
def test_iterable_out_of_order_gives_the_same_batches():
    reference = list(TorchLoader(Stream(23), batch_size=3, num_workers=2))
    got = list(DataLoader(Stream(23), batch_size=3, num_workers=2, in_order=False))
    assert sorted(b["i"].tolist() for b in got) == sorted(b["i"].tolist() for b in reference)


class Restarts(IterableDataset):
    """An iterator that ends once and then yields again: torch does not ask it twice."""

    def __iter__(self):
        return self

    def __init__(self):
        self.calls = 0

    def __next__(self):
        self.calls += 1
        if self.calls == 6:
            raise StopIteration
        return self.calls


def test_an_iterable_dataset_that_ended_is_not_asked_again():
    for batch_size in (4, 5):
        compare(Restarts(), batch_size=batch_size)


@needs_process
@pytest.mark.parametrize("dataset", [Items("dict", 20), Stream(20)], ids=["map", "iterable"])
def test_leaving_an_epoch_early_then_the_next_epoch_is_torchs(dataset):
    reference, dropin = loaders(dataset, batch_size=2, num_workers=2, persistent_workers=True, generator=True)
    try:
        for loader in (reference, dropin):
            for batch in loader:
                break
        expected, got = list(reference), list(dropin)
    finally:
        dropin.close()
    keys = ["i", "epoch", "worker"] if isinstance(dataset, Stream) else list(expected[0])
    assert_same([{k: b[k] for k in keys} for b in expected], [{k: b[k] for k in keys} for b in got])


def test_the_length_warning_for_an_iterable_dataset_is_torchs():
    for make in (TorchLoader, DataLoader):
        loader = make(Stream(20, length=5), batch_size=2)
        assert len(loader) == 3
        with pytest.warns(UserWarning, match="was reported to be 5"):  # torch compares batches with len(dataset)
            list(loader)


def test_an_iterable_dataset_needs_processes_for_workers():
    with pytest.raises(ValueError, match="needs backend='process'"):
        DataLoader(Stream(5), num_workers=2, backend="thread")


# -- worker processes for map-style datasets ---------------------------------------------------


@needs_process
def test_map_style_workers_see_torchs_worker_info_seeds_and_their_dataset_copy():
    reference, dropin = loaders(WorkerSeen(12), batch_size=2, num_workers=2, worker_init_fn=mark_worker, generator=True)
    expected, got = list(reference), list(dropin)
    dropin.close()
    for batches in (expected, got):
        rows = [{k: v[j].item() for k, v in b.items()} for b in batches for j in range(len(b["id"]))]
        assert {r["id"] for r in rows} == {0, 1}
        assert all(r["workers"] == 2 and r["init"] == r["id"] and r["mine"] for r in rows)
        assert len({r["base"] for r in rows}) == 1 and rows[0]["base"] == rows[0]["torch_seed"]
    assert got[0]["base"][0] == expected[0]["base"][0]  # the same base seed, drawn from the same generator


@needs_process
def test_process_workers_can_be_closed_and_restarted():
    with DataLoader(Items("int", 10), batch_size=4, num_workers=2) as loader:
        first = list(loader)
        loader.close()
        assert_same(first, list(loader))


@needs_process
def test_spawned_workers_get_the_same_batches():
    expected = list(TorchLoader(Items("nested", 8), batch_size=3))  # what torch gives with any workers
    with DataLoader(Items("nested", 8), batch_size=3, num_workers=2, multiprocessing_context="spawn") as loader:
        assert_same(expected, list(loader))
    got = list(
        DataLoader(
            Stream(12), batch_size=3, num_workers=2, multiprocessing_context="spawn", generator=torch.Generator().manual_seed(0)
        )
    )
    reference = list(
        TorchLoader(
            Stream(12), batch_size=3, num_workers=2, multiprocessing_context="fork", generator=torch.Generator().manual_seed(0)
        )
    )
    assert_same(reference, got)  # the start method changes nothing in torch's output


# -- pin_memory and device ------------------------------------------------------------------------


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without an accelerator")
def test_pin_memory_without_an_accelerator_warns_once_and_changes_nothing():
    loader = DataLoader(Items("dict", 6), batch_size=4, pin_memory=True)
    with pytest.warns(UserWarning, match="no accelerator is found"):
        first = list(loader)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = list(loader)
    assert_same(first, second)
    assert_same(list(TorchLoader(Items("dict", 6), batch_size=4)), first)


def test_device_cpu_or_none_moves_nothing():
    for device in (None, "cpu", torch.device("cpu")):
        compare(Items("nested", 6), batch_size=4, device=device)


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the behaviour without CUDA")
def test_a_cuda_device_without_cuda_is_a_clear_error():
    with pytest.raises(RuntimeError, match="torch.cuda.is_available"):
        DataLoader(Items("int", 4), device="cuda")


class FakeCuda:
    """Stands in for torch.cuda to check the prefetcher's order of operations on a CPU."""

    def __init__(self):
        self.log: list[str] = []
        fake = self

        class Stream:
            def __init__(self, device=None):
                self.name = "side"

            def wait_stream(self, other):
                fake.log.append(f"wait {other.name}")

        class Event:
            def record(self, stream):
                fake.log.append(f"record on {stream.name}")

            def synchronize(self):
                fake.log.append("sync")

        class StreamContext:
            def __init__(self, stream):
                self.stream = stream

            def __enter__(self):
                fake.log.append(f"enter {self.stream.name}")

            def __exit__(self, *exc):
                fake.log.append(f"exit {self.stream.name}")

        current = Stream()
        current.name = "current"
        self.Stream, self.Event, self.stream = Stream, Event, StreamContext
        self.current_stream = lambda device=None: current


def test_the_cuda_prefetcher_copies_one_batch_ahead_and_syncs_before_handing_out(monkeypatch):
    from slipstream.torch import _todevice as _device

    fake = FakeCuda()
    for name in ("Stream", "Event", "stream", "current_stream"):
        monkeypatch.setattr(torch.cuda, name, getattr(fake, name))
    monkeypatch.setattr(_device, "_move", lambda batch, device: fake.log.append(f"copy {batch}") or f"gpu{batch}")
    closed = []

    def source():
        try:
            for k in range(3):
                fake.log.append(f"load {k}")
                yield k
        finally:
            closed.append(True)

    out = []
    for batch in _device._to_cuda(source(), torch.device("cuda")):
        fake.log.append(f"use {batch}")
        out.append(batch)
    assert out == ["gpu0", "gpu1", "gpu2"] and closed == [True]
    assert fake.log == [
        "load 0", "enter side", "copy 0", "record on side", "exit side",
        "wait side", "load 1", "enter side", "copy 1", "record on side", "exit side", "sync", "use gpu0",
        "wait side", "load 2", "enter side", "copy 2", "record on side", "exit side", "sync", "use gpu1",
        "wait side", "sync", "use gpu2",
    ]  # fmt: skip


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_batches_arrive_on_the_cuda_device():  # pragma: no cover - runs where there is a GPU
    expected = list(TorchLoader(Items("nested", 9), batch_size=4))
    got = list(DataLoader(Items("nested", 9), batch_size=4, device="cuda", pin_memory=True))
    for e, g in zip(expected, got):
        assert g["image"].device.type == "cuda"
        assert_same(e["image"], g["image"].cpu())


# -- arguments ---------------------------------------------------------------------------------------

BAD = [
    {"batch_sampler": [[0]], "batch_size": 2},
    {"batch_sampler": [[0]], "shuffle": True},
    {"batch_sampler": [[0]], "sampler": [0]},
    {"batch_sampler": [[0]], "drop_last": True},
    {"sampler": [0], "shuffle": True},
    {"num_workers": -1},
    {"prefetch_factor": 2},
    {"num_workers": 2, "prefetch_factor": -1},
    {"timeout": -1},
    {"persistent_workers": True},
    {"batch_size": None, "drop_last": True},
    {"multiprocessing_context": "fork"},
    {"num_workers": 2, "multiprocessing_context": "no-such-method"},
    {"num_workers": 2, "multiprocessing_context": 3},
]


@pytest.mark.parametrize("kwargs", BAD, ids=lambda kw: ",".join(kw))
def test_arguments_are_validated_as_torch_does(kwargs):
    with pytest.raises(Exception) as expected:
        TorchLoader(Items("int", 4), **kwargs)
    with pytest.raises(expected.type) as got:
        DataLoader(Items("int", 4), **kwargs)
    assert str(got.value) == str(expected.value)


@pytest.mark.parametrize("kwargs", [{"shuffle": True}, {"sampler": [0]}, {"batch_sampler": [[0]]}], ids=lambda kw: ",".join(kw))
def test_an_iterable_dataset_refuses_an_order_as_torch_does(kwargs):
    with pytest.raises(ValueError) as expected:
        TorchLoader(Stream(4), **kwargs)
    with pytest.raises(ValueError) as got:
        DataLoader(Stream(4), **kwargs)
    assert str(got.value) == str(expected.value)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"backend": "fiber"}, ValueError, "backend must be"),
        ({"num_workers": 2, "backend": "thread", "multiprocessing_context": "spawn"}, ValueError, "backend='process'"),
        ({"seed": -1}, ValueError, "seed must be"),
        ({"seed": 1.5}, ValueError, "seed must be"),
        ({"device": "nonsense"}, ValueError, "device must be"),
    ],
)
def test_the_extra_arguments_are_validated(kwargs, error, match):
    with pytest.raises(error, match=match):
        DataLoader(Items("int", 4), **kwargs)


def test_it_is_a_torch_dataloader_with_torchs_attributes():
    loader = DataLoader(Items("int", 10), batch_size=3, shuffle=True)
    assert isinstance(loader, TorchLoader)
    assert isinstance(loader.batch_sampler, BatchSampler) and loader.batch_size == 3
    with pytest.raises(ValueError, match="should not be set"):
        loader.batch_size = 4


# -- faults, in a subprocess so nothing can hang the test run ---------------------------------


def run_script(body: str, timeout: float = 90) -> subprocess.CompletedProcess:
    code = textwrap.dedent(body)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([SRC, SUPPORT])}
    return subprocess.run([sys.executable, "-c", code], check=False, capture_output=True, text=True, timeout=timeout, env=env)


@needs_process
def test_an_iterable_worker_that_hangs_raises_a_timeout_and_stops_the_workers():
    result = run_script(
        """
        import threading
        from torch.utils.data import IterableDataset
        from slipstream.torch import DataLoader, DataLoaderTimeoutError

        class Stuck(IterableDataset):
            def __iter__(self):
                threading.Event().wait()  # never set
                yield 1

        loader = DataLoader(Stuck(), num_workers=2, timeout=1, multiprocessing_context="fork")
        try:
            next(iter(loader))
        except DataLoaderTimeoutError as exc:
            assert isinstance(exc, RuntimeError) and isinstance(exc, TimeoutError)
            print("timed out:", exc)
        """
    )
    assert result.returncode == 0, result.stderr
    assert "timed out: DataLoader timed out after 1 seconds" in result.stdout


@needs_process
def test_an_iterable_worker_that_dies_is_reported():
    result = run_script(
        """
        import os
        from torch.utils.data import IterableDataset
        import slipstream as ss
        from slipstream.torch import DataLoader

        class Dies(IterableDataset):
            def __iter__(self):
                os._exit(3)
                yield 1

        try:
            list(DataLoader(Dies(), num_workers=2, multiprocessing_context="fork"))
        except ss.WorkerError as exc:
            assert isinstance(exc, RuntimeError)
            print("reported:", exc)
        """
    )
    assert result.returncode == 0, result.stderr
    assert "reported:" in result.stdout and "exited with code 3" in result.stdout


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_with_process_workers_the_parent_never_reads_the_dataset(method):
    """A dataset that only works after worker_init_fn (a file handle opened per worker) loads with
    process workers: sample 0, which shapes the buffers, is read by a worker too."""
    from procdata import NeedsWorkerInit, open_handle

    with DataLoader(NeedsWorkerInit(), batch_size=4, num_workers=2, worker_init_fn=open_handle, multiprocessing_context=method) as dl:
        got = [int(v) for batch in dl for v in batch]
    assert got == [100 + i for i in range(16)]


@pytest.mark.parametrize("num_workers, backend", [(0, "thread"), (2, "thread"), (2, "process")])
def test_an_endless_sampler_streams_the_batches_torch_gives(num_workers, backend):
    class Endless(torch.utils.data.Sampler):  # iteration-based training: no __len__, never ends
        def __iter__(self):
            k = 0
            while True:
                yield (5 * k) % 8
                k += 1

    kwargs = {"batch_size": 3, "sampler": Endless(), "num_workers": num_workers}
    want = [b.tolist() for _, b in zip(range(20), torch.utils.data.DataLoader(list(range(8)), **kwargs))]
    with DataLoader(list(range(8)), backend=backend, **kwargs) as dl:
        it = iter(dl)
        got = [next(it).tolist() for _ in range(20)]
        it.close()
    assert got == want
