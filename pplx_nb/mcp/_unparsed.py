"""A reply for every request, even one the SDK's transports cannot parse.

Both of the SDK's transports parse JSON with pydantic's strict parser, which refuses a lone
surrogate escape in a string (``"\\ud800"``, from an emoji cut in half) that Python's ``json``
module reads. Over stdio such a line reaches the server as an exception, which it only logs: the
client gets no reply and waits until its own timeout. Over HTTP the transport answers
``400 -32700`` with no request ID, which the TypeScript client throws instead of showing a
result. So both transports answer such a request here, the same way: a tool call with an
``isError`` result that says which argument holds what, any other request with a JSON-RPC error.

- stdio: :class:`AnsweringReader` sits between the transport and the server.
- HTTP: :class:`AnsweringApp` sits in front of the SDK's app and answers the POST itself.

Everything else passes through unchanged.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import anyio
import pydantic_core
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from mcp.shared.message import SessionMessage
from mcp_types import INVALID_PARAMS, PARSE_ERROR, ErrorData, JSONRPCError, JSONRPCResponse
from pydantic import ValidationError as PydanticValidationError
from starlette.responses import Response

from pplx_nb._errors import not_unicode
from pplx_nb.mcp._middleware import request_header

if TYPE_CHECKING:
    from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["AnsweringApp", "AnsweringReader", "reply_to_body", "reply_to_unparsed"]

Reply = JSONRPCResponse | JSONRPCError
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")

logger = logging.getLogger("pplx_nb.mcp")


class AnsweringReader:
    """The transport's read stream, answering the requests it could not parse (see the module).

    Args:
        inner: the read stream the transport gives the server.
        write: the stream the server writes its messages to; the replies go there too.
    """

    def __init__(self, inner: Any, write: Any) -> None:
        self._inner = inner
        self._write = write

    @property
    def last_context(self) -> Any:
        """The sender's context of the last message, as the transport's stream keeps it."""
        return getattr(self._inner, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        """The next message or unparsed line that this reader did not answer itself."""
        while True:
            item = await self._inner.receive()
            if isinstance(item, Exception):
                reply = reply_to_unparsed(item)
                if reply is not None:
                    await self._write.send(SessionMessage(reply))
                    continue
            return item  # type: ignore[no-any-return]

    def __aiter__(self) -> AnsweringReader:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        """Close the transport's stream."""
        await self._inner.aclose()

    async def __aenter__(self) -> AnsweringReader:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


def reply_to_unparsed(error: Exception) -> Reply | None:
    """The reply to a stdio line the transport could not parse, or None when it names no
    request."""
    if not isinstance(error, PydanticValidationError):
        return None
    problems = error.errors()
    if not problems or problems[0]["type"] != "json_invalid":
        return None
    line = problems[0].get("input")
    request = _request_in(line) if isinstance(line, str) else None
    if request is None:
        return None
    reply = _surrogate_reply(request)
    if reply is not None:
        return reply
    reason = problems[0].get("ctx", {}).get("error", "not valid JSON")
    return JSONRPCError(
        jsonrpc="2.0",
        id=request["id"],
        error=ErrorData(code=PARSE_ERROR, message=f"Parse error: {reason}"),
    )


def reply_to_body(body: bytes) -> Reply | None:
    """The reply to a POSTed request holding a lone surrogate, or None for any other body
    (the SDK's transport parses it, or refuses it as it does)."""
    if not _SURROGATE_ESCAPE.search(body):
        return None
    try:
        pydantic_core.from_json(body)
    except ValueError:
        request = _request_in(body)
        return _surrogate_reply(request) if request is not None else None
    return None


def _request_in(text: str | bytes) -> dict[str, Any] | None:
    """``text`` as a JSON-RPC request that can be answered (a method and a usable ID), or None."""
    try:
        request = json.loads(text)
    except ValueError:
        return None
    if not isinstance(request, dict) or not isinstance(request.get("method"), str):
        return None
    request_id = request.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, int | str):
        return None
    if isinstance(request_id, str) and _lone_surrogate(request_id) is not None:
        return None
    return request


