"""Benchmark: slipstream's DataLoader against torch.utils.data.DataLoader (and a plain copy limit).

Both loaders run in this one process on the same data; every measurement is one whole epoch.
Cases:

(a) an in-memory uint8 array of 50,000 images (3x32x32), batch 256, shuffle, no workers:
    slipstream ``DataLoader(X)`` against the copy limit (``np.take(X, idx, axis=0, out=buf)`` of a
    per-epoch permutation, batch by batch, into one preallocated buffer, with ``mode='clip'`` and
    with the default ``mode='raise'``, which buffers its copy when ``out=`` is given), and against
    torch over the same memory: ``TensorDataset`` with ``batch_size=256`` (the usual idiom) and a
    batched idiom (``batch_size=None`` with a ``BatchSampler`` over a dataset whose
    ``__getitem__(indices)`` calls ``torch.index_select``, the fastest setup we found).
    Goal: slipstream >= 80% of np.take (mode='clip').
(b) the same images behind a plain Python container (``__len__`` and ``__getitem__`` returning
    ``X[i]``), the same object for both loaders, batch 256, shuffle, no workers.
    Goal: slipstream >= 1.5x torch.
(c) a container whose ``__getitem__`` sleeps 1 ms (simulated I/O) and returns a 3x32x32 uint8
    array; 4 slipstream threads (``workers=4``) against 4 torch processes (``num_workers=4``,
    default ``persistent_workers=False``, so each epoch pays for worker startup, as slipstream's
    does for its threads). Throughput is measured from ``iter()`` to the end of the epoch; time to
    first batch from ``iter()`` to the first batch in hand.
    Goals: throughput >= torch, first batch >= 3x sooner.

Fair footing: ``torch.set_num_threads(1)``; ``pin_memory=False``; the same data object for both;
in (b) and (c) slipstream's NumPy batches are turned into tensors with ``torch.from_numpy``
(zero-copy) in the timed loop, so both hand the consumer a tensor (in (a) they stay NumPy, like the
np.take limit's; the conversion costs ~1 us per batch); one warm-up epoch per loader; then the loaders
take turns (the order rotates every repeat) and each figure is the median over repeats. Ratios
are the median of the per-repeat ratios of loaders measured back to back, which cancels most of
the drift of a noisy machine. Absolute samples/s depend on the machine; read the ratios.

Run:  make bench              (runs ``.venv/bin/python benchmarks/bench_loader.py``)
      python benchmarks/bench_loader.py [--quick] [--repeats N] [--cases abc]
``--quick`` takes a few seconds (fewer repeats, a smaller case (c)); the full run takes about
40 s on two cores. Needs torch (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable

import numpy as np
import torch

# _common first: it makes slipstream importable from a checkout, and exits with a message when torch is missing
from _common import SEED, Verdicts, measure, paired, permutation, rates, set_footing, summary, table, verdict, versions
from torch.utils.data import BatchSampler, Dataset, RandomSampler, TensorDataset
from torch.utils.data import DataLoader as TorchLoader

import slipstream as ss

SHAPE = (3, 32, 32)
BATCH = 256

# One epoch of one loader: () -> (samples, seconds from iter() to the end, seconds to the first batch).
Epoch = Callable[[], "tuple[int, float, float]"]


# -- containers (module level, so torch workers can pickle them under any start method) ---------
class ImageContainer:
    """A plain Python container: one NumPy image per ``__getitem__``."""

    def __init__(self, images: np.ndarray):
        self.images = images

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> np.ndarray:
        return self.images[i]


class SleepyContainer:
    """Waits 1 ms per sample (simulated I/O), then returns a small image."""

    def __init__(self, n: int):
        self.n = n
        self.image = np.arange(np.prod(SHAPE), dtype=np.uint8).reshape(SHAPE)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> np.ndarray:
        time.sleep(0.001)
        return self.image + np.uint8(i % 251)


class BatchIndexDataset(Dataset):
    """torch's batched idiom: ``__getitem__`` gets a list of indices (from a BatchSampler)."""

    def __init__(self, tensor: torch.Tensor):
        self.tensor = tensor

    def __len__(self) -> int:
        return len(self.tensor)

    def __getitem__(self, indices: list[int]) -> torch.Tensor:
        return torch.index_select(self.tensor, 0, torch.as_tensor(indices))


# -- epochs ---------------------------------------------------------------------------------
def _rows(batch) -> int:
    return len(batch[0]) if isinstance(batch, (list, tuple)) else len(batch)


