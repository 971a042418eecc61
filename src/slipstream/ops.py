"""``slipstream.ops``: the image operations of ``.map(field=[ops...])`` pipelines.

``ss.open(path).map(image=[ops.RandomResizedCrop(224), ops.RandomHorizontalFlip(), ops.ToCHW()])``.
The operations are defined in ``slipstream.images.ops``; this module is their public name.
"""

from .images.ops import Apply, CenterCrop, Decode, Normalize, Op, RandomHorizontalFlip, RandomResizedCrop, Resize, ToCHW, ToRGB
from .images.ops import Geometry, Window, WindowError, Windows  # noqa: F401 - public names of slipstream.ops, outside __all__ as before

__all__ = ["Apply", "CenterCrop", "Decode", "Normalize", "Op", "RandomHorizontalFlip", "RandomResizedCrop", "Resize", "ToCHW", "ToRGB"]
