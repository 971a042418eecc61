"""Packed files: ``format`` (the Arrow IPC layout and its metadata), ``field`` (the field and column
protocol) with ``field_array`` and ``field_image`` (the array and image kinds; ``slipstream.fields``
adds the scalar, text, bytes and JSON kinds and is the public namespace of them all), ``writer``
(``ss.write``), ``packed`` (``ss.open``, the zero-copy reader), ``identity`` (the file's ends checked
before it is opened, its identity watched while it is mapped) and ``mapped`` (fields mapped through
image pipelines).
"""
