"""Serving MCP over streamable HTTP safely: a bearer token, Host/Origin allow-lists, idle expiry.

Whoever reaches the port can spend the API key and read every stored conversation, so:

- with ``PPLX_NB_MCP_TOKEN`` set, every request needs ``Authorization: Bearer <token>`` (401
  otherwise, compared in constant time); a non-loopback ``--host`` without a token refuses to
  start unless ``--allow-unauthenticated`` says the network is trusted;
- the Host and Origin headers are checked on every bind (DNS rebinding): by default loopback
  names and the bound address, or the ``PPLX_NB_MCP_ALLOWED_HOSTS`` / ``_ORIGINS`` lists;
- a session idle for ``session_idle_seconds`` is closed, so memory does not grow with clients
  that never say goodbye.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import logging
from typing import TYPE_CHECKING

from mcp.server.transport_security import TransportSecuritySettings

from pplx_nb._config import Settings

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Receive, Scope, Send

    from pplx_nb.mcp.server import PplxMCPServer

__all__ = [
    "DEFAULT_SESSION_IDLE_SECONDS",
    "BearerAuth",
    "exposure_problem",
    "is_loopback",
    "security_settings",
    "serve_http",
]

logger = logging.getLogger("pplx_nb.mcp")

DEFAULT_SESSION_IDLE_SECONDS = 300.0
_LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]")
_WILDCARDS = ("0.0.0.0", "::", "")


def is_loopback(host: str) -> bool:
    """Whether binding ``host`` keeps the server reachable from this machine only."""
    if host.strip("[]") == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def exposure_problem(host: str, settings: Settings, allow_unauthenticated: bool) -> str | None:
    """Why serving on ``host`` as configured is refused, or None when it is fine."""
    if is_loopback(host) or settings.mcp_token is not None or allow_unauthenticated:
        return None
    return (
        f"VALIDATION_ERROR: --host {host} makes the MCP server reachable from other machines, "
        "and without a token anyone who reaches it can spend your API key and read every "
        "stored conversation. Set PPLX_NB_MCP_TOKEN to a long random secret (clients then send "
        "'Authorization: Bearer <token>'), or bind 127.0.0.1, or pass --allow-unauthenticated "
        "if this network is trusted."
    )


def _bracketed(host: str) -> str:
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def security_settings(host: str, settings: Settings) -> TransportSecuritySettings:
    """The Host/Origin allow-lists for a server bound to ``host`` (enforced on every bind)."""
    hosts = list(settings.mcp_allowed_hosts)
    if not hosts:
        names = list(_LOOPBACK_NAMES)
        if host not in _WILDCARDS and not is_loopback(host):
            names.append(_bracketed(host))
        hosts = [form for name in names for form in (name, f"{name}:*")]
    origins = list(settings.mcp_allowed_origins)
    if not origins:
        origins = [f"http://{name}:*" for name in _LOOPBACK_NAMES]
        origins += [f"http://{name}" for name in _LOOPBACK_NAMES]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True, allowed_hosts=hosts, allowed_origins=origins
    )


class BearerAuth:
    """ASGI middleware: HTTP requests without ``Authorization: Bearer <token>`` get a 401."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self._app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        sent = b""
        for name, value in scope["headers"]:
            if name == b"authorization":
                sent = value
                break
        if hmac.compare_digest(sent, self._expected):
            await self._app(scope, receive, send)
            return
        body = json.dumps(
            {
                "error": "invalid_token",
                "error_description": "Send the server's PPLX_NB_MCP_TOKEN as "
                "'Authorization: Bearer <token>'.",
            }
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 401,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                    (b"www-authenticate", b'Bearer realm="pplx_nb", error="invalid_token"'),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})


def build_app(
    server: PplxMCPServer,
    settings: Settings,
    host: str,
    session_idle_seconds: float = DEFAULT_SESSION_IDLE_SECONDS,
) -> ASGIApp:
    """The streamable-HTTP app at ``/mcp``, behind the token when one is set."""
    app: ASGIApp = server.streamable_http_app(
        transport_security=security_settings(host, settings),
        session_idle_timeout=session_idle_seconds,
        host=host,
    )
    if settings.mcp_token is not None:
        app = BearerAuth(app, settings.mcp_token.get_secret_value())
    return app


def serve_http(
    server: PplxMCPServer,
    settings: Settings,
    host: str,
    port: int,
    session_idle_seconds: float = DEFAULT_SESSION_IDLE_SECONDS,
) -> None:
    """Serve until interrupted (uvicorn binds the socket: TCP_NODELAY stays on)."""
    import anyio
    import uvicorn

    app = build_app(server, settings, host, session_idle_seconds)
    allowed = security_settings(host, settings).allowed_hosts
    auth = "bearer token required" if settings.mcp_token is not None else "no token"
    logger.info(
        "Serving MCP over streamable HTTP on http://%s:%d/mcp (%s; allowed Host headers: %s)",
        _bracketed(host),
        port,
        auth,
        ", ".join(allowed),
    )
    if host in _WILDCARDS and not settings.mcp_allowed_hosts:
        logger.warning(
            "Bound to every interface, but only loopback Host headers are accepted: list the "
            "names clients use in PPLX_NB_MCP_ALLOWED_HOSTS (e.g. mcp.example.org:%d).",
            port,
        )
    config = uvicorn.Config(
        app, host=host, port=port, log_level=settings.log_level.lower(), lifespan="on"
    )
    anyio.run(uvicorn.Server(config).serve)
