"""``slipstream.gpu``: image pixel work on a torch device (the device stage), by its public names.

``ss.open(p).map(image=[ops...], device="cuda")`` is the usual spelling; this module names the parts
for use by hand (``DeviceStage``, ``decode_batch``, ``nvjpeg_available``, ...). They are defined in
``slipstream.images.device`` and load lazily: importing this module never imports torch.
"""

from .images.device import __all__, __dir__, __getattr__  # noqa: F401 - the public names, loaded lazily
