"""Data read where it already lives, without a conversion step: ``ss.open`` of Parquet files and
folders, Hugging Face datasets and WebDataset tar shards, as packed files are read.

``storage`` (a table column as its field stores it), ``tablepages`` (a table's parts as the pages of
a ``PackedDataset``), ``parquet`` (Parquet files: row groups as pages, footers as the index), and
``opening`` (``ss.open``: in-place sources here, packed files through ``remote.open``).
"""
