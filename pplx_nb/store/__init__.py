"""Conversations on disk: :class:`ConversationStore` over a pluggable backend.

``conversation-logs/<id>/conversation.json`` is the single source of truth, shared by notebooks,
background workers and the MCP server; writes are atomic and appends serialised by a lock.
"""

from __future__ import annotations

from pplx_nb.store._base import StoreBackend
from pplx_nb.store._file import FileBackend
from pplx_nb.store._store import ConversationStore

__all__ = ["ConversationStore", "FileBackend", "StoreBackend"]
