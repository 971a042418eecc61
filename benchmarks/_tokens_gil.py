"""Case (2) of ``bench_tokens.py``: the GIL a packing loader holds per batch, two upper bounds.

The probe: bench_gil's pure-Python counter thread, its rate beside the loader against alone (switch
interval 0.1 ms); other programs on the machine move it both ways. The CPU bound: this process's
CPU time per batch less the compiled row gathers' own (``KernelClock``: their thread CPU time, clocked
around each call), so everything else the loader does, consumer and worker thread, Python and NumPy
under the GIL (and the threads' handoffs); other programs barely move it, so the verdict takes it.
"""

from __future__ import annotations

import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from _common import Verdicts, spread, verdict
from bench_gil import PROBE_SWITCH, Counter

import slipstream as ss


class KernelClock:
    """Stands in for a packing's compiled module (``Packing._kernel``, a private the benchmark reaches
    on purpose): the thread CPU time its row gathers take, summed over every thread that calls them."""

    def __init__(self, kernel: Any):
        self.kernel, self.seconds, self._lock = kernel, 0.0, threading.Lock()

    def __getattr__(self, name: str) -> Any:
        call = getattr(self.kernel, name)
        if not name.startswith("rows_"):
            return call

        def timed(*args: Any) -> Any:
            began = time.thread_time()
            try:
                return call(*args)
            finally:
                spent = time.thread_time() - began
                with self._lock:
                    self.seconds += spent

        return timed


def gil(
    path: Path, length: int, batch: int, repeats: int, window: float, verdicts: Verdicts, figures: dict[str, Any], goal_us: float
) -> None:
    """Case (2) of ``bench_tokens.py``: for each loader, ``repeats`` probe runs and CPU runs of whole epochs
    lasting at least ``window`` seconds; prints the table and verdicts, records the medians in ``figures``."""
    print(
        f"\n(2) GIL held per batch of {batch} by slipstream (workers=1): the probe (switch interval {PROBE_SWITCH * 1e6:.0f} us), and "
        "this process's CPU per batch less the compiled gathers' (an upper bound on the GIL held that other programs do not move)"
    )
    print(f"  {'method, workers':<16} {'probe us/batch':>15} {'[min - max]':>15} {'held share':>11} {'CPU us/batch':>13} {'gathers':>8} "
          f"{'outside gathers':>16} {'[min - max]':>15}")  # fmt: skip
    for method, workers in (("best_fit", 1), ("concat", 1), ("best_fit", 0)):
        packed = ss.pack(ss.open(path), length, method=method)
        clock = KernelClock(packed._kernel) if getattr(packed, "_kernel", None) is not None else None
        if clock is not None:
            packed._kernel = clock
        loader = ss.DataLoader(packed, batch_size=batch, workers=workers, shuffle=True, seed=0)
        for _ in loader:  # warm: pages mapped, buffers shaped
            pass
        held, shares, cpu, gathers, outside = [], [], [], [], []
        old = sys.getswitchinterval()
        for _ in range(repeats):
            sys.setswitchinterval(PROBE_SWITCH)
            try:
                with Counter() as beside:
                    batches, seconds = _epochs(loader, window)
                with Counter() as alone:
                    time.sleep(seconds)
            finally:
                sys.setswitchinterval(old)
            share = max(0.0, 1.0 - beside.rate / alone.rate)
            shares.append(share)
            held.append(share * seconds / batches * 1e6)
            began, kernel = time.process_time(), clock.seconds if clock else 0.0
            batches, _ = _epochs(loader, window)
            spent, kernel = time.process_time() - began, (clock.seconds - kernel) if clock else float("nan")
            cpu.append(spent / batches * 1e6)
            gathers.append(kernel / batches * 1e6)
            outside.append((spent - kernel) / batches * 1e6)
        probe_med, probe_rng = spread(held, ".1f")
        out_med, out_rng = spread(outside, ".1f")
        print(f"  {f'{method}, {workers}':<16} {probe_med:>15} {probe_rng:>15} {statistics.median(shares):>10.1%} {statistics.median(cpu):>13.1f} "
              f"{statistics.median(gathers):>8.1f} {out_med:>16} {out_rng:>15}")  # fmt: skip
        # the CPU bound is the verdict's: the probe is an upper bound only on a quiet machine (contention
        # during the loader's run inflates it, during the counter's run alone deflates it)
        bound = statistics.median(outside) if clock else statistics.median(held)
        if workers != 1:  # info: the loader's own work in this thread, no handoff to a worker
            continue
        figures.setdefault("gil_us_per_batch", {})[method] = bound
        figures.setdefault("gil_probe_us_per_batch", {})[method] = statistics.median(held)
        figures.setdefault("cpu_outside_gathers_us_per_batch", {})[method] = statistics.median(outside)
        verdict(f"GIL held per batch, {method} (CPU bound)", bound, goal_us, verdicts, unit=" us", at_most=True)


def _epochs(loader: Any, seconds: float) -> tuple[int, float]:
    """Batches and seconds of whole epochs lasting at least ``seconds`` (nothing kept)."""
    n, t0 = 0, time.perf_counter()
    while True:
        for _ in loader:
            n += 1
        if (elapsed := time.perf_counter() - t0) >= seconds:
            return n, elapsed
