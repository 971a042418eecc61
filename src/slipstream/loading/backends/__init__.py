"""Backends: how a loader's batch plans are loaded (one interface, see ``base``).

* ``inline``: in the consumer's thread (``workers=0``);
* ``threads``: worker threads that share each batch (``backend="thread"``, the default);
* ``processes``: persistent worker processes writing into shared memory (``backend="process"``);
* ``helper``: the worker threads in one persistent helper process, writing into shared memory
  (``backend="helper"``): the trainer's process only sends batches and hears they are ready.

``make_backend`` is the one place that maps a loader's ``Options`` to a backend: a new backend is a
module here and an entry in ``BACKENDS`` (whose names ``loading.options`` checks ``backend=`` against).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import Backend, Reading
from .helper import HelperBackend
from .inline import InlineBackend
from .processes import ProcessBackend
from .threads import ThreadBackend

if TYPE_CHECKING:  # for the hints only: options imports this module (BACKENDS)
    from ..options import Options

__all__ = ["BACKENDS", "Backend", "Reading", "make_backend"]

BACKENDS: dict[str, type[Backend]] = {"thread": ThreadBackend, "process": ProcessBackend, "helper": HelperBackend}


def make_backend(options: Options) -> Backend:
    """The backend ``options.backend`` names (a name ``check_options`` checked), made from ``options``;
    inline whenever there are no workers."""
    if options.workers == 0:
        return InlineBackend(options)
    return BACKENDS[options.backend](options)
