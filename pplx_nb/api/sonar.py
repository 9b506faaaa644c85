"""The Sonar protocol: ``POST /chat/completions`` (Perplexity Sonar, or any OpenAI-compatible
server).

Background runs use Sonar's async API: ``POST /async/chat/completions`` and
``GET /async/chat/completions/{id}``.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, field_validator
from typing_extensions import TypedDict

from pplx_nb._errors import APIServerError, RemoteRunFailed
from pplx_nb._models import Answer
from pplx_nb.api._activity import Activity
from pplx_nb.api._adapter import (
    Call,
    SearchResults,
    encode,
    no_answer,
    read_wire,
    stream_cut_short,
)
from pplx_nb.api._names import sonar_name
from pplx_nb.api._sse import Event
from pplx_nb.api._text import DeltaFilter, split_think
from pplx_nb.api.request import Request

__all__ = ["SonarAdapter"]


class _Cost(TypedDict, total=False):
    input_tokens_cost: float | None
    output_tokens_cost: float | None
    request_cost: float | None
    total_cost: float | None


class _Usage(TypedDict, total=False):
    prompt_tokens: int | None
    completion_tokens: int | None
    total_tokens: int | None
    reasoning_tokens: int | None
    citation_tokens: int | None
    num_search_queries: int | None
    search_context_size: str | None
    cost: _Cost | None


class _Text(BaseModel):
    content: str | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _join_parts(cls, value: Any) -> Any:
        """OpenAI-compatible servers may send content as a list of typed parts."""
        if not isinstance(value, list):
            return value
        return "".join(
            part["text"]
            for part in value
            if isinstance(part, dict)
            and part.get("type") == "text"
            and isinstance(part.get("text"), str)
        )


class _Choice(BaseModel):
    message: _Text | None = None
    delta: _Text | None = None
    finish_reason: str | None = None


class _Error(BaseModel):
    message: str | None = None


class _Completion(BaseModel):
    id: str | None = None
    model: str | None = None
    object: str | None = None
    choices: list[_Choice] = []
    citations: list[str | None] | None = None
    search_results: SearchResults | None = None
    related_questions: list[str] | None = None
    images: list[dict[str, Any]] | None = None
    usage: _Usage | None = None
    error: _Error | str | None = None


class _AsyncRun(BaseModel):
    id: str
    status: str
    error_message: str | None = None
    response: _Completion | None = None


def _sources(completion: _Completion) -> list[Any]:
    if completion.search_results:
        return completion.search_results
    return [{"url": url} for url in completion.citations or () if url]


def _usage(usage: _Usage | None) -> tuple[dict[str, Any] | None, dict[str, float] | None]:
    if usage is None:
        return None, None
    counts: dict[str, Any] = {k: v for k, v in usage.items() if v is not None}
    cost = counts.pop("cost", None)
    if cost is None:
        return counts, None
    return counts, {
        "input_cost": cost.get("input_tokens_cost") or 0.0,
        "output_cost": cost.get("output_tokens_cost") or 0.0,
        "request_cost": cost.get("request_cost") or 0.0,
        "total_cost": cost.get("total_cost") or 0.0,
    }


def _answer(completion: _Completion, content: str, finish_reason: str | None, model: str) -> Answer:
    """One validation pass builds the Answer with its sources, usage and cost."""
    text, thinking = split_think(content)
    usage, cost = _usage(completion.usage)
    return Answer.model_validate(
        {
            "text": text,
            "thinking": thinking,
            "sources": _sources(completion),
            "related_questions": completion.related_questions or [],
            "images": completion.images or [],
            "model": completion.model or model,
            "usage": usage,
            "cost": cost,
            "response_id": completion.id,
            "finish_reason": finish_reason,
        }
    )


def _complete_answer(completion: _Completion, model: str) -> Answer:
    """The answer in a whole (not streamed) completion: its first choice's message."""
    choice = completion.choices[0] if completion.choices else None
    if choice is None or choice.message is None:
        raise no_answer()
    return _answer(completion, choice.message.content or "", choice.finish_reason, model)


def _error_text(error: _Error | str | None) -> str:
    if isinstance(error, _Error):
        return error.message or "unknown error"
    return error or "unknown error"


_ENVELOPE = ("id", "model", "citations", "search_results", "related_questions", "images", "usage")


