"""The split of a sharded write, decided up front: which samples go in which shard.

Every way of writing a sharded folder from a container or a file set (one process, local worker
processes, Ray tasks) splits it by this rule, so they all write the same shards, byte for byte:

1. **Probe.** Encode the samples of ``probe_runs(count)``: all of them when there are at most 64,
   else 8 runs of 8 consecutive samples, the runs evenly spaced from the first sample to the last
   (a dataset sorted by class or by size is sampled across its length, and each run is one
   sequential read of a file set), and pack them into pages in memory (``write.planned.probe``):
   ``probe_bytes`` is what they add to a packed file (Arrow buffers and padding, page metadata),
   and the bytes of an empty packed file (schema, footer) are taken off ``shard_size``. Encoding
   is deterministic, so the probe gives the same numbers every time.
2. **Split.** ``shards = ceil(count * probe_bytes / (probe_samples * shard_size))`` (integer
   arithmetic: no rounding that could differ between machines), at least 1 and at most ``count``
   (every shard holds a sample; ``shard_size=0`` gives one sample per shard). Shard ``k`` of
   ``shards`` holds samples ``k * count // shards`` up to ``(k + 1) * count // shards``: equal
   runs, their counts differing by at most one. An empty dataset is one empty shard.

Shards are then about ``shard_size`` bytes when samples are alike; when they vary, a shard may be
larger or smaller than ``shard_size`` by as much as its samples differ from the probe's mean. The
split depends only on the data, the fields and ``shard_size``, never on workers or timing.
"""

from __future__ import annotations

__all__ = ["PROBE_RUN", "PROBE_RUNS", "probe_runs", "split"]

PROBE_RUNS = 8  # runs of consecutive samples the probe encodes...
PROBE_RUN = 8  # ...of this many samples each


def probe_runs(count: int) -> list[range]:
    """The samples the probe encodes, as runs of consecutive indices (see the module doc)."""
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if count <= PROBE_RUNS * PROBE_RUN:
        return [range(count)] if count else []
    last = count - PROBE_RUN  # the start of the last run
    return [range(start, start + PROBE_RUN) for start in (k * last // (PROBE_RUNS - 1) for k in range(PROBE_RUNS))]


def split(count: int, probe_bytes: int, probe_samples: int, shard_size: int) -> list[range]:
    """The samples of each shard, in order (see the module doc): ``count`` samples, of which
    ``probe_samples`` encoded to ``probe_bytes``, in shards of about ``shard_size`` bytes."""
    for name, value in (("count", count), ("probe_bytes", probe_bytes), ("probe_samples", probe_samples), ("shard_size", shard_size)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    if count == 0:
        return [range(0, 0)]
    if probe_samples == 0:
        raise ValueError(f"a probe of 0 samples cannot size shards of {count} samples")
    if shard_size == 0:
        shards = count
    else:
        denominator = probe_samples * shard_size
        shards = min(count, max(1, -(-count * probe_bytes // denominator)))
    return [range(k * count // shards, (k + 1) * count // shards) for k in range(shards)]
