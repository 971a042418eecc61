"""Benchmark: slipstream's worker processes (``backend="process"``) against torch.utils.data.DataLoader.

Cases:

(a) pure-Python per-sample work: a container whose ``__getitem__`` tokenizes a 40-word text with
    Python loops and dicts (calibrated to about 0.5 ms per sample on one core; the calibrated cost
    is printed) and returns a fixed-shape int64 array of 64 token ids and an int label; batch 64,
    shuffle, 2 workers on both sides:
    * throughput, one whole epoch from ``iter()`` to its end: slipstream processes (persistent)
      against torch ``num_workers=2`` (default ``persistent_workers=False``: each epoch starts
      its workers) and torch with ``persistent_workers=True``, under the "fork" start method (the
      Linux default) and "spawn"; and slipstream processes against slipstream ``workers=0``.
      Goal: slipstream >= torch (both rows, fork).
    * time to first batch from a fresh loader: construction + ``iter()`` + the first batch, which
      includes starting the worker processes, then both are shut down. Goal: slipstream sooner.
(b) memory: a container that holds a large Python object (a list of 2 million small dicts with
    strings and ints, ~0.8 GB) and returns a small int64 array per sample; one whole shuffled epoch
    (batch 1024, fork) with workers = 1, 2, 4, each configuration in a fresh interpreter that builds
    the list, then iterates. At the last batch, while the workers are alive, the memory of the parent
    and all its child processes is summed: USS (pages private to one process: what copy-on-write
    has copied) and PSS (each shared page split among its sharers, so the sum is the group's share
    of physical memory). The parent alone after building the list is the baseline.

Fair footing: ``torch.set_num_threads(1)``; ``pin_memory=False``; the same container object for both;
slipstream's NumPy batches become tensors with ``torch.from_numpy`` (zero-copy) inside the timed loop;
one warm-up epoch per loader (it starts the persistent workers); then the loaders take turns (the order
rotates every repeat) and each figure is the median over repeats. Ratios are medians of per-repeat
ratios of loaders measured back to back (the machine is noisy). The containers are defined in this
file, which imports only NumPy at module level, so a "spawn" worker imports just what its library
needs (torch's workers import torch, slipstream's import slipstream).

Run:  python benchmarks/bench_process.py [--quick] [--repeats N] [--cases ab] [--no-spawn]
``--quick`` takes about a minute (a smaller epoch and list); the full run takes about 4-5 minutes on two
cores. Needs torch and psutil (``pip install -e '.[bench]'``).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

# Only NumPy and the standard library at module level: "spawn" workers re-import this file.
SEQ = 64  # token ids per sample
TARGET_MS = 0.5  # pure-Python cost per sample to calibrate to
BATCH = 64
WORKERS = 2
MEM_BATCH = 1024
TIMEOUT = 120  # seconds a loader may wait for one batch before raising (nothing here should hang)

_SYLLABLES = ["ka", "lo", "mi", "ne", "ru", "ta", "shi", "po", "ven", "dar", "el", "quo", "ix", "um", "bra", "zen"]


def _vocabulary(rng: random.Random, n: int = 3000) -> list[str]:
    words = set()
    while len(words) < n:
        words.add("".join(rng.choice(_SYLLABLES) for _ in range(rng.randint(1, 4))))
    return sorted(words)


class TextTokens:
    """A pure-Python tokenizer workload: ``__getitem__`` -> (int64 token ids [SEQ], int label).

    Each sample lower-cases and splits its text, strips punctuation, counts words in a dict, maps
    them to ids through a vocabulary dict (hashing unknown words) and adds character-bigram ids,
    ``rounds`` times over (the calibration knob)."""

    def __init__(self, n: int, rounds: int = 1, seed: int = 0):
        rng = random.Random(seed)
        words = _vocabulary(rng)
        self.vocab = {w: i for i, w in enumerate(words[: len(words) * 2 // 3])}  # a third are unknown
        marks = ["", "", "", ",", "."]
        self.texts = [" ".join(rng.choice(words).capitalize() + rng.choice(marks) for _ in range(40)) for _ in range(n)]
        self.rounds = rounds

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, i: int) -> tuple[np.ndarray, int]:
        text, vocab = self.texts[i], self.vocab
        ids: list[int] = []
        counts: dict[str, int] = {}
        for _ in range(self.rounds):
            ids, counts = [], {}
            for word in text.lower().split():
                word = word.strip(".,")
                counts[word] = counts.get(word, 0) + 1
                tid = vocab.get(word)
                ids.append(tid if tid is not None else 3000 + sum(map(ord, word)) % 1000)
                for a, b in zip(word, word[1:]):
                    ids.append(4000 + (ord(a) * 31 + ord(b)) % 20000)
        tokens = np.zeros(SEQ, dtype=np.int64)
        head = ids[:SEQ]
        tokens[: len(head)] = head
        return tokens, max(counts.values()) % 10


class BigRows:
    """A large Python object: a list of ``n`` small dicts (an int, a string, a tuple); ``__getitem__``
    reads one (touching its reference counts, as any Python code does) and returns an int64 array."""

    def __init__(self, n: int):
        self.rows = [{"id": i, "name": f"item-{i:08d}", "pos": (i % 1000, i // 1000 + 1000)} for i in range(n)]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> np.ndarray:
        row = self.rows[i]
        return np.array([row["id"], len(row["name"]), row["pos"][0], row["pos"][1]], dtype=np.int64)


# -- helpers that need the libraries (imported in main or in a memory child) ----------------------
def _rows(batch: Any) -> int:
    return len(batch[0]) if isinstance(batch, (list, tuple)) else len(batch)


def _ms(x: float) -> str:
    return f"{x * 1e3:.0f}" if x >= 0.1 else f"{x * 1e3:.1f}"


def calibrate(target_ms: float) -> tuple[int, float]:
    """Rounds of ``TextTokens`` that cost ``target_ms`` per sample on one core, and the measured cost (s)."""

    def cost(rounds: int) -> float:
        data = TextTokens(300, rounds, seed=1)
        times = []
        for _ in range(7):
            t0 = time.perf_counter()
            for i in range(len(data)):
                data[i]
            times.append((time.perf_counter() - t0) / len(data))
        return statistics.median(times)

    cost(1)  # warm-up: the first pass pays for caches and allocations
    one = cost(4) / 4  # a round's cost, measured over several (a single round's is dominated by overhead)
    rounds = max(1, round(target_ms * 1e-3 / one))
    return rounds, cost(rounds)


def ss_loader(data: Any, workers: int, context: str | None, batch: int = BATCH, seed: int = 0):
    import slipstream as ss

    if workers == 0:
        return ss.DataLoader(data, batch_size=batch, shuffle=True, seed=seed)
    return ss.DataLoader(
        data, batch_size=batch, shuffle=True, seed=seed, workers=workers, backend="process", mp_context=context, timeout=TIMEOUT
    )


def torch_loader(data: Any, workers: int, context: str, persistent: bool, batch: int = BATCH, seed: int = 0):
    import torch
    from torch.utils.data import DataLoader as TorchLoader

    return TorchLoader(
        data,
        batch_size=batch,
        shuffle=True,
        num_workers=workers,
        persistent_workers=persistent,
        multiprocessing_context=context,
        timeout=TIMEOUT,
        generator=torch.Generator().manual_seed(seed),
    )


# One epoch of one loader: () -> (samples, seconds from iter() to the end, CPU seconds of the consumer's process,
# CPU seconds of all processes: the consumer and its workers).
Epoch = Callable[[], "tuple[int, float, float, float]"]


def _cpu_snapshot() -> tuple[float, dict[int, float]]:
    """CPU seconds of reaped children so far, and of each live descendant."""
    import resource

    import psutil

    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)
    live = {}
    for p in psutil.Process().children(recursive=True):
        try:
            t = p.cpu_times()
            live[p.pid] = t.user + t.system
        except psutil.NoSuchProcess:
            pass
    return reaped.ru_utime + reaped.ru_stime, live


def _workers_cpu(before: tuple[float, dict[int, float]]) -> float:
    """CPU seconds the descendants spent since ``before``: what reaped children used, plus what live ones
    used, less what they had used at ``before`` (a worker started and stopped within counts whole)."""
    reaped, live = _cpu_snapshot()
    return reaped - before[0] + sum(live.values()) - sum(before[1].values())


def ss_epoch(loader: Any) -> Epoch:
    import torch

    def run() -> tuple[int, float, float, float]:
        before = _cpu_snapshot()
        c0, t0 = time.process_time(), time.perf_counter()
        n = 0
        for tokens, labels in loader:
            tokens, labels = torch.from_numpy(tokens), torch.from_numpy(labels)
            n += len(tokens)
        elapsed, consumer = time.perf_counter() - t0, time.process_time() - c0
        return n, elapsed, consumer, consumer + _workers_cpu(before)

    return run


def torch_epoch(loader: Any) -> Epoch:
    def run() -> tuple[int, float, float, float]:
        before = _cpu_snapshot()
        c0, t0 = time.process_time(), time.perf_counter()
        it = iter(loader)
        n = 0
        for batch in it:
            n += _rows(batch)
        del it  # non-persistent workers are stopped (and reaped) here, inside the timing, as in a training loop
        elapsed, consumer = time.perf_counter() - t0, time.process_time() - c0
        return n, elapsed, consumer, consumer + _workers_cpu(before)

    return run


def close(loader: Any) -> None:
    if hasattr(loader, "close"):  # slipstream: stop the persistent processes
        loader.close()
    elif getattr(loader, "_iterator", None) is not None:  # torch persistent workers
        loader._iterator._shutdown_workers()
        loader._iterator = None


def first_batch(make: Callable[[], Any]) -> float:
    """Seconds from constructing a fresh loader to its first batch in hand; then the loader is shut down."""
    gc.collect()
    t0 = time.perf_counter()
    loader = make()
    it = iter(loader)
    next(it)
    elapsed = time.perf_counter() - t0
    try:
        if hasattr(it, "close"):
            it.close()
        elif hasattr(it, "_shutdown_workers"):
            it._shutdown_workers()
        del it
        close(loader)
    except RuntimeError as exc:  # torch: a worker stopped mid-epoch may abort on its way out (seen rarely)
        print(f"    (while shutting down {type(loader).__module__} loader after its first batch: {exc})")
    return elapsed


# -- case (a) --------------------------------------------------------------------------------------
def case_a(n: int, repeats: int, first_repeats: int, spawn: bool, verdicts: Any) -> None:
    from _common import measure, paired, rates, table, verdict

    rounds, cost = calibrate(TARGET_MS)
    data = TextTokens(n, rounds)
    print(f"\n(a) pure-Python tokenizing, {n} samples, batch {BATCH}, shuffle, {WORKERS} workers; "
          f"calibrated cost {cost * 1e3:.3f} ms/sample on one core ({rounds} rounds)")
    print(f"    ideal on {os.cpu_count()} cores: {n * cost:.2f} s/epoch with workers=0, "
          f"{n * cost / min(WORKERS, os.cpu_count() or 1):.2f} s with {WORKERS} workers")

    contexts = ["fork"] + (["spawn"] if spawn else [])
    loaders: dict[str, Any] = {"ss0": ss_loader(data, 0, None)}
    for c in contexts:
        loaders[f"ss-{c}"] = ss_loader(data, WORKERS, c)
        if c == "fork":  # under spawn each epoch would start its workers anew: seconds (see the first batch below)
            loaders[f"torch-{c}"] = torch_loader(data, WORKERS, c, persistent=False)
        loaders[f"torchP-{c}"] = torch_loader(data, WORKERS, c, persistent=True)
    runs = {k: (ss_epoch(v) if k.startswith("ss") else torch_epoch(v)) for k, v in loaders.items()}
    try:
        results = measure(runs, repeats, noun="loaders")
    finally:
        for loader in loaders.values():
            close(loader)
    labels = {"ss0": "slipstream workers=0 (in the consumer's process)"}
    for c in contexts:
        labels[f"ss-{c}"] = f"slipstream {WORKERS} processes ({c}, persistent)"
        if c == "fork":
            labels[f"torch-{c}"] = f"torch num_workers={WORKERS} ({c})"
        labels[f"torchP-{c}"] = f"torch num_workers={WORKERS} ({c}), persistent_workers=True"
    columns = {
        "samples/s": rates,
        "s/epoch": lambda rs: [r[1] for r in rs],
        "CPU s: consumer": lambda rs: [r[2] for r in rs],
        "all processes": lambda rs: [r[3] for r in rs],
    }
    table([(labels[k], {c: f(results[k]) for c, f in columns.items()}) for k in labels],
          [("samples/s", ".0f", 13), ("s/epoch", ".2f", 13), ("CPU s: consumer", ".3f", 15), ("all processes", ".2f", 13)],
          corner="one whole epoch")
    print(f"    (calibrated cost x samples: {n * cost:.2f} CPU s per epoch; CPU seconds barely depend on how busy the machine is, "
          "wall times do)")
    for c in contexts:
        ss_thr = rates(results[f"ss-{c}"])
        goal = 1.0 if c == "fork" else None
        if c == "fork":
            verdict(f"throughput ({c}): slipstream / torch", paired(ss_thr, rates(results[f"torch-{c}"])), goal, verdicts)
        verdict(f"throughput ({c}): slipstream / torch persistent", paired(ss_thr, rates(results[f"torchP-{c}"])), goal, verdicts)
    cpu = paired([r[3] for r in results["ss-fork"]], [r[3] for r in results["torchP-fork"]])
    verdict("CPU s per epoch, all processes (fork): slipstream / torch persistent", cpu, None, verdicts)
    speedup = paired(rates(results["ss-fork"]), rates(results["ss0"]))
    verdict(f"slipstream {WORKERS} processes / workers=0 (ideal {min(WORKERS, os.cpu_count() or 1)}x)", speedup, None, verdicts)

    # time to first batch: fresh loaders, taking turns
    makers = {}
    for c in contexts:
        makers[f"ss-{c}"] = lambda c=c: ss_loader(data, WORKERS, c)
        makers[f"torch-{c}"] = lambda c=c: torch_loader(data, WORKERS, c, persistent=False)
    firsts: dict[str, list[float]] = {k: [] for k in makers}
    names = list(makers)
    for name in names:  # warm-up: first imports, first forks
        first_batch(makers[name])
    for r in range(first_repeats):
        for name in names[r % len(names):] + names[: r % len(names)]:
            firsts[name].append(first_batch(makers[name]))
    print(f"\n    time to first batch from a fresh loader (construction + iter() + first batch, incl. worker start-up), "
          f"{first_repeats} rounds")
    table([(f"{'slipstream' if k.startswith('ss') else 'torch'} {k.split('-')[1]}", {"1st batch ms": [1e3 * x for x in v]})
           for k, v in firsts.items()], [("1st batch ms", ".0f", 15)], corner="loader")
    for c in contexts:
        goal = 1.0 if c == "fork" else None
        sooner = paired(firsts[f"torch-{c}"], firsts[f"ss-{c}"])
        verdict(f"first batch ({c}): torch time / slipstream time", sooner, goal, verdicts)


# -- case (b) --------------------------------------------------------------------------------------
def _group_memory() -> dict[str, float]:
    """USS and PSS (bytes) summed over this process and all its descendants, and how many there are."""
    import psutil

    me = psutil.Process()
    procs = [me, *me.children(recursive=True)]
    uss = pss = 0
    count = 0
    for p in procs:
        try:
            info = p.memory_full_info()
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
        uss += info.uss
        pss += info.pss
        count += 1
    return {"uss": uss, "pss": pss, "processes": count}


def memory_child(spec: str) -> None:
    """One configuration of case (b), in this fresh interpreter; prints one JSON line."""
    lib, workers, rows = spec.split(":")
    workers, rows = int(workers), int(rows)
    if lib.startswith("torch"):
        import torch

        torch.set_num_threads(1)
    t0 = time.perf_counter()
    gc.disable()  # building millions of dicts: no collections on the way (it is then enabled as usual)
    data = BigRows(rows)
    if lib.endswith("-shared"):  # the remedy: the same rows as one pickled buffer in shared memory
        import slipstream as ss

        data.rows = ss.SharedList(data.rows)
    gc.enable()
    gc.collect()
    built = time.perf_counter() - t0
    base = _group_memory()
    if lib.startswith("ss"):
        loader = ss_loader(data, workers, "fork", batch=MEM_BATCH)
    else:
        loader = torch_loader(data, workers, "fork", persistent=False, batch=MEM_BATCH)
    t0 = time.perf_counter()
    total = len(loader)
    n, peak = 0, None
    it = iter(loader)
    for k, batch in enumerate(it):
        n += len(batch)
        if k == total - 1:  # the last batch: every sample was read, the workers are still alive
            peak = _group_memory()
    epoch = time.perf_counter() - t0
    del it
    close(loader)
    print(json.dumps({"base": base, "end": peak, "samples": n, "epoch_s": epoch, "build_s": built}))


LIBS = {
    "ss": "slipstream",
    "torch": "torch",
    "ss-shared": "slipstream + SharedList",
    "torch-shared": "torch + SharedList",
}


def case_b(rows: int, worker_counts: list[int]) -> None:
    print(f"\n(b) memory: a list of {rows:,} small dicts held by the container, one shuffled epoch, batch {MEM_BATCH}, fork;")
    print("    USS and PSS summed over the parent and its worker processes at the last batch; each row in a fresh interpreter")
    out: dict[tuple[str, int], dict] = {}
    for workers in worker_counts:
        for lib in LIBS:
            cmd = [sys.executable, str(Path(__file__).resolve()), "--memory-child", f"{lib}:{workers}:{rows}"]
            try:
                done = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
            except subprocess.TimeoutExpired:
                print(f"    {lib} workers={workers}: TIMED OUT after 600 s")
                continue
            if done.returncode != 0:
                print(f"    {lib} workers={workers}: FAILED (exit {done.returncode})\n{done.stderr[-2000:]}")
                continue
            out[(lib, workers)] = json.loads(done.stdout.strip().splitlines()[-1])
    if not out:
        return
    gib = 1 << 30
    libs = LIBS
    for lib, name in libs.items():
        bases = [r["base"] for (l, _), r in out.items() if l == lib]
        if bases:
            uss, pss = (statistics.median(b[key] for b in bases) / gib for key in ("uss", "pss"))
            note = "  (torch imported)" if lib.startswith("torch") else ""
            print(f"    {name} parent alone after building the list (median): USS {uss:.2f} GiB, PSS {pss:.2f} GiB{note}")
    print(f"    {'workers':>7}  {'library':<24} {'procs':>5}  {'USS sum GiB':>11}  {'PSS sum GiB':>11}  "
          f"{'PSS added by workers':>20}  {'epoch s':>7}")
    for workers in worker_counts:
        for lib, name in libs.items():
            r = out.get((lib, workers))
            if r is None:
                continue
            end = r["end"]
            print(f"    {workers:>7}  {name:<24} {end['processes']:>5}  {end['uss'] / gib:>11.2f}  {end['pss'] / gib:>11.2f}  "
                  f"{(end['pss'] - r['base']['pss']) / gib:>20.2f}  {r['epoch_s']:>7.1f}")
    for mine in ("ss", "ss-shared"):
        print(f"    {libs[mine]} / torch:")
        for workers in worker_counts:
            a, b = out.get((mine, workers)), out.get(("torch", workers))
            if a and b:
                added = (a["end"]["pss"] - a["base"]["pss"]) / max(1, b["end"]["pss"] - b["base"]["pss"])
                uss, pss = a["end"]["uss"] / b["end"]["uss"], a["end"]["pss"] / b["end"]["pss"]
                print(f"      workers={workers}: USS sum {uss:.2f}x, PSS sum {pss:.2f}x, PSS added by workers {added:.2f}x")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short run: a smaller epoch and list, fewer repeats")
    parser.add_argument("--repeats", type=int, default=None, help="timed epochs per loader in (a) (default 5, quick 2)")
    parser.add_argument("--cases", default="ab", help="which cases to run, e.g. 'a' (default ab)")
    parser.add_argument("--no-spawn", action="store_true", help="leave out the 'spawn' rows of (a)")
    parser.add_argument("--rows", type=int, default=None, help="list length in (b) (default 2,000,000, quick 400,000)")
    parser.add_argument("--memory-child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.memory_child:  # no _common here: it imports torch, which the slipstream rows should not carry
        try:
            import slipstream  # noqa: F401
        except ImportError:  # run from a checkout without installing
            sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
        memory_child(args.memory_child)
        return 0

    # _common first: it makes slipstream importable from a checkout, and exits with a message when torch is missing
    from _common import Verdicts, set_footing, summary, versions

    try:
        import psutil
    except ImportError:
        sys.exit("bench_process.py needs psutil: pip install -e '.[bench]'")
    set_footing()
    repeats = args.repeats or (2 if args.quick else 5)
    first_repeats = 3 if args.quick else 5
    n = 1024 if args.quick else 4096
    rows = args.rows or (400_000 if args.quick else 2_000_000)
    print(versions(f"psutil {psutil.__version__}"))
    print("footing: torch.set_num_threads(1); pin_memory=False; same container objects; slipstream batches -> torch.from_numpy "
          "inside the timed loop;\n"
          f"         1 warm-up epoch per loader, then {repeats} timed epochs in rotating order; figures are medians "
          "[min - max], ratios are medians of back-to-back pairs")
    verdicts = Verdicts(label_width=68, value_width=6)
    start = time.perf_counter()
    if "a" in args.cases:
        case_a(n, repeats, first_repeats, not args.no_spawn, verdicts)
    if "b" in args.cases:
        case_b(rows, [1, 2, 4])
    summary(verdicts, start)
    return 0


if __name__ == "__main__":
    sys.exit(main())
