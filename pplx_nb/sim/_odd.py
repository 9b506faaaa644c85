"""The ``odd`` fault: answers in shapes that are legal but unusual, to test lenient clients.

The APIs add fields and event types over time and OpenAI-compatible servers differ in details;
a client must read what it knows and skip the rest. Each function rewrites an already built
payload: ``null`` usage and cost fields, a search result without URL, output items and stream
events of unknown types whose fields are objects, and message content as a list of parts.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pplx_nb.sim._http import dumps, sse, sse_event, sse_payload

__all__ = ["odd_agent_body", "odd_agent_frames", "odd_chunk", "odd_completion"]

_NO_URL = {"title": "A result without a URL", "url": None, "snippet": "no link"}
_UNKNOWN_EVENTS = (
    {"type": "response.custom.progress", "delta": {"percent": 50}},
    {"type": "response.reasoning.step", "message": {"text": "Comparing sources."}},
)


def _odd_sources(payload: dict[str, Any]) -> None:
    if isinstance(payload.get("search_results"), list):
        payload["search_results"] = [*payload["search_results"], _NO_URL]
    if isinstance(payload.get("citations"), list):
        payload["citations"] = [*payload["citations"], None]


def odd_completion(body: bytes) -> bytes:
    """A ``chat.completion`` with content parts, a ``null`` cost field and a URL-less result."""
    payload = json.loads(body)
    _odd_sources(payload)
    message = payload["choices"][0]["message"]
    text = message["content"]
    half = len(text) // 2
    message["content"] = [
        {"type": "text", "text": text[:half]},
        {"type": "image_url", "image_url": {"url": "https://example.invalid/a.png"}},
        {"type": "text", "text": text[half:]},
    ]
    payload["usage"]["cost"] = {"input_tokens_cost": None, "total_cost": 0.001}
    return dumps(payload)


def odd_chunk(frame: bytes) -> bytes:
    """A ``chat.completion.chunk`` frame with ``null`` token counts and cost."""
    data = frame.removeprefix(b"data: ").strip()
    if data == b"[DONE]":
        return frame
    payload = json.loads(data)
    _odd_sources(payload)
    payload["usage"] = {**payload.get("usage", {}), "completion_tokens": None, "cost": None}
    return sse(payload)


def _odd_response(response: dict[str, Any]) -> dict[str, Any]:
    """A ``response`` object with unknown output items, a non-text part and ``null`` cost."""
    output = []
    for item in response.get("output", []):
        if item.get("type") == "search_results":
            item = {**item, "results": [*item["results"], _NO_URL]}
        elif item.get("type") == "message":
            image = {"type": "output_image", "url": "x", "text": {"alt": "a chart"}}
            item = {**item, "content": [image, *item["content"]]}
        output.append(item)
    unknown = [
        {"type": "reasoning", "content": "I thought about it.", "summary": []},
        {"type": "fetch_url_results", "contents": [{"url": "u", "text": "t"}], "results": "n/a"},
    ]
    odd = {**response, "output": [*unknown, *output]}
    if "usage" in odd:
        odd["usage"] = {**odd["usage"], "cost": None}
    return odd


def odd_agent_body(body: bytes) -> bytes:
    """A ``response`` body rewritten by :func:`_odd_response`."""
    return dumps(_odd_response(json.loads(body)))


def odd_agent_frames(frames: Sequence[bytes]) -> list[bytes]:
    """Agent stream events with unknown event types (object fields) before the real ones."""
    result = [sse_event(event) for event in _UNKNOWN_EVENTS]
    for frame in frames:
        event = sse_payload(frame)
        if isinstance(event.get("response"), dict):
            event["response"] = _odd_response(event["response"])
        result.append(sse_event(event))
    return result
