"""Closing a question no answer will come for, and storing the late answer of its job.

A question whose job ends without an answer is closed by a turn saying so
(:func:`~pplx_nb._models.closing_turn`), decided under the conversation's lock so that closing
twice closes once and an answer stored meanwhile is never followed by a closing turn. A report
that arrives after its job was cancelled (or failed: an attempt that lost its lease hands it
over) is paid for, so it takes the place of that turn.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pplx_nb._fs import validate_conversation_id
from pplx_nb._models import Message
from pplx_nb.store._base import StoreBackend
from pplx_nb.store._document import last_role, parse

__all__ = ["answer_closed", "close_question"]

AppendChecked = Callable[
    [str, Sequence[Message], Callable[[bytes], None], Callable[[], None] | None], object
]
"""The store's append with a ``check`` and a ``then`` (through the backend's ``append`` or
``append_locked``)."""


def close_question(
    backend: StoreBackend,
    append: AppendChecked,
    conversation_id: str,
    closing: Message,
    check: Callable[[bytes], None] | None = None,
    then: Callable[[], None] | None = None,
) -> bool:
    """Append ``closing`` through ``append`` if the conversation ends with a question that has
    no answer; return whether it did (:meth:`ConversationStore.close_question`)."""
    where = backend.document_location(conversation_id)

    def open_question(stored: bytes) -> None:
        if check is not None:
            check(stored)
        if last_role(stored, conversation_id, where) != "user":
            raise _Answered

    try:
        append(conversation_id, (closing,), open_question, then)
    except _Answered:
        return False
    return True


def answer_closed(
    backend: StoreBackend,
    appended: Callable[[bytes, str], object],
    conversation_id: str,
    answer: Message,
    job_id: str,
    check: Callable[[bytes], None] | None = None,
    then: Callable[[], None] | None = None,
) -> bool:
    """Store ``answer`` in place of the turn that closed the question of job ``job_id`` when it
    was cancelled or failed, or after that question while it is still open; return whether it did
    (:meth:`ConversationStore.answer_closed`). ``appended`` is the store's check that it can
    return the stored document."""
    where = backend.document_location(conversation_id)

    def place(stored: bytes) -> int:
        appended(stored, conversation_id)
        if check is not None:
            check(stored)
        messages = parse(stored, conversation_id, where)["messages"]
        for index in range(len(messages) - 1, -1, -1):
            if _closes(messages[index], job_id):
                return index
        # An open question is the job's only while no answer of another is on its way.
        last = messages[-1]["role"] if messages else None
        if last == "user" and backend.answering(conversation_id) is None:
            return len(messages)
        raise _Answered

    validate_conversation_id(conversation_id)
    try:
        backend.place(conversation_id, answer.to_json_dict(), where=place, then=then)
    except _Answered:
        return False
    return True


def _closes(message: Mapping[str, Any], job_id: str) -> bool:
    """Whether ``message`` is the turn that closed the question of job ``job_id`` when it was
    cancelled or failed."""
    unanswered = message.get("unanswered")
    return (
        message.get("closesJob") == job_id
        and isinstance(unanswered, dict)
        and unanswered.get("state") in ("cancelled", "failed")
    )


class _Answered(Exception):
    """The conversation's last question already has an answer (or it has none): nothing to close."""
