"""Agent API answers: ``response`` objects, their usage and cost, and the typed stream events.

Shapes follow the official SDK's models (``perplexity/generated/api.py``): output items
``search_results`` (ids from 1), ``fetch_url_results`` (deep runs) and ``message``; streams
open with ``response.created`` and ``response.in_progress``, report their research with
``response.reasoning.*`` events (started, search_queries and search_results per search round,
fetch_url_queries and fetch_url_results when pages are read, stopped), then the output items
and text deltas, and end with exactly one terminal event.
"""

from __future__ import annotations

import uuid
from typing import Any

from pplx_nb.sim._agent import AgentRequest
from pplx_nb.sim._answers import Answer, count_tokens
from pplx_nb.sim._catalog import MODELS, TOOL_PRICES
from pplx_nb.sim._citations import cite
from pplx_nb.sim._http import sse_event
from pplx_nb.sim._options import CitationStyle
from pplx_nb.sim._sonar import text_pieces

__all__ = [
    "agent_events",
    "cancelled_event",
    "failed_response",
    "new_response_id",
    "reported_cost",
    "requires_action_response",
    "research_frames",
    "response_object",
]

_FETCHED = 3


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
            "date": answer.date,
            "last_updated": answer.date,
            "source": "web",
        }
        for n, (doc, text) in enumerate(zip(answer.sources, answer.snippets, strict=True), 1)
    ]


def _fetched(answer: Answer) -> list[dict[str, Any]]:
    """The pages a deep run reads in full after searching."""
    if not answer.deep:
        return []
    pairs = zip(answer.sources, answer.snippets, strict=True)
    return [{"url": d.url, "title": d.title, "snippet": s} for d, s in list(pairs)[:_FETCHED]]


def _usage(request: AgentRequest, answer: Answer, *, written: bool = True) -> dict[str, Any]:
    """What a run used; ``written=False``: it stopped before writing its answer."""
    price = MODELS[request.model]
    input_tokens = request.input_tokens
    reasoning = count_tokens(answer.think) if answer.think else 0
    output_tokens = (count_tokens(answer.text) if written else 0) + reasoning
    calls = {"search_web": len(answer.queries), "fetch_url": len(_fetched(answer))}
    details = {
        tool: {"invocation": n, "cost_usd": round(n * TOOL_PRICES[tool], 6)}
        for tool, n in calls.items()
        if n
    }
    input_cost = input_tokens * price.input_per_m / 1e6
    output_cost = output_tokens * price.output_per_m / 1e6
    tools_cost = sum(n * TOOL_PRICES[tool] for tool, n in calls.items())
    total = input_cost + output_cost + tools_cost if request.cost is None else request.cost
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "total_tokens": input_tokens + output_tokens,
        "input_tokens_details": {"cache_read_input_tokens": 0, "cache_creation_input_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "tool_calls_details": details,
        "cost": {
            "currency": "USD",
            "input_cost": round(input_cost, 6),
            "output_cost": round(output_cost, 6),
            "cache_read_cost": 0.0,
            "tool_calls_cost": round(tools_cost, 6),
            "total_cost": round(total, 6),
        },
    }


def reported_cost(request: AgentRequest, answer: Answer, *, written: bool = True) -> float:
    """The total cost (USD) a run's usage reports: what the simulator bills for it."""
    cost: float = _usage(request, answer, written=written)["cost"]["total_cost"]
    return cost


def _search_item(answer: Answer) -> dict[str, Any]:
    return {"type": "search_results", "queries": list(answer.queries), "results": _results(answer)}


def _message_item(item_id: str, text: str | None, status: str) -> dict[str, Any]:
    content = [] if text is None else [{"type": "output_text", "text": text, "annotations": []}]
    return {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": status,
        "content": content,
    }


def _output(answer: Answer, message_id: str, style: CitationStyle) -> list[dict[str, Any]]:
    items = [_search_item(answer)] if answer.queries else []
    if answer.deep:
        items.append({"type": "fetch_url_results", "contents": _fetched(answer)})
    items.append(_message_item(message_id, cite(answer.text, answer.sources, style), "completed"))
    return items


def response_object(
    ident: str,
    request: AgentRequest,
    created: int,
    *,
    status: str,
    answer: Answer | None = None,
    completed: int | None = None,
    style: CitationStyle = "numbered",
) -> dict[str, Any]:
    """A ``response`` object; ``output`` is empty and ``usage`` absent until there is an answer."""
    payload: dict[str, Any] = {
        "id": ident,
        "object": "response",
        "created_at": created,
        "status": status,
        "model": request.model,
        "background": request.background,
        "store": request.store,
        "error": None,
        "incomplete_details": None,
        "output": [],
    }
    for key in ("preset", "effort"):
        if getattr(request, key) is not None:
            payload[key] = getattr(request, key)
    if answer is not None:
        payload["output"] = _output(answer, "msg_" + ident.removeprefix("resp_"), style)
        payload["usage"] = _usage(request, answer)
        payload["completed_at"] = completed if completed is not None else created
        if answer.truncated:
            payload["status"] = "incomplete"
            payload["incomplete_details"] = {"reason": "max_output_tokens"}
    return payload


