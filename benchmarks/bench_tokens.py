"""Benchmark: token sequences (``ss.pack``, ``ss.mix``) against grain, LitData, TRL and torchdata, in one run.

The same documents for everyone: log-normal lengths (median 300 tokens, sigma 1, clipped to 1 .. 20,000),
uint16 tokens (``--dtype uint32`` for a vocabulary above 65,536), seeded; see ``_tokens.py`` for how
each peer gets them in its own form. Rows of ``length`` 2048, batches of 32. Cases:

(1) Loader throughput, tokens/s (row slots handed out: batch x length, padding included; the padding
    is case 3's), after the first batch, each figure the median of ``--repeats`` windows of
    ``--seconds`` on one warm iterator (epochs restart inside a window): slipstream
    ``ss.DataLoader(ss.pack(ss.open(file), 2048, method=m), batch_size=32, workers=w, shuffle=True)``
    for ``m`` in concat, best_fit, first_fit and ``w`` in 1, 2 (threads), against grain's
    ``ConcatThenSplitIterDataset``, ``BestFitPackIterDataset`` and ``FirstFitPackIterDataset`` (32 bins)
    over a shuffled ``MapDataset`` of the same arrays (documents cut at 2048: grain's bin packers refuse
    longer ones), batched, in this process (one core) and with ``mp_prefetch`` of 1 and 2 worker
    processes, and against LitData's ``StreamingDataLoader`` over
    ``StreamingDataset(item_loader=TokensLoader(block_size=2048), shuffle=True)`` with 0, 1 and 2
    workers. Ratios: each slipstream method against the grain packer that does the same (its best of
    in-process and ``w`` processes), and concat against LitData's best of 0 and ``w`` workers. Matched
    output (``_tokens_matched.py``): ``ss.pack(..., method="concat", dtype="uint16", segments=False)``,
    what LitData hands out (uint16 tokens only), with 0, 1, 2 threads against LitData (``--only``: a subset).
    Goals (issue): >= 50x grain's packers, >= 10x LitData's TokensLoader.
(2) GIL held per batch by slipstream (``workers=1``, best_fit and concat), two upper bounds: bench_gil's
    probe (a pure-Python counter thread's rate beside the loader against alone, switch interval 0.1 ms;
    other programs on the machine inflate it), and this process's CPU time per batch less the compiled
    row gathers' own (their thread CPU time, clocked around each call): everything else the loader
    does, consumer and worker thread, Python and NumPy under the GIL. The verdict takes the second,
    which other programs barely move (the probe is a bound only on a quiet machine).
    Goal: < 50 us per batch of 32. Info: best_fit with ``workers=0`` (no handoff between threads).
(3) Planning and padding. ``ss.pack(..., method="best_fit")`` of ``--plan-docs`` (10 million) document
    lengths (no tokens: a container whose documents have only lengths), seconds on one core (goal < 5 s).
    Padding (the share of row slots that are padding) on the same ``--pad-docs`` lengths, documents
    longer than 2048 truncated for every packer (as TRL's "bfd" does): slipstream best_fit and
    first_fit, TRL ``pack_dataset(strategy="bfd")`` (its default: best fit within ``map`` batches of
    1000 documents; and in one batch of all), grain's first-fit and best-fit with 32 bins.
    Goals: best_fit padding <= TRL's bfd (one batch: the stricter), <= half of grain's first-fit.
(4) ``ss.mix`` of 3 sources (weights 0.6/0.3/0.1), cost per item: the mixture of three int64 arrays
    read through the loader in batches of 1024 (and, beside it, the same loader over one plain array:
    what any container costs); against grain's ``MapDataset.mix(...).batch(1024)`` and torchdata's
    ``MultiNodeWeightedSampler`` through a ``Batcher(1024)``, over ``range`` sources. Goal: < 1 us per
    item. Info: the loader's tokens/s over ``ss.mix`` of three ``ss.pack`` sources against one. (MosaicML Streaming's ``Stream(proportion=...)`` needs torchvision to import,
    which cannot load beside the CPU torch here: skipped, and said so.)

Peers come from ``make peers`` (a virtual environment of their own, ``.venv-peers``, slipstream
installed there editable); a peer that does not import is skipped with the reason, and slipstream is
measured anyway. Run:  make peers && .venv-peers/bin/python benchmarks/bench_tokens.py
(about 5 minutes on two cores; ``--quick``: under a minute, smaller data). Files are kept in
``--cache`` (default /tmp/slipstream-bench-tokens). Absolute figures depend on the machine and on what
else runs on it; read the ratios.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import _tokens as T
import numpy as np
from _common import Verdicts, set_footing, spread, summary, table, verdict, versions
from _tokens_gil import gil
from _tokens_matched import matched_runs, matched_verdicts

import slipstream as ss
from slipstream.sequences.documents import Documents

LENGTH, BATCH, BINS = 2048, 32, 32
DEFAULT_CACHE = Path("/tmp/slipstream-bench-tokens")
GOAL_GRAIN, GOAL_LITDATA, GOAL_GIL_US, GOAL_PLAN_S, GOAL_MIX_US = 50.0, 10.0, 50.0, 5.0, 1.0
METHODS = {"concat": "ConcatThenSplit", "best_fit": "BestFit", "first_fit": "FirstFit"}  # slipstream -> grain
FIGURES: dict[str, Any] = {}  # every median measured, by case (written by --json)


def si(x: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if x >= scale:
            return f"{x / scale:.2f}{unit}"
    return f"{x:.0f}"


# -- (1) throughput ---------------------------------------------------------------------------------
def windows(make: Callable[[], Any], tokens_of: Callable[[Any], int], seconds: float, repeats: int) -> tuple[float, list[float]]:
    """(seconds to the first batch, tokens/s of ``repeats`` windows of ``seconds``) on one iterator of
    ``make()``'s iterable (a fresh ``iter()`` when an epoch ends). A warm-up window comes first."""
    t0 = time.perf_counter()
    source = make()
    it = iter(source)
    tokens_of(next(it))
    first = time.perf_counter() - t0

    def window(span: float) -> float:
        n, began, restarts = 0, time.perf_counter(), 0.0
        nonlocal it
        while (now := time.perf_counter()) - began - restarts < span:
            try:
                n += tokens_of(next(it))
            except StopIteration:  # a new epoch: its start, to the first batch, is not steady state
                it = iter(source)
                tokens_of(next(it))
                restarts += time.perf_counter() - now
        return n / (now - began - restarts)

    window(min(0.5, seconds / 2))
    rates = []
    for _ in range(repeats):
        gc.collect()
        rates.append(window(seconds))
    it = None  # the iterator's workers stop before the next loader starts
    gc.collect()
    return first, rates


