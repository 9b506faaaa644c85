"""What every HTTP request meets before the SDK's app: ASGI middleware of pplx_nb's own.

- :class:`HeaderCheck`: the Host and Origin headers against allow-lists (DNS rebinding), 421 or
  403 otherwise. Names are compared in any case (RFC 9110 §7.2, RFC 3986 §6.2.2.1), which the
  SDK's own check does not do, so it is turned off and this one stands in for it.
- :class:`BearerAuth`: ``Authorization: Bearer <token>``, the scheme in any case (RFC 9110
  §11.1), the token in constant time; 401 otherwise.
- :class:`AccessLog`: one line per request on the ``pplx_nb`` logger, as uvicorn's would be but
  without the query string: a token sent as ``?token=`` by mistake is never written down.
"""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from starlette.responses import Response

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["AccessLog", "BearerAuth", "HeaderCheck", "matches", "request_header"]

logger = logging.getLogger("pplx_nb.mcp")
access_logger = logging.getLogger("pplx_nb.mcp.access")


def matches(value: str, allowed: Sequence[str]) -> bool:
    """Whether the Host or Origin ``value`` is one of ``allowed``, in any case; a pattern ending
    in ``:*`` stands for that name with any port."""
    value = value.lower()
    for pattern in allowed:
        pattern = pattern.lower()
        if value == pattern:
            return True
        base = pattern.removesuffix(":*")
        port = value.removeprefix(f"{base}:")
        if base != pattern and port != value and port.isascii() and port.isdigit():
            return True
    return False


def request_header(scope: Scope, name: bytes) -> bytes | None:
    """The value of the request's header ``name`` (lower case), or None without one."""
    return next((value for key, value in scope["headers"] if key == name), None)


class HeaderCheck:
    """ASGI middleware: a request whose Host or Origin header is not allowed gets 421 or 403.

    Args:
        app: the app behind.
        hosts: the Host headers accepted (``name`` or ``name:*``).
        origins: the Origin headers accepted; a request without one is same-origin.
    """

    def __init__(self, app: ASGIApp, hosts: Sequence[str], origins: Sequence[str]) -> None:
        self._app = app
        self._hosts = list(hosts)
        self._origins = list(origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            host = (request_header(scope, b"host") or b"").decode("latin-1")
            origin = (request_header(scope, b"origin") or b"").decode("latin-1")
            refusal = None
            if not matches(host, self._hosts):
                logger.warning("Refused a request for Host %r (PPLX_NB_MCP_ALLOWED_HOSTS)", host)
                refusal = Response("Invalid Host header", status_code=421)
            elif origin and not matches(origin, self._origins):
                logger.warning(
                    "Refused a request from Origin %r (PPLX_NB_MCP_ALLOWED_ORIGINS)", origin
                )
                refusal = Response("Invalid Origin header", status_code=403)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self._app(scope, receive, send)


def _bearer(value: bytes) -> bytes | None:
    """The token of a Bearer ``Authorization`` value, or None for another scheme."""
    scheme, _, token = value.partition(b" ")
    return token.strip(b" ") if scheme.lower() == b"bearer" else None


class BearerAuth:
    """ASGI middleware: HTTP requests without ``Authorization: Bearer <token>`` get a 401."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self._app = app
        self._expected = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        sent = _bearer(request_header(scope, b"authorization") or b"")
        if sent is not None and hmac.compare_digest(sent, self._expected):
            await self._app(scope, receive, send)
            return
        body = json.dumps(
            {
                "error": "invalid_token",
                "error_description": "Send the server's PPLX_NB_MCP_TOKEN as "
                "'Authorization: Bearer <token>'.",
            }
        )
        refusal = Response(
            body,
            status_code=401,
            media_type="application/json",
            headers={"www-authenticate": 'Bearer realm="pplx_nb", error="invalid_token"'},
        )
        await refusal(scope, receive, send)


class AccessLog:
    """ASGI middleware: logs each request's client, method, path and status when it is answered.

    Args:
        app: the app behind.
        secret: text never to log (the server's token), should a client put it in the path.
    """

    def __init__(self, app: ASGIApp, secret: str | None = None) -> None:
        self._app = app
        self._secret = secret

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return

        async def logged(message: Message) -> None:
            if message["type"] == "http.response.start":
                self._log(scope, message["status"])
            await send(message)

        await self._app(scope, receive, logged)

    def _log(self, scope: Scope, status: int) -> None:
        client = scope.get("client")
        where = f"{client[0]}:{client[1]}" if client else "-"
        # The raw path, cut at any "?", keeps percent escapes: a decoded %0a cannot forge a line.
        raw = scope.get("raw_path") or scope["path"].encode()
        path = raw.partition(b"?")[0].decode("ascii", "backslashreplace")
        if self._secret:
            path = path.replace(self._secret, "***")
        access_logger.info(
            '%s - "%s %s HTTP/%s" %d', where, scope["method"], path, scope["http_version"], status
        )
