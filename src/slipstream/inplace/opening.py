"""``ss.open``: packed files (``remote.open``) and data read in place (this package), by what ``path`` is.

* a Hugging Face ``datasets.Dataset``: ``inplace.hfdataset`` (its Arrow table, memory-mapped);
* a ``.parquet`` file, a folder of them (and no ``index.json``), or a list of them: ``inplace.parquet``
  (local) or ``inplace.parquet_remote`` (URLs, ``filesystem=``; a prefix with no ``index.json`` under
  it and ``.parquet`` objects is read as their set);
* WebDataset tar shards: a ``.tar`` file, a list of them, a folder of them, or a brace pattern
  (``shard-{0000..0099}.tar``): ``inplace.webdataset`` (local files) or ``inplace.webdataset_remote``
  (URLs; a prefix with no ``index.json`` and no ``.parquet`` objects under it, and ``.tar`` objects);
* anything else: packed data, ``remote.open`` (a packed file, a list of them, a sharded folder,
  local or in object storage).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..core.errors import MissingShardError
from ..files import field_kinds as F
from ..files.packed import PackedDataset
from ..files.shards import ShardedDataset
from ..remote import open as _packed
from ..remote.store import is_url
from .hfdataset import is_hf_dataset, open_hf_dataset
from .parquet import SUFFIX, is_parquet, open_parquet
from .parquet_remote import open_remote_parquet
from .webdataset import SUFFIX as TAR
from .webdataset import is_webdataset, open_webdataset
from .webdataset_remote import open_remote_webdataset

__all__ = ["open"]


def open(  # noqa: A001
    path: Any,
    cache: str = "os",
    fields: list[str] | None = None,
    *,
    image: F.Image | None = None,
    cache_dir: str | os.PathLike | None = None,
    cache_limit: int | str | None = None,
    filesystem: Any = None,
    storage_options: dict[str, Any] | None = None,
    timeout: float = 30.0,
    retry_budget: float = 120.0,
    readahead: int = 8,
    keep: int = 32,
) -> PackedDataset | ShardedDataset:
    """Open data as a container of dict samples: packed files (see ``remote.open``) or data read in
    place (a Hugging Face ``datasets.Dataset``, Parquet, WebDataset tar shards: see ``inplace.hfdataset``,
    ``inplace.parquet``, ``inplace.webdataset``). ``cache="os"`` memory-maps local packed files,
    ``"ram"`` reads them into memory; ``fields`` reads only those fields (columns); ``image`` is
    the field of image columns read in place (default ``F.Image(codec="jpeg")``: each image's own
    channels; ``F.Image(channels=3)`` makes them RGB); ``keep`` the pages (row groups) each process
    keeps decoded, over all the files opened together. Errors name the file, shard or object."""
    if is_hf_dataset(path):
        return open_hf_dataset(path, fields, image=image, keep=keep)
    paths = list(path) if isinstance(path, (list, tuple)) else [path]
    local = filesystem is None and not any(is_url(p) for p in paths)
    if local and paths and all(isinstance(p, (str, os.PathLike)) and is_parquet(p) for p in paths):
        return open_parquet(path if isinstance(path, (list, tuple)) else Path(path), fields, image=image, keep=keep)
    if local and paths and all(isinstance(p, (str, os.PathLike)) and is_webdataset(p) for p in paths):
        return open_webdataset(path, fields, image=image, keep=keep, cache_dir=cache_dir)
    remote = dict(
        cache_dir=cache_dir, cache_limit=cache_limit, filesystem=filesystem, storage_options=storage_options,
        timeout=timeout, retry_budget=retry_budget, readahead=readahead, keep=keep,
    )  # fmt: skip
    if not local and paths and all(str(p).endswith(SUFFIX) for p in paths):
        return open_remote_parquet(path, fields, image=image, **remote)
    if not local and paths and all(isinstance(p, (str, os.PathLike)) and str(p).endswith(TAR) for p in paths):
        return open_remote_webdataset(path, fields, image=image, **remote)
    try:
        return _packed.open(path, cache, fields, **remote)
    except MissingShardError:
        if local or not isinstance(path, str):
            raise
        for read_in_place in (open_remote_parquet, open_remote_webdataset):  # a prefix with no index.json under it
            try:
                return read_in_place(path, fields, image=image, **remote)
            except FileNotFoundError:
                pass
        raise