def slipstream_loader(path: Path, method: str, workers: int, **pack: Any) -> T.Loader:
    def make() -> Any:
        packed = ss.pack(ss.open(path), LENGTH, method=method, **pack)
        return ss.DataLoader(packed, batch_size=BATCH, workers=workers, shuffle=True, seed=0, drop_last=True)

    return make, lambda b: int(b["tokens"].size)


def throughput(files: dict[str, Path], have: dict[str, Any], args: argparse.Namespace, verdicts: Verdicts) -> None:
    print(f"\n(1) loader throughput, tokens/s after the first batch (length {LENGTH}, batch {BATCH}, shuffle; "
          f"{args.repeats} windows of {args.seconds:g} s each)")  # fmt: skip
    runs: dict[str, T.Loader] = {}
    for method in METHODS:
        for w in (1, 2):
            runs[f"slipstream {method}, {w} thread{'s' * (w > 1)}"] = slipstream_loader(files["ss"], method, w)
    if have.get("grain"):
        for method, kind in METHODS.items():
            for w in (0, 1, 2):
                label = f"grain {kind}, " + ("in process" if w == 0 else f"{w} process{'es' * (w > 1)}")
                runs[label] = T.grain_packer(files["docs"], kind, LENGTH, BATCH, w, BINS)
    if have.get("litdata"):
        for w in (0, 1, 2):
            runs[f"litdata TokensLoader, {w} workers"] = T.litdata_loader(files["litdata"], LENGTH, BATCH, w)
    runs.update(matched_runs(files["ss"], LENGTH, BATCH))
    runs = {label: run for label, run in runs.items() if not args.only or any(word in label for word in args.only.split(","))}
    rates: dict[str, list[float]] = {}
    firsts: dict[str, float] = {}
    for label, (make, tokens_of) in runs.items():
        try:
            firsts[label], rates[label] = windows(make, tokens_of, args.seconds, args.repeats)
        except Exception as e:  # noqa: BLE001 - a peer failing here is reported, the rest is measured
            print(f"  {label}: failed: {type(e).__name__}: {str(e)[:200]}")
    FIGURES["tokens_per_s"] = {label: statistics.median(r) for label, r in rates.items()}
    FIGURES["first_batch_s"] = firsts
    table([(label, {"tokens/s": r, "1st batch s": [firsts[label]]}) for label, r in rates.items()],
          [("tokens/s", si, 17), ("1st batch s", ".2f", 0)], corner="loader")  # fmt: skip

    def best(prefix: str, workers: list[int]) -> tuple[float, str] | None:
        found = [
            (statistics.median(r), label) for label, r in rates.items() if label.startswith(prefix) and _workers(label) in workers
        ]
        return max(found) if found else None

    print(
        "  ratios: slipstream's median / the peer's best median of in process (one core) and the same worker count "
        "(the verdict), and / the same worker count alone"
    )
    pairs = [(method, f"grain {kind}", f"grain {kind},", GOAL_GRAIN) for method, kind in METHODS.items()]
    pairs.append(("concat", "litdata TokensLoader", "litdata", GOAL_LITDATA))
    for method, name, prefix, goal in pairs:
        for w in (1, 2):
            ours = rates.get(f"slipstream {method}, {w} thread{'s' * (w > 1)}")
            if ours is None:
                continue
            if (peer := best(prefix, [0, w])) is not None:
                verdict(f"{method} {w}w vs {name} [0,{w}]", statistics.median(ours) / peer[0], goal, verdicts)
            if (peer := best(prefix, [w])) is not None:
                verdict(f"{method} {w}w vs {name} [{w}]", statistics.median(ours) / peer[0], None, verdicts)
    matched_verdicts(rates, best, verdicts, GOAL_LITDATA, _workers)


