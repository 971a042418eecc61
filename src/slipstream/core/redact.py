"""Credentials never shown: one helper for every message, repr and error that may hold a URL.

``redact(text)`` returns ``text`` with what could be a credential replaced by ``***``:

* the user information of every URL in it (``s3://key:secret@bucket/...``,
  ``https://user:password@host/...``, ``https://TOKEN@host/...`` become ``scheme://***@...``; an
  Azure ``abfs://container@account...`` keeps its container, which names no secret);
* the values of query parameters that carry one (``X-Amz-Signature``, ``X-Amz-Credential``,
  ``X-Amz-Security-Token``, ``sig``, ``token``, ``access_token``, ``key``, ``password``...: any
  whose name has ``sig``, ``token``, ``secret``, ``pass``, ``pwd``, ``cred``, ``key``, ``auth`` or
  ``session`` in it);
* every secret this process was shown (``remember(url)``: a URL's password, or the token standing
  alone in its user's place, and its credential parameters; ``remember_options(storage_options)``),
  and the credentials of the environment (``AWS_SECRET_ACCESS_KEY``, ``AWS_SESSION_TOKEN``,
  ``AZURE_STORAGE_KEY``...), wherever they appear, since a client's message may quote them outside
  any URL (botocore quotes ``key:secret@bucket`` as the bucket's name). A remembered secret of
  fewer than 3 characters, or an environment one of fewer than 8, is only redacted inside URLs
  (shorter strings are too likely to be ordinary words).

``redact_url(url)`` is the name to show for one URL (the same rules). ``scrubbed(error)`` makes an
exception, with its causes and contexts, safe to show: each one's arguments and string attributes
redacted in place, and one whose text still holds a credential (a custom ``__str__``) replaced by a
``RedactedError`` of the same text redacted. ``PackedFileError`` redacts its path and message, so
every slipstream error naming an object is safe however it was built.
"""

from __future__ import annotations

import os
import re
import threading
import urllib.parse
from collections.abc import Iterator
from typing import Any

__all__ = ["MASK", "RedactedError", "has_credentials", "redact", "redact_url", "remember", "remember_options", "scrubbed"]

MASK = "***"

_QUERY = re.compile(r"(?P<lead>[?&;](?:amp;)?)(?P<name>[^\s=&;#\"'<>?]*)=(?P<value>[^\s&;#\"'<>]*)")
_SENSITIVE = re.compile(r"sig|token|secret|pass|pwd|cred|key|auth|session", re.IGNORECASE)
_CONNECTION = re.compile(r"conn", re.IGNORECASE)  # (an Azure connection_string holds its account key)
_SPACE = re.compile(r"\s")
_DELIMITER = re.compile(r"[/?#]")
_SCHEME = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789+.-")
_LETTERS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
_CONTAINER_SCHEMES = ("az://", "abfs://", "abfss://", "adl://", "wasb://", "wasbs://")  # container@account: not a secret
_ENVIRONMENT = (
    "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AZURE_STORAGE_KEY", "AZURE_STORAGE_ACCOUNT_KEY",
    "AZURE_STORAGE_SAS_TOKEN", "AZURE_STORAGE_CONNECTION_STRING", "AZURE_CLIENT_SECRET", "GOOGLE_OAUTH_ACCESS_TOKEN",
)  # fmt: skip
_SHORTEST, _SHORTEST_ENVIRONMENT = 3, 8

_secrets: set[str] = set()
_lock = threading.Lock()


class RedactedError(Exception):
    """Stands in for an exception whose text held a credential that could not be removed from it
    in place: its message is ``"<its type>: <its text, redacted>"``."""


def _urls(text: str) -> Iterator[tuple[int, int, int]]:
    """(start, end of its ``scheme://``, end) of every URL in ``text``, in order, in linear time: a
    scheme (a letter, then letters, digits, ``+ . -``) before each ``://``, the URL running to the
    next white space (a password may hold quotes) or to the next URL's scheme (a URL in a query)."""
    found: list[tuple[int, int]] = []
    at = floor = 0
    while (k := text.find("://", at)) >= 0:
        start = k
        while start > floor and text[start - 1] in _SCHEME:
            start -= 1
        while start < k and text[start] not in _LETTERS:
            start += 1
        if start < k:
            found.append((start, k + 3))
        at = floor = k + 3
    space = -1
    for i, (start, body) in enumerate(found):
        if space < body:
            match = _SPACE.search(text, body)
            space = match.start() if match else len(text)
        following = found[i + 1][0] if i + 1 < len(found) else len(text)
        yield start, body, min(space, following)


