"""The Agent protocol: ``POST /v1/agent`` (Responses-style), streamed events and background runs.

The Agent API rejects unknown fields, so only mapped fields are sent: sonar model names become
provider models or efforts (never the deprecated ``preset``), search filters go into the
``web_search`` tool, and related questions are asked for in ``instructions`` and split off the
answer text (there is no API field for them).
A run that ends ``failed`` or ``cancelled``, or stops ``requires_action``, arrives as HTTP 200
and is raised as an error here.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, field_validator
from typing_extensions import TypedDict

from pplx_nb._errors import APIServerError, RemoteRunFailed, RunRequiresAction
from pplx_nb._models import Answer, Cost, Usage
from pplx_nb.api._activity import SKILL_EVENTS, Activity, ActivityLog
from pplx_nb.api._adapter import (
    Call,
    SearchResult,
    SearchResults,
    encode,
    no_answer,
    read_wire,
    stream_cut_short,
)
from pplx_nb.api._names import PRESETS, SONAR_TO_AGENT, agent_target
from pplx_nb.api._sse import Event
from pplx_nb.api._text import RELATED_INSTRUCTION, DeltaFilter, split_related, split_think
from pplx_nb.api.request import Request, is_deep_research
from pplx_nb.api.retry import UNREADABLE

__all__ = ["PRESETS", "SONAR_TO_AGENT", "AgentAdapter", "AgentStream", "agent_target"]

_PENDING = frozenset({"queued", "in_progress"})
_SNAPSHOTS = frozenset({"response.created", "response.in_progress"})
"""Events whose ``response`` snapshot names the run before it ends."""
_ITEMS = frozenset({"message", "search_results"})
_EVENTS = frozenset(
    {
        "response.output_text.delta",
        "response.completed",
        "response.incomplete",
        "response.failed",
        "response.cancelled",
        "error",
    }
)


class _Content(BaseModel):
    type: str = ""
    text: str | None = None


def _of_types(values: Any, types: frozenset[str]) -> Any:
    """Only the entries whose ``type`` is one of ``types``: unknown kinds may hold anything."""
    if not isinstance(values, list):
        return values
    return [v for v in values if not isinstance(v, dict) or v.get("type") in types]


class _Item(BaseModel):
    type: str = ""
    content: list[_Content] | None = None
    results: SearchResults | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _text_parts(cls, value: Any) -> Any:
        return _of_types(value, frozenset({"output_text"}))


class _Cost(TypedDict, total=False):
    input_cost: float | None
    output_cost: float | None
    cache_read_cost: float | None
    cache_creation_cost: float | None
    tool_calls_cost: float | None
    total_cost: float | None
    currency: str | None


class _InputDetails(TypedDict, total=False):
    cache_read_input_tokens: int | None
    cache_creation_input_tokens: int | None


class _OutputDetails(TypedDict, total=False):
    reasoning_tokens: int | None


class _ToolCalls(TypedDict, total=False):
    invocation: int | None
    cost_usd: float | None


class _Usage(TypedDict, total=False):
    input_tokens: int | None
    output_tokens: int | None
    total_tokens: int | None
    input_tokens_details: _InputDetails | None
    output_tokens_details: _OutputDetails | None
    tool_calls_details: dict[str, _ToolCalls] | None
    cost: _Cost | None


class _Error(BaseModel):
    message: str | None = None
    code: str | int | None = None


class _Incomplete(BaseModel):
    reason: str | None = None


class _Response(BaseModel):
    id: str | None = None
    status: str | None = None
    model: str | None = None
    effort: str | None = None
    preset: str | None = None
    output: list[_Item] = []
    usage: _Usage | None = None
    error: _Error | str | None = None
    incomplete_details: _Incomplete | None = None

    @field_validator("output", mode="before")
    @classmethod
    def _known_items(cls, value: Any) -> Any:
        return _of_types(value, _ITEMS)


class _Kind(BaseModel):
    type: str = ""
    sequence_number: int | None = None


class _Event(BaseModel):
    type: str = ""
    delta: str | None = None
    response: _Response | None = None
    error: _Error | str | None = None
    message: str | None = None


def _error_text(error: _Error | str | None) -> str | None:
    return error.message if isinstance(error, _Error) else error


def _sources(response: _Response) -> list[dict[str, Any]]:
    """The results of every search round, each page once, with every ``id`` it was found
    under (a later round may find a page again under a new id, and ``[n]`` names ids)."""
    pages: dict[str, dict[str, Any]] = {}
    for item in response.output:
        if item.type != "search_results":
            continue
        for result in item.results or ():
            source = pages.setdefault(result["url"], _source(result))
            if "id" in result and source["ids"] is not None:
                source["ids"].append(result["id"])
    return list(pages.values())


def _source(result: SearchResult) -> dict[str, Any]:
    """A source's fields from its first search result; ``ids`` is ``None`` if it has no id."""
    fields: dict[str, Any] = {key: value for key, value in result.items() if key != "id"}
    fields["ids"] = [] if "id" in result else None
    return fields


