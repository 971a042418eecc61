"""Images: ``codecs`` (JPEG, PNG, QOI, raw: encode, decode, headers), ``pipeline`` (the compiled
pipelines that decode a crop window and resample it into a batch slot), ``kernels`` (the pixel
kernels: checks, NumPy and numba paths sharing one set of Pillow's constants, and their background
compiler), and the ``_roijpeg`` C extension (the optional JPEG region decoder).
"""
