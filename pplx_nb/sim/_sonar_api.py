"""Sonar chat completions and async chat completions (served only in the simulator's Sonar mode)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from pplx_nb.sim._answers import Answer, is_deep, sonar_usage
from pplx_nb.sim._faults import Fault
from pplx_nb.sim._handlers import STREAM_PIECES, Handlers, remember
from pplx_nb.sim._http import Reply, Request, Stream, error_reply, json_reply
from pplx_nb.sim._odd import odd_chunk, odd_completion
from pplx_nb.sim._runs import Run
from pplx_nb.sim._sonar import ChatRequest, completion, completion_chunks, parse_chat
from pplx_nb.sim._validate import Invalid, parse_json_object

__all__ = ["SonarHandlers"]

_ASYNC_STATUS = {
    "queued": "CREATED",
    "in_progress": "IN_PROGRESS",
    "completed": "COMPLETED",
    "failed": "FAILED",
    "cancelled": "FAILED",
}


def _cost(chat: ChatRequest, answer: Answer) -> float:
    """The total cost (USD) a completion reports: what the simulator bills for it."""
    usage = sonar_usage(chat.model, chat.prompt, answer, final=True)
    cost: dict[str, float] = usage["cost"]  # type: ignore[assignment]  # a dict of amounts
    return cost["total_cost"]


class SonarHandlers(Handlers):
    """``/chat/completions`` (and aliases) and ``/async/chat/completions``."""

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
        self.billed_usd += _cost(chat, answer)
        created = int(time.time())
        odd = fault is not None and fault.odd
        if chat.stream:
            frames = completion_chunks(chat, answer, created, STREAM_PIECES)
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
        if not failed:
            self.billed_usd += _cost(chat, run.answer)
        remember(self.async_runs, run.ident, (run, chat))
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

    def _started(self, run: Run) -> Run:
        """Count a new background run, and its answer unless the run is set to fail."""
        self.background_runs += 1
        if not run.failed:
            self.generations += 1
        return run