def _text(response: _Response) -> str:
    return "".join(
        part.text
        for item in response.output
        if item.type == "message"
        for part in item.content or ()
        if part.type == "output_text" and part.text
    )


def _usage(usage: _Usage | None) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The token counts and the cost in the API's ``usage``; ``None`` for what it left out."""
    if usage is None:
        return None, None
    prompt, completion = usage.get("input_tokens") or 0, usage.get("output_tokens") or 0
    cached = usage.get("input_tokens_details") or {}
    tools = usage.get("tool_calls_details") or {}
    calls = {name: detail.get("invocation") or 0 for name, detail in tools.items()}
    counts = {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": usage.get("total_tokens") or prompt + completion,
        "reasoning_tokens": (usage.get("output_tokens_details") or {}).get("reasoning_tokens"),
        "num_search_queries": calls.get("search_web"),
        "cache_read_input_tokens": cached.get("cache_read_input_tokens"),
        "cache_creation_input_tokens": cached.get("cache_creation_input_tokens"),
        "tool_calls": calls or None,
    }
    cost = usage.get("cost")
    if cost is None:
        return counts, None
    tool_costs: dict[str, float] = {}
    for name, detail in tools.items():
        paid = detail.get("cost_usd")
        if paid is not None:
            tool_costs[name] = paid
    tools_cost = cost.get("tool_calls_cost")
    if tools_cost is None and tool_costs:
        tools_cost = sum(tool_costs.values())
    return counts, {
        "input_cost": cost.get("input_cost") or 0.0,
        "output_cost": cost.get("output_cost") or 0.0,
        "request_cost": tools_cost or 0.0,
        "total_cost": cost.get("total_cost") or 0.0,
        "currency": cost.get("currency") or "USD",
        "cache_read_cost": cost.get("cache_read_cost"),
        "cache_creation_cost": cost.get("cache_creation_cost"),
        "tool_calls_cost": tools_cost,
        "tool_costs": tool_costs or None,
    }


def _searched(response: _Response, usage: dict[str, Any] | None) -> bool | None:
    """Whether the run searched: it has search results, or its usage counts web searches;
    ``None`` when the response says neither way (a minimal terminal event)."""
    if any(item.type == "search_results" for item in response.output):
        return True
    if usage is None:
        return None
    return bool(usage.get("num_search_queries"))


def _run_failed(response: _Response) -> RemoteRunFailed:
    ident = response.id or "(no id)"
    status = response.status or "failed"
    if status == "requires_action":
        usage, cost = _usage(response.usage)
        return RunRequiresAction(
            f"The run {ident} stopped to wait for an action pplx_nb does not take (status "
            "requires_action: a tool call to approve, a function's output to send), so it is "
            "not waited for; its cost so far is recorded. Ask again, or use another model.",
            request_id=response.id,
            cost=None if cost is None else Cost.model_validate(cost),
            usage=None if usage is None else Usage.model_validate(usage),
        )
    if status == "cancelled":
        return RemoteRunFailed(
            f"The run {ident} was cancelled before it finished. Ask again to start a new one.",
            request_id=response.id,
        )
    if status == "incomplete":
        reason = response.incomplete_details.reason if response.incomplete_details else None
        return RemoteRunFailed(
            f"The run {ident} ended incomplete ({reason or 'no reason given'}) without an "
            "answer. Retry, or ask a narrower question.",
            request_id=response.id,
        )
    message = _error_text(response.error) or status
    return RemoteRunFailed(
        f"The run {ident} failed: {message}. Retry the question; if it keeps failing, try a "
        "lighter model.",
        request_id=response.id,
    )


