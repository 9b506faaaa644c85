"""The simulator as an ASGI application: routing, auth, injected faults, pacing, control."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from pplx_nb.sim._corpus import Corpus
from pplx_nb.sim._endpoints import Endpoints
from pplx_nb.sim._faults import Fault, FaultQueue, parse_fault
from pplx_nb.sim._http import (
    HTML_401,
    Receive,
    Reply,
    Request,
    Scope,
    Send,
    Stream,
    error_reply,
    json_reply,
)
from pplx_nb.sim._options import SimOptions
from pplx_nb.sim._validate import Invalid, parse_json_object

__all__ = ["SimApp", "SimOptions"]

_TRICKLE_PIECES = 10
_RETIRED = (
    "Sonar chat completions were retired on 2026-09-27: use the Agent API (POST /v1/agent or "
    "/v1/responses). Start the simulator with --sonar (PPLX_NB_SIM_SONAR=1) to serve them."
)
Handler = Callable[[Request, Fault | None], Awaitable[Reply | Stream]]


@dataclass(frozen=True, slots=True)
class _Route:
    handler: Handler
    template: str
    sonar: bool


class SimApp:
    """An ASGI app speaking both Perplexity protocols from one corpus."""

    def __init__(self, corpus: Corpus, options: SimOptions | None = None) -> None:
        self.corpus = corpus
        self.options = options or SimOptions()
        self.faults = FaultQueue()
        self.requests: Counter[str] = Counter()
        self.api = Endpoints(corpus, self.options, self._wait)
        self._stopping: asyncio.Event | None = None
        self._exact: dict[tuple[str, str], _Route] = {}
        for path in ("/chat/completions", "/v1/chat/completions", "/v1/sonar"):
            self._exact["POST", path] = _Route(self.api.chat, path, True)
        for path in ("/v1/agent", "/v1/responses"):
            self._exact["POST", path] = _Route(self.api.agent, path, False)
        self._exact["POST", "/async/chat/completions"] = _Route(
            self.api.async_create, "/async/chat/completions", True
        )
        self._exact["GET", "/async/chat/completions"] = _Route(
            self.api.async_list, "/async/chat/completions", True
        )
        for path in ("/v1/models", "/models"):
            self._exact["GET", path] = _Route(self.api.models, path, False)
        self._exact["POST", "/search"] = _Route(self.api.search, "/search", False)

    # -- ASGI ---------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection scope."""
        if scope["type"] != "http":
            return
        if self._stopping is None:
            self._stopping = asyncio.Event()
        body = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        request = Request(
            scope["method"], scope["path"], scope["query_string"].decode(), headers, bytes(body)
        )
        if request.path.startswith("/_sim/"):
            await self._send_reply(send, self._control(request))
            return
        fault: Fault | None = None
        try:
            reply, fault = await self._api(request, receive)
        except Invalid as exc:
            reply = error_reply(400, exc.message, type_=exc.kind, param=exc.param)
        if reply is None or (
            isinstance(reply, Reply) and fault is not None and fault.disconnect_after is not None
        ):
            # No answer at all: the server drops the connection, as a network failure would.
            return
        if fault is not None and fault.headers:
            reply.headers.extend((k.lower().encode(), v.encode()) for k, v in fault.headers)
        if isinstance(reply, Stream):
            await self._send_stream(send, reply, fault)
        else:
            await self._send_reply(send, reply, fault.trickle if fault is not None else 0.0)

    def stop(self) -> None:
        """Wake every request that is waiting (hangs, paced streams) so shutdown is quick."""
        if self._stopping is not None:
            self._stopping.set()

    async def _send_reply(self, send: Send, reply: Reply, trickle: float = 0.0) -> None:
        headers = [
            (b"content-type", reply.content_type),
            (b"content-length", str(len(reply.body)).encode()),
            *reply.headers,
        ]
        await send({"type": "http.response.start", "status": reply.status, "headers": headers})
        body = reply.body
        if trickle > 0:
            size = -(-len(body) // _TRICKLE_PIECES)
            while len(body) > size:
                await send({"type": "http.response.body", "body": body[:size], "more_body": True})
                body = body[size:]
                if await self._wait(trickle):
                    return
        await send({"type": "http.response.body", "body": body})

    async def _send_stream(self, send: Send, stream: Stream, fault: Fault | None) -> None:
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
            *stream.headers,
        ]
        await send({"type": "http.response.start", "status": stream.status, "headers": headers})
        cut = fault.disconnect_after if fault is not None else None
        for n, (frame, delay) in enumerate(zip(stream.frames, stream.delays, strict=True)):
            if cut is not None and n >= cut:
                # Returning with the body unfinished makes the server drop the connection,
                # which is what a client sees when the real API's stream breaks.
                return
            if delay > 0 and await self._wait(delay):
                return
            last = stream.interrupt(n) if stream.interrupt is not None else None
            try:
                await send({"type": "http.response.body", "body": last or frame, "more_body": True})
            except OSError:
                return
            if last is not None:
                break
        await send({"type": "http.response.body", "body": b""})

    async def _wait(self, seconds: float, receive: Receive | None = None) -> bool:
        """Sleep ``seconds``; return True early if the server stops or the client goes away."""
        assert self._stopping is not None
        waiters: list[asyncio.Future[Any]] = [asyncio.ensure_future(self._stopping.wait())]
        if receive is not None:
            waiters.append(asyncio.ensure_future(receive()))
        try:
            done, _ = await asyncio.wait(waiters, timeout=seconds)
        finally:
            for waiter in waiters:
                waiter.cancel()
        return bool(done)

    # -- dispatch -----------------------------------------------------------------------------

    def _route(self, method: str, path: str) -> _Route | Reply:
        route = self._exact.get((method, path.rstrip("/") or "/"))
        if route is not None:
            return route
        parts = path.strip("/").split("/")
        runs = parts[:2] in (["v1", "responses"], ["v1", "agent"])
        if runs and len(parts) == 3 and method == "GET":
            return _Route(self.api.run_get, f"/{parts[0]}/{parts[1]}/{{id}}", False)
        if runs and len(parts) == 4 and method == "POST" and parts[3] == "cancel":
            return _Route(self.api.run_cancel, f"/{parts[0]}/{parts[1]}/{{id}}/cancel", False)
        if len(parts) == 4 and parts[:3] == ["async", "chat", "completions"] and method == "GET":
            return _Route(self.api.async_get, "/async/chat/completions/{id}", True)
        known = {p for _, p in self._exact}
        if path in known:
            return error_reply(405, f"{method} is not allowed on {path}.")
        return error_reply(404, f"No such endpoint: {method} {path}.")

    async def _api(
        self, request: Request, receive: Receive
    ) -> tuple[Reply | Stream | None, Fault | None]:
        route = self._route(request.method, request.path)
        if isinstance(route, Reply):
            return route, None
        self.requests[f"{request.method} {route.template}"] += 1
        key = self.options.api_key
        if key is not None and request.headers.get("authorization") != f"Bearer {key}":
            if route.sonar:
                return Reply(401, HTML_401, b"text/html"), None
            return error_reply(401, "Invalid API key: check PERPLEXITY_API_KEY."), None
        if route.sonar and not self.options.sonar:
            return error_reply(403, _RETIRED, type_="chat_completions_not_available"), None
        fault = self._fault_for(request)
        if fault is not None:
            if fault.hang and await self._wait(fault.hang, receive):
                return None, fault
            status = fault.error_status
            if status is not None:
                return self._fault_reply(fault, status), fault
        return await route.handler(request, fault), fault

    def _fault_for(self, request: Request) -> Fault | None:
        header = request.headers.get("x-sim-fault")
        if header:
            try:
                return parse_fault(header)
            except ValueError as exc:
                raise Invalid(f"bad X-Sim-Fault header: {exc}") from exc
        return self.faults.take(request.path)

    def _fault_reply(self, fault: Fault, status: int) -> Reply:
        if fault.html:
            reply = Reply(status, HTML_401, b"text/html")
        else:
            reply = error_reply(status, f"Simulated error {status} (injected fault).")
        if fault.retry_after is not None:
            seconds = fault.retry_after
            value = str(int(seconds)) if float(seconds).is_integer() else f"{seconds:g}"
            reply.headers.append((b"retry-after", value.encode()))
        if fault.retry_after_ms is not None:
            reply.headers.append((b"retry-after-ms", str(fault.retry_after_ms).encode()))
        return reply

    # -- control ------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Requests per route and what would be billed: see :func:`pplx_nb.sim.stats`."""
        return {"requests": dict(sorted(self.requests.items())), **self.api.counters()}

    def reset(self) -> None:
        """Forget queued faults and counters."""
        self.faults.clear()
        self.requests.clear()
        self.api.reset_counters()

    def _control(self, request: Request) -> Reply:
        action = (request.method, request.path.rstrip("/"))
        if action == ("GET", "/_sim/stats"):
            return json_reply(self.stats())
        if action == ("POST", "/_sim/reset"):
            self.reset()
            return json_reply({"ok": True})
        if action == ("GET", "/_sim/health"):
            return json_reply({"ok": True, "documents": len(self.corpus.documents)})
        if action == ("POST", "/_sim/faults"):
            try:
                body = parse_json_object(request.body)
                raw = body.get("faults")
                if not isinstance(raw, list):
                    raise Invalid('body must be {"faults": [...]}', "faults")
                faults = [parse_fault(item) for item in raw]
            except Invalid as exc:
                return error_reply(400, exc.message, param=exc.param)
            except ValueError as exc:
                return error_reply(400, str(exc), param="faults")
            self.faults.extend(faults)
            return json_reply({"queued": len(self.faults)})
        return error_reply(404, f"No such control endpoint: {request.method} {request.path}.")
