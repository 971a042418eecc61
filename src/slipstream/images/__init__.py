"""Images: codecs (JPEG, PNG, QOI, raw), the compiled pipelines that decode a crop window and
resample it into a batch slot, the pixel kernels, and the ``_roijpeg`` C extension.
"""