def _surrogate_reply(request: dict[str, Any]) -> Reply | None:
    """The reply to ``request`` whose params hold a lone surrogate; None when they hold none."""
    found = _first_surrogate(request.get("params"), "params")
    if found is None:
        return None
    logger.info("Answered a request the transport could not parse (%s)", request["method"])
    where, at = found
    if request["method"] == "tools/call" and where.startswith("params.arguments"):
        from pplx_nb.mcp._render import error_result

        argument = where.removeprefix("params.arguments").lstrip(".")
        what = f"The argument {argument}" if argument else "An argument's name"
        result = error_result(not_unicode(what, at))
        return JSONRPCResponse(
            jsonrpc="2.0",
            id=request["id"],
            result=result.model_dump(by_alias=True, exclude_unset=True, mode="json"),
        )
    error = not_unicode(f"The request's {where}", at)
    return JSONRPCError(
        jsonrpc="2.0",
        id=request["id"],
        error=ErrorData(code=INVALID_PARAMS, message=f"{error.code}: {error.message}"),
    )


class AnsweringApp:
    """ASGI middleware: a POST the SDK's transport cannot parse for a lone surrogate is answered
    here (200, one JSON-RPC message as ``application/json``, as the transport may answer).

    A request other than ``initialize`` is answered only when it names a session (an
    ``Mcp-Session-Id`` header, sent back with the reply); without one the SDK refuses it, as
    it does a body larger than ``max_body``, which goes on unread.
    """

    def __init__(self, app: ASGIApp, max_body: int = DEFAULT_MAX_REQUEST_BODY_SIZE) -> None:
        self._app = app
        self._max_body = max_body

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await self._app(scope, receive, send)
            return
        received = await _read_body(receive, self._max_body)
        body = b"".join(m.get("body", b"") for m in received if m["type"] == "http.request")
        reply = reply_to_body(body) if _complete(received) else None
        named = request_header(scope, b"mcp-session-id")
        session = named.decode("latin-1") if named is not None else None
        if reply is not None and (session is not None or _is_initialize(body)):
            headers = {"mcp-session-id": session} if session is not None else None
            text = reply.model_dump_json(by_alias=True, exclude_unset=True)
            await Response(text, media_type="application/json", headers=headers)(
                scope, receive, send
            )
            return

        async def replay() -> Message:
            return received.pop(0) if received else await receive()

        await self._app(scope, replay, send)


async def _read_body(receive: Receive, limit: int) -> list[Message]:
    """The request's messages up to its last body part, or until more than ``limit`` bytes."""
    received: list[Message] = []
    size = 0
    while True:
        message = await receive()
        received.append(message)
        if message["type"] != "http.request":
            return received
        size += len(message.get("body", b""))
        if size > limit or not message.get("more_body", False):
            return received


def _complete(received: list[Message]) -> bool:
    last = received[-1]
    return last["type"] == "http.request" and not last.get("more_body", False)


def _is_initialize(body: bytes) -> bool:
    request = _request_in(body)
    return request is not None and request["method"] == "initialize"


def _lone_surrogate(text: str) -> int | None:
    return next((i for i, c in enumerate(text) if "\ud800" <= c <= "\udfff"), None)


def _first_surrogate(value: object, path: str) -> tuple[str, int | None] | None:
    """Where the first lone surrogate in ``value`` is: its path and, in a string, its index."""
    for where, text, is_key in _strings(value, path):
        at = _lone_surrogate(text)
        if at is not None:
            return (where, None) if is_key else (where, at)
    return None


def _strings(value: object, path: str) -> Iterator[tuple[str, str, bool]]:
    """Every string in ``value`` with its path, keys included (flagged), depth first."""
    if isinstance(value, str):
        yield path, value, False
    elif isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str):
                yield path, key, True
                yield from _strings(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, f"{path}[{index}]")
