"""Device names as users write them: the one parser of every ``device=`` argument.

``device_name(x)`` gives torch's device string for ``x`` without importing torch, so NumPy-only
code (a device-mapped view made in a worker) checks a device as the training process does:

- ``None`` stays ``None`` (no device: the host);
- an int ``i >= 0`` is the CUDA device ``"cuda:i"`` (torch's rule for a bare index);
- a ``torch.device`` is its name (``"cuda:1"``, ``"cpu"``);
- a string of the form ``type`` or ``type:index`` (``"cuda"``, ``"cuda:1"``, ``"cpu"``, ``"mps"``)
  is itself.

Anything else is a ``ValueError`` naming the argument and the value. Whether the device exists is
the framework's to say (``torch.cuda.is_available()``), when the device is first used.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["device_name"]

_FORM = re.compile(r"[a-z][a-z0-9_]*(:[0-9]+)?")


def device_name(device: Any, what: str = "device") -> str | None:
    """``device`` as torch's device string, or None for None (see the module doc)."""
    if device is None:
        return None
    if isinstance(device, int) and not isinstance(device, bool):
        if device >= 0:
            return f"cuda:{device}"
    else:
        name = str(device) if type(device).__name__ == "device" else device
        if isinstance(name, str) and _FORM.fullmatch(name):
            return name
    raise ValueError(f"{what} must be None, a torch device such as 'cuda', 'cuda:1' or 'cpu', or a CUDA index, got {device!r}")
