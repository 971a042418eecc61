"""Packed files: the Arrow IPC format, the fields that encode and decode columns, the writer
(``ss.write``), the zero-copy reader (``ss.open``) and fields mapped through image pipelines.
"""
