"""Where a notebook output came from: the record a magic puts in its display data.

Every answer a magic shows carries ``metadata["pplx_nb"]`` (:func:`record`): the conversation and
turn it is stored as, what the API said about it (response id, model, cost), what was asked
(query, reformulated query, effort), the sources, and a SHA-256 of the answer text. JupyterLab
saves display metadata in the ``.ipynb``, so :mod:`pplx_nb.provenance` can later tell whether the
answer is still in the store unchanged.
"""

from __future__ import annotations

import hashlib
from typing import NotRequired, TypedDict

from pplx_nb._models import Conversation, Message
from pplx_nb._redact import url_without_credentials

__all__ = [
    "METADATA_KEY",
    "Provenance",
    "WebProvenance",
    "answer_hash",
    "find_turn",
    "record",
    "web_record",
]

METADATA_KEY = "pplx_nb"


class Provenance(TypedDict):
    """The ``metadata["pplx_nb"]`` of an answer's output (JSON, camelCase as the store is)."""

    conversationId: str
    turn: int
    answerSha256: str
    createdAt: str | None
    model: str | None
    query: str | None
    reformulatedQuery: str | None
    costUsd: float | None
    sources: list[str]
    version: str
    responseId: NotRequired[str]
    effort: NotRequired[str]


class WebProvenance(TypedDict):
    """The ``metadata["pplx_nb"]`` of web results (no answer; a conversation when saved)."""

    query: str
    createdAt: str
    sources: list[str]
    version: str
    conversationId: NotRequired[str]


def web_record(query: str, urls: list[str], conversation_id: str | None) -> WebProvenance:
    """The provenance of Search API results shown now."""
    from pplx_nb import __version__
    from pplx_nb._models import now_iso

    found: WebProvenance = {
        "query": query,
        "createdAt": now_iso(),
        "sources": [url_without_credentials(url) for url in urls],
        "version": __version__,
    }
    if conversation_id:
        found["conversationId"] = conversation_id
    return found


def answer_hash(text: str) -> str:
    """The SHA-256 of an answer's text (UTF-8), as hex."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def find_turn(conversation: Conversation, text: str) -> int | None:
    """The position of the newest assistant message whose text is ``text``."""
    for index in range(len(conversation.messages) - 1, -1, -1):
        message = conversation.messages[index]
        answered = message.role == "assistant" and message.unanswered is None
        if answered and text in (message.content, message.answer_text):
            return index
    return None


def _question(conversation: Conversation, turn: int) -> Message | None:
    for index in range(turn - 1, -1, -1):
        if conversation.messages[index].role == "user":
            return conversation.messages[index]
    return None


def record(
    conversation: Conversation,
    turn: int,
    *,
    response_id: str | None = None,
    effort: str | None = None,
) -> Provenance:
    """The provenance of the answer stored at ``turn`` of ``conversation``."""
    from pplx_nb import __version__

    message = conversation.messages[turn]
    question = _question(conversation, turn)
    found: Provenance = {
        "conversationId": conversation.conversation_id,
        "turn": turn,
        "answerSha256": answer_hash(message.content),
        "createdAt": message.timestamp,
        "model": message.model,
        "query": question.content if question else None,
        "reformulatedQuery": question.reformulated_query if question else None,
        "costUsd": message.cost.total_cost if message.cost else None,
        # The .ipynb is shared: a source's user:password@ or token never goes in it.
        "sources": [url_without_credentials(source.url) for source in message.sources or []],
        "version": __version__,
    }
    if response_id:
        found["responseId"] = response_id
    effort = effort or message.effort
    if effort:
        found["effort"] = effort
    return found
