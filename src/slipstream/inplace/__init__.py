"""Data read where it already lives, without a conversion step: ``ss.open`` of Parquet files and
folders, Hugging Face datasets and WebDataset tar shards, as packed files are read.

``storage`` (a table column as its field stores it), ``tablepages`` (a table's parts as the pages
of a ``PackedDataset``), ``parquet`` (local Parquet files: row groups as pages, footers as the
index), ``parquet_remote`` (Parquet objects in a store, their row groups fetched through the page
cache) with ``remotefooters`` (their listing and footers, read and checked) and ``footers`` (the
footers kept in a private index file), ``hfdataset`` (a ``datasets.Dataset``'s Arrow table),
``remoteobjects`` (objects listed by suffix, and checked to be the one opened), ``tarindex`` (a tar
shard's member offsets, by one pass over its headers) with ``tarcache`` (those indexes cached, of
local files and of objects in a store), ``webdataset`` (local tar shards' samples grouped by key)
and ``webdataset_remote`` (tar shards in a store, their parts fetched through the page cache), and
``opening`` (``ss.open``: in-place sources here, packed files through ``remote.open``).
"""
