"""An exception carried to another process: as itself when it survives the trip, else a faithful stand-in.

One rule for every exception slipstream sends out of a worker (a task's over a worker pipe, a
write worker process's, a Ray task's):

* it crosses as itself when it survives the trip: pickled and unpickled again (``dumps`` and
  ``loads``: ``pickle``'s, or Ray's cloudpickle for its tasks). Many do not: a class whose
  ``__init__`` takes other arguments than its ``args`` (a two-argument user exception pickles but
  cannot be rebuilt), or an attribute that cannot be pickled (a lock, a file handle);
* else as a stand-in the trip cannot lose: a ``RuntimeError`` whose message is
  ``"<type>: <message>"`` (``type_name``: the type's qualified name, ``module.`` before it outside
  ``builtins``), with the original's notes (which name the shard, the sample), then a note: where
  it was raised, why it could not be sent back as itself, and its traceback there.

Two trips use it:

* a trip that pickles the raised exception itself and keeps its traceback (``concurrent.futures``
  worker processes, Ray): ``portable(exc)`` is what to raise instead, ``raise_portable(exc)``
  raises it in the ``except`` block (itself re-raised, a stand-in ``from None``);
* a pipe that carries bytes only (``workers``): ``wrap_error(exc, where)`` in the worker is what
  to send, ``rebuild_error(wrapped)`` on the other side the exception again, with a note: where
  it was raised, then its traceback. One that survived the trip in the worker but does not
  unpickle on the other side (a class that side cannot import) becomes the stand-in there.
"""

from __future__ import annotations

import pickle
import traceback
from collections.abc import Callable, Iterable
from typing import Any, NoReturn

from .errors import add_note

__all__ = ["Wrapped", "portable", "raise_portable", "rebuild_error", "type_name", "wrap_error"]

# what ``wrap_error`` sends: the exception's pickle (None when it does not survive the trip), its
# ``type_name`` and message, its notes, where it was raised, why it did not survive (or None), its traceback
Wrapped = tuple[bytes | None, str, str, tuple[str, ...], str, str | None, str]

_WORKER = "raised in a worker"  # where, when the trip does not say


def type_name(exc: BaseException) -> str:
    """``ValueError``, or ``package.module.LabelError`` for a type outside ``builtins``."""
    kind = type(exc)
    return kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"


def _dumps(obj: Any) -> bytes:
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def _trip(exc: BaseException, dumps: Callable[[Any], bytes], loads: Callable[[bytes], Any]) -> tuple[bytes | None, str | None]:
    """``exc``'s pickle and None when it survives ``dumps`` then ``loads``; else None and why not."""
    try:
        data = dumps(exc)
        loads(data)
        return data, None
    except BaseException as why:  # noqa: BLE001 - a __reduce__ may raise anything (SystemExit too): the stand-in must still be made
        return None, f"{type(why).__name__}: {why}"


def _traceback(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip()


def _notes(exc: BaseException) -> tuple[str, ...]:
    return tuple(note for note in getattr(exc, "__notes__", []) if isinstance(note, str))


def _stand_in(kind: str, message: str, notes: Iterable[str], where: str, why: str, trace: str) -> RuntimeError:
    """The stand-in (module doc) for an exception of type ``kind`` (``type_name``) and ``message``."""
    stand_in = RuntimeError(f"{kind}: {message}")
    for note in notes:
        add_note(stand_in, note)
    why_not = f"a stand-in for the {kind}, which could not be sent back as itself ({why})"
    add_note(stand_in, f"{where}: {why_not}; its traceback there:\n{trace}")
    return stand_in


def portable(
    exc: BaseException,
    dumps: Callable[[Any], bytes] | None = None,
    loads: Callable[[bytes], Any] | None = None,
    *,
    where: str = _WORKER,
) -> BaseException:
    """``exc`` when it survives the trip (``dumps``/``loads``, default ``pickle``'s), else its
    stand-in (module doc), whose note says ``where`` it was raised."""
    _, why = _trip(exc, dumps or _dumps, loads or pickle.loads)
    if why is None:
        return exc
    return _stand_in(type_name(exc), str(exc), _notes(exc), where, why, _traceback(exc))


def raise_portable(
    exc: BaseException,
    dumps: Callable[[Any], bytes] | None = None,
    loads: Callable[[bytes], Any] | None = None,
    *,
    where: str = _WORKER,
) -> NoReturn:
    """In the ``except`` block handling ``exc``: re-raise it when it survives the trip (see
    ``portable``), else raise its stand-in (``from None``)."""
    sendable = portable(exc, dumps, loads, where=where)
    if sendable is exc:
        raise
    raise sendable from None


def wrap_error(exc: BaseException, where: str) -> Wrapped:
    """``exc`` made ready to send over a pipe (``Wrapped``); ``where``: where it was raised
    (``"raised in worker 0 (pid 12)"``)."""
    data, why = _trip(exc, _dumps, pickle.loads)
    return data, type_name(exc), str(exc), _notes(exc), where, why, _traceback(exc)


def rebuild_error(wrapped: Wrapped) -> BaseException:
    """The exception ``wrap_error`` sent, with a note saying where it was raised and its traceback;
    its stand-in when it did not survive the trip (or does not unpickle here)."""
    data, kind, message, notes, where, why, trace = wrapped
    if data is not None:
        try:
            error = pickle.loads(data)
        except Exception as exc:  # noqa: BLE001 - e.g. a class this side cannot import
            why = f"{type(exc).__name__}: {exc}"
        else:
            add_note(error, f"{where}\n{trace}")
            return error
    return _stand_in(kind, message, notes, where, why or "it did not unpickle", trace)
