"""``slipstream.ops``: the image operations of ``.map(field=[ops...])`` pipelines.

``ss.open(path).map(image=[ops.RandomResizedCrop(224), ops.RandomHorizontalFlip(), ops.ToCHW()])``.
The operations are defined in ``slipstream.images.imageops``; this module is their public name.
"""

from .images.imageops import (  # noqa: F401 - Geometry, Window, WindowError, Windows: public, outside __all__
    Apply,
    CenterCrop,
    Decode,
    Geometry,
    Normalize,
    Op,
    RandomHorizontalFlip,
    RandomResizedCrop,
    Resize,
    ToCHW,
    ToRGB,
    Window,
    WindowError,
    Windows,
)

__all__ = ["Apply", "CenterCrop", "Decode", "Normalize", "Op", "RandomHorizontalFlip", "RandomResizedCrop", "Resize", "ToCHW", "ToRGB"]