def _workers(label: str) -> int:
    tail = label.rsplit(", ", 1)[-1]
    return 0 if tail == "in process" else int(tail.split()[0])


# -- (3) planning and padding --------------------------------------------------------------------
class Lengths:
    """Documents that have only lengths (their tokens are never read): what planning needs."""

    def __init__(self, lengths: np.ndarray):
        self.lengths = lengths

    def __len__(self) -> int:
        return len(self.lengths)

    def token_documents(self, field: str) -> Documents:
        return Documents(f"{len(self.lengths)} document lengths", [0, len(self.lengths)], np.uint16, self.lengths)


def plan(docs: Lengths, method: str, **pack: Any) -> tuple[float, float, int]:
    """(seconds, padding fraction, rows) of ``ss.pack(docs, LENGTH, method=method)``."""
    t0 = time.perf_counter()
    packed = ss.pack(docs, LENGTH, method=method, **pack)
    rows = len(packed)
    seconds = time.perf_counter() - t0
    tokens = int((np.minimum(docs.lengths, LENGTH) if pack.get("too_long") == "truncate" else docs.lengths).sum())
    return seconds, 1 - tokens / (rows * LENGTH), rows


def planning(files: dict[str, Path], have: dict[str, Any], args: argparse.Namespace, verdicts: Verdicts) -> None:
    print(f"\n(3) planning {args.plan_docs:,} documents with best_fit (one core), and padding on {args.pad_docs:,} documents")
    big = Lengths(T.lengths(args.plan_docs, seed=1))
    times = []
    for _ in range(args.repeats):
        seconds, pad, rows = plan(big, "best_fit")
        times.append(seconds)
    med, rng = spread(times, ".2f")
    FIGURES["plan"] = {"documents": args.plan_docs, "seconds": statistics.median(times), "padding": pad, "rows": rows}
    print(f"  slipstream best_fit, {args.plan_docs:,} documents ({int(big.lengths.sum()):,} tokens): {med} s {rng}, "
          f"{rows:,} rows, padding {pad:.3%} (longer documents split)")  # fmt: skip
    verdict(
        f"plan {args.plan_docs / 1e6:g}M documents, best_fit",
        statistics.median(times),
        GOAL_PLAN_S,
        verdicts,
        unit=" s",
        at_most=True,
    )

    lens = T.lengths(args.docs)[: args.pad_docs]
    small = Lengths(lens)
    pads: dict[str, tuple[float, int, float | None]] = {}
    for method in ("best_fit", "first_fit"):
        seconds, pad, rows = plan(small, method, too_long="truncate")
        pads[f"slipstream {method}"] = (pad, rows, seconds)
    if have.get("trl"):
        for name, batch in (("TRL bfd (map batches of 1000)", None), ("TRL bfd (one batch)", 0)):
            pad, rows, seconds = T.trl_padding(lens, LENGTH, batch)
            pads[name] = (pad, rows, seconds)
    if have.get("grain"):
        docs = T.Docs(files["docs"], limit=LENGTH, count=args.pad_docs)
        for kind in ("FirstFit", "BestFit"):
            t0 = time.perf_counter()
            pad, rows = T.grain_padding(docs, kind, LENGTH, BINS)
            pads[f"grain {kind} ({BINS} bins)"] = (pad, rows, time.perf_counter() - t0)
    FIGURES["padding"] = {name: pad for name, (pad, _, _) in pads.items()}
    print(f"  {'packer':<32} {'padding':>9} {'rows':>8} {'seconds':>9}")
    for name, (pad, rows, seconds) in pads.items():
        print(f"  {name:<32} {pad:>9.3%} {rows:>8,} {seconds:>9.3f}")
    ours = pads["slipstream best_fit"][0]
    if "TRL bfd (one batch)" in pads:
        verdict(
            "best_fit padding vs TRL bfd (one batch)",
            ours / max(pads["TRL bfd (one batch)"][0], 1e-12),
            1.0,
            verdicts,
            at_most=True,
        )
        print(
            f"  {'':<32} planning {pads['TRL bfd (one batch)'][2] / pads['slipstream best_fit'][2]:.0f}x faster than TRL's (one batch)"
        )
    if f"grain FirstFit ({BINS} bins)" in pads:
        verdict(f"best_fit padding vs grain FirstFit ({BINS} bins)", ours / max(pads[f"grain FirstFit ({BINS} bins)"][0], 1e-12), 0.5, verdicts,
                at_most=True)  # fmt: skip


