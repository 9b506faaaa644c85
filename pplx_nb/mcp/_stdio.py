"""A reply for every request over stdio, even one the SDK's transport cannot parse.

The SDK's stdio transport parses each line with pydantic's strict JSON parser. A line it cannot
parse reaches the server as an exception, which the server only logs: the client of that request
gets no reply and waits until its own timeout. The usual cause is a lone surrogate escape in a
string (``"\\ud800"``, from an emoji cut in half), which Python's ``json`` module reads but
pydantic's parser refuses. :class:`AnsweringReader` sits between the transport and the server:
for such a line that still names a request (a ``method`` and an ``id``) it answers at once: a
tool call with an ``isError`` result that says which argument holds what, any other request with
a JSON-RPC error. Everything else passes through unchanged.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from typing import Any

import anyio
from mcp.shared.message import SessionMessage
from mcp_types import INVALID_PARAMS, PARSE_ERROR, ErrorData, JSONRPCError, JSONRPCResponse
from pydantic import ValidationError as PydanticValidationError

from pplx_nb._errors import not_unicode

__all__ = ["AnsweringReader", "reply_to_unparsed"]

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


def reply_to_unparsed(error: Exception) -> JSONRPCResponse | JSONRPCError | None:
    """The reply to a line the transport could not parse, or None when it names no request."""
    if not isinstance(error, PydanticValidationError):
        return None
    problems = error.errors()
    if not problems or problems[0]["type"] != "json_invalid":
        return None
    line = problems[0].get("input")
    try:
        request = json.loads(line) if isinstance(line, str) else None
    except ValueError:
        return None
    if not isinstance(request, dict) or not isinstance(request.get("method"), str):
        return None
    request_id = request.get("id")
    if isinstance(request_id, bool) or not isinstance(request_id, int | str):
        return None
    if isinstance(request_id, str) and _lone_surrogate(request_id) is not None:
        return None
    logger.info("Answered a request the transport could not parse (%s)", request["method"])
    params = request.get("params")
    found = _first_surrogate(params, "params")
    if found is None:
        reason = problems[0].get("ctx", {}).get("error", "not valid JSON")
        return JSONRPCError(
            jsonrpc="2.0",
            id=request_id,
            error=ErrorData(code=PARSE_ERROR, message=f"Parse error: {reason}"),
        )
    where, at = found
    if request["method"] == "tools/call" and where.startswith("params.arguments"):
        from pplx_nb.mcp._render import error_result

        argument = where.removeprefix("params.arguments").lstrip(".")
        what = f"The argument {argument}" if argument else "An argument's name"
        result = error_result(not_unicode(what, at))
        return JSONRPCResponse(
            jsonrpc="2.0",
            id=request_id,
            result=result.model_dump(by_alias=True, exclude_unset=True, mode="json"),
        )
    error = not_unicode(f"The request's {where}", at)
    return JSONRPCError(
        jsonrpc="2.0",
        id=request_id,
        error=ErrorData(code=INVALID_PARAMS, message=f"{error.code}: {error.message}"),
    )


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
