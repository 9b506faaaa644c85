"""The Agent API (``/v1/agent``, ``/v1/responses``): strict checks, response objects, events."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

from pplx_nb.sim._answers import Answer, Filters, agent_usage, asks_for_related, is_deep
from pplx_nb.sim._http import sse
from pplx_nb.sim._sonar import text_pieces
from pplx_nb.sim._validate import Invalid, check_choice, check_filters, check_number, message_text

__all__ = [
    "AgentRequest",
    "agent_events",
    "failed_response",
    "parse_agent",
    "response_object",
]

FIELDS = frozenset(
    {
        "input",
        "instructions",
        "model",
        "models",
        "preset",
        "tools",
        "max_output_tokens",
        "temperature",
        "top_p",
        "stream",
        "reasoning",
        "response_format",
        "background",
        "previous_response_id",
        "metadata",
        "max_steps",
        "store",
        "language_preference",
        "skills",
    }
)
PRESETS = {
    "fast": "perplexity/sonar",
    "fast-search": "perplexity/sonar",
    "low": "perplexity/sonar-pro",
    "pro-search": "perplexity/sonar-pro",
    "medium": "perplexity/sonar-deep-research",
    "high": "perplexity/sonar-deep-research",
    "xhigh": "perplexity/sonar-deep-research",
    "deep-research": "perplexity/sonar-deep-research",
    "advanced-deep-research": "perplexity/sonar-deep-research",
}
_ROLES = ("user", "assistant", "system", "developer")
_TOOLS = (
    "web_search",
    "fetch_url",
    "people_search",
    "finance_search",
    "sandbox",
    "mcp",
    "function",
)
_MARKER = re.compile(r"\[(\d+)\]")


@dataclass(frozen=True, slots=True)
class AgentRequest:
    """A validated Agent API request."""

    model: str
    tier: str
    query: str
    prompt: str
    stream: bool
    background: bool
    max_output_tokens: int | None
    related_in_text: bool
    filters: Filters

    @property
    def deep(self) -> bool:
        """Whether this is a deep-research run."""
        return is_deep(self.tier)


def _input_turns(value: Any) -> list[tuple[str, str]]:
    if isinstance(value, str):
        if not value.strip():
            raise Invalid("input must not be empty", "input")
        return [("user", value)]
    if not isinstance(value, list) or not value:
        raise Invalid("input must be a string or a non-empty list of messages", "input")
    turns = []
    for n, item in enumerate(value):
        if not isinstance(item, dict) or item.get("role") not in _ROLES:
            raise Invalid(f"input[{n}].role must be one of {', '.join(_ROLES)}", "input")
        turns.append((item["role"], message_text(item.get("content"), f"input[{n}]")))
    users = [text for role, text in turns if role == "user"]
    if not users or not users[-1].strip():
        raise Invalid("input must contain a non-empty user message", "input")
    return turns


def _tool_filters(tools: Any) -> tuple[str, ...]:
    if tools is None:
        return ()
    if not isinstance(tools, list):
        raise Invalid("tools must be a list", "tools")
    domains: tuple[str, ...] = ()
    for n, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type") not in _TOOLS:
            raise Invalid(f"tools[{n}].type must be one of {', '.join(_TOOLS)}", "tools")
        check_choice(tool, "search_context_size", ("low", "medium", "high"))
        filters = tool.get("filters")
        if filters is not None:
            if not isinstance(filters, dict):
                raise Invalid(f"tools[{n}].filters must be an object", "tools")
            domains += check_filters(filters)
    return domains


def parse_agent(data: dict[str, Any]) -> AgentRequest:
    """Validate an Agent API body strictly: an unknown top-level field is a 400."""
    for key in sorted(data):
        if key not in FIELDS:
            raise Invalid(f'invalid request body: json: unknown field "{key}"', key)
    model, preset = data.get("model"), data.get("preset")
    if preset is not None and (not isinstance(preset, str) or preset not in PRESETS):
        raise Invalid(f"unknown preset {preset!r}; use one of {', '.join(PRESETS)}", "preset")
    if model is not None and (not isinstance(model, str) or "/" not in model):
        raise Invalid(
            f"model must be a provider-prefixed model such as 'perplexity/sonar'; got {model!r}",
            "model",
        )
    if model is None and preset is None:
        raise Invalid("one of model or preset is required", "model")
    turns = _input_turns(data.get("input"))
    instructions = data.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise Invalid("instructions must be a string", "instructions")
    check_number(data, "temperature", 0, 2)
    check_number(data, "top_p", 0, 1)
    check_number(data, "max_output_tokens", 1, 128_000, integer=True)
    reasoning = data.get("reasoning")
    if reasoning is not None:
        if not isinstance(reasoning, dict):
            raise Invalid("reasoning must be an object", "reasoning")
        check_choice(reasoning, "effort", ("minimal", "low", "medium", "high", "xhigh"))
    for flag in ("stream", "background", "store"):
        if data.get(flag) is not None and not isinstance(data[flag], bool):
            raise Invalid(f"{flag} must be a boolean", flag)
    domains = _tool_filters(data.get("tools"))
    query = next(text for role, text in reversed(turns) if role == "user")
    everything = "\n".join([instructions or "", *(text for _, text in turns)])
    tier = str(preset if model is None else model)
    return AgentRequest(
        model=model if model is not None else PRESETS[tier],
        tier=tier,
        query=query,
        prompt=everything,
        stream=bool(data.get("stream")),
        background=bool(data.get("background")),
        max_output_tokens=data.get("max_output_tokens"),
        related_in_text=asks_for_related(everything),
        filters=Filters(domains),
    )


def new_response_id() -> str:
    """A fresh ``resp_...`` id."""
    return f"resp_{uuid.uuid4().hex}"


def _results(answer: Answer) -> list[dict[str, Any]]:
    return [
        {
            "id": n,
            "url": doc.url,
            "title": doc.title,
            "snippet": text,
            "date": None,
            "last_updated": None,
            "source": "web",
        }
        for n, (doc, text) in enumerate(zip(answer.sources, answer.snippets, strict=True), 1)
    ]


def _annotations(answer: Answer) -> list[dict[str, Any]]:
    notes = []
    for match in _MARKER.finditer(answer.text):
        n = int(match.group(1))
        if 1 <= n <= len(answer.sources):
            doc = answer.sources[n - 1]
            notes.append(
                {
                    "type": "url_citation",
                    "url": doc.url,
                    "title": doc.title,
                    "start_index": match.start(),
                    "end_index": match.end(),
                }
            )
    return notes


def _search_item(answer: Answer) -> dict[str, Any]:
    return {"type": "search_results", "queries": list(answer.queries), "results": _results(answer)}


def _message_item(item_id: str, text: str, status: str, answer: Answer | None) -> dict[str, Any]:
    content = []
    if answer is not None:
        content = [{"type": "output_text", "text": text, "annotations": _annotations(answer)}]
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def response_object(
    ident: str,
    request: AgentRequest,
    created: int,
    *,
    status: str,
    answer: Answer | None = None,
    completed: int | None = None,
    item_id: str | None = None,
) -> dict[str, Any]:
    """A ``response`` object; ``output`` stays empty until there is an answer."""
    payload: dict[str, Any] = {
        "id": ident,
        "object": "response",
        "created_at": created,
        "status": status,
        "model": request.model,
        "background": request.background,
        "error": None,
        "incomplete_details": None,
        "output": [],
    }
    if answer is not None:
        message_id = item_id or "msg_" + ident.removeprefix("resp_")
        payload["output"] = [
            _search_item(answer),
            _message_item(message_id, answer.text, "completed", answer),
        ]
        payload["usage"] = agent_usage(request.model, request.prompt, answer)
        payload["completed_at"] = completed if completed is not None else created
        if answer.truncated:
            payload["status"] = "incomplete"
            payload["incomplete_details"] = {"reason": "max_output_tokens"}
    return payload


def failed_response(ident: str, request: AgentRequest, created: int) -> dict[str, Any]:
    """A run that failed: HTTP 200 with ``status: failed`` and an ``error``."""
    payload = response_object(ident, request, created, status="failed")
    payload["error"] = {
        "code": "server_error",
        "type": "server_error",
        "message": "The simulated run failed (injected agent_failed fault). Retry the request.",
    }
    return payload


def agent_events(
    ident: str, request: AgentRequest, answer: Answer, created: int, pieces: int, failed: bool
) -> list[bytes]:
    """The typed SSE events of a streamed run, with exactly one terminal event."""
    events: list[dict[str, Any]] = []
    pending = response_object(ident, request, created, status="in_progress")
    events.append({"type": "response.created", "response": pending})
    events.append({"type": "response.in_progress", "response": pending})
    events.append({"type": "response.reasoning.started", "thought": "Searching the corpus."})
    events.append({"type": "response.reasoning.search_queries", "queries": list(answer.queries)})
    if answer.deep:
        for doc in answer.sources:
            events.append(
                {
                    "type": "response.reasoning.fetch_url_queries",
                    "urls": [doc.url],
                    "thought": f"Reading {doc.title}.",
                }
            )
    events.append({"type": "response.reasoning.search_results", "results": _results(answer)})
    events.append({"type": "response.reasoning.stopped", "thought": "Writing the answer."})
    if failed:
        error = failed_response(ident, request, created)
        events.append({"type": "response.failed", "error": error["error"], "response": error})
        return [sse({**event, "sequence_number": n}) for n, event in enumerate(events)]
    search = _search_item(answer)
    item_id = "msg_" + ident.removeprefix("resp_")
    events.append({"type": "response.output_item.added", "output_index": 0, "item": search})
    events.append({"type": "response.output_item.done", "output_index": 0, "item": search})
    events.append(
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": _message_item(item_id, "", "in_progress", None),
        }
    )
    where = {"item_id": item_id, "output_index": 1, "content_index": 0}
    for piece in text_pieces(answer.text, pieces):
        events.append({"type": "response.output_text.delta", **where, "delta": piece})
    events.append({"type": "response.output_text.done", **where, "text": answer.text})
    final = response_object(
        ident, request, created, status="completed", answer=answer, item_id=item_id
    )
    events.append(
        {"type": "response.output_item.done", "output_index": 1, "item": final["output"][1]}
    )
    terminal = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
    events.append({"type": terminal, "response": final})
    return [sse({**event, "sequence_number": n}) for n, event in enumerate(events)]