# -- (4) mixing ------------------------------------------------------------------------------------
WEIGHTS = {"web": 0.6, "code": 0.3, "math": 0.1}
MIX_BATCH = 1024


def _loader_us(data: Any, repeats: int, batch: int = MIX_BATCH, size: Callable[[Any], int] = len) -> list[float]:
    """Microseconds per item of whole epochs of ``ss.DataLoader(data, batch)`` (workers=0), after one warm epoch."""
    loader = ss.DataLoader(data, batch_size=batch)
    out = []
    for r in range(repeats + 1):
        t0 = time.perf_counter()
        n = sum(size(b) for b in loader)
        if r:
            out.append((time.perf_counter() - t0) / n * 1e6)
    return out


def mixing(path: Path, have: dict[str, Any], args: argparse.Namespace, verdicts: Verdicts) -> None:
    items = args.mix_items
    print(f"\n(4) ss.mix of 3 sources (weights {WEIGHTS}), {items:,} items read in batches of {MIX_BATCH}: cost per item")
    sources = {name: np.arange(items, dtype=np.int64) * 3 + k for k, name in enumerate(WEIGHTS)}
    mixed = ss.mix(sources, WEIGHTS, seed=0, length=items)
    plain = np.arange(items, dtype=np.int64)
    mix_us, plain_us = _loader_us(mixed, args.repeats), _loader_us(plain, args.repeats)
    own = statistics.median(m - p for m, p in zip(mix_us, plain_us))
    print(f"  slipstream loader over ss.mix of 3 arrays  {statistics.median(mix_us):.3f} us/item (over one array {statistics.median(plain_us):.3f}: "
          f"the mixture's own {own:.3f})")  # fmt: skip
    FIGURES["mix_us_per_item"] = {
        "slipstream loader": statistics.median(mix_us),
        "one array": statistics.median(plain_us),
        "mixture's own": own,
    }
    verdict("ss.mix cost per item", statistics.median(mix_us), GOAL_MIX_US, verdicts, unit=" us", at_most=True)
    peers = {}
    if have.get("grain"):
        peers["grain MapDataset.mix(...).batch"] = [
            T.grain_mix(items, WEIGHTS, items, MIX_BATCH) * 1e6 for _ in range(args.repeats)
        ]
    if have.get("torchdata"):
        peers["torchdata MultiNodeWeightedSampler + Batcher"] = [
            T.torchdata_mix(items, WEIGHTS, items, MIX_BATCH) * 1e6 for _ in range(args.repeats)
        ]
    for name, us in peers.items():
        FIGURES["mix_us_per_item"][name] = statistics.median(us)
        verdict(f"vs {name}", statistics.median(us) / statistics.median(mix_us), None, verdicts)
    if not have.get("streaming"):
        print(f"  mosaicml-streaming Stream(proportion=...): not measured ({T.peer_missing.get('streaming', 'not installed')})")
    # packed sources: the mixture's weights are token weights; its cost beside the rows' gathers
    packs = {name: ss.pack(ss.open(path), LENGTH, method="concat", seed=k) for k, name in enumerate(WEIGHTS)}
    rows = min(len(p) for p in packs.values())

    def tokens(batch: dict[str, np.ndarray]) -> int:
        return int(batch["tokens"].size)

    mixed_rows = _loader_us(ss.mix(packs, WEIGHTS, seed=0, length=rows), args.repeats, BATCH, tokens)
    one_rows = _loader_us(packs["web"], args.repeats, BATCH, tokens)
    FIGURES["mixed_packs_tokens_per_s"] = {
        "ss.mix of 3 ss.pack": 1e6 / statistics.median(mixed_rows),
        "one ss.pack": 1e6 / statistics.median(one_rows),
    }
    print(f"  ss.mix of 3 ss.pack(concat) sources, batch {BATCH}, in order, workers=0: {si(1e6 / statistics.median(mixed_rows))} tokens/s "
          f"(one ss.pack: {si(1e6 / statistics.median(one_rows))})")  # fmt: skip


