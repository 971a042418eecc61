"""``ss.open`` of WebDataset tar shards in object storage, read in place: an object, a list of them,
a brace pattern (``s3://bucket/shard-{0000..0099}.tar``) or a folder prefix of ``.tar`` objects.

The container is the one ``inplace.webdataset`` makes of local shards: ``len``, random access,
samples grouped by key as WebDataset groups them, one field per extension, parts of consecutive
samples as pages.

Opening lists the folder once (or HEADs each named object: its size and ETag), then reads each
shard's index (``inplace.tarcache.remote_tar_index``, ``threads`` shards at once): from the index
cache when an entry for the object's name, size and tag is there (no request), else by one pass
over its headers (a shard of small members is downloaded once, whole, by that pass; only the index
is kept). A part is one ranged read of its members (through the ``Fetcher``: the shared page cache
on disk, read-ahead, retries, one download per node), checked before anything keeps it: the bytes
must hold, before each member, a header that is the index's (``tarindex.first_bad_header``:
checksum, regular file, size, and the name where the header holds it); bytes that fail are
downloaded again, and the same failing bytes three times raise ``ChecksumError`` naming the object,
the part and its samples. What the headers do not cover (a byte changed inside a member's data) is
not checked here, as in a local shard; each value is still checked as its field reads it.

The object's identity (its size, and its ETag or modification time) is checked against the one its
index was made with before the first download in each process (``remoteobjects.ObjectCheck``, one
HEAD) and again when a part fails its checks: an object replaced or changed since raises
``ShardMismatchError`` naming it, a removed one ``MissingShardError``; parts cached on disk are
keyed by that identity, so a changed object never reads an old one's parts.
"""

from __future__ import annotations

import hashlib
import os
import secrets
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..core.errors import ChecksumError, CorruptFileError, MissingShardError
from ..files import field_kinds as F
from ..files.packed import PackedDataset
from ..files.pagememory import RecentPages
from ..files.shards import ShardedDataset
from ..remote.fetch import Fetcher, range_key
from ..remote.pages import admitted
from ..remote.store import is_url
from .parquet_remote import KEEP, remote_fetcher
from .remotefooters import FOOTER_THREADS
from .remoteobjects import ObjectCheck, list_objects, object_info, object_infos
from .tarcache import remote_tar_index
from .tarindex import TarIndex, object_identity
from .webdataset import PART_BYTES, SUFFIX, TarPages, TarParts, expand_braces, is_pattern

__all__ = ["RemoteTarPages", "open_remote_webdataset"]


class RemoteTarPages(TarParts):
    """One tar shard in a store, its samples in parts as pages (see the module doc); ``size`` and
    ``tag``: the object's as listed; ``index``: its index when known (else read through the cache)."""

    def __init__(
        self, fetcher: Fetcher, url: str, size: int, tag: str, fields: list[str] | None = None, *, image: F.Image | None = None,
        recent: RecentPages | None = None, part_bytes: int = PART_BYTES, part_samples: int | None = None,
        cache_dir: str | os.PathLike | None = None, index: TarIndex | None = None, salt: str = "",
    ):  # fmt: skip
        self.fetcher = fetcher
        self.name = self.url = url
        self.size, self.tag = int(size), str(tag or "")
        self.identity = object_identity(self.size, self.tag)
        self._identify = ObjectCheck(fetcher, url, self.size, self.tag, "it was indexed")
        # An object without a tag cannot be told from one rewritten at its size: nothing of it is
        # reused across opens (its index is not cached, its parts are keyed by this open's salt).
        self._salt = salt if self.tag else (salt or secrets.token_hex(8))
        if index is None:
            index = remote_tar_index(fetcher, url, self.size, self.tag, cache_dir=cache_dir, cache=bool(self.tag))
        if tuple(index.identity) != self.identity:
            raise CorruptFileError(url, "the object changed while it was opened (or since the dataset was pickled): reopen it")
        key = f"tar\0{self.size}\0{self.tag}\0{self._salt}".encode()
        self._crc = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "little")  # what a part's key records
        self._failed: dict[int, str] = {}  # part -> why its last bytes failed
        self._settings = {"part_bytes": part_bytes, "part_samples": part_samples, "cache_dir": cache_dir}
        self._parts_of(url, index, fields, image, part_bytes, part_samples, recent)

    def _check(self, p: int) -> Any:
        """The check of part ``p``'s downloaded bytes: their length and every member header (the
        index's ``_crc`` when they pass, else -1 and the reason kept)."""
        base, stop, m0, m1 = self.span(p)

        def check(data: Any) -> int:
            problem = (
                f"{len(data)} bytes came for {stop - base}" if len(data) != stop - base else self.bad_header(data, base, m0, m1)
            )
            if problem is None:
                return self._crc
            self._failed[p] = problem
            return -1

        return check

    def _part_bytes(self, p: int) -> Any:
        base, stop, _, _ = self.span(p)
        try:
            return self.fetcher.fetch(self.url, base, stop, self._crc, self._check(p), self._identify)
        except ChecksumError as exc:
            self._identify(again=True)  # (an object replaced since it was indexed: named as such)
            first, last = self._bounds[p], self._bounds[p + 1]
            why = self._failed.get(p, exc.args[0].split(": ", 1)[-1])
            raise ChecksumError(
                self.url, f"{self.where(p)}: bytes {base}..{stop} fail their checks, the same bytes three times: {why}; "
                "the object is damaged, or changed since it was indexed", p, range(first, last),
            ) from None  # fmt: skip

    def check(self) -> None:
        """Nothing to watch between reads: the object's identity is checked before its first download,
        and every part as it arrives."""

    def prefetch(self, pages: Any) -> None:
        """Start downloading parts ``pages`` (never raises: a part that cannot be fetched fails when it
        is read); inside ``remote.pages.shared_only()``, only what the disk cache can hold."""
        ranges = []
        for p in pages:
            base, stop, _, _ = self.span(int(p))
            ranges.append((self.url, base, stop, self._crc, self._check(int(p)), self._identify))
        ranges, _ = admitted(self.fetcher.cache, ranges, lambda span: range_key(*span[:4]), lambda span: span[2] - span[1])
        self.fetcher.prefetch(ranges)

    def __getstate__(self) -> dict[str, Any]:
        """As a local shard's (``TarPages``): the settings, and the index only when it is not cached."""
        return {
            "fetcher": self.fetcher, "url": self.url, "size": self.size, "tag": self.tag, "fields": self._wanted,
            "image": self._image, "recent": self.recent, "index": None if self.index.cached else self.index, "salt": self._salt,
            **self._settings,
        }  # fmt: skip

    def __setstate__(self, state: dict[str, Any]) -> None:
        state = dict(state)
        args = [state.pop(k) for k in ("fetcher", "url", "size", "tag", "fields")]
        self.__init__(*args, **state)  # type: ignore[misc]