class _SonarStream:
    """Accumulates chat-completion chunks until a ``finish_reason``, a done object or ``[DONE]``."""

    activity: Activity | None = None
    """Chat completions report no reasoning steps."""

    def __init__(self, request: Request, model: str) -> None:
        self._model = model
        self._filter = DeltaFilter()
        self._parts: list[str] = []
        self._last: _Completion | None = None
        self._finish: str | None = None
        self._ended = False

    def feed(self, event: Event) -> str:
        if event.data.strip() == "[DONE]":
            self._ended = True
            return ""
        chunk = read_wire(_Completion, event.data, "a stream chunk")
        if event.name == "error" or chunk.error is not None:
            raise APIServerError(
                f"The API reported an error mid-stream: {_error_text(chunk.error)}. Retry the "
                "question."
            )
        self._merge(chunk)
        if chunk.object == "chat.completion.done":
            self._ended = True
        if not chunk.choices:
            return ""
        choice = chunk.choices[0]
        if choice.finish_reason is not None:
            self._finish = choice.finish_reason
            self._ended = True
        piece = choice.delta.content if choice.delta is not None else None
        if not piece and self._ended and not self._parts and choice.message is not None:
            piece = choice.message.content  # a server that sends the whole text only at the end
        if not piece:
            return ""
        self._parts.append(piece)
        return self._filter.feed(piece)

    def _merge(self, chunk: _Completion) -> None:
        """Keep the newest value of each envelope field; not every chunk repeats them all."""
        if self._last is None:
            self._last = chunk
            return
        for name in _ENVELOPE:
            value = getattr(chunk, name)
            if value is not None:
                setattr(self._last, name, value)

    def finish(self) -> Answer:
        if not self._ended or self._last is None:
            raise stream_cut_short()
        return _answer(self._last, "".join(self._parts), self._finish, self._model)


class SonarAdapter:
    """Chat completions, as Perplexity's Sonar API and OpenAI-compatible servers speak them."""

    style = "sonar"

    def _body(self, request: Request, model: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": sonar_name(request.tier(model)),
            "messages": request.messages,
        }
        body.update(request.filters())
        if request.search_mode is not None:
            body["search_mode"] = request.search_mode
        if request.return_related_questions:
            body["return_related_questions"] = True
        if request.return_images:
            body["return_images"] = True
        if request.reasoning_effort is not None:
            body["reasoning_effort"] = request.reasoning_effort
        if request.search_context_size is not None:
            body["web_search_options"] = {"search_context_size": request.search_context_size}
        if request.max_tokens is not None:
            body["max_tokens"] = request.max_tokens
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.disable_search:
            body["disable_search"] = True
        return body

    def chat(self, request: Request, model: str, *, stream: bool) -> Call:
        """``POST /chat/completions``."""
        body = self._body(request, model)
        if stream:
            body["stream"] = True
        return Call("POST", "/chat/completions", encode(body))

    def parse(self, raw: bytes, request: Request, model: str) -> Answer:
        """The answer in a ``chat.completion`` body."""
        completion = read_wire(_Completion, raw, "a response")
        if completion.error is not None and not completion.choices:
            raise APIServerError(
                f"The API answered with an error: {_error_text(completion.error)}. Retry."
            )
        return _complete_answer(completion, model)

    def stream_parser(self, request: Request, model: str) -> _SonarStream:
        """A parser for ``chat.completion.chunk`` events."""
        return _SonarStream(request, model)

    def submit(self, request: Request, model: str) -> Call:
        """``POST /async/chat/completions`` with the chat body under ``request``."""
        return Call(
            "POST", "/async/chat/completions", encode({"request": self._body(request, model)})
        )

    def submitted(self, raw: bytes) -> str:
        """The async request id."""
        return read_wire(_AsyncRun, raw, "an async request").id

    def poll(self, remote_id: str) -> Call:
        """``GET /async/chat/completions/{id}``."""
        return Call("GET", f"/async/chat/completions/{quote(remote_id, safe='')}")

    def cancel(self, remote_id: str) -> None:
        """``None``: Sonar's async API has no cancel endpoint."""
        return None

    def polled(self, raw: bytes, *, related: bool = False) -> Answer | None:
        """``None`` while CREATED / IN_PROGRESS; the answer once COMPLETED.

        ``related`` is unused: Sonar returns related questions in their own field.
        """
        run = read_wire(_AsyncRun, raw, "an async request")
        status = run.status.upper()
        if status in ("CREATED", "IN_PROGRESS", "QUEUED", "PENDING"):
            return None
        if status == "COMPLETED" and run.response is not None:
            return _complete_answer(run.response, run.response.model or "")
        reason = run.error_message or f"status {run.status}"
        raise RemoteRunFailed(
            f"The background research run {run.id} failed: {reason}. Start it again.",
            request_id=run.id,
        )
