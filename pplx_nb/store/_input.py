"""What goes into the store, validated before any write: messages and a new conversation's
metadata."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

import pydantic
from pydantic.alias_generators import to_camel

from pplx_nb._errors import ValidationError
from pplx_nb._fs import validate_conversation_id
from pplx_nb._models import Message
from pplx_nb.store._document import SUMMARY_KEY, first_problem

__all__ = ["message_dicts", "stored_meta"]

_RESERVED = frozenset(
    ("conversationId", "createdAt", "updatedAt", "messageCount", "messages", SUMMARY_KEY)
)


def message_dicts(messages: Iterable[Message | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` as the JSON dicts the backend stores; VALIDATION_ERROR naming the first
    that is not a valid message."""
    result = []
    for number, message in enumerate(messages):
        if isinstance(message, Message):
            result.append(message.to_json_dict())
            continue
        if not isinstance(message, Mapping):
            raise ValidationError(
                f"Message {number} is a {type(message).__name__}; pass a Message or a dict "
                "like {'role': 'user', 'content': '...'}.",
            )
        try:
            result.append(Message.model_validate(message).to_json_dict())
        except pydantic.ValidationError as exc:
            raise ValidationError(
                f"Message {number} is invalid: {first_problem(exc)}. A message needs a role "
                "(system, user or assistant) and a string content.",
            ) from exc
    return result


def stored_meta(meta: Mapping[str, Any]) -> dict[str, Any]:
    """``create()``'s metadata as stored: camelCase keys, ``None`` values left out;
    VALIDATION_ERROR for a field the store sets itself or a value JSON cannot hold."""
    stored = {}
    for key, value in meta.items():
        name = to_camel(key)
        if name in _RESERVED:
            raise ValidationError(
                f"{key!r} is set by the store itself and cannot be passed to create().",
            )
        if name == "parentConversationId" and value is not None:
            validate_conversation_id(value)
        try:
            json.dumps(value)
        except (TypeError, ValueError) as exc:
            raise ValidationError(
                f"Metadata {key!r} must be JSON-serialisable (str, number, list, dict ...).",
            ) from exc
        if value is not None:
            stored[name] = value
    return stored
