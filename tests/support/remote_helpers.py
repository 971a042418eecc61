"""What tests/remote/test_remote.py shares with the child interpreters it runs its scenarios in.

The dataset's recipe, the loader epoch the tests compare, and the ``scenario_*`` functions a child
runs: ``python tests/support/remote_helpers.py SCENARIO JSON_KWARGS`` calls ``SCENARIO(**kwargs)`` and
prints ``RESULT`` + the JSON of its result on stdout, then exits (at once, with ``os._exit``, when
the result says ``"abandoned"``: a part of the scenario that ran out of time still runs). A scenario does its own comparisons with local data: an
``AssertionError`` fails the child, and so the test, with a traceback. This module imports neither
pytest nor the test module, so a child starts quickly.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
import traceback
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
from helpers import assert_same, snapshot
from packed import photo_like

import slipstream as ss
from slipstream import fields as F
from slipstream import ops

TOOLS = Path(__file__).resolve().parents[2] / "tools"
if str(TOOLS) not in sys.path:
    sys.path.insert(0, str(TOOLS))
import s3local  # noqa: E402

BUCKET = "slipstream-remote"
FIELDS = {"image": F.Image(codec="jpeg"), "label": F.Int(), "x": F.Array("float32", (4,))}
SAMPLES = 240
SPLIT = 100  # the two separately written packed files hold samples [0, SPLIT) and [SPLIT, SAMPLES)
PAGE_SIZE = 16_000
SHARD_SIZE = "60KB"  # 5 shards of 3-4 pages, about 320 KB in all
BATCH = 16
SEED = 11
RESULT = "scenario result: "


def samples() -> list[dict[str, Any]]:
    return [
        {"image": photo_like(40 + 7 * (k % 4), 52 - 5 * (k % 3), seed=k), "label": k, "x": np.arange(4, dtype=np.float32) + k / 8}
        for k in range(SAMPLES)
    ]


def pipeline() -> list[Any]:
    return [ops.RandomResizedCrop(24, scale=(0.3, 1.0)), ops.RandomHorizontalFlip(), ops.ToCHW()]


def epoch(ds: Any, mapped: bool = True, backend: str = "thread", workers: int = 2, **kwargs: Any) -> list[Any]:
    """One epoch's batches (copied), through the image pipeline when ``mapped``."""
    kwargs.setdefault("seed", SEED)
    view = ds.map(image=pipeline()) if mapped else ds
    with ss.DataLoader(view, BATCH, backend=backend, workers=workers, **kwargs) as loader:
        return [snapshot(batch) for batch in loader]


def fetcher_stats(ds: Any) -> dict[str, Any]:
    """The remote reader's counters in this process (``ds.remote_stats()``)."""
    return ds.remote_stats()


def proxy_control(endpoint: str, name: str, body: dict[str, Any] | None = None) -> Any:
    """``ProxyHandle``'s control calls ("config", "counts"), from a process that did not start the proxy."""
    data = None if body is None else json.dumps(body).encode()
    with urllib.request.urlopen(
        urllib.request.Request(f"{endpoint}{s3local.CONTROL_PREFIX}{name}", data=data), timeout=10
    ) as answer:
        return json.loads(answer.read())


def fail_for_good(endpoint: str) -> None:
    """Every ranged GET through the proxy at ``endpoint`` answers 503 from now on."""
    proxy_control(endpoint, "config", {"faults": ["503"], "every": 1})


def _error(e: ss.RemoteReadError, start: float) -> dict[str, Any]:
    return {
        "type": type(e).__name__, "seconds": time.monotonic() - start, "url": e.url, "start": e.start, "stop": e.stop,
        "attempts": e.attempts, "message": str(e), "returned_at": time.time(),
    }  # fmt: skip


# ------------------------------------------------------------------------------------------ scenarios


