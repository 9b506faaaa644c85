"""The store URL (``PPLX_NB_STORE``): which Redis URLs pplx_nb accepts, and why it refuses the rest.

:func:`check_store_url` is what :class:`~pplx_nb._config.Settings` runs on the variable, so a URL
that would send writes to another database, or that redis-py would read differently, is refused
when the settings are built, with a message naming the accepted forms and never the URL's secrets.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit

from pplx_nb._redact import url_without_credentials

__all__ = ["check_store_url"]

_STORE_SCHEMES = ("redis", "rediss", "unix")
_STORE_PARAMS = frozenset({"db", "username", "password", "client_name"})
_TLS_PARAMS = frozenset(
    {
        "ssl_cert_reqs",
        "ssl_ca_certs",
        "ssl_ca_path",
        "ssl_certfile",
        "ssl_keyfile",
        "ssl_password",
        "ssl_check_hostname",
    }
)
_STORE_FORMS = (
    "Use redis://HOST:PORT/DB, rediss://HOST:PORT/DB (TLS) or unix:///path/to/redis.sock?db=DB, "
    "where DB is one database number (0 if left out) and credentials go before the host as "
    "USER:PASSWORD@ or in the query; the query may hold db, username, password and client_name, "
    "and for rediss:// also ssl_cert_reqs, ssl_ca_certs, ssl_ca_path, ssl_certfile, "
    "ssl_keyfile, ssl_password and ssl_check_hostname. Or unset PPLX_NB_STORE to keep "
    "conversations as files."
)
_DB_NUMBER = re.compile(r"[0-9]+")
_NOT_NAME_VALUE = "has a query part that is not NAME=VALUE"


def check_store_url(url: str) -> str:
    """``PPLX_NB_STORE`` as redis-py will read it, its scheme in lower case; ``ValueError``
    (naming the variable and the accepted forms, never the URL's secrets) for anything else.

    Refused: another scheme, a bad port, a fragment, a query parameter other than the ones
    :data:`_STORE_FORMS` lists (or one given twice), and a database that is not one
    non-negative integer: ``/1/2``, ``/abc`` or a ``?db=`` contradicting the path would
    otherwise send every write to another database.
    """
    value = url.strip()
    problem = _store_problem(value)
    if problem is not None:
        shown = url_without_credentials(value)
        if problem == _NOT_NAME_VALUE:  # a password pasted without its "password="
            shown = shown.partition("?")[0] + "?***"
        raise ValueError(f"PPLX_NB_STORE {shown!r} {problem}. {_STORE_FORMS}")
    scheme = value.partition(":")[0]
    return scheme.lower() + value[len(scheme) :]


def _store_problem(value: str) -> str | None:
    """What is wrong with a store URL, or None."""
    if not value or any(char.isspace() for char in value):
        return "is empty or holds a space" if not value else "holds a space"
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number
    except ValueError:
        return "is not a valid URL (check the port and any [ ] around the host)"
    if parts.scheme not in _STORE_SCHEMES or "://" not in value:
        return "is not a Redis URL"
    if parts.fragment or value.endswith("#"):
        return "has a #fragment, which Redis URLs do not take"
    allowed = _STORE_PARAMS | (_TLS_PARAMS if parts.scheme == "rediss" else frozenset())
    if parts.query and not all("=" in piece for piece in parts.query.split("&")):
        return _NOT_NAME_VALUE
    params = parse_qsl(parts.query, keep_blank_values=True)
    names = [name for name, _ in params]
    for name in names:
        if name not in allowed:
            return f"has the query parameter {name[:40]!r}, which is not accepted"
        if names.count(name) > 1:
            return f"gives the query parameter {name!r} more than once"
    query = dict(params)
    if query.get("ssl_cert_reqs", "required") not in ("none", "optional", "required"):
        return "has ssl_cert_reqs other than none, optional or required"
    if any(char.isspace() or not char.isprintable() for char in query.get("client_name", "")):
        return "has a client_name holding a space or a control character"
    db = query.get("db")
    if db is not None and not _DB_NUMBER.fullmatch(db):
        return "has a db in its query that is not one database number"
    if parts.scheme == "unix":
        if parts.hostname or parts.path in ("", "/"):
            return "must name a socket file after unix:// and no host, as unix:///run/redis.sock"
        return None
    path = parts.path
    if path not in ("", "/"):
        if not _DB_NUMBER.fullmatch(path[1:]):
            return f"has the path {path[:40]!r}, which is not one database number such as /0"
        if db is not None and int(db) != int(path[1:]):
            return f"names database {int(path[1:])} in its path but db={db} in its query"
    return None
