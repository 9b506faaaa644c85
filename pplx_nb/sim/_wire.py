"""A lean HTTP/1.1 server on asyncio that runs an ASGI app (the simulator's, or any other).

The simulator is the target of client benchmarks and often shares a process (and so the GIL) with
the client it serves, so it keeps per-request work small: one parse of the head, one write per
complete response, keep-alive, chunked encoding for streams. A response the app leaves unfinished
makes the connection drop, which is how the simulator breaks streams on purpose.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["WireServer"]

ASGIApp = Callable[
    [
        MutableMapping[str, Any],
        Callable[[], Awaitable[MutableMapping[str, Any]]],
        Callable[[MutableMapping[str, Any]], Awaitable[None]],
    ],
    Awaitable[None],
]

_MAX_HEAD = 64 * 1024
_MAX_BODY = 32 * 1024 * 1024
_REASONS = {
    200: b"OK",
    400: b"Bad Request",
    401: b"Unauthorized",
    403: b"Forbidden",
    404: b"Not Found",
    405: b"Method Not Allowed",
    408: b"Request Timeout",
    409: b"Conflict",
    413: b"Payload Too Large",
    429: b"Too Many Requests",
    431: b"Request Header Fields Too Large",
    500: b"Internal Server Error",
    502: b"Bad Gateway",
    503: b"Service Unavailable",
    504: b"Gateway Timeout",
}


class _BadRequest(Exception):
    def __init__(self, status: int, message: bytes) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class _Head:
    __slots__ = (
        "body_length",
        "chunked",
        "expects_continue",
        "headers",
        "keep_alive",
        "method",
        "path",
        "query",
    )

    def __init__(self, raw: bytes) -> None:
        lines = raw.split(b"\r\n")
        try:
            method, target, version = lines[0].split(b" ")
        except ValueError:
            raise _BadRequest(400, b"malformed request line") from None
        if not version.startswith(b"HTTP/1."):
            raise _BadRequest(400, b"unsupported HTTP version")
        self.method = method.decode("ascii", "replace")
        path, _, query = target.partition(b"?")
        self.path = path.decode("utf-8", "replace")
        self.query = query
        self.headers: list[tuple[bytes, bytes]] = []
        length = 0
        self.chunked = False
        self.expects_continue = False
        connection = b""
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep:
                raise _BadRequest(400, b"malformed header line")
            name = name.strip().lower()
            value = value.strip()
            self.headers.append((name, value))
            if name == b"content-length":
                if not value.isdigit():
                    raise _BadRequest(400, b"bad content-length")
                length = int(value)
            elif name == b"transfer-encoding":
                self.chunked = b"chunked" in value.lower()
            elif name == b"connection":
                connection = value.lower()
            elif name == b"expect":
                self.expects_continue = value.lower() == b"100-continue"
        if length > _MAX_BODY:
            raise _BadRequest(413, b"request body too large")
        self.body_length = length
        if version == b"HTTP/1.0":
            self.keep_alive = b"keep-alive" in connection
        else:
            self.keep_alive = b"close" not in connection


def _dechunk(buffer: bytearray) -> tuple[bytes, int] | None:
    """Decode a complete chunked body at the start of ``buffer``: (body, bytes used) or None."""
    body = bytearray()
    position = 0
    while True:
        end = buffer.find(b"\r\n", position)
        if end < 0:
            return None
        try:
            size = int(bytes(buffer[position:end]).split(b";")[0], 16)
        except ValueError:
            raise _BadRequest(400, b"bad chunk size") from None
        start = end + 2
        if size == 0:
            trailer_end = buffer.find(b"\r\n\r\n", end)
            if trailer_end == end:
                return bytes(body), end + 4
            if trailer_end < 0:
                return None
            return bytes(body), trailer_end + 4
        if len(buffer) < start + size + 2:
            return None
        body += buffer[start : start + size]
        position = start + size + 2
        if len(body) > _MAX_BODY:
            raise _BadRequest(413, b"request body too large")


class _Connection(asyncio.Protocol):
    def __init__(self, server: WireServer) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.continued = False
        self.task: asyncio.Task[None] | None = None
        self.closed = asyncio.get_running_loop().create_future()
        self.writable = asyncio.Event()
        self.writable.set()

    # -- asyncio.Protocol ----------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.server.connections.add(self)

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        if not self.closed.done():
            self.closed.set_result(None)
        self.writable.set()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.task is None:
            self._next_request()
        elif len(self.buffer) > _MAX_HEAD + _MAX_BODY and self.transport is not None:
            self.transport.close()

    # -- requests ------------------------------------------------------------------------------

    def _next_request(self) -> None:
        transport = self.transport
        if transport is None or transport.is_closing():
            return
        try:
            parsed = self._parse()
        except _BadRequest as exc:
            self._write_simple(exc.status, exc.message)
            transport.close()
            return
        if parsed is None:
            return
        head, body = parsed
        self.continued = False
        self.task = asyncio.ensure_future(self._run(head, body))
        self.server.tasks.add(self.task)
        self.task.add_done_callback(self.server.tasks.discard)

    def _parse(self) -> tuple[_Head, bytes] | None:
        end = self.buffer.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buffer) > _MAX_HEAD:
                raise _BadRequest(431, b"request head too large")
            return None
        head = _Head(bytes(self.buffer[:end]))
        start = end + 4
        if head.chunked:
            rest = self.buffer[start:]
            decoded = _dechunk(rest)
            if decoded is None:
                self._continue(head)
                return None
            body, used = decoded
            del self.buffer[: start + used]
            return head, body
        if len(self.buffer) < start + head.body_length:
            self._continue(head)
            return None
        body = bytes(self.buffer[start : start + head.body_length])
        del self.buffer[: start + head.body_length]
        return head, body

    def _continue(self, head: _Head) -> None:
        """Tell a client waiting on ``Expect: 100-continue`` to send its body (once)."""
        if head.expects_continue and not self.continued and self.transport is not None:
            self.continued = True
            self.transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def _write_simple(self, status: int, message: bytes) -> None:
        assert self.transport is not None
        reason = _REASONS.get(status, b"Error")
        self.transport.write(
            b"HTTP/1.1 %d %s\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n"
            b"connection: close\r\n\r\n%s" % (status, reason, len(message), message)
        )

    async def _run(self, head: _Head, body: bytes) -> None:
        transport = self.transport
        assert transport is not None
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1",
            "method": head.method,
            "scheme": "http",
            "path": head.path,
            "raw_path": head.path.encode(),
            "query_string": head.query,
            "root_path": "",
            "headers": head.headers,
            "server": self.server.address,
            "client": transport.get_extra_info("peername"),
        }
        state = {"started": False, "done": False, "chunked": False, "body_sent": False}
        pending: list[bytes] = []

        async def receive() -> MutableMapping[str, Any]:
            if not state["body_sent"]:
                state["body_sent"] = True
                return {"type": "http.request", "body": body, "more_body": False}
            await asyncio.shield(self.closed)
            return {"type": "http.disconnect"}

        async def send(message: MutableMapping[str, Any]) -> None:
            if transport.is_closing():
                raise ConnectionResetError("client disconnected")
            if message["type"] == "http.response.start":
                status = int(message["status"])
                lines = [b"HTTP/1.1 %d %s" % (status, _REASONS.get(status, b"Status"))]
                has_length = False
                for name, value in message.get("headers", ()):
                    has_length = has_length or name.lower() == b"content-length"
                    lines.append(name + b": " + value)
                if not has_length:
                    state["chunked"] = True
                    lines.append(b"transfer-encoding: chunked")
                if not head.keep_alive:
                    lines.append(b"connection: close")
                pending.append(b"\r\n".join(lines) + b"\r\n\r\n")
                state["started"] = True
                return
            if message["type"] != "http.response.body" or state["done"]:
                return
            chunk = message.get("body", b"")
            more = bool(message.get("more_body", False))
            if state["chunked"]:
                if chunk:
                    pending.append(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                if not more:
                    pending.append(b"0\r\n\r\n")
            else:
                pending.append(chunk)
            if not more:
                state["done"] = True
            transport.write(b"".join(pending))
            pending.clear()
            if more and not self.writable.is_set():
                await self.writable.wait()

        try:
            await self.server.app(scope, receive, send)
        except Exception:
            if not state["started"] and not transport.is_closing():
                self._write_simple(500, b"internal error")
            transport.close()
            return
        finally:
            self.task = None
        if not state["done"]:
            transport.close()
            return
        if not head.keep_alive:
            transport.close()
            return
        self._next_request()


class WireServer:
    """Serve an ASGI app on an already bound, listening socket until :meth:`stop` is called."""

    def __init__(self, app: ASGIApp, sock: socket.socket) -> None:
        self.app = app
        self.sock = sock
        self.address = sock.getsockname()[:2]
        self.connections: set[_Connection] = set()
        self.tasks: set[asyncio.Task[None]] = set()
        self.started = False
        self._stop: asyncio.Event | None = None

    async def serve(self) -> None:
        """Accept connections until stopped, then close them and cancel what is still running."""
        loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        server = await loop.create_server(lambda: _Connection(self), sock=self.sock, backlog=1024)
        self.started = True
        try:
            await self._stop.wait()
        finally:
            server.close()
            for connection in list(self.connections):
                if connection.transport is not None:
                    connection.transport.close()
            # Let the transports run their close callbacks before the loop goes away.
            await asyncio.sleep(0)
            for task in list(self.tasks):
                task.cancel()
            if self.tasks:
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.wait(list(self.tasks), timeout=2)
            await server.wait_closed()

    def stop(self) -> None:
        """Ask :meth:`serve` to return (call from the server's own loop)."""
        if self._stop is not None:
            self._stop.set()
