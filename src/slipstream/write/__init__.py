"""The write wing: ``ss.write`` and everything only it uses. Reading never imports this package.

``writer`` (``ss.write``: one packed file from a container or iterable), ``described`` (what data
says of itself: fields and metadata to keep) and ``onefield`` (bare samples as one-field dicts),
``pagewrite`` (samples gathered into pages and written), ``atomic`` (a temporary file renamed over
the target once complete), ``failures`` (samples that fail to read or encode), ``shardplan`` (the
split of a sharded write, decided up front), ``planned`` (one job per shard, run by an engine),
``shardwrite`` (one shard: the unit every engine runs), ``folderwrite`` (a sharded folder's shards
and index written) with ``writelock`` (one write of a folder at a time), and the engines that run a
planned write's shard jobs (each ``run(data, spec, jobs, ...)`` returns the jobs' index entries in
order and calls ``advance(samples)`` as samples are written; the bytes do not depend on the engine):
``engine_inprocess`` (``engine=None``: this process, samples encoded by threads),
``engine_processes`` (``"processes"``: local worker processes, one shard each at a time) and
``engine_ray`` (``"ray"``: one Ray task per shard, on a running cluster or a local Ray).
"""
