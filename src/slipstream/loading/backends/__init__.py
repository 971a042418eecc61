"""Backends: how a loader's batch plans are loaded (one interface, see ``base``).

* ``inline``: in the consumer's thread (``workers=0``);
* ``threads``: worker threads that share each batch (``backend="thread"``, the default);
* ``processes``: persistent worker processes writing into shared memory (``backend="process"``);
* ``helper``: the worker threads in one persistent helper process, writing into shared memory
  (``backend="helper"``): the trainer's process only sends batches and hears they are ready.

``make_backend`` is the one place that maps a loader's arguments to a backend: a new backend is a
module here and an entry in ``BACKENDS``.
"""

from __future__ import annotations

from .base import Backend, Reading, Settings
from .helper import HelperBackend
from .inline import InlineBackend
from .processes import ProcessBackend
from .threads import ThreadBackend

__all__ = ["BACKENDS", "Backend", "Reading", "Settings", "make_backend"]

BACKENDS: dict[str, type[Backend]] = {"thread": ThreadBackend, "process": ProcessBackend, "helper": HelperBackend}


def make_backend(name: str, settings: Settings) -> Backend:
    """The backend called ``name`` for ``settings`` (inline whenever there are no workers)."""
    if name not in BACKENDS:
        raise ValueError(f"backend must be one of {list(BACKENDS)}, got {name!r}")
    if settings.workers == 0:
        return InlineBackend(settings)
    return BACKENDS[name](settings)
