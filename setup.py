"""Builds the optional C extension; everything else is in pyproject.toml.

``slipstream.images._roijpeg`` is slipstream's compiled image code (``src/slipstream/images/csrc``):
region-of-interest JPEG decoding with libjpeg-turbo's libjpeg API (``jpeg_crop_scanline`` /
``jpeg_skip_scanlines``), Pillow's resampling, and whole image tasks (decode, crop, resize, mirror,
lay out a chunk of a batch in one call without the GIL). It needs a C compiler and the libjpeg
headers (Debian: ``libjpeg62-turbo-dev``); when either is missing the build is skipped and slipstream
decodes whole images with simplejpeg and resamples with NumPy instead (same pixels, slower).

``slipstream.sequences._packing`` and ``_mixing`` (``src/slipstream/sequences/csrc``) are the
token-sequence kernels: packing plans, row gathers into the batch, mixture interleaves. They need a
C compiler only; without one NumPy gives the same results, slower.
"""

from pathlib import Path

from setuptools import Extension, setup

# the module's file and every C file under csrc/ (sorted: the same build order everywhere)
SOURCES = ["_roijpeg.c"] + sorted(f"csrc/{path.name}" for path in Path("src/slipstream/images/csrc").glob("*.c"))
# the token-sequence kernels need no library: they build wherever a C compiler is
SEQUENCES = {"_packing": ["csrc/packing.c", "csrc/packplan.c", "csrc/packrows.c"], "_mixing": ["csrc/mixing.c", "csrc/mixsim.c", "csrc/feistel.c"]}

setup(
    ext_modules=[
        Extension(
            "slipstream.images._roijpeg",
            [f"src/slipstream/images/{name}" for name in SOURCES],
            libraries=["jpeg", "pthread"],
            optional=True,
            # no fused multiply-add: the resampling weights must round as Pillow's and NumPy's do
            extra_compile_args=["-O3", "-std=c99", "-ffp-contract=off"],
        )
    ]
    + [
        Extension(f"slipstream.sequences.{name}", [f"src/slipstream/sequences/{path}" for path in paths], optional=True, extra_compile_args=["-O3", "-std=c99"])
        for name, paths in SEQUENCES.items()
    ]
)
