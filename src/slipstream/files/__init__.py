"""Packed files: ``format`` (the Arrow IPC layout and its metadata), ``field`` (the field and column
protocol) with ``field_array`` and ``field_image`` (the array and image kinds; ``slipstream.fields``
adds the scalar, text, bytes and JSON kinds and is the public namespace of them all), ``writer``
(``ss.write``), ``packed`` (the zero-copy reader of one file's pages from a page source), ``local``
(a local file as a page source), ``pagememory`` (the decoded pages a reader keeps), ``layout``
(page byte ranges read from a file's footer), ``folder`` (sharded folders and their index),
``shards`` (several files as one dataset), ``identity`` (the file's ends checked before it is
opened, its identity watched while it is mapped), ``image_index`` and ``mapped`` (fields mapped
through image pipelines). ``ss.open`` itself is ``remote.open``, which also reads object storage.
"""