# -- main ------------------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small data, one short window each: a smoke test")
    parser.add_argument("--repeats", type=int, default=None, help="windows / runs per figure (default 3, quick 1)")
    parser.add_argument("--seconds", type=float, default=None, help="seconds per throughput window (default 2, quick 0.3)")
    parser.add_argument("--docs", type=int, default=None, help="documents in the loader's corpus (default 100,000, quick 4,000)")
    parser.add_argument(
        "--plan-docs", type=int, default=None, help="documents planned in (3) (default 10,000,000, quick 200,000)"
    )
    parser.add_argument(
        "--pad-docs", type=int, default=None, help="documents of the padding comparison (default 20,000, quick 2,000)"
    )
    parser.add_argument(
        "--mix-items", type=int, default=None, help="items of the mixtures in (4) (default 1,000,000, quick 50,000)"
    )
    parser.add_argument("--dtype", default="uint16", choices=sorted(T.VOCAB), help="the stored token dtype (default uint16)")
    parser.add_argument("--cases", default="1234", help="which cases to run (default 1234)")
    parser.add_argument("--only", default="", help="case 1: only the loaders whose label holds one of these comma-separated words")
    parser.add_argument("--json", type=Path, default=None, help="also write every figure and verdict to this JSON file")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"where the files are kept (default {DEFAULT_CACHE})")
    args = parser.parse_args(argv)
    q = args.quick
    args.repeats = args.repeats or (1 if q else 3)
    args.seconds = args.seconds or (0.3 if q else 2.0)
    args.docs = args.docs or (4_000 if q else 100_000)
    args.plan_docs = args.plan_docs or (200_000 if q else 10_000_000)
    args.pad_docs = min(args.pad_docs or (2_000 if q else 20_000), args.docs)
    args.mix_items = args.mix_items or (50_000 if q else 1_000_000)
    set_footing()
    start = time.perf_counter()
    have = T.peer_versions()
    print(versions(*(f"{name} {v}" for name, v in have.items() if v)))
    for name, why in T.peer_missing.items():
        print(f"  {name}: not measured ({why})")
    folder = args.cache / f"{args.docs}-{args.dtype}"
    files = {"docs": folder}
    T.corpus(folder, args.docs, args.dtype)
    files["ss"] = T.write_slipstream(folder, args.dtype)
    if have.get("litdata") and "1" in args.cases:
        try:
            files["litdata"] = T.write_litdata(folder, LENGTH)
        except Exception as e:  # noqa: BLE001 - the peer is skipped, and why is said
            have["litdata"] = None
            print(f"  litdata: not measured (its optimize failed: {type(e).__name__}: {str(e).splitlines()[0][:160]})")
    docs = T.Docs(folder)
    lens = np.diff(docs.arrays()[0])
    print(f"documents: {len(docs):,}, {int(lens.sum()):,} {args.dtype} tokens, length median {int(np.median(lens))}, "
          f"mean {lens.mean():.0f}, max {lens.max():,}; files in {folder}")  # fmt: skip
    verdicts = Verdicts(label_width=46, value_width=8, detail=True)
    if "1" in args.cases:
        throughput(files, have, args, verdicts)
    if "2" in args.cases:
        gil(files["ss"], LENGTH, BATCH, args.repeats, args.seconds, verdicts, FIGURES, GOAL_GIL_US)
    if "3" in args.cases:
        planning(files, have, args, verdicts)
    if "4" in args.cases:
        mixing(files["ss"], have, args, verdicts)
    summary(verdicts, start)
    if args.json is not None:
        FIGURES.update(peers={name: v or T.peer_missing.get(name) for name, v in have.items()}, available=sorted(n for n, v in have.items() if v),
                       verdicts=list(verdicts))  # fmt: skip
        args.json.write_text(json.dumps(FIGURES, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
