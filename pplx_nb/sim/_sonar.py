"""Sonar chat completions: request checks, the completion object and its streamed chunks."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any

from pplx_nb.sim._answers import Answer, Filters, sonar_usage
from pplx_nb.sim._http import sse
from pplx_nb.sim._validate import (
    Invalid,
    check_choice,
    check_filters,
    check_number,
    message_text,
)

__all__ = ["SONAR_MODELS", "ChatRequest", "completion", "completion_chunks", "parse_chat"]

SONAR_MODELS = ("sonar", "sonar-pro", "sonar-reasoning-pro", "sonar-deep-research")
_ROLES = ("system", "user", "assistant")
_WORDS = re.compile(r"\S+\s*")


@dataclass(frozen=True, slots=True)
class ChatRequest:
    """A validated chat-completions request: what the answer depends on."""

    model: str
    query: str
    prompt: str
    stream: bool
    max_tokens: int | None
    related: bool
    images: bool
    filters: Filters


def _check_roles(messages: list[Any]) -> list[tuple[str, str]]:
    if not isinstance(messages, list) or not messages:
        raise Invalid("messages must be a non-empty list", "messages")
    parsed: list[tuple[str, str]] = []
    for n, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in _ROLES:
            raise Invalid(f"messages[{n}].role must be one of {', '.join(_ROLES)}", "messages")
        parsed.append((message["role"], message_text(message.get("content"), f"messages[{n}]")))
    turns = [role for role, _ in parsed]
    while turns and turns[0] == "system":
        turns.pop(0)
    expected = ["user", "assistant"] * len(turns)
    if turns != expected[: len(turns)]:
        raise Invalid(
            "After the (optional) system message(s), user and assistant roles should be "
            "alternating.",
            "messages",
        )
    if not turns or turns[-1] != "user":
        raise Invalid("Last message must have role `user`.", "messages")
    if not parsed[-1][1].strip():
        raise Invalid("The last user message must not be empty.", "messages")
    return parsed


def parse_chat(data: dict[str, Any]) -> ChatRequest:
    """Validate a chat-completions body the way the real API does."""
    model = data.get("model")
    if model not in SONAR_MODELS:
        raise Invalid(
            f"Invalid model {model!r}. Permitted models: {', '.join(SONAR_MODELS)}.", "model"
        )
    messages = _check_roles(data.get("messages"))  # type: ignore[arg-type]
    check_number(data, "temperature", 0, 2)
    check_number(data, "top_p", 0, 1)
    check_number(data, "max_tokens", 1, 128_000, integer=True)
    check_choice(data, "search_mode", ("web", "academic", "sec"))
    check_choice(data, "reasoning_effort", ("minimal", "low", "medium", "high"))
    options = data.get("web_search_options")
    if options is not None:
        if not isinstance(options, dict):
            raise Invalid("web_search_options must be an object", "web_search_options")
        check_choice(options, "search_context_size", ("low", "medium", "high"))
    for flag in ("stream", "return_images", "return_related_questions"):
        if data.get(flag) is not None and not isinstance(data[flag], bool):
            raise Invalid(f"{flag} must be a boolean", flag)
    return ChatRequest(
        model=model,
        query=messages[-1][1],
        prompt="\n".join(text for _, text in messages),
        stream=bool(data.get("stream")),
        max_tokens=data.get("max_tokens"),
        related=bool(data.get("return_related_questions")),
        images=bool(data.get("return_images")),
        filters=Filters(check_filters(data)),
    )


def search_results(answer: Answer) -> list[dict[str, Any]]:
    """The ``search_results`` list, in citation order."""
    return [
        {
            "title": doc.title,
            "url": doc.url,
            "date": None,
            "last_updated": None,
            "snippet": text,
            "source": "web",
        }
        for doc, text in zip(answer.sources, answer.snippets, strict=True)
    ]


def _envelope(request: ChatRequest, answer: Answer, ident: str, created: int) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "id": ident,
        "model": request.model,
        "created": created,
        "citations": [doc.url for doc in answer.sources],
        "search_results": search_results(answer),
    }
    if answer.related:
        payload["related_questions"] = list(answer.related)
    if request.images:
        payload["images"] = []  # documentation pages come without pictures
    return payload


def completion(
    request: ChatRequest, answer: Answer, created: int, ident: str | None = None
) -> dict[str, Any]:
    """The non-streaming ``chat.completion`` object."""
    payload = _envelope(request, answer, ident or str(uuid.uuid4()), created)
    message = {"role": "assistant", "content": answer.content}
    payload["object"] = "chat.completion"
    payload["choices"] = [
        {
            "index": 0,
            "finish_reason": "length" if answer.truncated else "stop",
            "message": message,
            "delta": {"role": "assistant", "content": ""},
        }
    ]
    payload["usage"] = sonar_usage(request.model, request.prompt, answer, final=True)
    return payload


def text_pieces(text: str, pieces: int) -> list[str]:
    """``text`` cut at word boundaries into at most ``pieces`` parts that join back to it."""
    words = _WORDS.findall(text)
    if not words:
        return [text] if text else []
    size = max(1, -(-len(words) // max(1, pieces)))
    return ["".join(words[i : i + size]) for i in range(0, len(words), size)]


def completion_chunks(
    request: ChatRequest, answer: Answer, created: int, pieces: int
) -> list[bytes]:
    """The SSE frames of a streamed completion, ending with the final chunk and ``[DONE]``."""
    envelope = _envelope(request, answer, str(uuid.uuid4()), created)
    envelope["object"] = "chat.completion.chunk"
    running = sonar_usage(request.model, request.prompt, answer, final=False)
    frames: list[bytes] = []
    sent = ""
    for piece in text_pieces(answer.content, pieces):
        sent += piece
        chunk = dict(envelope)
        chunk["choices"] = [
            {
                "index": 0,
                "finish_reason": None,
                "delta": {"role": "assistant", "content": piece},
                "message": {"role": "assistant", "content": sent},
            }
        ]
        chunk["usage"] = running
        frames.append(sse(chunk))
    final = dict(envelope)
    final["choices"] = [
        {
            "index": 0,
            "finish_reason": "length" if answer.truncated else "stop",
            "delta": {"role": "assistant", "content": ""},
            "message": {"role": "assistant", "content": sent},
        }
    ]
    final["usage"] = sonar_usage(request.model, request.prompt, answer, final=True)
    frames.append(sse(final))
    frames.append(b"data: [DONE]\n\n")
    return frames
