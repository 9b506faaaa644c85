"""The simulator as an ASGI application: routing, auth, faults, pacing, control endpoints."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Any

from pplx_nb.sim._agent import (
    PRESETS,
    AgentRequest,
    agent_events,
    failed_response,
    new_response_id,
    parse_agent,
    response_object,
)
from pplx_nb.sim._answers import Answer, Filters, compose, is_deep
from pplx_nb.sim._corpus import Corpus
from pplx_nb.sim._faults import Fault, FaultQueue, parse_fault
from pplx_nb.sim._http import (
    HTML_401,
    Receive,
    Reply,
    Request,
    Scope,
    Send,
    Stream,
    dumps,
    error_reply,
    json_reply,
)
from pplx_nb.sim._runs import Run
from pplx_nb.sim._sonar import SONAR_MODELS, ChatRequest, completion, completion_chunks, parse_chat
from pplx_nb.sim._validate import Invalid, parse_json_object

__all__ = ["SimApp", "SimOptions"]

Handler = Callable[[Request, Fault | None], Awaitable[Reply | Stream]]
_ANSWER_CACHE_SIZE = 4096
_ID_SLOT = "SIMID0SLOT"
_TIME_SLOT = 4102444800
_STREAM_PIECES = 16
_ASYNC_STATUS = {
    "queued": "CREATED",
    "in_progress": "IN_PROGRESS",
    "completed": "COMPLETED",
    "failed": "FAILED",
    "cancelled": "FAILED",
}


@dataclass(frozen=True, slots=True)
class SimOptions:
    """Knobs of one simulator: added latency, deep-research duration, expected key."""

    latency_ms: int = 300
    deep_research_seconds: float = 5.0
    api_key: str | None = None


@dataclass(frozen=True, slots=True)
class _Route:
    handler: Handler
    template: str
    sonar: bool


class SimApp:
    """An ASGI app speaking both Perplexity protocols from one corpus."""

    def __init__(self, corpus: Corpus, options: SimOptions = SimOptions()) -> None:
        self.corpus = corpus
        self.options = options
        self.faults = FaultQueue()
        self.requests: Counter[str] = Counter()
        self.generations = 0
        self.background_runs = 0
        self.runs: dict[str, tuple[Run, AgentRequest]] = {}
        self.async_runs: dict[str, tuple[Run, ChatRequest]] = {}
        self._answers: dict[tuple[Any, ...], Answer] = {}
        self._bodies: dict[Hashable, bytes] = {}
        self._stopping: asyncio.Event | None = None
        self._exact: dict[tuple[str, str], _Route] = {}
        for path in ("/chat/completions", "/v1/chat/completions", "/v1/sonar"):
            self._exact["POST", path] = _Route(self._chat, path, True)
        for path in ("/v1/agent", "/v1/responses"):
            self._exact["POST", path] = _Route(self._agent, path, False)
        self._exact["POST", "/async/chat/completions"] = _Route(
            self._async_create, "/async/chat/completions", True
        )
        self._exact["GET", "/async/chat/completions"] = _Route(
            self._async_list, "/async/chat/completions", True
        )
        for path in ("/v1/models", "/models"):
            self._exact["GET", path] = _Route(self._models, path, False)

    # -- ASGI ---------------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one ASGI connection scope."""
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
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
            reply = error_reply(400, exc.message, param=exc.param)
        if reply is None or (
            isinstance(reply, Reply) and fault is not None and fault.disconnect_after is not None
        ):
            # No answer at all: the server drops the connection, as a network failure would.
            return
        if isinstance(reply, Stream):
            await self._send_stream(send, reply, fault)
        else:
            await self._send_reply(send, reply)

    def stop(self) -> None:
        """Wake every request that is waiting (hangs, paced streams) so shutdown is quick."""
        if self._stopping is not None:
            self._stopping.set()

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                self.stop()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def _send_reply(self, send: Send, reply: Reply) -> None:
        headers = [
            (b"content-type", reply.content_type),
            (b"content-length", str(len(reply.body)).encode()),
            *reply.headers,
        ]
        await send({"type": "http.response.start", "status": reply.status, "headers": headers})
        await send({"type": "http.response.body", "body": reply.body})

    async def _send_stream(self, send: Send, stream: Stream, fault: Fault | None) -> None:
        headers = [
            (b"content-type", b"text/event-stream; charset=utf-8"),
            (b"cache-control", b"no-cache"),
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
            try:
                await send({"type": "http.response.body", "body": frame, "more_body": True})
            except OSError:
                return
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
            return _Route(self._run_get, f"/{parts[0]}/{parts[1]}/{{id}}", False)
        if runs and len(parts) == 4 and method == "POST" and parts[3] == "cancel":
            return _Route(self._run_cancel, f"/{parts[0]}/{parts[1]}/{{id}}/cancel", False)
        if len(parts) == 4 and parts[:3] == ["async", "chat", "completions"] and method == "GET":
            return _Route(self._async_get, "/async/chat/completions/{id}", True)
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

    # -- answers ------------------------------------------------------------------------------

    def _answer(
        self,
        query: str,
        tier: str,
        filters: Filters,
        *,
        related: bool = False,
        related_in_text: bool = False,
        max_tokens: int | None = None,
    ) -> Answer:
        key = (query, tier, filters, related, related_in_text, max_tokens)
        answer = self._answers.get(key)
        if answer is None:
            if len(self._answers) >= _ANSWER_CACHE_SIZE:
                self._answers.clear()
            answer = compose(
                self.corpus,
                query,
                model=tier,
                filters=filters,
                related=related,
                related_in_text=related_in_text,
                max_tokens=max_tokens,
            )
            self._answers[key] = answer
        return answer

    def _template(self, request: Hashable, build: Callable[[str, int], Any]) -> bytes:
        """The serialised answer to ``request`` with placeholders for its id and timestamp.

        Requests repeat (benchmarks, retries, notebooks re-run), so the JSON is built once and
        only the id and time are spliced in afterwards.
        """
        body = self._bodies.get(request)
        if body is None:
            if len(self._bodies) >= _ANSWER_CACHE_SIZE:
                self._bodies.clear()
            body = self._bodies[request] = dumps(build(_ID_SLOT, _TIME_SLOT))
        return body

    @staticmethod
    def _fill(body: bytes, ident: str, created: int) -> bytes:
        return body.replace(_ID_SLOT.encode(), ident.encode()).replace(
            str(_TIME_SLOT).encode(), str(created).encode()
        )

    def _pace(self, frames: int, deep: bool) -> list[float]:
        """Delays before each frame: deep research spreads over its duration."""
        if frames == 0:
            return []
        if deep:
            step = self.options.deep_research_seconds / frames
            return [step] * frames
        latency = self.options.latency_ms / 1000
        step = min(0.05, latency / frames)
        return [latency] + [step] * (frames - 1)

    async def _delay(self, deep: bool) -> bool:
        seconds = self.options.deep_research_seconds if deep else self.options.latency_ms / 1000
        return seconds > 0 and await self._wait(seconds)

    # -- Sonar --------------------------------------------------------------------------------

    def _chat_answer(self, chat: ChatRequest) -> Answer:
        return self._answer(
            chat.query,
            chat.model,
            chat.filters,
            related=chat.related,
            max_tokens=chat.max_tokens,
        )

    async def _chat(self, request: Request, fault: Fault | None) -> Reply | Stream:
        chat = parse_chat(parse_json_object(request.body))
        answer = self._chat_answer(chat)
        deep = is_deep(chat.model)
        self.generations += 1
        created = int(time.time())
        if chat.stream:
            frames = completion_chunks(chat, answer, created, _STREAM_PIECES)
            return Stream(frames, self._pace(len(frames), deep))
        await self._delay(deep)
        body = self._template(chat, lambda i, t: completion(chat, answer, t, i))
        return Reply(200, self._fill(body, str(uuid.uuid4()), created))

    async def _async_create(self, request: Request, fault: Fault | None) -> Reply:
        body = parse_json_object(request.body)
        inner = body.get("request")
        if not isinstance(inner, dict):
            raise Invalid("request must be an object holding the chat-completions body", "request")
        chat = parse_chat(inner)
        failed = fault is not None and fault.agent_failed
        duration = self.options.deep_research_seconds if is_deep(chat.model) else 0.0
        run = Run(str(uuid.uuid4()), self._chat_answer(chat), duration, failed)
        self.async_runs[run.ident] = (run, chat)
        self.background_runs += 1
        if not failed:
            self.generations += 1
        return json_reply(self._async_view(run, chat, full=True, fresh=True))

    def _async_view(
        self, run: Run, chat: ChatRequest, *, full: bool, fresh: bool = False
    ) -> dict[str, Any]:
        phase = "queued" if fresh else run.phase()
        view: dict[str, Any] = {
            "id": run.ident,
            "model": chat.model,
            "created_at": run.created,
            "status": _ASYNC_STATUS[phase],
        }
        if phase != "queued":
            view["started_at"] = run.created
        if phase == "completed":
            view["completed_at"] = run.finished_at
            if full:
                view["response"] = completion(chat, run.answer, run.created)
        elif phase in ("failed", "cancelled"):
            view["failed_at"] = run.finished_at
            view["error_message"] = "The simulated request failed (injected fault)."
        return view

    async def _async_get(self, request: Request, fault: Fault | None) -> Reply:
        ident = request.path.rstrip("/").rsplit("/", 1)[-1]
        found = self.async_runs.get(ident)
        if found is None:
            return error_reply(404, f"No async request with id {ident!r}.")
        return json_reply(self._async_view(*found, full=True))

    async def _async_list(self, request: Request, fault: Fault | None) -> Reply:
        views = [self._async_view(run, chat, full=False) for run, chat in self.async_runs.values()]
        views.reverse()
        return json_reply({"requests": views, "next_token": None})

    # -- Agent --------------------------------------------------------------------------------

    def _agent_answer(self, agent: AgentRequest) -> Answer:
        return self._answer(
            agent.query,
            agent.tier,
            agent.filters,
            related_in_text=agent.related_in_text,
            max_tokens=agent.max_output_tokens,
        )

    async def _agent(self, request: Request, fault: Fault | None) -> Reply | Stream:
        agent = parse_agent(parse_json_object(request.body))
        answer = self._agent_answer(agent)
        failed = fault is not None and fault.agent_failed
        ident = new_response_id()
        created = int(time.time())
        if agent.stream:
            frames = agent_events(ident, agent, answer, created, _STREAM_PIECES, failed)
            if not failed:
                self.generations += 1
            return Stream(frames, self._pace(len(frames), agent.deep))
        if agent.background:
            duration = (
                self.options.deep_research_seconds if agent.deep else self.options.latency_ms / 1000
            )
            run = Run(ident, answer, duration, failed, created)
            self.runs[ident] = (run, agent)
            self.background_runs += 1
            if not failed:
                self.generations += 1
            return json_reply(response_object(ident, agent, created, status="queued"))
        await self._delay(agent.deep)
        if failed:
            return json_reply(failed_response(ident, agent, created))
        self.generations += 1
        body = self._template(
            agent,
            lambda i, t: response_object(
                f"resp_{i}", agent, t, status="completed", answer=answer, completed=t
            ),
        )
        return Reply(200, self._fill(body, ident.removeprefix("resp_"), int(time.time())))

    def _run_view(self, run: Run, agent: AgentRequest) -> dict[str, Any]:
        phase = run.phase()
        if phase == "completed":
            return response_object(
                run.ident,
                agent,
                run.created,
                status="completed",
                answer=run.answer,
                completed=run.finished_at,
            )
        if phase == "failed":
            return failed_response(run.ident, agent, run.created)
        return response_object(run.ident, agent, run.created, status=phase)

    def _find_run(self, path: str, depth: int) -> tuple[str, tuple[Run, AgentRequest] | None]:
        ident = path.strip("/").split("/")[depth]
        return ident, self.runs.get(ident)

    async def _run_get(self, request: Request, fault: Fault | None) -> Reply:
        ident, found = self._find_run(request.path, 2)
        if found is None:
            return error_reply(404, f"No response with id {ident!r}; it may have expired.")
        return json_reply(self._run_view(*found))

    async def _run_cancel(self, request: Request, fault: Fault | None) -> Reply:
        ident, found = self._find_run(request.path, 2)
        if found is None:
            return error_reply(404, f"No response with id {ident!r}; it may have expired.")
        found[0].cancel()
        return json_reply(self._run_view(*found))

    async def _models(self, request: Request, fault: Fault | None) -> Reply:
        names = [*SONAR_MODELS, *sorted(set(PRESETS.values()))]
        data = [{"id": n, "object": "model", "created": 0, "owned_by": "perplexity"} for n in names]
        return json_reply({"object": "list", "data": data})

    # -- control ------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Requests per route, answers produced (what would be billed), background runs."""
        return {
            "requests": dict(sorted(self.requests.items())),
            "generations": self.generations,
            "background_runs": self.background_runs,
        }

    def reset(self) -> None:
        """Forget queued faults and counters."""
        self.faults.clear()
        self.requests.clear()
        self.generations = 0
        self.background_runs = 0

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
