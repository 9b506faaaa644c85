"""Conversations: :class:`ConversationStore` over a pluggable backend.

``conversation-logs/<id>/conversation.json`` (:class:`FileBackend`), or with ``PPLX_NB_STORE`` one
Redis database (:class:`RedisBackend`), is the single source of truth, shared by notebooks,
background workers and MCP servers; writes are atomic and appends serialised by a lock
(:class:`MemoryBackend` keeps them in this process, for tests). Where conversations live is a
:class:`StoreBackend`, given to the store by :func:`pplx_nb.backends.open_backends`; what the
store needs to know about jobs it asks through :class:`JobStates`, and never reads the job side's
files nor imports it. A question being answered
right now is marked in its conversation (:meth:`ConversationStore.mark_answering`,
:class:`AnsweringMarker`) under the conversation's lock (:meth:`ConversationStore.locked`).
"""

from __future__ import annotations

from pplx_nb.store._answering import AnsweringMarker
from pplx_nb.store._base import JobStates, StoreBackend
from pplx_nb.store._closing import Placed
from pplx_nb.store._file import FileBackend
from pplx_nb.store._memory import MemoryBackend
from pplx_nb.store._redis import RedisBackend
from pplx_nb.store._store import ConversationStore

__all__ = [
    "AnsweringMarker",
    "ConversationStore",
    "FileBackend",
    "JobStates",
    "MemoryBackend",
    "Placed",
    "RedisBackend",
    "StoreBackend",
]