def _answer(
    response: _Response, model: str, *, related: bool, streamed: str = "", asked: str | None = None
) -> Answer:
    """The answer in a finished response; failed, cancelled or empty-incomplete runs raise.

    ``related``: related questions were asked for, so a trailing list is split off the text.
    ``asked``: the effort sent, reported when the API does not say which it ran with.
    """
    if (
        response.status is None
        and not streamed
        and not any(item.type == "message" for item in response.output)
    ):
        raise no_answer()
    status = response.status or "completed"
    text = _text(response) or streamed
    finish = "stop"
    if status == "incomplete":
        reason = response.incomplete_details.reason if response.incomplete_details else None
        if not text or reason not in ("max_output_tokens", "max_tokens"):
            raise _run_failed(response)
        finish = "length"
    elif status != "completed":
        raise _run_failed(response)
    text, thinking = split_think(text)
    text, questions = split_related(text) if related else (text, [])
    usage, cost = _usage(response.usage)
    searched = _searched(response, usage)
    return Answer.model_validate(
        {
            "text": text,
            "thinking": thinking,
            "sources": _sources(response),
            "related_questions": questions,
            "model": response.model or model,
            "usage": usage,
            "cost": cost,
            "response_id": response.id,
            "finish_reason": finish,
            "effort": response.effort or asked,
            "preset": response.preset,
            "searched": searched,
        }
    )


def _effort_sent(request: Request, model: str) -> str | None:
    """The ``effort`` a request for ``model`` carries, if any."""
    return request.effort or agent_target(model).get("effort")


class AgentStream:
    """Follows typed events to exactly one terminal; unknown event types are ignored.

    The ``response.reasoning.*`` events on the way become :attr:`activity` (what the run is
    doing); :attr:`sequence` is the last ``sequence_number`` seen, where a resumed stream
    picks up. An event at or below it (sent again after a resume) is skipped.
    :attr:`response_id` is the run's id once an event has named it (``response.created``):
    a stream cut after that can be read back by id.
    """

    def __init__(self, *, related: bool, model: str = "", effort: str | None = None) -> None:
        self._model = model
        self._effort = effort
        self._related = related
        self._filter = DeltaFilter(related=self._related)
        self._parts: list[str] = []
        self._final: _Response | None = None
        self._log = ActivityLog()
        self.sequence: int | None = None
        self.response_id: str | None = None

    @property
    def activity(self) -> Activity | None:
        """What the run has done so far; ``None`` before its first reasoning or text event."""
        return self._log.current

    def feed(self, event: Event) -> str:
        head = read_wire(_Kind, event.data, "a stream event")
        if head.sequence_number is not None:
            if self.sequence is not None and head.sequence_number <= self.sequence:
                return ""
            self.sequence = head.sequence_number
        kind = head.type or event.name
        if kind.startswith("response.reasoning."):
            self._log.reasoning(kind, event.data)
            return ""
        if kind in SKILL_EVENTS:
            self._log.skill(event.data)
            return ""
        if kind in _SNAPSHOTS:
            snapshot = read_wire(_Event, event.data, "a stream event").response
            if snapshot is not None and snapshot.status == "requires_action":
                raise _run_failed(snapshot)  # the run waits: nothing more will come
            if self.response_id is None:
                self.response_id = snapshot.id if snapshot is not None else None
        if kind not in _EVENTS:
            return ""
        data = read_wire(_Event, event.data, "a stream event")
        if kind == "response.output_text.delta":
            if not data.delta:
                return ""
            self._log.writing(len(data.delta))
            self._parts.append(data.delta)
            return self._filter.feed(data.delta)
        if kind in ("response.completed", "response.incomplete"):
            self._final = data.response or _Response(status=kind.rsplit(".", 1)[-1])
            return self._filter.flush()
        if kind in ("response.failed", "response.cancelled"):
            response = data.response or _Response(status=kind.rsplit(".", 1)[-1])
            if response.error is None and data.error is not None:
                response.error = data.error
            response.status = kind.rsplit(".", 1)[-1]
            raise _run_failed(response)
        if kind == "error":
            message = _error_text(data.error) or data.message or "unknown"
            raise APIServerError(f"The API reported an error mid-stream: {message}. Retry.")
        return ""

    def finish(self) -> Answer:
        if self._final is None:
            raise stream_cut_short()
        return _answer(
            self._final,
            self._model,
            related=self._related,
            streamed="".join(self._parts),
            asked=self._effort,
        )