def slipstream_epoch(loader: ss.DataLoader, to_tensor: bool = True) -> Epoch:
    convert = torch.from_numpy if to_tensor else (lambda b: b)

    def run():
        t0 = time.perf_counter()
        it = iter(loader)
        batch = convert(next(it))
        t1 = time.perf_counter()
        n = len(batch)
        for b in it:
            batch = convert(b)
            n += len(batch)
        return n, time.perf_counter() - t0, t1 - t0

    return run


def torch_epoch(loader: TorchLoader) -> Epoch:
    def run():
        t0 = time.perf_counter()
        it = iter(loader)
        batch = next(it)
        t1 = time.perf_counter()
        n = _rows(batch)
        for batch in it:
            n += _rows(batch)
        del it
        return n, time.perf_counter() - t0, t1 - t0

    return run


def take_epoch(images: np.ndarray, mode: str) -> Epoch:
    out = np.empty((BATCH, *images.shape[1:]), images.dtype)
    n, epochs = len(images), iter(range(1 << 62))

    def run():
        t0 = time.perf_counter()
        order = permutation(n, next(epochs))
        np.take(images, order[:BATCH], axis=0, out=out[: len(order[:BATCH])], mode=mode)
        t1 = time.perf_counter()
        for a in range(BATCH, n, BATCH):
            idx = order[a : a + BATCH]
            np.take(images, idx, axis=0, out=out[: len(idx)], mode=mode)
        return n, time.perf_counter() - t0, t1 - t0

    return run


