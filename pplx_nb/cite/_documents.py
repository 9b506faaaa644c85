"""A store's conversations read for their references alone.

Exporting a whole store reads every stored document; building the full pydantic models of every
message (usage, costs, files ...) cost more than everything else an export does. References
need a few fields of each answer: its text, date and sources (URL, title, date, search-result
ids), and whether it closes an unanswered question. Those are read from the plain documents
:meth:`ConversationStore.documents` yields; a document or message whose fields are not the
types the models hold is read through the models, so it gets what they give it (their value,
or their error).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

from pplx_nb._models import Conversation, Message
from pplx_nb._references import Citing, answer_citing, cited_in, conversation_cites

__all__ = ["Stored", "cycles_uncollected", "stored_cites"]


class Stored(NamedTuple):
    """One stored conversation as its references see it: its id, when it was created, and the
    sources of each of its answers."""

    conversation_id: str
    created_at: str
    answers: list[Citing]


class _Page(NamedTuple):
    """A stored source, as much of it as a reference reads."""

    url: str
    title: str | None
    date: str | None
    ids: list[int] | None


def stored_cites(conversation_id: str, document: dict[str, Any]) -> Stored:
    """The conversation ``document`` (as the store keeps it) and its answers' sources."""
    created = document.get("createdAt")
    if type(document.get("conversationId")) is not str or type(created) is not str:
        conversation = Conversation.model_validate(document)
        answers = list(conversation_cites(conversation))
        return Stored(conversation.conversation_id, conversation.created_at, answers)
    answers = []
    for turn, message in enumerate(document["messages"]):
        # The store checked every message's role and content.
        if message.get("sources") and message["role"] == "assistant":
            citing = _citing(conversation_id, turn, message)
            if citing is not None:
                answers.append(citing)
    return Stored(document["conversationId"], created, answers)


def _citing(conversation_id: str, turn: int, message: dict[str, Any]) -> Citing | None:
    if message.get("unanswered") is not None:
        return None  # a question left without an answer cites nothing
    sources = message["sources"]
    accessed = message.get("timestamp")
    pages = _pages(sources) if type(sources) is list else None
    if pages is None or not (accessed is None or type(accessed) is str):
        return cited_in(conversation_id, turn, Message.model_validate(message))
    return answer_citing(conversation_id, turn, pages, message["content"], accessed)


def _pages(sources: list[Any]) -> Sequence[_Page] | None:
    """``sources`` as pages, or ``None`` when one is not what a :class:`Source` holds."""
    pages = []
    for source in sources:
        if type(source) is not dict:
            return None
        url, title, date = source.get("url"), source.get("title"), source.get("date")
        ids = source.get("ids")
        if (
            type(url) is not str
            or (title is not None and type(title) is not str)
            or (date is not None and type(date) is not str)
            or (ids is not None and not (type(ids) is list and all(type(i) is int for i in ids)))
        ):
            return None
        pages.append(_Page(url, title, date, ids))
    return pages


@contextmanager
def cycles_uncollected() -> Iterator[None]:
    """Python's cycle collector paused while a store's documents are read.

    Decoding thousands of documents allocates millions of dicts and lists, and the collector,
    run after every 700 allocations, walks what is alive again and again: a fifth of an
    export's time. Decoded JSON holds no cycles, so nothing waits for it; it runs again after.
    """
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()
