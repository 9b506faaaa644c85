"""A Conversation whose messages are validated on first use.

``ConversationStore.append`` returns one: validating a 1,000-message history through pydantic
costs more than the append itself, and most callers only read the id, count and path. Anything
that touches the messages or the model's state (``.messages``, dumping, copying, comparing,
pickling, ``repr``, and setting a field) goes through ``__dict__`` or ``messages`` and validates
them first, so the object behaves exactly like a loaded :class:`Conversation`.
"""

from __future__ import annotations

from typing import Any

from pydantic import PrivateAttr

from pplx_nb._models import Conversation

__all__ = ["LazyConversation"]

_FIELDS = tuple(Conversation.model_fields)


class LazyConversation(Conversation):
    """A :class:`Conversation` built from a stored document, its messages validated on demand."""

    _document: bytes = PrivateAttr(default=b"")

    @classmethod
    def from_header(
        cls, header: dict[str, Any], document: bytes, path: str | None
    ) -> LazyConversation:
        """The conversation of ``document``, validating only ``header`` (its non-message keys)."""
        conversation = cls.model_validate({**header, "messages": []})
        conversation.path = path
        conversation._document = document
        del object.__getattribute__(conversation, "__dict__")["messages"]
        return conversation

    def __getattribute__(self, name: str) -> Any:
        if name == "messages" or name == "__dict__":
            state = object.__getattribute__(self, "__dict__")
            if "messages" not in state:
                _materialize(self, state)
        return object.__getattribute__(self, name)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Conversation):
            return NotImplemented
        return (
            self.__dict__ == other.__dict__ and self.__pydantic_extra__ == other.__pydantic_extra__
        )

    __hash__ = None  # type: ignore[assignment]


def _materialize(conversation: LazyConversation, state: dict[str, Any]) -> None:
    private = object.__getattribute__(conversation, "__pydantic_private__")
    messages = Conversation.model_validate_json(private["_document"]).messages
    rest = dict(state)
    state.clear()
    for name in _FIELDS:
        if name == "messages":
            state[name] = messages
        elif name in rest:
            state[name] = rest.pop(name)
    state.update(rest)
    private["_document"] = b""
