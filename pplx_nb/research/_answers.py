"""Answer <-> Message: an API answer as the assistant turn stored for it, and back again."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from pydantic.alias_generators import to_camel, to_snake

from pplx_nb._errors import PplxError, error_from_code
from pplx_nb._models import Answer, Conversation, Message, now_iso
from pplx_nb._pricing import storable_cost

__all__ = ["assistant_message", "priced", "stored_answer"]


def priced(answer: Answer, model: str) -> Answer:
    """``answer`` with its cost estimated from its usage when the API did not report one
    (the static prices; the client estimates first, with the API's). Without usage the cost
    stays unknown: ``None``, never a made-up 0.

    The last step before a paid answer is stored, so it never fails and never leaves a cost
    that cannot be stored: a reported cost that is not a finite number is estimated instead,
    and an estimate that cannot be made leaves the cost unknown.
    """
    answer.cost = storable_cost(answer.cost, answer.model or model, answer.usage)
    return answer


def assistant_message(
    answer: Answer,
    *,
    tool: str,
    model: str,
    notes: Sequence[str] = (),
    show_thinking: bool = False,
    job_id: str | None = None,
) -> Message:
    """The assistant turn that stores ``answer`` (``job_id``: the job whose report it is).

    ``model`` is the one asked, kept when the API does not say which answered; the reasoning is
    kept only when ``show_thinking`` asked for it.
    """
    return Message(
        role="assistant",
        content=answer.text,
        timestamp=now_iso(),
        tool=tool,
        model=answer.model or model,
        sources=answer.sources or None,
        usage=answer.usage,
        cost=answer.cost,
        related_questions=answer.related_questions or None,
        thinking=answer.thinking if show_thinking else None,
        images=[_rekeyed(image, to_camel) for image in answer.images] or None,
        notes=list(notes) or None,
        effort=answer.effort,
        preset=answer.preset,
        job_id=job_id,
    )


def stored_answer(
    conversation: Conversation,
    path: str,
    job_id: str | None = None,
    *,
    turn: Message | None = None,
) -> Answer:
    """The conversation's last answer as an :class:`Answer` (``path``: where it is stored).

    With ``job_id``, the answer that job stored (tagged ``jobId``) when there is one: the
    conversation may have moved on with follow-ups since the job ended. With ``turn``, that
    stored assistant turn (the questions before it are read from the conversation).
    """
    message = _job_answer(conversation, job_id) if job_id else None
    message = message or _same_turn(conversation, turn) or conversation.last_answer()
    if message is None:
        raise PplxError(
            f"Conversation {conversation.conversation_id} has no answer yet. "
            "Follow up to ask again."
        )
    closed = message.unanswered
    if closed is not None:
        # Its last question got no answer: say why, rather than pass the notice off as one.
        raise error_from_code(
            closed.code or PplxError.code,
            closed.message or message.content,
            conversation_id=conversation.conversation_id,
        )
    return Answer(
        text=message.answer_text,
        sources=message.sources or [],
        related_questions=message.related_questions or [],
        images=[_rekeyed(image, to_snake) for image in message.images or ()],
        thinking=message.reasoning,
        model=message.model,
        usage=message.usage,
        cost=message.cost,
        conversation_id=conversation.conversation_id,
        conversation_path=path,
        reformulated_query=_previous_user(conversation, message),
        notes=list(message.notes or ()),
        effort=message.effort,
        preset=message.preset,
    )


def _previous_user(conversation: Conversation, answer: Message) -> str | None:
    index = conversation.messages.index(answer)
    for message in reversed(conversation.messages[:index]):
        if message.role == "user":
            return message.reformulated_query
    return None


def _job_answer(conversation: Conversation, job_id: str) -> Message | None:
    return next(
        (
            message
            for message in reversed(conversation.messages)
            if message.role == "assistant" and message.job_id == job_id
        ),
        None,
    )


def _same_turn(conversation: Conversation, turn: Message | None) -> Message | None:
    """The stored message equal to ``turn`` (the copy the conversation holds), if any."""
    return next((message for message in conversation.messages if message == turn), None)


def _rekeyed(image: dict[str, Any], convert: Callable[[str], str]) -> dict[str, Any]:
    """An image record with its keys converted: camelCase on disk, snake_case in Answer."""
    return {convert(key): value for key, value in image.items()}