_FAILURE = {
    "code": "server_error",
    "type": "server_error",
    "message": "The simulated run failed (injected agent_failed fault). Retry the request.",
}


def requires_action_response(
    ident: str, request: AgentRequest, created: int, answer: Answer
) -> dict[str, Any]:
    """A run that stopped to wait for an action (an injected ``requires_action`` fault): its
    searches in ``output`` and their usage, no message."""
    payload = response_object(ident, request, created, status="requires_action")
    payload["output"] = [_search_item(answer)] if answer.queries else []
    payload["usage"] = _usage(request, answer, written=False)
    return payload


def failed_response(ident: str, request: AgentRequest, created: int) -> dict[str, Any]:
    """A run that failed: HTTP 200 with ``status: failed`` and an ``error``."""
    payload = response_object(ident, request, created, status="failed")
    payload["error"] = dict(_FAILURE)
    return payload


def cancelled_event(ident: str, request: AgentRequest, created: int, sequence: int) -> bytes:
    """The frame that ends a stream whose run was cancelled (no usage: the cost is unknown)."""
    response = response_object(ident, request, created, status="cancelled")
    return sse_event(
        {"type": "response.cancelled", "response": response, "sequence_number": sequence}
    )


def _research(answer: Answer, skills: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    """The ``response.reasoning.*`` events: the skills loaded, one search round per query, then
    page reads."""
    events: list[dict[str, Any]] = [
        {"type": "response.reasoning.started", "thought": "Planning the searches."},
        *({"type": "response.skill.loaded", "name": name} for name in skills),
    ]
    results = _results(answer)
    rounds = len(answer.queries)
    size = -(-len(results) // rounds) if results else 0
    for n, query in enumerate(answer.queries):
        events.append(
            {
                "type": "response.reasoning.search_queries",
                "queries": [query],
                "thought": f"Searching for {query}.",
            }
        )
        events.append(
            {
                "type": "response.reasoning.search_results",
                "results": results[n * size : (n + 1) * size],
            }
        )
    fetched = _fetched(answer)
    if fetched:
        urls = [page["url"] for page in fetched]
        events.append(
            {
                "type": "response.reasoning.fetch_url_queries",
                "urls": urls,
                "thought": f"Reading {len(urls)} pages in full.",
            }
        )
        events.append({"type": "response.reasoning.fetch_url_results", "contents": fetched})
    events.append({"type": "response.reasoning.stopped", "thought": "Writing the answer."})
    return events


def research_frames(answer: Answer, skills: tuple[str, ...] = ()) -> int:
    """How many frames of a run's stream come before its output: ``response.created``,
    ``response.in_progress`` and the reasoning (and skill) events."""
    return 2 + len(_research(answer, skills))


def agent_events(
    ident: str,
    request: AgentRequest,
    answer: Answer,
    created: int,
    pieces: int,
    *,
    failed: bool = False,
    requires_action: bool = False,
    style: CitationStyle = "numbered",
) -> list[bytes]:
    """The typed SSE frames of a run, ``sequence_number`` rising from 0, one terminal event
    (a run that stops ``requires_action`` ends with ``response.completed`` carrying that
    status: the turn is over, the run waits)."""
    pending = response_object(ident, request, created, status="in_progress")
    events: list[dict[str, Any]] = [
        {"type": "response.created", "response": pending},
        {"type": "response.in_progress", "response": pending},
        *_research(answer, request.skills),
    ]
    if failed:
        events.append({"type": "response.failed", "error": dict(_FAILURE)})
    elif requires_action:
        waiting = requires_action_response(ident, request, created, answer)
        events.append({"type": "response.completed", "response": waiting})
    if failed or requires_action:
        return [sse_event({**event, "sequence_number": n}) for n, event in enumerate(events)]
    final = response_object(ident, request, created, status="completed", answer=answer, style=style)
    *sources, message = final["output"]
    for index, item in enumerate(sources):
        events.append({"type": "response.output_item.added", "output_index": index, "item": item})
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    index = len(sources)
    text = message["content"][0]["text"]
    events.append(
        {
            "type": "response.output_item.added",
            "output_index": index,
            "item": _message_item(message["id"], None, "in_progress"),
        }
    )
    where = {"item_id": message["id"], "output_index": index, "content_index": 0}
    for piece in text_pieces(text, pieces):
        events.append({"type": "response.output_text.delta", **where, "delta": piece})
    events.append({"type": "response.output_text.done", **where, "text": text})
    events.append({"type": "response.output_item.done", "output_index": index, "item": message})
    terminal = "response.incomplete" if final["status"] == "incomplete" else "response.completed"
    events.append({"type": terminal, "response": final})
    return [sse_event({**event, "sequence_number": n}) for n, event in enumerate(events)]
