"""slipstream: feed machine-learning training at hardware speed.

Data containers are anything with ``__len__`` and ``__getitem__``; views compose them; the
``DataLoader`` batches them in a seeded, sharded, resumable order with worker threads or processes
that never hang; ``loadparallel`` prefetches any iterable. ``slipstream.torch.DataLoader`` is a
drop-in for PyTorch's; ``slipstream.jax.device_prefetch`` feeds JAX devices.
"""

from . import fields, ops
from ._collate import default_collate
from ._containers import getobs, getobs_into, numobs
from ._errors import (
    ChecksumError,
    CorruptFileError,
    FormatVersionError,
    MissingFieldError,
    NotAPackedFileError,
    PackedFileError,
    TruncatedFileError,
)
from ._huggingface import to_huggingface
from ._imagefolder import imagefolder
from ._loader import DataLoader
from ._mapfields import mapfields
from ._parallel import loadparallel
from ._reader import PackedDataset, open
from ._writer import write
from ._rng import sample_rng
from ._views import batchview, joinobs, mapobs, obsview, shuffleobs, splitobs
from ._procpool import WorkerError
from ._sharedlist import SharedList
from ._shm import SharedMemoryError
from ._workerinfo import WorkerInfo, worker_info

__version__ = "0.1.0"

__all__ = [
    "ChecksumError",
    "CorruptFileError",
    "DataLoader",
    "FormatVersionError",
    "MissingFieldError",
    "NotAPackedFileError",
    "PackedDataset",
    "PackedFileError",
    "SharedList",
    "SharedMemoryError",
    "TruncatedFileError",
    "WorkerError",
    "WorkerInfo",
    "batchview",
    "default_collate",
    "fields",
    "getobs",
    "getobs_into",
    "imagefolder",
    "joinobs",
    "loadparallel",
    "mapfields",
    "mapobs",
    "numobs",
    "obsview",
    "open",
    "ops",
    "sample_rng",
    "shuffleobs",
    "splitobs",
    "to_huggingface",
    "worker_info",
    "write",
]
