"""Redaction: secrets out of every text pplx_nb shows, stores or logs.

:func:`redact` replaces with ``***`` anything key-shaped (a ``pplx-…`` key, a Bearer token, an
Authorization header's value, a URL's ``user:password@`` or secret query values) and every
secret registered with :func:`register_secret`: the API key the client sends, whatever its
shape (a proxy's ``sk-…`` or an opaque token), so a server that echoes it back cannot make it
show. Every :class:`~pplx_nb.PplxError` message and every pplx_nb log record goes through it.

:func:`scrub_chain` does the same to the messages of an exception's causes, for the one place
(``pplx_nb.api._failures``) that chains foreign exceptions to the errors it raises.
"""

from __future__ import annotations

import re
import threading
from urllib.parse import unquote_plus

__all__ = [
    "MIN_SECRET_LENGTH",
    "redact",
    "register_secret",
    "scrub_chain",
    "url_without_credentials",
]

MIN_SECRET_LENGTH = 8
"""Shorter secrets are not registered: replacing every ``abc`` in every message would garble
them, and a key that short is refused by any real API anyway."""

_registered: tuple[str, ...] = ()
"""The process's registered secrets, longest first (the one module-level state here: a tuple
replaced whole under ``_registering``, so readers never lock)."""
_registering = threading.Lock()

_KEY_PATTERN = re.compile(r"pplx-[A-Za-z0-9_\-]{8,}")
_URL_START = re.compile(r"(?i)\b[a-z][a-z0-9+.\-]*://")
_WHOLE_URL = re.compile(r"(?i)[a-z][a-z0-9+.\-]*://\S*")
_URL_END = re.compile(r"[\s'\"<>]")
_SECRET_NAME = re.compile(r"(?i)pass|pwd|secret|token|key|auth|cred")
_PREFIXED_PATTERNS = (
    # An Authorization header's value (after its scheme word), as text, JSON or a bytes repr.
    re.compile(r"(?i)(authorization['\"]?\s*[:=,]\s*(?:b?['\"])?(?:[a-z]+\s+)?)[^\s'\",)]+"),
    # A Bearer token has a digit: "Bearer authentication" in a question stays as it is.
    re.compile(r"(?i)(bearer\s+)(?=[A-Za-z0-9_\-\.~+/]*[0-9])[A-Za-z0-9_\-\.~+/]{8,}=*"),
)


def register_secret(secret: str | None) -> None:
    """Redact ``secret`` (of at least :data:`MIN_SECRET_LENGTH` characters) from every text
    :func:`redact` scrubs in this process from now on; the API client registers its key."""
    global _registered
    if not secret or len(secret) < MIN_SECRET_LENGTH or secret in _registered:
        return
    with _registering:
        if secret not in _registered:
            _registered = tuple(sorted({*_registered, secret}, key=len, reverse=True))


def redact(text: str, *secrets: str | None) -> str:
    """Return ``text`` with secrets replaced by ``***``: the given ones, the registered ones
    (:func:`register_secret`) and anything key-shaped.

    Key-shaped means a Perplexity key (``pplx-...``), a Bearer token, an Authorization header's
    value (Basic credentials included), or the ``user:password@`` of a URL.
    """
    for secret in (*secrets, *_registered):
        if secret:
            text = text.replace(secret, "***")
    text = _KEY_PATTERN.sub("***", text)
    for pattern in _PREFIXED_PATTERNS:
        text = pattern.sub(r"\1***", text)
    return url_without_credentials(text)


def scrub_chain(error: BaseException, *secrets: str | None) -> None:
    """Redact, in place, the text arguments of ``error`` and of every exception in its chain
    (``__cause__`` and ``__context__``): what ``str`` and ``repr`` show of exceptions that keep
    their message in ``args``, as httpx's and the builtins do."""
    pending, seen = [error], set()
    while pending:
        current = pending.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        current.args = tuple(
            redact(arg, *secrets) if isinstance(arg, str) else arg for arg in current.args
        )
        pending += [e for e in (current.__cause__, current.__context__) if e is not None]


def url_without_credentials(text: str) -> str:
    """``text`` with the secrets of every URL in it replaced by ``***``.

    A URL's ``user:password@`` becomes ``***@`` and the value of each query parameter whose name
    looks secret (``password``, ``ssl_password``, ``token``, ``api_key``, ``auth``...) becomes
    ``***``. When ``text`` is one URL and nothing else (a configured URL), its userinfo runs to
    the last ``@`` before the query, so a password holding an unencoded ``@`` or ``/`` is
    hidden whole, and a query part that is not ``name=value`` or a fragment is hidden too;
    inside other text a URL ends at a space or quote, and its userinfo at the last ``@``
    before its path, as URL parsers read it.
    """
    if _WHOLE_URL.fullmatch(text):
        return _url_shown(text, whole=True)
    parts: list[str] = []
    done = 0
    for found in _URL_START.finditer(text):
        if found.start() < done:
            continue
        end = _URL_END.search(text, found.end())
        stop = len(text) if end is None else end.start()
        parts += [text[done : found.start()], _url_shown(text[found.start() : stop], whole=False)]
        done = stop
    parts.append(text[done:])
    return "".join(parts)


def _url_shown(url: str, *, whole: bool) -> str:
    """One URL without its userinfo and secret query values (see url_without_credentials)."""
    scheme, _, rest = url.partition("://")
    before_query, mark, query = rest.partition("?")
    authority = before_query if whole else re.split(r"[/#]", before_query, maxsplit=1)[0]
    userinfo, at, _ = authority.rpartition("@")
    place = before_query[len(userinfo) + len(at) :]
    shown = f"{scheme}://" + ("***@" if at else "") + place
    if not mark:
        return shown
    query, hash_mark, fragment = query.partition("#")
    params = [_param_shown(param, whole) for param in re.split(r"([&;])", query)]
    return shown + "?" + "".join(params) + hash_mark + ("***" if whole and fragment else fragment)


def _param_shown(param: str, whole: bool) -> str:
    name, equals, value = param.partition("=")
    if equals and value and _SECRET_NAME.search(unquote_plus(name)):
        return f"{name}=***"
    if whole and not equals and param not in ("", "&", ";"):
        return "***"
    return param
