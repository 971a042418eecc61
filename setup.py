"""Builds the optional C extension; everything else is in pyproject.toml.

``slipstream.images._roijpeg`` decodes only a crop window of a JPEG with libjpeg-turbo's libjpeg API
(``jpeg_crop_scanline`` / ``jpeg_skip_scanlines``). It needs a C compiler and the libjpeg headers
(Debian: ``libjpeg62-turbo-dev``); when either is missing the build is skipped and slipstream
decodes whole images with simplejpeg instead (same pixels, a little slower).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("slipstream.images._roijpeg", ["src/slipstream/images/_roijpeg.c"], libraries=["jpeg"], optional=True, extra_compile_args=["-O2", "-std=c99"])
    ]
)
