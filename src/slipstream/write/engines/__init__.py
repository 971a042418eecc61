"""Engines for a planned sharded write (``ss.write(..., shard_size=..., engine=...)``): each runs
the same shard jobs (``write.shardwrite.write_shard``, one per output shard) somewhere else.

* ``None`` (``inprocess``): in this process, one shard after another, samples encoded by threads;
* ``"processes"`` (``processes``): local worker processes, one shard each at a time, so one
  machine uses all its cores;
* ``"ray"`` (``raytasks``): one Ray task per shard, on a running cluster or a local Ray.

Every engine's ``run(data, spec, jobs, ...)`` returns the jobs' index entries in the jobs' order
and calls ``advance(samples)`` as samples are written; the bytes written do not depend on the
engine, its workers or their timing.
"""

from __future__ import annotations

__all__ = ["ENGINES", "check_engine"]

ENGINES = ("processes", "ray")


def check_engine(engine: str | None) -> str | None:
    """``engine`` when it names one (None: this process); ``ValueError`` naming the choices otherwise."""
    if engine is not None and engine not in ENGINES:
        raise ValueError(f"engine must be None (this process), 'processes' or 'ray', got {engine!r}")
    return engine
