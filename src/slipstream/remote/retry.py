"""Retrying a remote read: transient failures again with backoff and jitter, within a time budget.

``retrying(attempt, url, start, stop, budget)`` calls ``attempt()`` until it returns. Failures are
classified by their cause (``transient(error)``), and only transient ones are retried:

* raised at once as themselves: ``FileNotFoundError``, ``PermissionError``, ``NotADirectoryError``,
  ``IsADirectoryError``; ``ValueError``, ``TypeError``, ``ImportError``, ``NotImplementedError`` and
  ``AttributeError``, which a misconfigured client or a bad URL raise (slipstream's
  ``ShardMismatchError`` and ``CorruptFileError`` among them); or an error marked
  ``permanent = True``. A client's error gets a note saying what was read of which object;
* raised at once as a ``RemoteReadError`` (``attempts`` 1), the error chained: other permanent
  failures, which no retry mends: a client-side error (botocore's ``ParamValidationError`` for an
  invalid bucket name, missing or partial credentials, an unknown region...) and an answer whose
  HTTP status says the request itself is wrong (400, 401, 403, 404, 405, 410, 411, 412, 413, 414,
  416, 501...), unless its error code says "try again" (S3's ``RequestTimeout``, ``SlowDown``);
* retried: everything else (timeouts, resets, refused or dropped connections, 408, 429 and 5xx
  answers, throttling, short bodies, checksum mismatches): the next attempt follows after a random
  wait of up to ``min(cap, base * 2**k)`` seconds ("full jitter", so many readers that failed
  together do not retry together), as long as the budget allows; then ``RemoteReadError`` names
  the object, the range, the number of attempts and the time spent, with the last failure chained
  as its cause.

Whatever is raised or chained has its credentials redacted first (``core.redact.scrubbed``): a
URL's ``user:password@`` or signature never reaches a message, a note or a cause.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

from ..core.errors import PackedFileError, RemoteReadError, add_note
from ..core.redact import scrubbed

__all__ = ["PERMANENT", "http_status", "retrying", "transient"]

T = TypeVar("T")
PERMANENT = (
    FileNotFoundError, PermissionError, NotADirectoryError, IsADirectoryError, ValueError, TypeError, ImportError, NotImplementedError, AttributeError,
)  # fmt: skip

# client-side errors (botocore's names; matched by name, so no client is imported here): the
# request was never valid, and asking again sends the same one
CLIENT_ERRORS = frozenset((
    "ParamValidationError", "InvalidDNSNameError", "InvalidHostLabelError", "InvalidRegionError", "NoRegionError",
    "InvalidEndpointConfigurationError", "InvalidS3AddressingStyleError", "UnsupportedS3ArnError",
    "UnsupportedS3AccesspointConfigurationError", "UnsupportedS3ConfigurationError", "UnknownSignatureVersionError",
    "UnknownServiceError", "UnknownClientMethodError", "NoCredentialsError", "PartialCredentialsError",
    "UnknownCredentialError", "ProfileNotFound", "InvalidConfigError", "ConfigParseError", "InvalidURL",
))  # fmt: skip
PERMANENT_STATUS = frozenset((400, 401, 403, 404, 405, 406, 410, 411, 412, 413, 414, 415, 416, 422, 431, 451, 501, 505))
TRANSIENT_CODES = frozenset((
    "RequestTimeout", "RequestTimeoutException", "SlowDown", "Throttling", "ThrottlingException", "TooManyRequests",
    "TooManyRequestsException", "RequestLimitExceeded", "OperationAborted", "InternalError", "ServiceUnavailable",
    "PriorRequestNotComplete", "RequestThrottled", "BandwidthLimitExceeded", "EC2ThrottledException",
))  # fmt: skip


def _chain(error: BaseException) -> list[BaseException]:
    """``error`` and its explicit causes (a client's translated error chains the answer it came from)."""
    out: list[BaseException] = []
    while error is not None and len(out) < 8 and all(error is not seen for seen in out):
        out.append(error)
        error = error.__cause__  # type: ignore[assignment]
    return out


def http_status(error: BaseException) -> int | None:
    """The HTTP status of the answer behind ``error``, looked for along its causes: a botocore
    ``ClientError``'s response, an aiohttp ``ClientResponseError``'s ``status``, a requests
    ``HTTPError``'s response, an ``urllib`` ``HTTPError``'s ``code`` (only these: other errors carry
    a ``code`` or ``status`` of their own, aiohttp's parse errors a 400 that no server sent). None
    when there is none."""
    for link in _chain(error):
        names = {cls.__name__ for cls in type(link).__mro__}
        response = getattr(link, "response", None)
        if isinstance(response, dict):
            found = (response.get("ResponseMetadata") or {}).get("HTTPStatusCode")
        elif "ClientResponseError" in names:
            found = getattr(link, "status", None)
        elif "HTTPError" in names:
            found = getattr(response, "status_code", None) if response is not None else getattr(link, "code", None)
        else:
            continue
        if isinstance(found, int) and not isinstance(found, bool) and 100 <= found <= 599:
            return found
    return None


def _error_code(error: BaseException) -> str | None:
    for link in _chain(error):
        response = getattr(link, "response", None)
        if isinstance(response, dict):
            code = (response.get("Error") or {}).get("Code")
            if isinstance(code, str):
                return code
    return None


def transient(error: BaseException) -> bool | None:
    """True when ``error`` may pass if asked again; None when it is permanent and raised as itself
    (the kinds above, or marked ``permanent``); False when it is permanent otherwise (a client-side
    error, a status that says the request is wrong)."""
    marked = getattr(error, "permanent", None)
    if marked is not None:
        return None if marked else True
    if isinstance(error, PERMANENT):
        return None
    names = {cls.__name__ for link in _chain(error) for cls in type(link).__mro__}
    if names & CLIENT_ERRORS:
        return False
    if _error_code(error) in TRANSIENT_CODES:
        return True
    status = http_status(error)
    return not (status is not None and status in PERMANENT_STATUS)


def retrying(
    attempt: Callable[[], T], url: str, start: int, stop: int, budget: float, base: float = 0.05, cap: float = 2.0,
    on_retry: Callable[[], None] | None = None, attempt_timeout: float | None = None, what: str | None = None,
    prepare: Callable[[], object] | None = None,
) -> T:  # fmt: skip
    """``attempt()``'s result, retried as the module doc says (``on_retry()`` before each retry).
    With ``attempt_timeout``, an attempt that has not returned after that long (or after what is
    left of the budget) is abandoned as a ``TimeoutError``: a server that accepts a request and
    never answers, or trickles its answer, cannot hold a read past the budget whatever the client's
    own timeouts. ``what`` names what was read in the error (default: the byte range).
    ``prepare()`` runs first, outside the budget and unretried (making the client)."""
    try:
        return _retrying(attempt, url, start, stop, budget, base, cap, on_retry, attempt_timeout, what, prepare)
    except Exception as exc:  # noqa: BLE001 - re-raised, its credentials redacted
        safe = scrubbed(exc)
        if safe is exc:
            raise
    raise safe from safe.__cause__  # (a stand-in, raised outside the handler: the original is not its context)


def _retrying(
    attempt: Callable[[], T], url: str, start: int, stop: int, budget: float, base: float, cap: float,
    on_retry: Callable[[], None] | None, attempt_timeout: float | None, what: str | None, prepare: Callable[[], object] | None,
) -> T:  # fmt: skip
    if prepare is not None:
        prepare()  # (outside the budget: making a client is not a request)
    began = time.monotonic()
    deadline = began + budget
    what = what or f"bytes {start}..{stop}"
    k = 0
    while True:
        k += 1
        try:
            if attempt_timeout is None:
                return attempt()
            return _bounded(attempt, max(0.0, min(attempt_timeout, deadline - time.monotonic())))
        except Exception as exc:  # noqa: BLE001 - classified: raised, or retried within the budget
            kind = transient(exc)
            if kind is None:
                _note(exc, f"(reading {what} of {url}: a permanent failure, not retried)")
                raise
            if kind is False:
                raise _final(
                    RemoteReadError(url, f"{what} could not be read: a permanent failure, not retried: {_describe(exc)}", start, stop, k)
                ) from scrubbed(exc)
            wait = random.uniform(0, min(cap, base * 2**k))
            if time.monotonic() + wait >= deadline:
                raise _final(
                    RemoteReadError(
                        url,
                        f"{what} could not be read in {k} attempts over {time.monotonic() - began:.1f} s "
                        f"(the retry budget is {budget:g} s); the last failure: {_describe(exc)}",
                        start,
                        stop,
                        k,
                    )
                ) from scrubbed(exc)
            if on_retry is not None:
                on_retry()
            time.sleep(wait)  # backoff before the next attempt (a pause for the server, not a synchronization)


def _note(error: BaseException, note: str) -> None:
    """Say on ``error`` (raised as itself: a client's error may name nothing) what was being read,
    once; slipstream's own errors already name the object."""
    if not isinstance(error, PackedFileError) and not any(n.startswith("(reading ") for n in getattr(error, "__notes__", ())):
        add_note(error, note)


def _final(error: RemoteReadError) -> RemoteReadError:
    """``error`` marked permanent: a read that retried within a larger one is not retried again
    (its budget is spent, or nothing would mend it)."""
    error.permanent = True  # type: ignore[attr-defined]
    return error


def _describe(error: BaseException) -> str:
    """``Type: text`` of a failure, with the HTTP status when the text does not say it."""
    text = f"{type(error).__name__}: {error}"
    status = http_status(error)
    return text if status is None or str(status) in text else f"{text} (HTTP {status})"


def _bounded(attempt: Callable[[], T], seconds: float) -> T:
    """``attempt()`` run on a daemon thread, waited for at most ``seconds``; ``TimeoutError`` after
    that (the thread is abandoned: the client's own timeout ends it later, and what it returns is
    dropped)."""
    box: dict[str, Any] = {}
    done = threading.Event()

    def run() -> None:
        try:
            box["value"] = attempt()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name="slipstream-request", daemon=True).start()
    if not done.wait(seconds):  # (a time limit on the request, not a synchronization)
        raise TimeoutError(f"no complete answer within {seconds:.1f} s")
    if "error" in box:
        raise box["error"]
    return box["value"]