class AgentAdapter:
    """Perplexity's Agent API (``/v1/agent``), strict about the fields it sends."""

    style = "agent"

    def _body(self, request: Request, model: str) -> dict[str, Any]:
        target = agent_target(model)
        body: dict[str, Any] = dict(target)
        system = [str(m.get("content", "")) for m in request.messages if m.get("role") == "system"]
        turns = [
            {"role": m["role"], "content": m.get("content", "")}
            for m in request.messages
            if m.get("role") != "system"
        ]
        if request.return_related_questions:
            system.append(RELATED_INSTRUCTION)
        if system:
            body["instructions"] = "\n\n".join(part for part in system if part)
        if len(turns) == 1 and turns[0]["role"] == "user" and isinstance(turns[0]["content"], str):
            body["input"] = turns[0]["content"]
        else:
            body["input"] = turns
        filters = request.filters()
        wants_search = (
            "model" in target
            or filters
            or request.search_context_size is not None
            or request.tool_choice == "required"
        )
        if wants_search and not request.disable_search:
            tool: dict[str, Any] = {"type": "web_search"}
            if filters:
                tool["filters"] = filters
            if request.search_context_size is not None:
                tool["search_context_size"] = request.search_context_size
            body["tools"] = [tool]
        if request.max_tokens is not None:
            body["max_output_tokens"] = request.max_tokens
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.reasoning_effort is not None:
            body["reasoning"] = {"effort": request.reasoning_effort}
        if request.effort is not None:
            body["effort"] = request.effort  # over one named as the model, as the API does
        if request.tool_choice is not None and not request.disable_search:
            body["tool_choice"] = request.tool_choice
        return body

    def chat(self, request: Request, model: str, *, stream: bool) -> Call:
        """``POST /v1/agent``; a streamed deep research is stored (``store: true``), so that
        a stream cut after the run started can be read back by its id."""
        body = self._body(request, model)
        if stream:
            body["stream"] = True
            if is_deep_research(request.tier(model)):
                body["store"] = True
        return Call("POST", "/v1/agent", encode(body))

    def parse(self, raw: bytes, request: Request, model: str) -> Answer:
        """The answer in a ``response`` object; failed runs (HTTP 200) raise."""
        response = read_wire(_Response, raw, "a response")
        return _answer(
            response,
            model,
            related=request.return_related_questions,
            asked=_effort_sent(request, model),
        )

    def stream_parser(self, request: Request, model: str) -> AgentStream:
        """A parser for the typed ``response.*`` events."""
        return AgentStream(
            related=request.return_related_questions,
            model=model,
            effort=_effort_sent(request, model),
        )

    def follow_parser(self, related: bool) -> AgentStream:
        """A parser for the events of a background run being followed.

        ``related``: the run's request asked for related questions.
        """
        return AgentStream(related=related)

    def submit(self, request: Request, model: str) -> Call:
        """``POST /v1/agent`` with ``background: true`` and ``store: true`` (a run that is
        not stored cannot be polled)."""
        body = self._body(request, model)
        body["background"] = True
        body["store"] = True
        return Call("POST", "/v1/agent", encode(body))

    def submitted(self, raw: bytes) -> str:
        """The run id (``resp_...``); a run that failed at once raises."""
        response = read_wire(_Response, raw, "a response")
        if response.status in ("failed", "cancelled"):
            raise _run_failed(response)
        if not response.id:
            raise APIServerError(
                "The API accepted the background run but sent no id.", reason=UNREADABLE
            )
        return response.id

    def poll(self, remote_id: str) -> Call:
        """``GET /v1/responses/{id}``."""
        return Call("GET", f"/v1/responses/{quote(remote_id, safe='')}")

    def follow(self, remote_id: str, after: int) -> Call:
        """``GET /v1/responses/{id}?stream=true&starting_after=N``: a run's events after N."""
        return Call(
            "GET",
            f"/v1/responses/{quote(remote_id, safe='')}?stream=true&starting_after={after}",
        )

    def cancel(self, remote_id: str) -> Call:
        """``POST /v1/responses/{id}/cancel``."""
        return Call("POST", f"/v1/responses/{quote(remote_id, safe='')}/cancel")

    def polled(self, raw: bytes, *, related: bool = False) -> Answer | None:
        """``None`` while queued or in progress; the answer once finished.

        ``related``: the run's request asked for related questions (split off the text).
        """
        response = read_wire(_Response, raw, "a response")
        if response.status in _PENDING:
            return None
        return _answer(response, response.model or "", related=related)
