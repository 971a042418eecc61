"""Conversion: existing datasets (image folders, NumPy, Parquet/Arrow, Hugging Face) into
packed files (``slipstream convert``), and packed files out to Hugging Face ``datasets``.
"""
