"""Engines for a planned sharded write (``ss.write(..., shard_size=..., engine=...)``): each runs
the same shard jobs (``write.shardwrite.write_shard``, one per output shard) somewhere else.

* ``None`` (``inprocess``): in this process, one shard after another, samples encoded by threads;
* ``"processes"`` (``subprocesses``): local worker processes, one shard each at a time, so one
  machine uses all its cores;
* ``"ray"`` (``raytasks``): one Ray task per shard, on a running cluster or a local Ray.

Every engine's ``run(data, spec, jobs, ...)`` returns the jobs' index entries in the jobs' order
and calls ``advance(samples)`` as samples are written; the bytes written do not depend on the
engine, its workers or their timing. The engine names are checked by ``write.planned.check_engine``,
whose driver runs them.
"""
