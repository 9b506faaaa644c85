"""The Agent API's handlers: responses (plain, streamed, background), retrieve, resume, cancel."""

from __future__ import annotations

import time
from dataclasses import replace
from typing import Any
from urllib.parse import parse_qs

from pplx_nb.sim._agent import AgentRequest, parse_agent
from pplx_nb.sim._answers import Answer, unsearched
from pplx_nb.sim._faults import Fault
from pplx_nb.sim._handlers import STREAM_PIECES, Handlers, remember
from pplx_nb.sim._http import Reply, Request, Stream, error_reply, json_reply
from pplx_nb.sim._odd import odd_agent_body, odd_agent_frames
from pplx_nb.sim._responses import (
    agent_events,
    cancelled_event,
    failed_response,
    new_response_id,
    reported_cost,
    requires_action_response,
    research_frames,
    response_object,
)
from pplx_nb.sim._runs import Run, frame_times
from pplx_nb.sim._validate import Invalid, parse_json_object

__all__ = ["AgentHandlers"]


class AgentHandlers(Handlers):
    """``/v1/agent`` and ``/v1/responses`` with the runs they keep."""

    def _agent_answer(self, agent: AgentRequest) -> Answer:
        answer = self._answer(
            agent.query,
            agent.tier,
            agent.filters,
            related_in_text=agent.related_in_text,
            max_tokens=agent.max_output_tokens,
        )
        return answer if agent.searches else unsearched(answer)

    def _run(
        self,
        ident: str,
        agent: AgentRequest,
        answer: Answer,
        duration: float,
        *,
        failed: bool,
        created: int,
        requires_action: bool = False,
    ) -> Run:
        """A run kept for GET and cancel when the request asked to store it (the default).

        Kept without its prompt, which a GET does not need (its token count is kept): a long
        conversation's prompt would otherwise make each of thousands of kept runs as big.
        """
        run = Run(
            ident,
            answer,
            duration,
            failed,
            created,
            cancel_seconds=self.options.cancel_seconds,
            requires_action=requires_action,
            billed=0.0 if failed else reported_cost(agent, answer, written=not requires_action),
        )
        if agent.store:
            remember(self.runs, ident, (run, replace(agent, prompt="")))
        return run

    def _events(self, run: Run, agent: AgentRequest) -> list[bytes]:
        return agent_events(
            run.ident,
            agent,
            run.answer,
            run.created,
            STREAM_PIECES,
            failed=run.failed,
            requires_action=run.requires_action,
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
        if fault is not None and fault.skill_loaded:
            agent = replace(agent, skills=(*agent.skills, fault.skill_loaded))
        if fault is not None and fault.unsearched:
            agent = replace(agent, searches=False)
        if fault is not None and fault.cost is not None:
            agent = replace(agent, cost=fault.cost)
        answer = self._agent_answer(agent)
        failed = fault is not None and fault.agent_failed
        waits = fault is not None and fault.requires_action and not failed
        odd = fault is not None and fault.odd
        ident = new_response_id()
        created = int(time.time())
        if agent.background:
            self.background_runs += 1
        billed = 0.0 if failed else reported_cost(agent, answer, written=not waits)
        if not failed:
            self.generations += 1
            self.billed_usd += billed
        if agent.stream:
            frames = agent_events(
                ident,
                agent,
                answer,
                created,
                STREAM_PIECES,
                failed=failed,
                requires_action=waits,
                style=self.options.citations,
            )
            output = len(frames) - research_frames(answer, agent.skills)
            if odd:
                frames = odd_agent_frames(frames)
            delays = self._pace(len(frames), agent.deep, len(frames) - output)
            run = self._run(
                ident,
                agent,
                answer,
                sum(delays),
                failed=failed,
                created=created,
                requires_action=waits,
            )
            return self._stream(run, agent, frames, delays)
        if agent.background:
            duration = (
                self.options.deep_research_seconds if agent.deep else self.options.latency_ms / 1000
            )
            self._run(
                ident,
                agent,
                answer,
                duration,
                failed=failed,
                created=created,
                requires_action=waits,
            )
            return json_reply(response_object(ident, agent, created, status="queued"))
        await self._delay(agent.deep)
        run = self._run(
            ident, agent, answer, 0.0, failed=failed, created=created, requires_action=waits
        )
        if failed or waits:
            return json_reply(self._run_view(run, agent))
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
        if phase == "requires_action":
            return requires_action_response(run.ident, agent, run.created, run.answer)
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
        due = frame_times(len(frames), research_frames(run.answer, agent.skills), run.duration)
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
        if first:  # a cancelled run reports no usage: nothing is billed for it
            self.billed_usd -= run.billed
        return json_reply({"response_id": run.ident, "status": "cancelling"})
