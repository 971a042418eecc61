"""The default engine: a planned sharded write's shards written here, one after another, each
shard's samples encoded by ``workers`` threads (in order: the bytes do not depend on the count)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .shardwrite import ShardJob, ShardSpec, write_shard

__all__ = ["run"]


class _Advance:
    """``update(n)`` for ``write_shard``'s progress: passes sample counts on to ``advance``."""

    def __init__(self, advance: Callable[[int], None]):
        self.advance = advance

    def update(self, n: int) -> None:
        self.advance(n)


def run(data: Any, spec: ShardSpec, jobs: list[ShardJob], *, workers: int, advance: Callable[[int], None]) -> list[dict[str, Any]]:
    """Write ``jobs`` in order in this process with ``workers`` encoding threads; their index entries."""
    progress = _Advance(advance)
    return [write_shard(data, spec, job, threads=workers, progress=progress) for job in jobs]
