"""The token benchmark's data and its peers (``bench_tokens.py``): documents, their files, and each peer's loader.

Documents: lengths drawn log-normal (median ``MEDIAN`` tokens, sigma ``SIGMA``), rounded, clipped to
1 .. ``MAX_LEN`` (the long tail), seeded; tokens uniform over a vocabulary below 2**16 (uint16) or above
(uint32). They are kept as ``(offsets, values)`` NumPy files in the cache folder, and written once as
a slipstream packed file (``F.Tokens``) and as LitData's optimized chunks (``optimize`` of one token
tensor per document, ``TokensLoader``). grain and TRL read the NumPy arrays themselves (grain through
a ``MapDataset`` source over them, TRL through a Hugging Face ``Dataset`` with an ``input_ids`` column).

A peer that cannot be imported is skipped: ``peer_versions`` says which are there and why not.
Everything here must pickle (grain's and LitData's worker processes), so sources are module level
and reopen the arrays from their paths.
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

MEDIAN, SIGMA, MAX_LEN = 300, 1.0, 20_000
VOCAB = {"uint16": 50_257, "uint32": 128_256}  # GPT-2's and Llama 3's vocabulary sizes

PEERS = {  # peer -> the module that must import (and the feature measured)
    "grain": "grain.experimental",
    "litdata": "litdata",
    "trl": "trl.data_utils",
    "torchdata": "torchdata.nodes",
    "streaming": "streaming",
}


def peer_versions() -> dict[str, str | None]:
    """For each peer, its version, or None (then ``peer_missing[name]`` says why)."""
    found: dict[str, str | None] = {}
    for name, module in PEERS.items():
        try:
            importlib.import_module(module)
            top = importlib.import_module(name)
            found[name] = str(getattr(top, "__version__", "?"))
        except Exception as e:  # noqa: BLE001 - an ImportError, or a peer's dependency failing as it loads
            found[name] = None
            peer_missing[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"
    return found


peer_missing: dict[str, str] = {}


# -- documents ------------------------------------------------------------------------------------
def lengths(n: int, seed: int = 0) -> np.ndarray:
    """``n`` document lengths (int64): log-normal, median ``MEDIAN``, clipped to 1 .. ``MAX_LEN``."""
    rng = np.random.default_rng((seed, n))
    return np.clip(np.rint(rng.lognormal(np.log(MEDIAN), SIGMA, n)), 1, MAX_LEN).astype(np.int64)


def corpus(folder: Path, n: int, dtype: str, seed: int = 0) -> tuple[Path, Path]:
    """``offsets.npy`` and ``values.npy`` of ``n`` documents in ``folder`` (made once)."""
    folder.mkdir(parents=True, exist_ok=True)
    off_path, val_path = folder / "offsets.npy", folder / "values.npy"
    if not (off_path.exists() and val_path.exists()):
        lens = lengths(n, seed)
        offsets = np.zeros(n + 1, np.int64)
        np.cumsum(lens, out=offsets[1:])
        rng = np.random.default_rng((seed, n, 1))
        values = rng.integers(0, VOCAB[dtype], int(offsets[-1]), dtype=np.dtype(dtype))
        np.save(folder / "values.tmp.npy", values)
        np.save(off_path, offsets)
        os.replace(folder / "values.tmp.npy", val_path)
    return off_path, val_path


class Docs:
    """The documents as a container of ``{"tokens": array}`` (read-only views over the memory-mapped
    values), cut at ``limit`` tokens when given; pickles as its paths."""

    def __init__(self, folder: Path, limit: int | None = None, count: int | None = None):
        self.folder, self.limit, self.count = Path(folder), limit, count
        self._arrays: tuple[np.ndarray, np.ndarray] | None = None

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        if self._arrays is None:
            offsets = np.load(self.folder / "offsets.npy")
            if self.count is not None:
                offsets = offsets[: self.count + 1]
            self._arrays = (offsets, np.load(self.folder / "values.npy", mmap_mode="r"))
        return self._arrays

    def __getstate__(self) -> dict[str, Any]:
        return {"folder": self.folder, "limit": self.limit, "count": self.count, "_arrays": None}

    def __len__(self) -> int:
        return len(self.arrays()[0]) - 1

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        offsets, values = self.arrays()
        a, b = int(offsets[i]), int(offsets[i + 1])
        if self.limit is not None:
            b = min(b, a + self.limit)
        return {"tokens": values[a:b]}


def write_slipstream(folder: Path, dtype: str) -> Path:
    """The documents as a slipstream packed file with one ``F.Tokens`` field (written once)."""
    import slipstream as ss
    import slipstream.fields as F

    path = folder / "tokens.ss"
    if not path.exists():
        docs = Docs(folder)
        ss.write(path, (docs[i]["tokens"] for i in range(len(docs))), fields={"tokens": F.Tokens(dtype=dtype)}, progress=False)
    return path


def _litdata_documents(span: tuple[str, int, int]) -> Iterator[Any]:
    import torch

    folder, a, b = span
    docs = Docs(Path(folder))
    for i in range(a, b):
        tokens = np.array(docs[i]["tokens"])
        # LitData's serializers take no torch.uint32: int32 holds these vocabularies' ids
        yield torch.from_numpy(tokens.astype(np.int32) if tokens.dtype == np.uint32 else tokens)


def write_litdata(folder: Path, length: int) -> Path:
    """The documents as LitData's optimized token chunks (``optimize(..., item_loader=TokensLoader())``), once."""
    from litdata import TokensLoader, optimize

    out = folder / "litdata"
    if not (out / "index.json").exists():
        n, step = len(Docs(folder)), 5000
        spans = [(str(folder), a, min(a + step, n)) for a in range(0, n, step)]
        optimize(fn=_litdata_documents, inputs=spans, output_dir=str(out), chunk_size=(length + 1) * 1024,
                 item_loader=TokensLoader(), num_workers=1, verbose=False, mode="overwrite")  # fmt: skip
    return out


