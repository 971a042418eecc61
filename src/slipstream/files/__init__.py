"""Packed files, the format and reading: ``format`` (the Arrow IPC layout and its metadata),
``field`` (the field and column protocol) with ``field_kinds`` (the scalar, bytes, text and JSON kinds;
``slipstream.fields`` is their public name) and ``field_array``, ``field_image``, ``field_tokens``
(the array, image and token kinds), ``inferred`` (the fields a sample's values imply), ``packed``
(the zero-copy reader of one file's pages from a page source), ``local`` (a local file as a page
source), ``pagememory`` (the decoded pages a reader keeps), ``layout`` (page byte ranges read from
a file's footer), ``folder`` (a sharded folder's index, read and checked), ``shards`` (several
files as one dataset), ``identity`` (the file's ends checked before it is opened, its identity
watched while it is mapped) and ``parquetfooter`` (a Parquet footer read and checked from its own
bytes, for reading Parquet in place and converting it). Writing is the ``write`` package;
``ss.open`` itself is ``inplace.opening``: packed files through ``remote.open``, which also reads
object storage, and data read in place.
"""
