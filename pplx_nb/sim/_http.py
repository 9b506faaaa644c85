"""Minimal ASGI plumbing: the request the handlers see and the replies they return."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "HTML_401",
    "Reply",
    "Request",
    "Stream",
    "error_reply",
    "json_reply",
    "sse",
    "sse_event",
    "sse_payload",
]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

HTML_401 = (
    b"<html>\r\n<head><title>401 Authorization Required</title></head>\r\n<body>\r\n"
    b"<center><h1>401 Authorization Required</h1></center>\r\n"
    b"<hr><center>openresty/1.25.3.1</center>\r\n</body>\r\n</html>\r\n"
)
_ERROR_TYPES = {
    400: "invalid_request",
    401: "invalid_api_key",
    403: "forbidden",
    404: "not_found",
    405: "method_not_allowed",
    408: "request_timeout",
    409: "conflict",
    413: "payload_too_large",
    422: "invalid_request",
    424: "external_connector_error",
    429: "request_rate_limit_exceeded",
    500: "internal_error",
    502: "bad_gateway",
    504: "gateway_timeout",
}


@dataclass(frozen=True, slots=True)
class Request:
    """An API request as the handlers see it."""

    method: str
    path: str
    query: str
    headers: dict[str, str]
    body: bytes


@dataclass(slots=True)
class Reply:
    """A complete response."""

    status: int
    body: bytes
    content_type: bytes = b"application/json"
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)


@dataclass(slots=True)
class Stream:
    """A server-sent-events response: pre-encoded frames, each sent after its delay (seconds).

    ``interrupt(n)``, asked before frame ``n`` goes out, may return a last frame to send instead
    of the rest (a run cancelled while it streams ends with its ``response.cancelled``).
    """

    frames: Sequence[bytes]
    delays: Sequence[float]
    status: int = 200
    interrupt: Callable[[int], bytes | None] | None = None
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)


def dumps(payload: Any) -> bytes:
    """Compact JSON bytes."""
    return json.dumps(payload, separators=(",", ":"), ensure_ascii=False).encode()


def json_reply(payload: Any, status: int = 200) -> Reply:
    """A JSON response."""
    return Reply(status, dumps(payload))


def error_reply(
    status: int, message: str, *, type_: str | None = None, param: str | None = None
) -> Reply:
    """The API's error envelope ``{"error": {"message", "type", "code"}}``."""
    error: dict[str, Any] = {
        "message": message,
        "type": type_ or _ERROR_TYPES.get(status, "internal_error" if status >= 500 else "error"),
        "code": status,
    }
    if param is not None:
        error["param"] = param
    return json_reply({"error": error}, status)


def sse(payload: Any) -> bytes:
    """One ``data:`` frame."""
    return b"data: " + dumps(payload) + b"\n\n"


def sse_event(payload: dict[str, Any]) -> bytes:
    """One typed frame as the live Agent API sends it: ``event: <type>`` then ``data:``."""
    return b"event: " + str(payload["type"]).encode() + b"\n" + sse(payload)


def sse_payload(frame: bytes) -> Any:
    """The JSON of a frame built by :func:`sse` or :func:`sse_event`."""
    data = frame.rsplit(b"data: ", 1)[-1]
    return json.loads(data)