# -- peers' loaders: each ``(make, tokens_of)``: make() gives an iterable of batches ------------------
Loader = tuple[Callable[[], Any], Callable[[Any], int]]


def _grain_size(batch: dict[str, np.ndarray]) -> int:
    return int(batch["tokens"].size)


def grain_packer(folder: Path, kind: str, length: int, batch: int, workers: int, bins: int = 32, seed: int = 0) -> Loader:
    """grain's ``kind`` packer (FirstFit/BestFit/ConcatThenSplit) over a shuffled ``MapDataset`` of the
    documents (cut at ``length``: its bin packers refuse longer ones), batched; ``workers`` > 0:
    ``mp_prefetch`` with that many processes, else in this process."""
    import grain
    import grain.experimental as ge

    def make() -> Any:
        docs = grain.MapDataset.source(Docs(folder, limit=length)).shuffle(seed=seed).to_iter_dataset()
        if kind == "ConcatThenSplit":
            packed = ge.ConcatThenSplitIterDataset(docs, length_struct={"tokens": length})
        else:
            packed = getattr(ge, f"{kind}PackIterDataset")(
                docs, length_struct={"tokens": length}, num_packing_bins=bins, seed=seed
            )
        out = packed.batch(batch, drop_remainder=True)
        if workers:
            out = out.mp_prefetch(grain.MultiprocessingOptions(num_workers=workers))
        return out

    return make, _grain_size


def grain_padding(docs: Docs, kind: str, length: int, bins: int = 32) -> tuple[float, int]:
    """(padding fraction, rows) of grain's ``kind`` packer over every document of ``docs`` (stored order)."""
    import grain
    import grain.experimental as ge

    source = grain.MapDataset.source(docs).to_iter_dataset()
    packed = getattr(ge, f"{kind}PackIterDataset")(
        source, length_struct={"tokens": length}, num_packing_bins=bins, shuffle_bins=False
    )
    rows = pad = 0
    for item in packed:
        rows += 1
        pad += int((item["tokens_segment_ids"] == 0).sum())
    return pad / (rows * length), rows


def litdata_loader(out: Path, length: int, batch: int, workers: int, seed: int = 0) -> Loader:
    """LitData's ``StreamingDataLoader`` over ``StreamingDataset(item_loader=TokensLoader(block_size=length), shuffle=True)``."""
    from litdata import StreamingDataLoader, StreamingDataset, TokensLoader

    def make() -> Any:
        ds = StreamingDataset(str(out), item_loader=TokensLoader(block_size=length), shuffle=True, seed=seed)
        return StreamingDataLoader(ds, batch_size=batch, num_workers=workers, drop_last=True)

    return make, lambda b: int(b.numel())


def trl_padding(lens: np.ndarray, length: int, batch_size: int | None) -> tuple[float, int, float]:
    """(padding fraction, rows, seconds) of TRL's ``pack_dataset(strategy="bfd")`` over documents of
    ``lens`` (truncated at ``length``, as "bfd" does), as a Hugging Face ``Dataset`` of ``input_ids``;
    ``batch_size``: the ``map`` batch it packs within (None: TRL's default, 1000; 0: all at once)."""
    import datasets
    import pyarrow as pa
    from trl import pack_dataset

    offsets = np.zeros(len(lens) + 1, np.int32)
    np.cumsum(lens, out=offsets[1:])
    column = pa.ListArray.from_arrays(pa.array(offsets), pa.array(np.zeros(int(offsets[-1]), np.uint8)))
    ds = datasets.Dataset(pa.table({"input_ids": column}))
    kwargs = {} if batch_size is None else {"map_kwargs": {"batch_size": batch_size or len(lens)}}
    datasets.disable_progress_bars()
    t0 = time.perf_counter()
    packed = pack_dataset(ds, length, strategy="bfd", **kwargs)
    seconds = time.perf_counter() - t0
    rows = len(packed)
    tokens = int(np.minimum(lens, length).sum())
    return 1 - tokens / (rows * length), rows, seconds


# -- mixing: seconds per item of each peer's weighted mixture of 3 sources, read in batches --------------
def grain_mix(n: int, weights: dict[str, float], items: int, batch: int) -> float:
    """Seconds per item reading ``grain.MapDataset.mix`` of ``MapDataset.range`` sources, ``.batch(batch)``."""
    import grain

    sources = [grain.MapDataset.range(n) for _ in weights]
    batches = grain.MapDataset.mix(sources, list(weights.values())).batch(batch)
    t0 = time.perf_counter()
    done = 0
    for k in range(items // batch):
        done += len(batches[k])
    return (time.perf_counter() - t0) / done


def torchdata_mix(n: int, weights: dict[str, float], items: int, batch: int) -> float:
    """Seconds per item iterating torchdata's ``MultiNodeWeightedSampler`` over ``IterableWrapper(range(n))``
    sources, through a ``Batcher(batch)``."""
    from torchdata.nodes import Batcher, IterableWrapper, MultiNodeWeightedSampler

    nodes = {name: IterableWrapper(range(n)) for name in weights}
    sampler = MultiNodeWeightedSampler(nodes, dict(weights), stop_criteria="CYCLE_UNTIL_ALL_DATASETS_EXHAUSTED", seed=0)
    it = iter(Batcher(sampler, batch_size=batch))
    t0 = time.perf_counter()
    done = 0
    for _ in range(items // batch):
        done += len(next(it))
    return (time.perf_counter() - t0) / done
