"""The compiled token kernels (_packing: plan, rows_bins, rows_concat; _mixing: simulate, locate,
permute, items) run in many threads at once over shared inputs and give what one thread gives: with
the GIL released around each call on a normal interpreter, and with no GIL at all on a
free-threaded one, where importing slipstream and the kernels must leave the GIL disabled.

The threads run in a child interpreter, so a crash or a hang fails the test instead of the run.
"""

from __future__ import annotations

import json
import sysconfig

import pytest
from helpers import run_python

pytest.importorskip("slipstream.sequences._packing", reason="the _packing extension is not built (no C compiler)")
pytest.importorskip("slipstream.sequences._mixing", reason="the _mixing extension is not built (no C compiler)")

FREE_THREADED = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))

_CHILD = """
import json, sys, threading, warnings

warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    import numpy as np
    import slipstream as ss
    from slipstream.sequences import _mixing, _packing
    from slipstream.sequences.packplan import concat_plan, max_bins, shuffle_keys
    from slipstream.sequences.permute import source_keys
    from slipstream.sequences.weights import margin
gil_after_import = sys._is_gil_enabled() if hasattr(sys, "_is_gil_enabled") else True

THREADS, ROUNDS = int(sys.argv[1]), int(sys.argv[2])
LENGTH, DOCS, PAGES = 64, 400, 5
I32, OUT_I32 = 3, 0  # the kernels' codes of int32 tokens and int32 outputs

rng = np.random.default_rng(0)
lengths = rng.integers(1, LENGTH + 1, DOCS).astype(np.int64)
page_first = np.linspace(0, DOCS, PAGES + 1).astype(np.int64)
pages = []  # (offsets, values) of each page, kept alive: the table holds their addresses
for p in range(PAGES):
    own = lengths[page_first[p] : page_first[p + 1]]
    offsets = np.concatenate([[0], np.cumsum(own)]).astype(np.int64)
    pages.append((offsets, rng.integers(0, 50000, int(offsets[-1])).astype(np.int32)))
off_addr = np.array([o.ctypes.data for o, _ in pages], np.uint64)
val_addr = np.array([v.ctypes.data for _, v in pages], np.uint64)
nvals = np.array([v.size for _, v in pages], np.int64)
none = np.zeros(0, np.int64)

n = 3
M = margin(n)
weights = np.array([[5, 3, 2], [1, 1, 8]], np.int64)  # two pieces, each summing to 10
w = np.ascontiguousarray(weights * M)
starts = np.array([0, 1500], np.int64)
T, S, EVERY, STEPS = 10 * M, 10, 64, 4096

def gather(call, rows, plan_args):
    tokens, seg, pos = (np.empty((len(rows), LENGTH), np.int32) for _ in range(3))
    missing = call(rows, page_first, off_addr, val_addr, nvals, tokens, seg, pos, none, *plan_args, LENGTH, 0, I32, OUT_I32, OUT_I32)
    assert missing == 0
    return [tokens.tobytes(), seg.tobytes(), pos.tobytes()]

def packing(seed):
    bound = max_bins(lengths, LENGTH)
    offsets, items = np.empty(bound + 1, np.int64), np.empty(DOCS, np.int64)
    bins = _packing.plan(lengths, none, shuffle_keys(seed), LENGTH, seed % 2, bound, offsets, items)
    offsets = offsets[: bins + 1].copy()
    rows = np.random.default_rng(seed).permutation(bins).astype(np.int64)
    got = [offsets.tobytes(), items.tobytes()]
    got += gather(_packing.rows_bins, rows, (offsets, items, lengths, none, none))
    concat = concat_plan(lengths, LENGTH, seed)
    got += gather(_packing.rows_concat, np.arange(concat.rows, dtype=np.int64)[::-1].copy(), (concat.cum, concat.order))
    return got

def mixing(seed):
    lam, cnt = np.zeros(n, np.int64), np.zeros(n, np.int64)
    src, idx = np.empty(STEPS, np.int32), np.empty(STEPS, np.int64)
    ck_lam, ck_cnt = np.zeros((STEPS // EVERY + 1, n), np.int64), np.zeros((STEPS // EVERY + 1, n), np.int64)
    _mixing.simulate(w, starts, T, S, 0, STEPS, lam, cnt, src, idx, EVERY, ck_lam[1:], ck_cnt[1:])
    r = np.sort(np.random.default_rng(seed).integers(0, STEPS, 500)).astype(np.int64)
    at_src, at_idx = np.empty(r.size, np.int32), np.empty(r.size, np.int64)
    _mixing.locate(w, starts, T, S, EVERY, ck_lam, ck_cnt, r, at_src, at_idx)
    assert (at_src == src[r]).all() and (at_idx == idx[r]).all()
    x = np.arange(3000, dtype=np.int64)
    sizes = x + 1 + seed
    keys = np.random.default_rng(seed).integers(0, 2**63, x.size).astype(np.uint64)
    image, item = np.empty(x.size, np.int64), np.empty(x.size, np.int64)
    _mixing.permute(x, sizes, keys, image)
    _mixing.items(src[: x.size].copy(), idx[: x.size].copy(), np.array([7, 11, 13], np.int64), source_keys(seed, n), item)
    return [lam.tobytes(), cnt.tobytes(), src.tobytes(), idx.tobytes(), ck_lam.tobytes(), at_src.tobytes(), image.tobytes(), item.tobytes()]

def work(r):
    return packing(r) + mixing(r)

expected = [work(r) for r in range(ROUNDS)]  # one thread
failures, crashes = [], []
barrier = threading.Barrier(THREADS)

def run(t):
    try:
        barrier.wait()
        for i in range(ROUNDS):
            r = (i + t) % ROUNDS  # the threads run different rounds at any moment
            if work(r) != expected[r]:
                failures.append((t, r))
    except BaseException as exc:
        crashes.append(f"thread {t}: {type(exc).__name__}: {exc}")

threads = [threading.Thread(target=run, args=(t,)) for t in range(THREADS)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
print(json.dumps({
    "gil_after_import": gil_after_import,
    "gil_after_run": sys._is_gil_enabled() if hasattr(sys, "_is_gil_enabled") else True,
    "warnings": [str(w.message) for w in caught if "GIL" in str(w.message)],
    "failures": failures, "crashes": crashes,
}))
"""


def test_the_token_kernels_in_many_threads_give_one_threads_results():
    result = run_python(_CHILD, timeout=300, argv=["8", "6"])
    assert result.returncode == 0, f"the child failed (rc {result.returncode}):\n{result.stderr[-3000:]}"
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["crashes"] == [], report["crashes"]
    assert report["failures"] == [], f"(thread, round) pairs whose results differ from one thread's: {report['failures']}"


@pytest.mark.skipif(not FREE_THREADED, reason="a free-threaded (3.13t) interpreter's check: this one has a GIL")
def test_importing_slipstream_and_running_the_token_kernels_leaves_the_gil_disabled():
    result = run_python(_CHILD, timeout=300, argv=["4", "1"])
    assert result.returncode == 0, f"the child failed (rc {result.returncode}):\n{result.stderr[-3000:]}"
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["warnings"] == [], report["warnings"]  # each names the module that enabled the GIL
    assert (report["gil_after_import"], report["gil_after_run"]) == (False, False)