def _userinfo(rest: str) -> tuple[str, str | None] | None:
    """(user, password or None) of a URL whose text after ``scheme://`` is ``rest``, or None when
    it has no user information. As HTTP clients read it: the authority runs to the first ``/``,
    ``?`` or ``#`` and its user information to its last ``@`` (a user may be an e-mail address, a
    password may hold quotes). One more form is read, since not every user encodes a password:
    ``user:pass/word@host``, a password holding ``/``, ``?`` or ``#`` (AWS secret keys hold ``/``),
    up to the ``@`` that a host follows; never ``host:port/...@...`` (a path with an ``@``) or an
    IPv6 ``[...]`` host. Reading too much as credentials only hides more of a message; reading too
    little would show a secret."""
    found = _DELIMITER.search(rest)
    authority_end = found.start() if found else len(rest)
    at = rest.rfind("@", 0, authority_end)
    if at < 0:
        colon = rest.find(":", 0, authority_end)
        after = rest[colon + 1 : authority_end]
        if colon <= 0 or rest.startswith("[") or not after or after.isdigit():
            return None
        first = rest.find("@", authority_end)
        if first < 0:
            return None
        found = _DELIMITER.search(rest, first + 1)
        at = rest.rfind("@", first, found.start() if found else len(rest))
    user, colon, password = rest[:at].partition(":")
    return user, (password if colon else None)


def _is_container(scheme: str, info: tuple[str, str | None]) -> bool:
    """An Azure ``container@account`` URL: its user part names a container, not a secret."""
    return info[1] is None and scheme.lower() in _CONTAINER_SCHEMES


def _query(match: re.Match) -> str:
    if not _SENSITIVE.search(match["name"]) or not match["value"]:
        return match[0]
    return f"{match['lead']}{match['name']}={MASK}"


def redact_url(url: str) -> str:
    """``url`` with its user information and credential parameters replaced by ``***``."""
    out, last = [], 0
    for start, body, end in _urls(url):
        rest = url[body:end]
        info = _userinfo(rest)
        if info is not None and not _is_container(url[start:body], info):
            at = len(info[0]) + (0 if info[1] is None else 1 + len(info[1]))
            rest = f"{MASK}{rest[at:]}"
        out += [url[last:body], _QUERY.sub(_query, rest) if "?" in rest else rest]
        last = end
    return "".join(out) + url[last:] if out else url


def _in_text(text: str) -> str:
    """``text`` with each URL in it redacted (the punctuation or quote after a URL in a sentence or
    repr is not part of it)."""
    out, last = [], 0
    for start, _, end in _urls(text):
        url = text[start:end]
        body = url.rstrip(".,:;)]}>\"'")
        out += [text[last:start], redact_url(body), url[len(body) :]]
        last = end
    return "".join(out) + text[last:] if out else text


def redact(text: Any) -> str:
    """``str(text)`` with every credential in it replaced by ``***`` (see the module doc)."""
    text = str(text)
    if "://" in text:
        text = _in_text(text)
    for secret in _known():
        if secret in text:
            text = text.replace(secret, MASK)
    return text


def has_credentials(text: Any) -> bool:
    """Whether ``redact`` would change ``str(text)``."""
    return redact(text) != str(text)


def _known() -> list[str]:
    """The secrets to find outside URLs, longest first (a secret holding another is masked whole)."""
    with _lock:
        found = set(_secrets)
    found.update(v for v in (os.environ.get(name) for name in _ENVIRONMENT) if v and len(v) >= _SHORTEST_ENVIRONMENT)
    return sorted(found, key=len, reverse=True)


def _add(secret: str) -> None:
    for form in {secret, urllib.parse.unquote(secret)}:  # (a client may show the decoded form)
        if len(form) >= _SHORTEST and form != MASK:
            with _lock:
                _secrets.add(form)


