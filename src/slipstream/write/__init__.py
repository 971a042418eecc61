"""The write wing: ``ss.write`` and everything only it uses. Reading never imports this package.

``writer`` (``ss.write``: one packed file from a container or iterable), ``described`` (what data
says of itself: fields and metadata to keep) and ``onefield`` (bare samples as one-field dicts),
``pagewrite`` (samples gathered into pages and written), ``atomic`` (a temporary file renamed over
the target once complete), ``failures`` (samples that fail to read or encode), ``shardplan`` (the
split of a sharded write, decided up front), ``planned`` (one job per shard, run by an engine),
``shardwrite`` (one shard: the unit every engine runs), ``folderwrite`` (a sharded folder's shards
and index written) with ``writelock`` (one write of a folder at a time), and ``engines`` (in process,
local worker processes, Ray tasks).
"""
