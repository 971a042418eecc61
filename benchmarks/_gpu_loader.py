"""Feeds of ``bench_gpu.py`` and how it times them.

Two ways to get the device stage's batches, both iterables of bf16 channels_last image batches on the device
(the consumer's current stream waits for each on the GPU, not the host) with a ``close()`` that stops all:

- ``LoaderFeed``: the spelling users write, ``ss.DataLoader`` over ``ss.open(p).map(image=[...], device=...)``:
  the loader's workers (threads or processes, NumPy only) read bytes and windows (and resample ``cpu_share`` of
  the JPEGs on the CPU), its finish thread decodes and resamples on a side stream, ``prefetch`` batches ahead;
- ``StageFeed``: the same work driven by hand, ``slipstream.gpu.DeviceStage.host`` in the benchmark's own threads
  and ``device_batch`` in one thread on a side stream.

``timed`` measures img/s over whole batches spanning a number of seconds after a warm-up, and the CPU cores used
(``cpu_seconds``: this process and all its descendants, per wall second).
"""

from __future__ import annotations

import collections
import itertools
import os
import queue
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import _gpu as G
import bench_images as bi
import torch
from _common import SEED, permutation

import slipstream as ss
from slipstream import ops

TIMEOUT = 60.0  # seconds any batch may take before the run raises
IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
CLK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def device_ops() -> list[Any]:
    """RandomResizedCrop(224) + flip + ImageNet normalize, as bfloat16 (the device stage's output dtype)."""
    return [ops.RandomResizedCrop(bi.CROP), ops.RandomHorizontalFlip(), ops.Normalize(IMAGENET_MEAN, IMAGENET_STD, dtype="bfloat16")]


# -- measuring ------------------------------------------------------------------------------------
def cpu_seconds() -> float:
    """CPU time (user + system) of this process, its live descendants (Linux /proc; elsewhere this process only)
    and its ended children."""
    try:
        stats = {}
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    text = (entry / "stat").read_text()
                except OSError:  # ended meanwhile
                    continue
                fields = text[text.rindex(")") + 2 :].split()  # state, ppid, ..., utime (12th), stime (13th)
                stats[int(entry.name)] = (int(fields[1]), int(fields[11]) + int(fields[12]))
        ours, total, grew = {os.getpid()}, 0, True
        while grew:
            grew = False
            for pid, (ppid, _) in stats.items():
                if ppid in ours and pid not in ours:
                    ours.add(pid)
                    grew = True
        total = sum(stats[pid][1] for pid in ours if pid in stats)
        if os.getpid() not in stats:
            raise ValueError("no /proc entry for this process")
    except (OSError, ValueError, IndexError):
        return time.process_time() + _reaped()
    return total / CLK + _reaped()


