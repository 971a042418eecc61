"""The bypass warning: ``accelerate`` is about to replace a ``slipstream.torch.DataLoader``.

Before rebuilding a loader, ``Accelerator.prepare_data_loader`` asks it
``getattr(loader, "_is_accelerate_prepared", False)``, its own "already prepared?" check. The
loader class answers with ``prepared_flag``: ``True`` once ``slipstream.torch.prepare`` has taken
the loader (accelerate then hands it back unchanged), otherwise ``False`` with an
``AccelerateBypassWarning``. Only accelerate reads the attribute, once per ``prepare``.
"""

from __future__ import annotations

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


def _answer_prepared(loader: Any) -> bool:
    """``loader._is_accelerate_prepared``: True once ``prepare`` took the loader; otherwise False,
    with the bypass warning (accelerate reads it just before replacing the loader)."""
    if loader.__dict__.get(_TAKEN, False):
        return True
    warnings.warn(_BYPASS, AccelerateBypassWarning, stacklevel=2)
    return False


def mark_prepared(loader: Any, value: bool) -> None:
    """Mark ``loader`` as taken by ``prepare`` (accelerate also sets ``_is_accelerate_prepared = True`` on
    what it returns from its ``prepare``)."""
    loader.__dict__[_TAKEN] = bool(value)


prepared_flag = property(_answer_prepared, mark_prepared)
