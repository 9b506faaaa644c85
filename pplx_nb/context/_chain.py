"""The history of a branch: a conversation and the ancestors it was forked from."""

from __future__ import annotations

from typing import Protocol

from pplx_nb._errors import ConversationCorrupted, ConversationNotFound
from pplx_nb._logging import get_logger
from pplx_nb._models import Conversation, Message

__all__ = ["MAX_CHAIN_DEPTH", "chain_messages"]

logger = get_logger("pplx_nb.context")

MAX_CHAIN_DEPTH = 20
"""How many ancestors a branch's history follows at most."""


class _Loader(Protocol):
    """What :func:`chain_messages` needs from a store: ``ConversationStore.load``."""

    def load(self, conversation_id: str) -> Conversation: ...


def _same(a: Message, b: Message) -> bool:
    return a.role == b.role and a.content == b.content and a.timestamp == b.timestamp


def _shared_prefix(history: list[Message], messages: list[Message]) -> int:
    count = 0
    for old, new in zip(history, messages, strict=False):
        if not _same(old, new):
            break
        count += 1
    return count


def _ancestry(store: _Loader, conversation_id: str, max_depth: int) -> list[Conversation]:
    """The conversation and its ancestors, newest first; a cycle is a corrupted store."""
    chain = [store.load(conversation_id)]
    seen = {conversation_id}
    while (parent := chain[-1].parent_conversation_id) is not None:
        if parent in seen:
            path = " → ".join([*(c.conversation_id for c in chain), parent])
            raise ConversationCorrupted(
                f"Conversation {conversation_id} has a cycle in its parentConversationId links "
                f"({path}). Remove the parentConversationId of one of them to repair the chain.",
                conversation_id=conversation_id,
                parent_conversation_id=parent,
            )
        if len(chain) > max_depth:
            logger.warning(
                "conversation %s: branch history stops after %d ancestors",
                conversation_id,
                max_depth,
            )
            break
        seen.add(parent)
        try:
            chain.append(store.load(parent))
        except ConversationNotFound:
            logger.warning("conversation %s: parent %s no longer exists", conversation_id, parent)
            break
    return chain


def chain_messages(
    store: _Loader, conversation_id: str, *, max_depth: int = MAX_CHAIN_DEPTH
) -> list[Message]:
    """The whole history of a branch, oldest ancestor first, each turn once.

    Follows ``parentConversationId`` up to ``max_depth`` ancestors. A child that starts with a
    copy of its parent's messages (what ``ConversationStore.fork`` writes) continues from where
    the copy ends, so copied turns are not repeated and turns the parent gained after the fork
    are not included; a child holding only its own turns is appended after the parent's. A
    missing ancestor ends the chain there; a cycle raises :class:`ConversationCorrupted`.
    """
    chain = _ancestry(store, conversation_id, max(0, max_depth))
    history: list[Message] = []
    for conversation in reversed(chain):
        own = list(conversation.messages)
        shared = _shared_prefix(history, own)
        if any(m.role != "system" for m in own[:shared]):
            history = history[:shared] + own[shared:]
        else:
            history = history + own[shared:] if history else own
    return history
