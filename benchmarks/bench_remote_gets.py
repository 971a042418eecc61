"""Ranged GETs for one epoch over a remote dataset (counted at the S3 proxy), by backend and cache size.

Run from the repository root: `.venv/bin/python benchmarks/bench_remote_gets.py` (env N=samples, 10 a page;
ORDER=sequential|random; W=workers). Needs the test extras (moto, boto3, s3fs).
"""
from __future__ import annotations

import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

import numpy as np

import slipstream as ss
from slipstream import fields as F

sys.path.insert(0, "tools")
import s3local  # noqa: E402


def main() -> None:
    """Print the table: rows are cache limits, columns backends."""
    samples_n = int(os.environ.get("N", 560))
    order = os.environ.get("ORDER", "sequential")
    workers = int(os.environ.get("W", 2))
    with s3local.start_server() as server, s3local.start_proxy(server.endpoint) as proxy, tempfile.TemporaryDirectory() as tmp:
        local = Path(tmp) / "ds"
        samples = [{"label": k, "x": np.arange(k, k + 250, dtype=np.float32)} for k in range(samples_n)]
        ss.write(local, samples, {"label": F.Int(), "x": F.Array("float32", (250,))}, progress=False, page_size=10_000, shard_size=90_000)
        s3local.upload(server, local, "ra-bucket", "ds")
        index = json.loads((local / "index.json").read_text())
        pages = [p for s in index["shards"] for p in s["pages"]]
        largest = max(int(p[1]) for p in pages)
        for k, v in {**server.env(), "AWS_ENDPOINT_URL": proxy.endpoint}.items():
            os.environ[k] = v
        sizes = {"1/2 page": largest // 2, "1.5 pages": largest * 3 // 2, "3 pages": largest * 3 + 200, "6 pages": largest * 6 + 400, "unlimited": 1 << 34}
        print(f"{len(pages)} pages of <= {largest} B, order={order}, workers={workers}")
        print(f"{'cache':>10} | " + " | ".join(f"{b:>8}" for b in ("thread", "helper", "process")))
        for label, limit in sizes.items():
            row = []
            for backend in ("thread", "helper", "process"):
                with tempfile.TemporaryDirectory() as cache, warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    remote = ss.open("s3://ra-bucket/ds/", cache_dir=cache, cache_limit=limit)
                    before = proxy.counts()["ranged_gets"]
                    with ss.DataLoader(remote, 16, seed=7, workers=workers, backend=backend, order=order) as loader:
                        for _ in loader:
                            pass
                    row.append(proxy.counts()["ranged_gets"] - before)
            print(f"{label:>10} | " + " | ".join(f"{g:>8}" for g in row), flush=True)


if __name__ == "__main__":
    main()
