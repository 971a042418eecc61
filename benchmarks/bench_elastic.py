"""What elastic resume costs at scale: one rank of an M-rank job resuming an N-rank job's state.

The job: an ImageNet-sized epoch (1,281,167 samples, shuffled), stopped mid-epoch by an N-rank job
and resumed by M ranks. Each new rank, on restart, loads one old rank's state (``load_state_dict``:
it works out what all N old ranks consumed) and draws its first batches (``iter``); this script
times those two steps for one rank, next to the time to plan a fresh epoch on the same rank (the
work every epoch start does anyway), and checks what the M ranks get: every sample of the epoch
once, beyond the new deal's padding. No peer is run: the loaders users compare us with cannot
resume on another number of ranks (torchdata's StatefulDataLoader and LitData need the same
worker/rank layout; MosaicML Streaming needs the same global batch size).

    python benchmarks/bench_elastic.py            # 1,281,167 samples, 1024 -> 1000 ranks and 8 -> 3
    python benchmarks/bench_elastic.py --quick    # 100,000 samples
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import numpy as np

try:
    import slipstream as ss
except ImportError:  # run from a checkout without installing
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import slipstream as ss


class Indices:
    """n samples that are their own index (the order and the deal are what is measured)."""

    def __init__(self, n: int):
        self.n = n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> int:
        return i


def loader(n: int, batch_size: int, rank: int, world: int) -> ss.DataLoader:
    return ss.DataLoader(Indices(n), batch_size, shuffle=True, seed=11, rank=rank, world_size=world, collate=list)


def median_s(step, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        began = time.perf_counter()
        step()
        times.append(time.perf_counter() - began)
    return statistics.median(times)


def case(n: int, old: tuple[int, int], new: tuple[int, int], repeats: int, check_ranks: int) -> dict:
    (w1, b1), (w2, b2) = old, new
    saver = loader(n, b1, 0, w1)
    stop = len(saver) // 2
    saver.load_state_dict({**saver.state_dict(), "batch": stop})  # rank 0 handed out half its batches
    state = json.loads(json.dumps(saver.state_dict()))

    def resume() -> None:
        x = loader(n, b2, w2 - 1, w2)
        x.load_state_dict(state)
        next(iter(x))

    def fresh() -> None:
        next(iter(loader(n, b2, w2 - 1, w2)))

    resume_s, fresh_s = median_s(resume, repeats), median_s(fresh, repeats)
    # what the new ranks get (a sample of them, or all): every unconsumed position once (+ padding)
    seen = np.zeros(n, dtype=np.int64)
    for r in range(w1):  # what the old ranks had handed out, in lockstep
        x = loader(n, b1, r, w1)
        for _, batch in zip(range(stop), x):
            seen[batch] += 1
    ranks = range(w2) if check_ranks >= w2 else np.linspace(0, w2 - 1, check_ranks).astype(int)
    counts = set()
    for r in ranks:
        x = loader(n, b2, int(r), w2)
        x.load_state_dict(state)
        got = list(x)
        counts.add(len(got))
        for batch in got:
            seen[batch] += 1
    complete = check_ranks >= w2
    return {
        "samples": n, "old": f"{w1} ranks x {b1}", "new": f"{w2} ranks x {b2}", "stopped_at_batch": stop,
        "state_bytes": len(json.dumps(state)), "resume_ms": 1e3 * resume_s, "fresh_epoch_ms": 1e3 * fresh_s,
        "resume_over_fresh": resume_s / fresh_s, "equal_batch_counts": len(counts) == 1,
        "lost": int((seen == 0).sum()) if complete else None,
        "twice": int((seen > 1).sum()) if complete else None,
    }  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="100,000 samples")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", help="write the results here too")
    args = parser.parse_args()
    n = 100_000 if args.quick else 1_281_167
    rows = [
        case(n, (8, 256), (3, 256), args.repeats, check_ranks=3),
        case(n, (8, 256), (16, 128), args.repeats, check_ranks=16),
        case(n, (1024, 32), (1000, 32), args.repeats, check_ranks=1000 if args.quick else 10),
    ]
    for row in rows:
        print(
            f"{row['samples']:,} samples, {row['old']} -> {row['new']} (stopped at batch {row['stopped_at_batch']}): "
            f"state {row['state_bytes']} B; resume {row['resume_ms']:.1f} ms vs a fresh epoch's first batch "
            f"{row['fresh_epoch_ms']:.1f} ms ({row['resume_over_fresh']:.2f}x); equal batch counts: "
            f"{row['equal_batch_counts']}; lost {row['lost']}, twice {row['twice']}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