def _objects(fetcher: Fetcher, path: Any, threads: int, in_store: bool) -> tuple[list[tuple[Any, int, str]], bool]:
    """The shards ``path`` names, (name, size, tag) each, and whether it named one object. In a
    list, a name that is no URL is a local file (size -1), unless ``in_store`` (a filesystem was
    given: every name is in it)."""
    store = fetcher.store
    if isinstance(path, (list, tuple)):
        remote = [in_store or is_url(p) for p in path]
        names = [store.name(str(p)) if r else p for p, r in zip(path, remote)]  # (each checked before any request)
        infos = iter(object_infos(fetcher, [n for n, r in zip(names, remote) if r], threads))
        return [next(infos) if r else (n, -1, "") for n, r in zip(names, remote)], False
    if is_pattern(str(path)):  # (expanded before names are made: each name keeps the URL's credentials)
        return object_infos(fetcher, [store.name(p) for p in expand_braces(str(path))], threads), False
    url = store.name(str(path))
    if url.endswith(SUFFIX):
        try:
            return [object_info(fetcher, url)], True
        except FileNotFoundError:
            pass  # (perhaps a folder named x.tar/)
    found = list_objects(fetcher, url, SUFFIX)
    if not found:
        if url.endswith(SUFFIX):
            raise MissingShardError(url, "no such object (nor a folder of .tar objects under it)")
        raise FileNotFoundError(f"{url}: no .tar objects under this folder")
    return found, False


def open_remote_webdataset(
    path: Any, fields: list[str] | None = None, *, image: F.Image | None = None, fetcher: Fetcher | None = None,
    cache_dir: str | os.PathLike | None = None, cache_limit: int | str | None = None, filesystem: Any = None,
    storage_options: dict[str, Any] | None = None, timeout: float = 30.0, retry_budget: float = 120.0, readahead: int = 8,
    keep: int = KEEP, part_bytes: int = PART_BYTES, part_samples: int | None = None, threads: int = FOOTER_THREADS,
) -> PackedDataset | ShardedDataset:  # fmt: skip
    """Tar shards in object storage as a ``PackedDataset`` (one object) or a ``ShardedDataset`` (a list,
    a brace pattern, a folder prefix; in that order; local paths in a list are read as
    ``inplace.webdataset`` reads them, unless ``filesystem`` is given): see the module doc. ``fetcher``: the one to read
    through (else made from the other arguments, as ``ss.open`` makes it); ``threads``: objects
    HEADed or indexed at once; ``cache_dir``: the page cache's and the index cache's folder.
    ``MissingShardError`` for a named object that is not there, ``FileNotFoundError`` for a folder
    without ``.tar`` objects."""
    if fetcher is None:
        fetcher = remote_fetcher(cache_dir, cache_limit, filesystem, storage_options, timeout, retry_budget, readahead, keep)
    objects, single = _objects(fetcher, path, threads, filesystem is not None)
    recent = RecentPages(keep)
    settings = {"image": image, "recent": recent, "part_bytes": part_bytes, "part_samples": part_samples, "cache_dir": cache_dir}

    def source(info: tuple[Any, int, str]) -> TarParts:
        if info[1] < 0:
            return TarPages(info[0], fields, **settings)  # type: ignore[arg-type]
        return RemoteTarPages(fetcher, *info, fields, **settings)  # type: ignore[arg-type]

    if len(objects) == 1:
        sources = [source(objects[0])]
    else:
        with ThreadPoolExecutor(max(1, min(int(threads), len(objects))), thread_name_prefix="slipstream-tarindex") as pool:
            sources = list(pool.map(source, objects))
    shards = [PackedDataset(s.name, fields=fields, source=s) for s in sources]
    return shards[0] if single else ShardedDataset([], fields=fields, shards=shards)
