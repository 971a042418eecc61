"""Datasets for the process-backend tests: module-level so spawn/forkserver workers can import them."""

from __future__ import annotations

import os
import random
import signal
import time

import numpy as np

import slipstream as ss


class Records:
    """Pure-Python samples: a dict with an array, a float, a string and a random draw."""

    def __init__(self, n: int = 300, work: int = 200):
        self.n, self.work = n, work
        self.records = [{"id": i, "text": f"sample-{i}" * (1 + i % 3)} for i in range(n)]

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> dict:
        record = self.records[i]
        total = sum(range(self.work))  # a little pure-Python work
        return {
            "x": np.full(4, record["id"], dtype=np.int64),
            "y": float(total % 7) + i / 2,
            "text": record["text"],
            "noise": ss.sample_rng().random(),
        }


class Faulty(Records):
    """Misbehaves at sample ``at``: 'segv', 'exit', 'kill', 'raise', 'hang' or 'none'.

    Before a crash it writes the time to ``stamp`` (when given), so a test can time the report."""

    def __init__(self, how: str, at: int, n: int = 300, stamp: str | None = None):
        super().__init__(n)
        self.how, self.at, self.stamp = how, at, stamp

    def __getitem__(self, i: int) -> dict:
        if i == self.at:
            if self.stamp:
                with open(self.stamp, "w") as f:
                    f.write(repr(time.time()))
            if self.how == "segv":
                os.kill(os.getpid(), signal.SIGSEGV)
            elif self.how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            elif self.how == "exit":
                os._exit(3)
            elif self.how == "raise":
                raise Custom(f"bad sample {i}", i)
            elif self.how == "hang":
                time.sleep(600)
        return super().__getitem__(i)


class Custom(Exception):
    """An exception type of the user's, with two arguments."""

    def __init__(self, message: str, index: int):
        super().__init__(message, index)
        self.index = index


class Seeds:
    """Each sample reports which worker loaded it and the worker's first global random draws."""

    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> dict:
        info = ss.worker_info()
        return {"worker": -1 if info is None else info.id, "py": hash(random.getstate()) % 2**31, "np": int(np.random.get_state()[1][0])}


def remember_init(worker_id: int) -> None:
    os.environ["SLIPSTREAM_TEST_INIT"] = str(worker_id)


class InitSeen:
    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int) -> int:
        return int(os.environ.get("SLIPSTREAM_TEST_INIT", "-1"))


def failing_init(worker_id: int) -> None:
    raise Custom(f"init failed in {worker_id}", worker_id)


def shifted_collate(samples: list) -> dict:
    return {"ids": [int(s["x"][0]) for s in samples], "n": len(samples)}


class Huge:
    """One sample of ``nbytes`` bytes (a broadcast view: nothing is allocated until a batch is)."""

    def __init__(self, nbytes: int, n: int = 4):
        self.nbytes, self.n = nbytes, n

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> np.ndarray:
        return np.broadcast_to(np.uint8(i), (self.nbytes,))


class Holder:
    """A dataset over any sequence of dicts (a list, or an ss.SharedList)."""

    def __init__(self, items):
        self.items = items

    def __len__(self) -> int:
        return len(self.items)

    def __getitem__(self, i: int) -> dict:
        item = self.items[i]
        return {"id": item["id"], "size": len(item["text"])}


_handle: dict | None = None


def open_handle(worker_id: int) -> None:
    """A worker_init that opens the per-worker resource NeedsWorkerInit reads through."""
    global _handle
    _handle = {"offset": 100}


class NeedsWorkerInit:
    """Readable only in a worker whose worker_init ran (torch's idiom for h5py and the like)."""

    def __len__(self) -> int:
        return 16

    def __getitem__(self, i: int) -> int:
        return _handle["offset"] + i  # TypeError in a process where worker_init did not run


def failing_collate(samples: list) -> list:
    """A collate that fails on the batch holding sample 6."""
    if 6 in samples:
        raise ValueError("cannot collate")
    return samples


class TaggedInit:
    """A worker_init that leaves ``tag + worker_id`` where ``InitSeen`` reads it."""

    def __init__(self, tag: int):
        self.tag = tag

    def __call__(self, worker_id: int) -> None:
        os.environ["SLIPSTREAM_TEST_INIT"] = str(self.tag + worker_id)
