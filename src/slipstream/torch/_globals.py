"""The process-global state torch manages, as torch manages it: the global RNGs (``random``,
``torch``, NumPy) and ``torch.utils.data.get_worker_info()``.

* ``_seed_like_torch`` seeds a worker process's global RNGs as torch's worker loop does
  (``base_seed + worker_id``; NumPy from torch's ``_generate_state`` where torch has it).
* ``_set_torch_worker_info`` sets what ``get_worker_info()`` returns in a worker process.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from torch.utils.data._utils import worker as _tworker


def _seed_like_torch(base_seed: int, worker_id: int) -> int:
    """Seed the global RNGs as torch's worker loop does; returns the worker's seed."""
    seed = base_seed + worker_id
    random.seed(seed)
    torch.manual_seed(seed)
    generate = getattr(_tworker, "_generate_state", None)
    np.random.seed(generate(base_seed, worker_id) if generate is not None else seed % 2**32)
    return seed


def _set_torch_worker_info(worker_id: int, num_workers: int, seed: int, dataset: Any) -> None:
    _tworker._worker_info = _tworker.WorkerInfo(id=worker_id, num_workers=num_workers, seed=seed, dataset=dataset)
