"""A Conversation whose messages are validated on first use.

``ConversationStore.append`` returns one: validating a 1,000-message history through pydantic
costs more than the append itself, and most callers only read the id, count and path. The
history stays in its stored bytes, out of the instance's fields, until it is needed:

- reading ``.messages``: Python asks :meth:`~LazyConversation.__getattr__` only for an attribute
  that is missing, which the messages are until then;
- every operation on the whole model — dumping (the model serializer), comparing, copying,
  pickling, ``repr`` and iterating — validates them first, through the hook pydantic or Python
  offers for it.

Either way the messages are validated once and stored as a plain field, so from then on the
object is an ordinary :class:`Conversation` and behaves exactly like a loaded one.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pydantic
from pydantic import PrivateAttr, SerializerFunctionWrapHandler, model_serializer

from pplx_nb._models import Conversation
from pplx_nb.store._document import corrupted, first_problem

__all__ = ["LazyConversation"]

_FIELDS = tuple(Conversation.model_fields)


class LazyConversation(Conversation):
    """A :class:`Conversation` built from a stored document, its messages validated on demand."""

    _document: bytes = PrivateAttr(default=b"")
    _where: str = PrivateAttr(default="")

    @classmethod
    def from_header(
        cls, header: dict[str, Any], document: bytes, path: str | None, where: str
    ) -> LazyConversation:
        """The conversation of ``document``, validating only ``header`` (its non-message keys);
        ``where`` names the document in the CONVERSATION_CORRUPTED of messages that do not
        validate."""
        conversation = cls.model_validate({**header, "messages": []})
        conversation.path = path
        conversation._document = document
        conversation._where = where
        del vars(conversation)["messages"]
        return conversation

    def __getattr__(self, name: str) -> Any:
        if name == "messages":
            self._materialize()
            return vars(self)["messages"]
        return super().__getattr__(name)  # type: ignore[misc]

    def _materialize(self) -> None:
        """Validate the stored messages into the ``messages`` field (once), in field order."""
        state = vars(self)
        if "messages" in state:
            return
        try:
            messages = Conversation.model_validate_json(self._document).messages
        except pydantic.ValidationError as exc:
            raise corrupted(self.conversation_id, self._where, first_problem(exc)) from exc
        rest = dict(state)
        state.clear()
        for name in _FIELDS:
            if name == "messages":
                state[name] = messages
            elif name in rest:
                state[name] = rest.pop(name)
        state.update(rest)
        self._document = b""

    @model_serializer(mode="wrap")
    def _serialize(self, handler: SerializerFunctionWrapHandler) -> Any:
        self._materialize()
        return handler(self)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Conversation):
            return NotImplemented
        self._materialize()
        if isinstance(other, LazyConversation):
            other._materialize()
        return vars(self) == vars(other) and self.__pydantic_extra__ == other.__pydantic_extra__

    __hash__ = None  # type: ignore[assignment]

    def __getstate__(self) -> dict[Any, Any]:
        self._materialize()
        return super().__getstate__()

    def __copy__(self) -> LazyConversation:
        self._materialize()
        return super().__copy__()

    def __deepcopy__(self, memo: dict[int, Any] | None = None) -> LazyConversation:
        self._materialize()
        return super().__deepcopy__(memo)

    def __repr_args__(self) -> Any:
        self._materialize()
        return super().__repr_args__()

    def __iter__(self) -> Generator[tuple[str, Any], None, None]:
        self._materialize()
        yield from super().__iter__()
