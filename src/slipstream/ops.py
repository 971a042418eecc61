"""``slipstream.ops``: the image operations of ``.map(field=[ops...])`` pipelines.

``ss.open(path).map(image=[ops.RandomResizedCrop(224), ops.RandomHorizontalFlip(), ops.ToCHW()])``.
The operations are defined in ``slipstream.images.imageops`` (geometry, formats) and
``slipstream.images.pixelops`` (torchvision v2's colour, tone, blur, rotation and erasing ops,
RandAugment, TrivialAugmentWide) and ``slipstream.images.batchops`` (MixUp, CutMix and the
choice between them, on whole batches: ``ss.DataLoader(..., batch_ops=[ops.MixUpOrCutMix(num_classes=K)])``);
this module is their public name.
"""

from .images.batchops import BatchOp, CutMix, MixUp, MixUpOrCutMix  # noqa: F401 - BatchOp: public, outside __all__
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
from .images.pixelops import (  # noqa: F401 - PixelOp: public, outside __all__
    AutoAugment,
    ColorJitter,
    GaussianBlur,
    Grayscale,
    PixelOp,
    RandAugment,
    RandomAdjustSharpness,
    RandomAffine,
    RandomApply,
    RandomAutocontrast,
    RandomChoice,
    RandomEqualize,
    RandomErasing,
    RandomGrayscale,
    RandomInvert,
    RandomPosterize,
    RandomRotation,
    RandomSolarize,
    TrivialAugmentWide,
)

__all__ = [
    "Apply",
    "AutoAugment",
    "CenterCrop",
    "ColorJitter",
    "CutMix",
    "Decode",
    "GaussianBlur",
    "Grayscale",
    "MixUp",
    "MixUpOrCutMix",
    "Normalize",
    "Op",
    "RandAugment",
    "RandomAdjustSharpness",
    "RandomAffine",
    "RandomApply",
    "RandomAutocontrast",
    "RandomChoice",
    "RandomEqualize",
    "RandomErasing",
    "RandomGrayscale",
    "RandomHorizontalFlip",
    "RandomInvert",
    "RandomPosterize",
    "RandomResizedCrop",
    "RandomRotation",
    "RandomSolarize",
    "Resize",
    "ToCHW",
    "ToRGB",
    "TrivialAugmentWide",
]