def _reaped() -> float:
    """CPU time of the children that have ended and been waited for (their time leaves /proc with them)."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not Linux
        return 0.0
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(batches: Any, device: torch.device, warm_s: float, seconds: float, budget: float) -> dict[str, Any]:
    """img/s over whole batches spanning at least ``seconds`` (after two batches and ``warm_s``), the device
    synchronized at both edges, and the CPU cores used over that span; ``cut`` when the budget ended it."""
    start = time.perf_counter()
    deadline, n, k, t0, c0, c1, now = start + budget, 0, 0, None, 0.0, 0.0, start
    try:
        for images in batches:
            if t0 is None:
                k += 1
                if k >= 2 and time.perf_counter() - start >= warm_s:
                    G.synchronize(device)
                    t0, c0, k = time.perf_counter(), cpu_seconds(), 0
                continue
            n, k = n + len(images), k + 1
            now = time.perf_counter()
            if (now - t0 >= seconds and k >= 2) or now > deadline:
                break
        G.synchronize(device)
        now, c1 = time.perf_counter(), cpu_seconds()  # before the workers are closed
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()
    if t0 is None or not n:
        return {"img_s": None, "cores": None, "batches": 0, "seconds": 0.0, "cut": True}
    wall = now - t0
    return {"img_s": n / wall, "cores": (c1 - c0) / wall, "batches": k, "seconds": wall, "cut": wall < seconds}


# -- the feeds --------------------------------------------------------------------------------------
class LoaderFeed:
    """``ss.DataLoader`` over ``ss.open(path).map(image=device_ops(), device=device, layout="channels_last",
    cpu_share=cpu_share)``, shuffled under SEED, whole batches, epoch after epoch (each a new ``iter(loader)``,
    as a training loop does). Iterating yields each batch's ``image`` tensor; ``info()`` says how many epochs
    were begun, how long an epoch's first batch took on average after the first epoch (from ``iter(loader)``:
    the loader's pipeline starts empty each epoch; a steady batch takes ``batch / img_s``) and what the
    loader's ``stats()`` said of the last epoch; ``close()`` ends the epoch in progress and the loader (its
    worker processes too)."""

    def __init__(self, path: Path, device: torch.device, batch: int, workers: int, backend: str, prefetch: int, cpu_share: float):
        view = ss.open(path).map(image=device_ops(), device=str(device), layout="channels_last", cpu_share=cpu_share)
        self.loader = ss.DataLoader(
            view, batch_size=batch, shuffle=True, drop_last=True, seed=SEED, workers=workers, backend=backend, prefetch=prefetch, timeout=TIMEOUT
        )
        self.epochs, self.epoch, self.last, self.starts = 0, None, None, []

    def __iter__(self) -> Any:
        while True:
            began = time.perf_counter()
            self.epoch = iter(self.loader)
            self.epochs += 1
            empty = True
            for batch in self.epoch:
                if empty:
                    self.starts.append(time.perf_counter() - began)
                    empty = False
                yield batch["image"]
            if empty:
                return

    def info(self) -> dict[str, Any]:
        later = self.starts[1:]
        start = sum(later) / len(later) if later else None
        return {"epochs": self.epochs, "epoch_first_batch_s": start, "last_epoch": self.last}

    def close(self) -> None:
        self.last = self.loader.stats()
        if self.epoch is not None:
            self.epoch.close()
        self.loader.close()


class StageFeed:
    """The device stage's batches, epoch after epoch (slipstream's per-epoch order under SEED, whole batches):
    host parts in ``workers`` threads, at most ``2 * workers`` batches ahead; device parts in one thread on a
    side CUDA stream, ``prefetch`` finished batches ahead (bounded device memory). Iterating yields device
    tensors whose work the consumer's current stream waits for (events, not host syncs); ``close()`` stops all."""

    def __init__(self, stage: Any, n: int, batch: int, workers: int, prefetch: int):
        self.stage, self.n, self.batch, self.workers = stage, n, batch, workers
        self.device = stage.device
        self.cuda = self.device.type == "cuda"
        self.done = queue.Queue(maxsize=prefetch)
        self.stop = threading.Event()
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="host")
        self.thread = threading.Thread(target=self._device_loop, name="device", daemon=True)
        self.thread.start()

    def _orders(self) -> Any:
        for epoch in itertools.count():
            order = permutation(self.n, epoch)
            for s in range(0, self.n - self.batch + 1, self.batch):
                yield order[s : s + self.batch], epoch

    def _put(self, item: Any) -> bool:
        while not self.stop.is_set():
            try:
                self.done.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def _device_loop(self) -> None:
        try:
            stream = torch.cuda.Stream(device=self.device) if self.cuda else None
            orders, pending = self._orders(), collections.deque()
            while not self.stop.is_set():
                while len(pending) < 2 * self.workers:
                    indices, epoch = next(orders)
                    pending.append(self.pool.submit(self.stage.host, indices, SEED, epoch))
                host = pending.popleft().result(timeout=TIMEOUT)
                if stream is None:
                    item = (self.stage.device_batch(host), None)
                else:
                    with torch.cuda.stream(stream):
                        out = self.stage.device_batch(host)
                        event = torch.cuda.Event()
                        event.record(stream)
                    item = (out, event)
                if not self._put(item):
                    return
        except BaseException as exc:  # noqa: BLE001 - handed to the consumer
            self._put(exc)

    def __iter__(self) -> Any:
        try:
            while True:
                item = self.done.get(timeout=TIMEOUT)
                if isinstance(item, BaseException):
                    raise item
                out, event = item
                if event is not None:
                    current = torch.cuda.current_stream(self.device)
                    current.wait_event(event)
                    out.record_stream(current)
                yield out
        finally:
            self.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=TIMEOUT)
        self.pool.shutdown(wait=True, cancel_futures=True)


def with_labels(batches: Any, labels: torch.Tensor) -> Any:
    """``(images, labels[:len(images)])`` for each batch of ``batches``, which it closes when closed."""
    try:
        for images in batches:
            yield images, labels[: len(images)]
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()
