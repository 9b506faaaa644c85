"""What a protocol adapter provides to the client: request bodies in, answers out.

The client owns HTTP, retries, timeouts and the cache; an adapter only knows its wire format.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, Protocol, Required, TypeVar

from pydantic import BaseModel, BeforeValidator, ValidationError
from typing_extensions import TypedDict

from pplx_nb._errors import APIServerError, NetworkError, not_unicode
from pplx_nb._models import Answer
from pplx_nb.api._sse import Event
from pplx_nb.api.request import Request
from pplx_nb.api.retry import UNREADABLE

if TYPE_CHECKING:
    from pplx_nb.api._activity import Activity

__all__ = [
    "Adapter",
    "Call",
    "SearchResult",
    "SearchResults",
    "StreamParser",
    "encode",
    "no_answer",
    "read_wire",
    "stream_cut_short",
]

M = TypeVar("M", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class Call:
    """An HTTP request to make: method, path (relative to the base URL) and JSON body bytes."""

    method: str
    path: str
    body: bytes | None = None


def encode(payload: dict[str, Any]) -> bytes:
    """Canonical compact JSON (sorted keys), so equal requests give equal bytes."""
    text = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    try:
        return text.encode()
    except UnicodeEncodeError:
        raise not_unicode("The request") from None


def read_wire(model: type[M], raw: bytes | str, what: str) -> M:
    """Parse ``raw`` into the lean wire ``model``; an unreadable body is an APIServerError."""
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        problem = exc.errors(include_url=False, include_input=False)[:1]
    # Raised outside the handler, chained to nothing: pydantic's error keeps the raw body as
    # its input_value, and a server (a proxy) may have echoed the API key into it.
    raise APIServerError(
        f"The API sent {what} that pplx_nb cannot read ({problem}). Check that "
        "PERPLEXITY_BASE_URL and PERPLEXITY_API_STYLE point at a compatible server.",
        reason=UNREADABLE,
    )


class SearchResult(TypedDict, total=False):
    """One search result as both protocols send it; validated into a Source by the Answer.

    ``id`` (Agent API, from 1) is what the answer's ``[n]`` markers name.
    """

    url: Required[str]
    id: int
    title: str | None
    date: str | None
    snippet: str | None
    last_updated: str | None


def _usable(result: Any) -> Any:
    """``result`` without an ``id`` that is not a whole number (it could name no marker)."""
    if not isinstance(result, dict) or "id" not in result:
        return result
    ident = result["id"]
    if isinstance(ident, int) and not isinstance(ident, bool):
        return result
    return {key: value for key, value in result.items() if key != "id"}


def _with_url(results: Any) -> Any:
    """Drop results without a URL: there is nothing to cite (``url: null`` does happen)."""
    if not isinstance(results, list):
        return results
    return [_usable(r) for r in results if not isinstance(r, dict) or isinstance(r.get("url"), str)]


SearchResults = Annotated[list[SearchResult], BeforeValidator(_with_url)]
"""A ``search_results`` list; entries without a URL are skipped, unusable ids dropped."""


def stream_cut_short() -> NetworkError:
    """The error for a stream that ended before its terminal event or chunk."""
    return NetworkError(
        "The answer stream ended before the API finished it; the answer would be incomplete. "
        "Retry the question."
    )


def no_answer() -> APIServerError:
    """The error for a successful response that holds no answer (``{}``, no choices)."""
    return APIServerError(
        "The API sent a response that held no answer. Check that PERPLEXITY_BASE_URL points at "
        "the Perplexity API or a compatible server, then retry."
    )


class StreamParser(Protocol):
    """Consumes one streamed response, event by event."""

    @property
    def activity(self) -> Activity | None:
        """What the run is doing, from its reasoning events (``None``: nothing reported)."""
        ...

    def feed(self, event: Event) -> str:
        """Answer text that this event adds (``""`` for none); raises on an error event."""
        ...

    def finish(self) -> Answer:
        """The complete answer; raises NetworkError if the stream ended before its terminal."""
        ...


class Adapter(Protocol):
    """One protocol: how a :class:`Request` goes on the wire and how answers come back."""

    style: str

    def chat(self, request: Request, model: str, *, stream: bool) -> Call:
        """The call asking ``request`` with ``model``."""
        ...

    def parse(self, raw: bytes, request: Request, model: str) -> Answer:
        """The answer in a non-streaming response body; raises on a failed run."""
        ...

    def stream_parser(self, request: Request, model: str) -> StreamParser:
        """A parser for the events of a streamed answer to ``request``."""
        ...

    def submit(self, request: Request, model: str) -> Call:
        """The call starting ``request`` as a background run."""
        ...

    def submitted(self, raw: bytes) -> str:
        """The remote id in the response to :meth:`submit`."""
        ...

    def poll(self, remote_id: str) -> Call:
        """The call fetching a background run's state."""
        ...

    def polled(self, raw: bytes, *, related: bool = False) -> Answer | None:
        """The answer once the run has completed; ``None`` while queued or running.

        ``related``: the run's request asked for related questions.
        """
        ...

    def cancel(self, remote_id: str) -> Call | None:
        """The call cancelling a background run; ``None`` when the protocol has none."""
        ...
