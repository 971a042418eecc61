"""Helpers of ``bench_gpu_feed.py``: the models and their training step, batches moved to the GPU, timed runs.

``train_rate`` times a training loop fed by any iterable of ``(uint8 NCHW images, labels)``: warm-up steps, then
a fixed number of steps between two ``torch.cuda.synchronize()`` calls. ``loader_rate`` times a loader alone.
Both chain epochs, stop at a time budget (a loader's own ``timeout`` bounds each batch) and report how far they
got. ``on_device`` pins each batch and copies it to the GPU on a side stream, one batch ahead of the step.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import _common  # noqa: F401 - first: it puts a checkout's src/ on the path and says so when torch is missing
import numpy as np
import torch
from torch import nn

MEAN = (0.485 * 255, 0.456 * 255, 0.406 * 255)  # ImageNet's, on the uint8 scale
STD = (0.229 * 255, 0.224 * 255, 0.225 * 255)


def load_torchvision() -> tuple[Any, str]:
    """torchvision, or None and why not (a build that does not match torch fails on import with a RuntimeError)."""
    try:
        import torchvision
        from torchvision import datasets, models, transforms  # noqa: F401 - what the benchmark uses
    except Exception as exc:  # noqa: BLE001
        return None, f"torchvision is not usable here ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})"
    return torchvision, ""


class TinyCNN(nn.Sequential):
    """A stand-in for a torchvision ResNet in ``--cpu-smoke`` runs where torchvision cannot be imported."""

    def __init__(self) -> None:
        layers = [nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU(), nn.Conv2d(16, 32, 3, 2, 1), nn.BatchNorm2d(32)]
        super().__init__(*layers, nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 1000))


def make_model(name: str, tv: Any, device: torch.device) -> nn.Module:
    model = getattr(tv.models, name)() if tv is not None else TinyCNN()
    return model.to(device, memory_format=torch.channels_last).train()


def make_step(model: nn.Module, device: torch.device, normalized: bool = False) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """One SGD step (lr 0.1, momentum 0.9) on a batch already on ``device``: a uint8 NCHW batch normalized there to
    float (or, ``normalized``, a batch that already is: the device stage's), channels_last, bf16 autocast."""
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    mean = torch.tensor(MEAN, device=device).view(1, 3, 1, 1)
    std = torch.tensor(STD, device=device).view(1, 3, 1, 1)

    def step(images: torch.Tensor, labels: torch.Tensor) -> None:
        x = images if normalized else images.float().sub_(mean).div_(std)
        x = x.contiguous(memory_format=torch.channels_last)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = loss_fn(model(x), labels.long())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def packed_loader(path: Any, batch_size: int, workers: int | str, backend: str | None, timeout: float) -> Any:
    """slipstream's loader over the packed file ``path`` through the benchmarks' image pipeline (RandomResizedCrop +
    flip + ToCHW, uint8), shuffled with ``_common.SEED``, whole batches; ``backend`` None: the default."""
    import bench_images

    import slipstream as ss

    chosen = {} if backend is None else {"backend": backend}
    data = ss.open(path).map(image=bench_images.pipeline())
    return ss.DataLoader(
        data, batch_size=batch_size, shuffle=True, drop_last=True, seed=_common.SEED, workers=workers, timeout=timeout, **chosen
    )


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def as_tensors(batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """(images, labels) as CPU tensors from a slipstream batch (a dict of arrays) or torch's ``[images, labels]``."""
    if isinstance(batch, dict):
        return torch.from_numpy(batch["image"]), torch.from_numpy(np.asarray(batch["label"]))
    return batch[0], batch[1]


def endless(loader: Iterable[Any]) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """The loader's batches as (images, labels), epoch after epoch."""
    while True:
        empty = True
        for batch in loader:
            empty = False
            yield as_tensors(batch)
        if empty:
            return


def on_device(batches: Iterator[tuple[torch.Tensor, torch.Tensor]], device: torch.device) -> Iterator[tuple[torch.Tensor, ...]]:
    """Each batch pinned (unless it already is) and copied to ``device`` with ``non_blocking`` on a side stream,
    one batch ahead; the step's stream waits for the copy on the GPU, not the host."""
    if device.type != "cuda":
        yield from batches
        return
    stream = torch.cuda.Stream(device=device)

    def issue(images: torch.Tensor, labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.cuda.Event]:
        if not images.is_pinned():  # pinning copies on the host with the GIL released
            images, labels = images.pin_memory(), labels.pin_memory()
        with torch.cuda.stream(stream):
            moved = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
            copied = torch.cuda.Event()
            copied.record(stream)
        return (*moved, copied)

    def ready(ahead: tuple[torch.Tensor, torch.Tensor, torch.cuda.Event]) -> tuple[torch.Tensor, torch.Tensor]:
        images, labels, copied = ahead
        current = torch.cuda.current_stream(device)
        current.wait_event(copied)  # this batch's copy only, not the one queued after it
        images.record_stream(current)
        labels.record_stream(current)
        return images, labels

    ahead = None
    for images, labels in batches:
        issued = issue(images, labels)
        if ahead is not None:
            yield ready(ahead)
        ahead = issued
    if ahead is not None:
        yield ready(ahead)


def train_rate(
    step: Callable[..., None], batches: Iterator[Any], warmup: int, steps: int, budget: float, device: torch.device
) -> dict[str, Any]:
    """img/s of ``steps`` training steps after ``warmup`` steps (synchronized at both edges); cut short after
    ``budget`` seconds (then ``steps`` says how many were timed and ``cut`` is True)."""
    deadline = time.perf_counter() + budget
    done = images = 0
    t0 = time.perf_counter()
    try:
        for k, (x, y) in enumerate(batches):
            step(x, y)
            if k + 1 == warmup:
                synchronize(device)
                t0 = time.perf_counter()
            elif k + 1 > warmup:
                done, images = done + 1, images + len(x)
            if done == steps or time.perf_counter() > deadline:
                break
        synchronize(device)
        seconds = time.perf_counter() - t0
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()
    return {"img_s": images / seconds if done else None, "steps": done, "seconds": seconds, "cut": done < steps}


def loader_rate(loader: Iterable[Any], warm_s: float, seconds: float, budget: float) -> dict[str, Any]:
    """Samples/s of a loader alone over whole batches spanning at least ``seconds``, after at least two batches
    and ``warm_s`` seconds of warm-up; epochs are chained."""
    batches = endless(loader)
    start = now = time.perf_counter()
    deadline = start + budget
    n = k = 0
    t0 = None
    try:
        for images, _ in batches:
            now = time.perf_counter()
            if t0 is None:
                k += 1
                if k >= 2 and now - start >= warm_s:
                    t0, k = now, 0
            else:
                n, k = n + len(images), k + 1
                if now - t0 >= seconds and k >= 2:
                    break
            if now > deadline:
                break
    finally:
        batches.close()
    if t0 is None or not n:
        return {"img_s": None, "batches": 0, "seconds": 0.0, "cut": True}
    return {"img_s": n / (now - t0), "batches": k, "seconds": now - t0, "cut": now - t0 < seconds}


def close_loader(loader: Any) -> None:
    """Stop a loader's workers now: slipstream's ``close()``, or torch's persistent workers."""
    close = getattr(loader, "close", None)
    if close is not None:
        close()
    iterator = getattr(loader, "_iterator", None)  # torch's persistent_workers iterator
    if iterator is not None and hasattr(iterator, "_shutdown_workers"):
        iterator._shutdown_workers()
    gc.collect()


def grid(head: list[str], rows: list[list[str]]) -> None:
    """A plain table: the first column left-aligned, the rest right-aligned."""
    widths = [max(len(r[k]) for r in [head, *rows]) for k in range(len(head))]
    for r in [head, *rows]:
        line(r, widths)


def line(cells: list[str], widths: list[int]) -> None:
    print("  " + "  ".join(c.ljust(w) if k == 0 else c.rjust(w) for k, (c, w) in enumerate(zip(cells, widths))), flush=True)
