"""What each API endpoint does: answers, streamed events, background runs, billing counters.

Transport concerns (routing, auth, injected faults, sending) live in :mod:`pplx_nb.sim._app`;
handlers here get a parsed :class:`Request` and the fault, if any, that still concerns them
(``agent_failed``).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Awaitable, Callable, Hashable
from datetime import UTC, datetime
from typing import Any, TypeVar
from urllib.parse import parse_qs

from pplx_nb.sim._agent import AgentRequest, parse_agent
from pplx_nb.sim._answers import Answer, Filters, compose, is_deep
from pplx_nb.sim._catalog import model_list
from pplx_nb.sim._corpus import Corpus
from pplx_nb.sim._faults import Fault
from pplx_nb.sim._http import Reply, Request, Stream, dumps, error_reply, json_reply
from pplx_nb.sim._odd import odd_agent_body, odd_agent_frames, odd_chunk, odd_completion
from pplx_nb.sim._options import SimOptions
from pplx_nb.sim._responses import (
    agent_events,
    cancelled_event,
    failed_response,
    new_response_id,
    response_object,
)
from pplx_nb.sim._runs import Run
from pplx_nb.sim._search import parse_search, search_response
from pplx_nb.sim._sonar import SONAR_MODELS, ChatRequest, completion, completion_chunks, parse_chat
from pplx_nb.sim._validate import Invalid, parse_json_object

__all__ = ["Endpoints"]

_CACHE_SIZE = 4096
# Requests longer than this are answered but not cached: the caches keep each request as a key,
# so a few thousand huge prompts would otherwise pin gigabytes.
_CACHEABLE_CHARS = 16_384
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


T = TypeVar("T")


def _remember(runs: dict[str, T], ident: str, entry: T) -> None:
    """Keep a run by id; past _CACHE_SIZE runs the oldest is forgotten, as if it expired."""
    while len(runs) >= _CACHE_SIZE:
        del runs[next(iter(runs))]
    runs[ident] = entry


class Endpoints:
    """The handlers of both protocols over one corpus, with their caches, runs and counters.

    ``sleep(seconds)`` waits and returns True when the wait was cut short (server stopping).
    """

    def __init__(
        self, corpus: Corpus, options: SimOptions, sleep: Callable[[float], Awaitable[bool]]
    ) -> None:
        self.corpus = corpus
        self.options = options
        self._sleep = sleep
        self.generations = 0
        self.background_runs = 0
        self.cancels = 0
        self.searches = 0
        self.runs: dict[str, tuple[Run, AgentRequest]] = {}
        self.async_runs: dict[str, tuple[Run, ChatRequest]] = {}
        self._answers: dict[tuple[Any, ...], Answer] = {}
        self._bodies: dict[Hashable, bytes] = {}

    def reset_counters(self) -> None:
        """Forget how many answers, runs, cancels and searches there were."""
        self.generations = 0
        self.background_runs = 0
        self.cancels = 0
        self.searches = 0

    def counters(self) -> dict[str, int]:
        """What would be billed: answers generated, background runs, cancels, searches."""
        return {
            "generations": self.generations,
            "background_runs": self.background_runs,
            "cancels": self.cancels,
            "searches": self.searches,
        }

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
            answer = compose(
                self.corpus,
                query,
                model=tier,
                filters=filters,
                related=related,
                related_in_text=related_in_text,
                max_tokens=max_tokens,
            )
            if len(query) <= _CACHEABLE_CHARS:
                if len(self._answers) >= _CACHE_SIZE:
                    self._answers.clear()
                self._answers[key] = answer
        return answer

    def _template(self, request: Hashable, prompt: str, build: Callable[[str, int], Any]) -> bytes:
        """The serialised answer to ``request`` with placeholders for its id and timestamp.

        Requests repeat (benchmarks, retries, notebooks re-run), so the JSON is built once and
        only the id and time are spliced in afterwards.
        """
        body = self._bodies.get(request)
        if body is None:
            body = dumps(build(_ID_SLOT, _TIME_SLOT))
            if len(prompt) <= _CACHEABLE_CHARS:
                if len(self._bodies) >= _CACHE_SIZE:
                    self._bodies.clear()
                self._bodies[request] = body
        return body

    def _started(self, run: Run) -> Run:
        """Count a new background run, and its answer unless the run is set to fail."""
        self.background_runs += 1
        if not run.failed:
            self.generations += 1
        return run

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
        return seconds > 0 and await self._sleep(seconds)

    # -- Sonar --------------------------------------------------------------------------------

    def _chat_answer(self, chat: ChatRequest) -> Answer:
        return self._answer(
            chat.query,
            chat.model,
            chat.filters,
            related=chat.related,
            max_tokens=chat.max_tokens,
        )

    async def chat(self, request: Request, fault: Fault | None) -> Reply | Stream:
        """POST /chat/completions (and aliases): a completion, or its SSE chunks."""
        chat = parse_chat(parse_json_object(request.body))
        answer = self._chat_answer(chat)
        deep = is_deep(chat.model)
        self.generations += 1
        created = int(time.time())
        odd = fault is not None and fault.odd
        if chat.stream:
            frames = completion_chunks(chat, answer, created, _STREAM_PIECES)
            if odd:
                frames = [odd_chunk(frame) for frame in frames]
            return Stream(frames, self._pace(len(frames), deep))
        await self._delay(deep)
        body = self._template(chat, chat.prompt, lambda i, t: completion(chat, answer, t, i))
        body = self._fill(body, str(uuid.uuid4()), created)
        return Reply(200, odd_completion(body) if odd else body)

    async def async_create(self, request: Request, fault: Fault | None) -> Reply:
        """POST /async/chat/completions: start a Sonar async request."""
        body = parse_json_object(request.body)
        inner = body.get("request")
        if not isinstance(inner, dict):
            raise Invalid("request must be an object holding the chat-completions body", "request")
        chat = parse_chat(inner)
        failed = fault is not None and fault.agent_failed
        duration = self.options.deep_research_seconds if is_deep(chat.model) else 0.0
        run = self._started(Run(str(uuid.uuid4()), self._chat_answer(chat), duration, failed))
        _remember(self.async_runs, run.ident, (run, chat))
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
                view["response"] = completion(chat, run.answer, run.created, run.ident)
        elif phase in ("failed", "cancelled"):
            view["failed_at"] = run.finished_at
            view["error_message"] = "The simulated request failed (injected fault)."
        return view

    async def async_get(self, request: Request, fault: Fault | None) -> Reply:
        """GET /async/chat/completions/{id}: the request, with its response once done."""
        ident = request.path.rstrip("/").rsplit("/", 1)[-1]
        found = self.async_runs.get(ident)
        if found is None:
            return error_reply(404, f"No async request with id {ident!r}.")
        return json_reply(self._async_view(*found, full=True))

    async def async_list(self, request: Request, fault: Fault | None) -> Reply:
        """GET /async/chat/completions: every async request, newest first."""
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

    def _run(
        self, ident: str, agent: AgentRequest, answer: Answer, duration: float, **kw: Any
    ) -> Run:
        """A run kept for GET and cancel when the request asked to store it (the default)."""
        run = Run(ident, answer, duration, cancel_seconds=self.options.cancel_seconds, **kw)
        if agent.store:
            _remember(self.runs, ident, (run, agent))
        return run

    def _events(self, run: Run, agent: AgentRequest) -> list[bytes]:
        return agent_events(
            run.ident,
            agent,
            run.answer,
            run.created,
            _STREAM_PIECES,
            failed=run.failed,
            style=self.options.citations,
        )

    def _stream(
        self,
        run: Run,
        agent: AgentRequest,
        frames: list[bytes],
        delays: list[float],
        first: int = 0,
    ) -> Stream:
        """Frames that stop with ``response.cancelled`` once the run is cancelled."""

        def interrupt(n: int) -> bytes | None:
            if run.phase() != "cancelled":
                return None
            return cancelled_event(run.ident, agent, run.created, first + n)

        return Stream(frames, delays, interrupt=interrupt)

    async def agent(self, request: Request, fault: Fault | None) -> Reply | Stream:
        """POST /v1/agent and /v1/responses: a response, its events, or a queued run."""
        agent = parse_agent(parse_json_object(request.body))
        answer = self._agent_answer(agent)
        failed = fault is not None and fault.agent_failed
        odd = fault is not None and fault.odd
        ident = new_response_id()
        created = int(time.time())
        if agent.background:
            self.background_runs += 1
        if not failed:
            self.generations += 1
        if agent.stream:
            frames = agent_events(
                ident,
                agent,
                answer,
                created,
                _STREAM_PIECES,
                failed=failed,
                style=self.options.citations,
            )
            if odd:
                frames = odd_agent_frames(frames)
            delays = self._pace(len(frames), agent.deep)
            run = self._run(ident, agent, answer, sum(delays), failed=failed, created=created)
            return self._stream(run, agent, frames, delays)
        if agent.background:
            duration = (
                self.options.deep_research_seconds if agent.deep else self.options.latency_ms / 1000
            )
            self._run(ident, agent, answer, duration, failed=failed, created=created)
            return json_reply(response_object(ident, agent, created, status="queued"))
        await self._delay(agent.deep)
        self._run(ident, agent, answer, 0.0, failed=failed, created=created)
        if failed:
            return json_reply(failed_response(ident, agent, created))
        body = self._template(
            agent,
            agent.prompt,
            lambda i, t: response_object(
                f"resp_{i}",
                agent,
                t,
                status="completed",
                answer=answer,
                completed=t,
                style=self.options.citations,
            ),
        )
        body = self._fill(body, ident.removeprefix("resp_"), created)
        return Reply(200, odd_agent_body(body) if odd else body)

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
                style=self.options.citations,
            )
        if phase == "failed":
            return failed_response(run.ident, agent, run.created)
        return response_object(run.ident, agent, run.created, status=phase)

    def _find_run(self, path: str) -> tuple[Run, AgentRequest] | Reply:
        """The run named by ``/v1/responses/{id}[/...]``, or the 404 for an unknown id.

        Runs asked for with ``store: false`` are never found, as on the live API.
        """
        ident = path.strip("/").split("/")[2]
        found = self.runs.get(ident)
        if found is None:
            return error_reply(
                404,
                f"No response with id {ident!r}: it expired, was never stored (store: false) "
                "or belongs to another key.",
            )
        return found

    def _resume(self, run: Run, agent: AgentRequest, query: dict[str, list[str]]) -> Stream:
        """The run's events after ``starting_after``, each when the run reaches it."""
        after = query.get("starting_after", [""])[0]
        if not after.isdigit():
            raise Invalid(
                "stream=true requires starting_after, a sequence number", "starting_after"
            )
        frames = self._events(run, agent)
        elapsed = time.monotonic() - run.started
        due = [run.duration * (n + 1) / len(frames) for n in range(len(frames))]
        first = int(after) + 1
        delays, waited = [], 0.0
        for moment in due[first:]:
            wait = max(0.0, moment - elapsed - waited)
            delays.append(wait)
            waited += wait
        return self._stream(run, agent, frames[first:], delays, first)

    async def run_get(self, request: Request, fault: Fault | None) -> Reply | Stream:
        """GET /v1/responses/{id}: a run as it stands now, or (``stream=true``) its events."""
        found = self._find_run(request.path)
        if isinstance(found, Reply):
            return found
        query = parse_qs(request.query)
        if query.get("stream", [""])[0] == "true":
            return self._resume(*found, query)
        return json_reply(self._run_view(*found))

    async def run_cancel(self, request: Request, fault: Fault | None) -> Reply:
        """POST /v1/responses/{id}/cancel: ask a pending run to stop; it ends ``cancelled``."""
        found = self._find_run(request.path)
        if isinstance(found, Reply):
            return found
        run = found[0]
        first = run.cancel_asked is None
        if not run.cancel():
            return error_reply(
                400,
                f"Response {run.ident} has already ended ({run.phase()}); there is nothing to "
                "cancel.",
            )
        self.cancels += first
        return json_reply({"response_id": run.ident, "status": "cancelling"})

    # -- Search API and models ----------------------------------------------------------------

    async def search(self, request: Request, fault: Fault | None) -> Reply:
        """POST /search: ranked pages without an answer (billed per request)."""
        search = parse_search(parse_json_object(request.body))
        self.searches += 1
        await self._delay(False)
        moment = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return json_reply(search_response(self.corpus, search, moment))

    async def models(self, request: Request, fault: Fault | None) -> Reply:
        """GET /v1/models: the models the Agent API sells (and the Sonar names when served)."""
        return json_reply(model_list(*(SONAR_MODELS if self.options.sonar else ())))