def scenario_epoch(
    url: str, local: str, cache_dir: str, open_kwargs: dict[str, Any], loader_kwargs: dict[str, Any]
) -> dict[str, Any]:
    """A full epoch from ``url`` equals the same epoch from ``local``; the fetcher's counters."""
    remote = ss.open(url, cache_dir=cache_dir, **open_kwargs)
    want = epoch(ss.open(local), **loader_kwargs)
    got = epoch(remote, **loader_kwargs)
    assert len(got) == len(want) == -(-SAMPLES // BATCH)
    assert_same(got, want, "remote epoch")
    return fetcher_stats(remote)


def scenario_faults(url: str, local: str, cache_dir: str, endpoint: str, plans: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """For each plan (a proxy schedule: ``faults``, ``every``, ``slow``; and ``open``, ``loader``:
    keyword arguments): the schedule set at the proxy ``endpoint``, then ``scenario_epoch`` in a
    cache folder of its own. Per plan: the proxy's counters during it, the fetcher's, and the
    traceback when it failed (the next plan runs anyway). The schedule is cleared at the end."""
    out = {}
    for name, plan in plans.items():
        proxy_control(
            endpoint, "config", {"faults": plan["faults"], "every": plan.get("every", 1), "slow": plan.get("slow", 2.0)}
        )
        before = proxy_control(endpoint, "counts")
        try:
            stats, error = scenario_epoch(url, local, f"{cache_dir}/{name}", plan.get("open", {}), plan.get("loader", {})), None
        except Exception:  # noqa: BLE001 - reported to the test of this plan
            stats, error = None, traceback.format_exc()
        after = proxy_control(endpoint, "counts")
        faults = {k: n - before["faults"].get(k, 0) for k, n in after["faults"].items() if n != before["faults"].get(k, 0)}
        out[name] = {
            "stats": stats,
            "error": error,
            "faults": faults,
            "ranged_gets": after["ranged_gets"] - before["ranged_gets"],
        }
    proxy_control(endpoint, "config", {"faults": None})
    return out


def _until(seconds: float, call: Any) -> dict[str, Any]:
    """``call()`` run in a daemon thread, given at most ``seconds``: the error it raised (a
    RemoteReadError's url, range, attempts, message; another's type and text), and ``seconds``,
    the time it took; ``{"seconds": None}`` when it still runs then (it is abandoned)."""
    got: dict[str, Any] = {"seconds": None}
    start = time.monotonic()

    def run() -> None:
        try:
            call()
            got.update(type=None, seconds=time.monotonic() - start)
        except ss.RemoteReadError as e:
            got.update(_error(e, start))
        except BaseException as e:  # noqa: BLE001 - reported to the test
            got.update(type=type(e).__name__, message=str(e), seconds=time.monotonic() - start)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    return dict(got)


def _drain(loader: Any) -> None:
    with loader:
        for _ in loader:
            pass


def scenario_fails_for_good(
    url: str, cache_dir: str, endpoint: str, budget: float, how: str, backends: list[str], wait: float
) -> dict[str, Any]:
    """Sample 0 is read (shard 0's size checked, its first page kept) and a loader made for each of
    ``backends`` while the store works; then it fails for good (``how``: "503" answers at the proxy
    ``endpoint``; "stopped": a proxy started here in front of ``endpoint``, then stopped). Then a
    sample of shard 0's last page is read, and each loader's epoch run, each given ``wait``
    seconds: the RemoteReadError of each, and how long it took (``"abandoned"`` when one ran out of
    time: the child then leaves at once)."""
    own = s3local.start_proxy(endpoint) if how == "stopped" else None
    options = {"endpoint_url": own.endpoint} if own is not None else None
    # readahead above the page count: every prefetch runs at once (none waits behind another's retries)
    ds = ss.open(url, cache_dir=cache_dir, retry_budget=budget, timeout=2, readahead=64, storage_options=options)
    ds[0]
    loaders = {b: ss.DataLoader(ds.map(image=pipeline()), BATCH, shuffle=True, seed=SEED, workers=2, backend=b) for b in backends}
    if own is not None:
        own.stop()
    else:
        fail_for_good(endpoint)
    out = {"read": _until(wait, lambda: ds[int(ds.shards[0].page_starts()[-1])])}
    for backend, loader in loaders.items():
        out[backend] = _until(wait, lambda loader=loader: _drain(loader))
    out["abandoned"] = any(part["seconds"] is None for part in out.values())
    return out


def scenario_read_behind_queue(url: str, cache_dir: str, endpoint: str, budget: float, wait: float) -> dict[str, Any]:
    """With ``readahead=1``: sample 0 read, then 503 for good, then every page prefetched (queued
    behind one another), then the last sample read, given ``wait`` seconds: its error and how long
    it took (``"abandoned"`` when it ran out of time)."""
    ds = ss.open(url, cache_dir=cache_dir, retry_budget=budget, timeout=2, readahead=1)
    ds[0]
    fail_for_good(endpoint)
    ds.prefetch(np.arange(len(ds)))
    got = _until(wait, lambda: ds[len(ds) - 1])
    return {**got, "abandoned": got["seconds"] is None}


SCENARIOS = {name: f for name, f in dict(globals()).items() if name.startswith("scenario_")}


def main(argv: list[str]) -> None:
    name, kwargs = argv
    result = SCENARIOS[name](**json.loads(kwargs))
    print(RESULT + json.dumps(result), flush=True)
    if isinstance(result, dict) and result.get("abandoned"):
        os._exit(0)  # (the thread still running the abandoned part may hold the exit up)


if __name__ == "__main__":
    main(sys.argv[1:])
