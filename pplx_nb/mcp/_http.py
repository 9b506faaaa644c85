"""Serving MCP over streamable HTTP safely: a bearer token, Host/Origin allow-lists, idle expiry.

Whoever reaches the port can spend the API key and read every stored conversation, so:

- with ``PPLX_NB_MCP_TOKEN`` set, every request needs ``Authorization: Bearer <token>`` (401
  otherwise, the scheme in any case, the token compared in constant time); a non-loopback
  ``--host`` without a token refuses to start unless ``--allow-unauthenticated`` says the network
  is trusted;
- the Host and Origin headers are checked on every bind (DNS rebinding), in any case: by default
  loopback names and the bound address, or the ``PPLX_NB_MCP_ALLOWED_HOSTS`` / ``_ORIGINS``
  lists;
- the access log shows paths without their query strings, so a token sent in one is not logged;
- a session idle for ``session_idle_seconds`` is closed, so memory does not grow with clients
  that never say goodbye.

The checks are ASGI middleware of ours in front of the SDK's app (:mod:`pplx_nb.mcp._middleware`,
and :class:`~pplx_nb.mcp._unparsed.AnsweringApp` for requests the SDK cannot parse).
"""

from __future__ import annotations

import ipaddress
import logging
from typing import TYPE_CHECKING

from mcp.server.transport_security import TransportSecuritySettings

from pplx_nb._config import Settings
from pplx_nb.mcp._middleware import AccessLog, BearerAuth, HeaderCheck
from pplx_nb.mcp._unparsed import AnsweringApp

if TYPE_CHECKING:
    from starlette.types import ASGIApp

    from pplx_nb.mcp.server import PplxMCPServer

__all__ = [
    "DEFAULT_SESSION_IDLE_SECONDS",
    "allowed_hosts",
    "allowed_origins",
    "build_app",
    "exposure_problem",
    "is_loopback",
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


def allowed_hosts(host: str, settings: Settings) -> list[str]:
    """The Host headers a server bound to ``host`` accepts: PPLX_NB_MCP_ALLOWED_HOSTS, else the
    loopback names and the bound address, each with any port."""
    if settings.mcp_allowed_hosts:
        return list(settings.mcp_allowed_hosts)
    names = list(_LOOPBACK_NAMES)
    bound = _bracketed(host).lower()
    if host not in _WILDCARDS and bound not in names:
        names.append(bound)
    return [form for name in names for form in (name, f"{name}:*")]


def allowed_origins(settings: Settings) -> list[str]:
    """The Origin headers accepted: PPLX_NB_MCP_ALLOWED_ORIGINS, else loopback origins."""
    if settings.mcp_allowed_origins:
        return list(settings.mcp_allowed_origins)
    return [f"http://{name}{port}" for name in _LOOPBACK_NAMES for port in (":*", "")]


def build_app(
    server: PplxMCPServer,
    settings: Settings,
    host: str,
    session_idle_seconds: float = DEFAULT_SESSION_IDLE_SECONDS,
) -> ASGIApp:
    """The streamable-HTTP app at ``/mcp`` behind our checks: access log, Host/Origin, the
    token when one is set, and answers to requests the SDK cannot parse."""
    app: ASGIApp = server.streamable_http_app(
        # HeaderCheck stands in for the SDK's check, which compares names case-sensitively.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
        session_idle_timeout=session_idle_seconds,
        host=host,
    )
    app = AnsweringApp(app)
    token = settings.mcp_token.get_secret_value() if settings.mcp_token is not None else None
    if token is not None:
        app = BearerAuth(app, token)
    app = HeaderCheck(app, allowed_hosts(host, settings), allowed_origins(settings))
    return AccessLog(app, secret=token)


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
    allowed = allowed_hosts(host, settings)
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
        app,
        host=host,
        port=port,
        log_level=settings.log_level.lower(),
        lifespan="on",
        access_log=False,  # AccessLog logs requests, without their query strings
    )
    anyio.run(uvicorn.Server(config).serve)
