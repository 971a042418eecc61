"""slipstream: feed machine-learning training at hardware speed.

Data containers are anything with ``__len__`` and ``__getitem__``; views compose them; the
``DataLoader`` batches them in a seeded, sharded, resumable order with worker threads or processes
that never hang; ``loadparallel`` prefetches any iterable. ``slipstream.torch.DataLoader`` is a
drop-in for PyTorch's; ``slipstream.jax.device_prefetch`` feeds JAX devices.
"""

from . import fields, ops
from .convert.huggingface import to_huggingface
from .convert.imagefolder import imagefolder
from .core.collate import default_collate
from .core.containers import getobs, getobs_into, numobs
from .core.errors import (
    ChecksumError,
    CorruptFileError,
    FormatVersionError,
    MissingFieldError,
    MissingShardError,
    NotAPackedFileError,
    PackedFileError,
    RemoteReadError,
    ShardMismatchError,
    SharedMemoryError,
    TruncatedFileError,
    WorkerError,
)
from .core.rng import sample_rng
from .core.version import __version__ as __version__
from .core.views import batchview, joinobs, mapobs, obsview, shuffleobs, splitobs
from .core.workerinfo import WorkerInfo, worker_info
from .files.packed import PackedDataset
from .files.shards import ShardedDataset
from .images.mapfields import mapfields
from .inplace.opening import open
from .loading.loader import DataLoader
from .loading.parallel import loadparallel
from .sequences.attention import attention_inputs, segment_mask
from .sequences.megatron import megatron_file
from .sequences.mix import mix
from .sequences.pack import pack
from .sequences.tokenfiles import token_file
from .workers.sharedlist import SharedList
from .write.writer import write

__all__ = [
    "ChecksumError",
    "CorruptFileError",
    "DataLoader",
    "FormatVersionError",
    "MissingFieldError",
    "MissingShardError",
    "NotAPackedFileError",
    "PackedDataset",
    "PackedFileError",
    "RemoteReadError",
    "ShardMismatchError",
    "ShardedDataset",
    "SharedList",
    "SharedMemoryError",
    "TruncatedFileError",
    "WorkerError",
    "WorkerInfo",
    "attention_inputs",
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
    "megatron_file",
    "mix",
    "numobs",
    "obsview",
    "open",
    "ops",
    "pack",
    "sample_rng",
    "segment_mask",
    "shuffleobs",
    "splitobs",
    "to_huggingface",
    "token_file",
    "worker_info",
    "write",
]