def remember(url: str) -> None:
    """Redact, from now on in this process, the credentials in ``url`` wherever they appear: its
    user information (the password; the user part when it stands alone, as a token does) and its
    credential parameters."""
    for start, body, end in _urls(url):
        info = _userinfo(url[body:end])
        if info is None or _is_container(url[start:body], info):
            continue
        user, password = info
        if password is None:
            _add(user)  # (a token in the user's place)
        else:
            _add(password)
            _add(f"{user}:{password}")
    for match in _QUERY.finditer(url):
        if _SENSITIVE.search(match["name"]) and match["value"]:
            _add(match["value"])


def remember_options(options: Any, _depth: int = 0) -> None:
    """``remember`` the credentials of ``storage_options`` (nested dicts too): the string values of
    keys that name one (``secret``, ``token``, ``password``, ``key``..., and a ``connection_string``
    whole), the sensitive parts of a ``name=value;...`` string (its ``AccountKey``, its
    ``SharedAccessSignature``), and the credentials of every URL among the values (an
    ``endpoint_url`` with user information)."""
    if _depth > 8 or not isinstance(options, dict):
        return
    for name, value in options.items():
        if isinstance(value, dict):
            remember_options(value, _depth + 1)
        elif isinstance(value, str):
            if "://" in value:
                remember(value)
            elif _SENSITIVE.search(str(name)) or _CONNECTION.search(str(name)):
                _add(value)
            for part in value.split(";") if "=" in value and ";" in value else ():  # a connection string's AccountKey=...
                label, _, secret = part.partition("=")
                if secret and _SENSITIVE.search(label):
                    _add(secret)


_TEXT_ATTRIBUTES = ("strerror", "filename", "filename2", "msg", "message", "reason", "url", "path")


def _clean(value: Any, depth: int = 0) -> Any:
    """``value`` with its strings redacted (in tuples, lists and dicts too, a few levels deep)."""
    if isinstance(value, str):
        return redact(value) if has_credentials(value) else value
    if depth > 4:
        return value
    if isinstance(value, tuple):
        return tuple(_clean(v, depth + 1) for v in value)
    if isinstance(value, list):
        return [_clean(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {k: _clean(v, depth + 1) for k, v in value.items()}
    return value


def _text(error: BaseException) -> str:
    try:
        return f"{error}\n{error!r}"
    except Exception:  # noqa: BLE001 - an exception whose str fails shows nothing of itself
        return ""


def _scrub_one(error: BaseException) -> BaseException:
    """``error`` redacted in place, or its stand-in when its text still holds a credential."""
    if not has_credentials(_text(error)):
        return error
    try:
        error.args = _clean(error.args)
    except Exception:  # noqa: BLE001 - read-only args: replaced below
        pass
    for name in _TEXT_ATTRIBUTES:
        value = getattr(error, name, None)
        if isinstance(value, str) and has_credentials(value):
            try:
                setattr(error, name, redact(value))
            except Exception:  # noqa: BLE001 - a read-only attribute: replaced below if it shows
                pass
    for name, value in list(getattr(error, "__dict__", {}).items()):
        try:
            setattr(error, name, _clean(value))
        except Exception:  # noqa: BLE001
            pass
    if not has_credentials(_text(error)):
        return error
    try:
        shown = str(error)
    except Exception:  # noqa: BLE001
        shown = ""
    stand_in = RedactedError(f"{type(error).__name__}: {redact(shown)}")
    stand_in.__traceback__ = error.__traceback__
    return stand_in


def scrubbed(error: BaseException) -> BaseException:
    """``error`` made safe to show, with its ``__cause__`` and ``__context__`` chains (see the module
    doc): the same object where its text could be redacted in place, else its stand-in."""
    seen: set[int] = set()

    def walk(current: BaseException | None) -> BaseException | None:
        if current is None or id(current) in seen or len(seen) > 32:
            return current
        seen.add(id(current))
        safe = _scrub_one(current)
        for link in ("__cause__", "__context__"):
            inner = getattr(current, link)
            cleaned = walk(inner)
            if cleaned is not inner or safe is not current:
                try:
                    setattr(safe, link, cleaned)
                except Exception:  # noqa: BLE001
                    pass
        if safe is not current:
            safe.__suppress_context__ = current.__suppress_context__
        return safe

    return walk(error) or error
