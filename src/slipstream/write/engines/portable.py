"""An exception raised in a worker (a process or a Ray task), made able to reach the driver.

``portable(exc)`` is ``exc`` itself when it survives the trip: pickled and unpickled again (``dumps``
and ``loads``: ``pickle``'s for worker processes, Ray's cloudpickle for tasks). Many do not: a
class whose ``__init__`` takes other arguments than its ``args`` (a two-argument user exception
pickles but cannot be rebuilt), or an attribute that cannot be pickled (a lock, a file handle).
For those it is a stand-in the trip cannot lose: a ``RuntimeError`` whose message is
``"<type>: <message>"`` (the type's qualified name; ``module.`` before it outside ``builtins``),
with the original's notes (which name the shard and sample), then a note with why it could not
be sent and its traceback in the worker.
"""

from __future__ import annotations

import pickle
import traceback
from collections.abc import Callable
from typing import Any, NoReturn

from ...core.errors import add_note

__all__ = ["portable", "raise_portable", "type_name"]


def type_name(exc: BaseException) -> str:
    """``ValueError``, or ``package.module.LabelError`` for a type outside ``builtins``."""
    kind = type(exc)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def portable(exc: BaseException, dumps: Callable[[Any], bytes] | None = None, loads: Callable[[bytes], Any] | None = None) -> BaseException:
    """``exc`` when it pickles and unpickles again (with ``dumps``/``loads``, default ``pickle``'s),
    else its stand-in ``RuntimeError`` (see the module doc)."""
    dumps = dumps or (lambda obj: pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
    loads = loads or pickle.loads
    try:
        loads(dumps(exc))
        return exc
    except BaseException as why:  # noqa: BLE001 - a __reduce__ may raise anything; the stand-in must still be made
        reason = f"{type(why).__name__}: {why}"
    stand_in = RuntimeError(f"{type_name(exc)}: {exc}")
    for note in getattr(exc, "__notes__", []):
        if isinstance(note, str):
            add_note(stand_in, note)
    trace = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()
    add_note(stand_in, f"(a stand-in: the {type_name(exc)} could not be sent back as itself ({reason}); its traceback in the worker:)\n{trace}")
    return stand_in


def raise_portable(exc: BaseException, dumps: Callable[[Any], bytes] | None = None, loads: Callable[[bytes], Any] | None = None) -> NoReturn:
    """In the ``except`` block handling ``exc``: re-raise it when it survives the trip (see
    ``portable``), else raise its stand-in (``from None``)."""
    sendable = portable(exc, dumps, loads)
    if sendable is exc:
        raise
    raise sendable from None
