"""The bypass warning: ``accelerate`` is about to replace a ``slipstream.torch.DataLoader``.

Before rebuilding a loader, ``Accelerator.prepare_data_loader`` asks it
``getattr(loader, "_is_accelerate_prepared", False)``, its own "already prepared?" check. The
loader class answers with ``prepared_flag``: ``True`` once ``slipstream.torch.prepare`` has taken
the loader (accelerate then hands it back unchanged), otherwise ``False``. The answer ``False``
comes with an ``AccelerateBypassWarning`` only when the code reading the attribute is
accelerate's (the calling frame's module is ``accelerate`` or one of its submodules): ``hasattr``,
``inspect.getmembers``, ``mock.create_autospec`` or any other reader gets ``False`` silently. The
check runs only when the attribute is read, never while loading.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

__all__ = ["AccelerateBypassWarning", "mark_prepared", "prepared_flag"]


_TAKEN = "_slipstream_accelerate_prepared"  # instance flag: prepare() took this loader


class AccelerateBypassWarning(UserWarning):
    """``accelerate`` is about to replace a ``slipstream.torch.DataLoader`` with its own loader."""


_BYPASS = (
    "accelerate is replacing this slipstream.torch.DataLoader with its own DataLoaderShard, which reads the "
    "dataset through torch's DataLoader: slipstream will not load these batches. Use "
    "loader = slipstream.torch.prepare(accelerator, loader) instead of accelerator.prepare(loader) "
    "(see slipstream.torch.prepare for sharding and device placement)."
)


def _read_by_accelerate(depth: int) -> bool:
    """The code ``depth`` frames up from the caller is in ``accelerate`` (or a submodule)."""
    try:
        frame = sys._getframe(depth + 1)
    except ValueError:  # no such frame
        return False
    module = frame.f_globals.get("__name__", "")
    return isinstance(module, str) and (module == "accelerate" or module.startswith("accelerate."))


def _answer_prepared(loader: Any) -> bool:
    """``loader._is_accelerate_prepared``: True once ``prepare`` took the loader; otherwise False,
    with the bypass warning when accelerate is the reader (it reads it just before replacing the
    loader)."""
    if loader.__dict__.get(_TAKEN, False):
        return True
    if _read_by_accelerate(1):  # the frame that read the attribute (getattr makes no frame)
        warnings.warn(_BYPASS, AccelerateBypassWarning, stacklevel=2)
    return False


def mark_prepared(loader: Any, value: bool) -> None:
    """Mark ``loader`` as taken by ``prepare`` (accelerate also sets ``_is_accelerate_prepared = True`` on
    what it returns from its ``prepare``)."""
    loader.__dict__[_TAKEN] = bool(value)


prepared_flag = property(_answer_prepared, mark_prepared)
