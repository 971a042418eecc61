"""``ss.open``: one opener for a packed file, a list of them, a sharded folder, local or remote.

* ``ss.open("train.arrow")``: one local packed file (``PackedDataset``, memory-mapped).
* ``ss.open("train/")``: a sharded dataset's folder (``ss.write(..., shard_size=...)``), checked
  against its ``index.json`` (each shard present, with the size the index says).
* ``ss.open(["a.arrow", "s3://b/c.arrow", ...])``: packed files written separately, as one
  ``ShardedDataset`` in list order.
* ``ss.open("s3://bucket/train/")`` (``gs://``, ``az://``, ``https://``, any fsspec URL, or
  ``filesystem=`` a pyarrow or fsspec filesystem): a sharded dataset in object storage, read from its
  index; a URL without an ``index.json`` under it is read as one packed file, its layout read from
  its footer and page headers (a few ranged reads per file; a folder with an index needs none).
  Pages come through a local cache: ``cache_dir`` (default ``$SLIPSTREAM_CACHE_DIR`` or
  ``~/.cache/slipstream``), at most ``cache_limit`` bytes on disk (a number or a string such as
  ``"20GB"``; default 20 GB or half the free space there, whichever is less), shared safely by
  every process and loader on the node (``remote.cache``). ``timeout`` is one request's limit in
  seconds, ``retry_budget`` the time one range may take with its retries (``remote.retry``),
  ``readahead`` the downloads in flight at once for pages the loader will read next, ``keep`` the
  pages each process keeps decoded in memory (over all the shards opened together).

A remote object is named everywhere (``path``, ``source_of``, reprs, errors) by its URL with any
credentials in it redacted (``Store.name``); an index or a file's structure that cannot be right
is read again, as damaged pages are (``Fetcher.read_checked``), before it is called corrupt.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ..core.errors import MissingShardError
from ..core.sizes import parse_size
from ..files.folder import INDEX, describe, open_folder, parse_index
from ..files.packed import PackedDataset
from ..files.pagememory import RecentPages
from ..files.shards import ShardedDataset
from .cache import PageCache
from .cachedir import default_limit
from .fetch import Fetcher
from .pages import RemotePages
from .store import Store, is_url, join

__all__ = ["default_cache_dir", "open"]


def default_cache_dir() -> Path:
    return Path(os.environ.get("SLIPSTREAM_CACHE_DIR") or Path.home() / ".cache" / "slipstream")


def open(  # noqa: A001
    path: Any,
    cache: str = "os",
    fields: list[str] | None = None,
    *,
    cache_dir: str | os.PathLike | None = None,
    cache_limit: int | str | None = None,
    filesystem: Any = None,
    storage_options: dict[str, Any] | None = None,
    timeout: float = 30.0,
    retry_budget: float = 120.0,
    readahead: int = 8,
    keep: int = 32,
) -> PackedDataset | ShardedDataset:
    """Open packed data as a container of dict samples (see the module doc). ``cache="os"``
    memory-maps local files, ``"ram"`` reads them into memory; ``fields`` reads only those fields.
    Errors name the file, shard or object (``slipstream.core.errors``)."""
    paths = list(path) if isinstance(path, (list, tuple)) else None
    remote = filesystem is not None or any(is_url(p) for p in (paths if paths is not None else [path]))
    if not remote:
        if paths is not None:
            return ShardedDataset(paths, cache=cache, fields=fields)
        if Path(path).is_dir():
            return open_folder(Path(path), cache=cache, fields=fields)
        return PackedDataset(path, cache=cache, fields=fields)
    folder = default_cache_dir() if cache_dir is None else Path(cache_dir)
    limit = parse_size(cache_limit, "cache_limit") if cache_limit is not None else default_limit(folder)  # (the cache makes the folder)
    fetcher = Fetcher(Store(filesystem, storage_options, timeout), PageCache(folder / "pages", limit), retry_budget, readahead, keep)
    recent = RecentPages(keep)  # the decoded pages each process keeps, over all the shards
    if paths is not None:
        names = [fetcher.store.name(str(p)) if is_url(p) else p for p in paths]  # (each checked before any request)
        shards = [_remote_file(fetcher, p, fields, recent) if is_url(p) else PackedDataset(p, cache=cache, fields=fields) for p in names]
        return ShardedDataset([], fields=fields, shards=shards)
    url = fetcher.store.name(str(path))
    where = join(url, INDEX)
    try:
        index = fetcher.read_checked(where, lambda reads: parse_index(reads.whole(), where), "the index")
    except (FileNotFoundError, NotADirectoryError):
        if url.endswith("/"):
            raise MissingShardError(url, f"no {INDEX} here: not a sharded dataset written by ss.write(..., shard_size=...) (or its upload is not complete)") from None
        return _remote_file(fetcher, url, fields, recent)
    shards = [
        PackedDataset(join(url, e["file"]), fields=fields, source=RemotePages(fetcher, join(url, e["file"]), e, index["schema"], recent))
        for e in index["shards"]
    ]
    return ShardedDataset([], fields=fields, shards=shards)


def _remote_file(fetcher: Fetcher, url: str, fields: list[str] | None, recent: RecentPages) -> PackedDataset:
    """One remote packed file with no index: its layout read from its footer and page headers."""
    try:
        size = fetcher.size(url)
    except FileNotFoundError:
        raise MissingShardError(url, "no such object (and no index.json under it): expected a packed file or a sharded dataset's folder") from None
    entry, schema = fetcher.read_checked(url, lambda reads: describe(url, size, reads.ranges), "its structure (footer, schema and page headers)")
    return PackedDataset(url, fields=fields, source=RemotePages(fetcher, url, entry, schema, recent))