# -- reporting --------------------------------------------------------------------------------
def _si(x: float) -> str:
    for unit, scale in (("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.2f}{unit}"
    return f"{x:.0f}"


def firsts(res: list[tuple[int, float, float]]) -> list[float]:
    return [f for _, _, f in res]


def loader_table(results, labels: dict[str, str], first_batch: bool = False) -> None:
    columns = [("samples/s", _si, 17)] + ([("1st batch ms", ".1f", 15)] if first_batch else [])
    rows = [(label, {"samples/s": rates(results[key]), "1st batch ms": [1e3 * x for x in firsts(results[key])]})
            for key, label in labels.items()]
    table(rows, columns, corner="loader")


# -- cases ----------------------------------------------------------------------------------------
def case_a(images: np.ndarray, repeats: int, verdicts: Verdicts) -> None:
    n = len(images)
    tensor = torch.from_numpy(images)
    g1, g2 = torch.Generator().manual_seed(SEED), torch.Generator().manual_seed(SEED)
    runs = {
        "clip": take_epoch(images, "clip"),
        "raise": take_epoch(images, "raise"),
        # NumPy batches, like the copy limit (torch.from_numpy would add ~1 us per batch)
        "ss": slipstream_epoch(ss.DataLoader(images, batch_size=BATCH, shuffle=True, seed=SEED), to_tensor=False),
        "torch": torch_epoch(TorchLoader(TensorDataset(tensor), batch_size=BATCH, shuffle=True, generator=g1)),
        "torchB": torch_epoch(
            TorchLoader(
                BatchIndexDataset(tensor),
                batch_size=None,
                sampler=BatchSampler(RandomSampler(range(n), generator=g2), BATCH, drop_last=False),
            )
        ),
    }
    print(f"\n(a) in-memory uint8 array {n}x{'x'.join(map(str, SHAPE))}, batch {BATCH}, shuffle, workers=0 on both")
    print("    (here slipstream's batches stay NumPy arrays, as the np.take limit's do)")
    results = measure(runs, repeats, noun="loaders")
    loader_table(
        results,
        {
            "clip": "np.take(mode='clip', out=buf)  [copy limit]",
            "raise": "np.take(default mode='raise', out=buf)",
            "ss": "slipstream DataLoader(X)",
            "torch": "torch TensorDataset, batch_size=256",
            "torchB": "torch BatchSampler + index_select, batch_size=None",
        },
    )
    ss_thr = rates(results["ss"])
    verdict("slipstream / np.take mode='clip'", paired(ss_thr, rates(results["clip"])), 0.8, verdicts)
    verdict("slipstream / np.take mode='raise'", paired(ss_thr, rates(results["raise"])), None, verdicts)
    verdict("slipstream / torch TensorDataset", paired(ss_thr, rates(results["torch"])), None, verdicts)
    verdict("slipstream / torch batched (its fastest setup)", paired(ss_thr, rates(results["torchB"])), None, verdicts)


def case_b(images: np.ndarray, repeats: int, verdicts: Verdicts) -> None:
    container = ImageContainer(images)
    runs = {
        "ss": slipstream_epoch(ss.DataLoader(container, batch_size=BATCH, shuffle=True, seed=SEED)),
        "torch": torch_epoch(
            TorchLoader(container, batch_size=BATCH, shuffle=True, generator=torch.Generator().manual_seed(SEED))
        ),
    }
    print(f"\n(b) plain Python container of {len(images)} images (__getitem__ -> X[i]), batch {BATCH}, shuffle, workers=0")
    results = measure(runs, repeats, noun="loaders")
    loader_table(results, {"ss": "slipstream DataLoader(container)", "torch": "torch DataLoader(container), default collate"})
    verdict("slipstream / torch", paired(rates(results["ss"]), rates(results["torch"])), 1.5, verdicts)


def case_c(n: int, repeats: int, verdicts: Verdicts) -> None:
    data = SleepyContainer(n)
    runs = {
        "ss": slipstream_epoch(ss.DataLoader(data, batch_size=BATCH, shuffle=True, seed=SEED, workers=4)),
        "torch": torch_epoch(
            TorchLoader(data, batch_size=BATCH, shuffle=True, num_workers=4, generator=torch.Generator().manual_seed(SEED))
        ),
        "torchP": torch_epoch(
            TorchLoader(
                data,
                batch_size=BATCH,
                shuffle=True,
                num_workers=4,
                persistent_workers=True,
                generator=torch.Generator().manual_seed(SEED),
            )
        ),
    }
    method = torch.multiprocessing.get_start_method()
    print(f"\n(c) {n} samples of 1 ms simulated I/O each, batch {BATCH}, shuffle; 4 threads vs 4 processes ({method})")
    print(f"    ideal with 4-way overlap: {n * 1e-3 / 4:.2f} s per epoch, first batch {BATCH * 1e-3 / 4 * 1e3:.0f} ms (threads) "
          f"/ {BATCH:.0f} ms (one process per batch)")
    results = measure(runs, repeats, noun="loaders")
    loader_table(
        results,
        {
            "ss": "slipstream workers=4 (threads)",
            "torch": "torch num_workers=4 (processes)",
            "torchP": "torch num_workers=4, persistent_workers=True",
        },
        first_batch=True,
    )
    ss_thr, t_thr = rates(results["ss"]), rates(results["torch"])
    verdict("throughput: slipstream / torch", paired(ss_thr, t_thr), 1.0, verdicts)
    verdict("first batch: torch time / slipstream time", paired(firsts(results["torch"]), firsts(results["ss"])), 3.0, verdicts)
    verdict("throughput: slipstream / torch persistent (info)", paired(ss_thr, rates(results["torchP"])), None, verdicts)
    first_p = paired(firsts(results["torchP"]), firsts(results["ss"]))
    verdict("first batch: torch persistent / slipstream (info)", first_p, None, verdicts)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run: fewer repeats, a smaller case (c)")
    parser.add_argument("--repeats", type=int, default=None, help="timed epochs per loader (default a/b/c: 11/7/5, quick 3/2/2)")
    parser.add_argument("--cases", default="abc", help="which cases to run, e.g. 'ac' (default abc)")
    args = parser.parse_args(argv)
    repeats_a = args.repeats or (3 if args.quick else 11)
    repeats_b = args.repeats or (2 if args.quick else 7)
    repeats_c = args.repeats or (2 if args.quick else 5)
    n_sleepy = 1024 if args.quick else 4096

    set_footing()  # case (c) asks for 4 workers on any machine
    images = np.random.default_rng(SEED).integers(0, 256, (50_000, *SHAPE), dtype=np.uint8)
    print(versions())
    print(
        "footing: torch.set_num_threads(1); pin_memory=False; same data objects; slipstream batches -> torch.from_numpy "
        "(zero-copy) inside the timed loop in (b), (c);\n"
        f"         1 warm-up epoch per loader, then {repeats_a}/{repeats_b}/{repeats_c} timed epochs (a/b/c) in rotating order; "
        "figures are medians, ratios are medians of back-to-back pairs"
    )
    verdicts = Verdicts(label_width=52, value_width=6)
    start = time.perf_counter()
    if "a" in args.cases:
        case_a(images, repeats_a, verdicts)
    if "b" in args.cases:
        case_b(images, repeats_b, verdicts)
    if "c" in args.cases:
        case_c(n_sleepy, repeats_c, verdicts)
    summary(verdicts, start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
