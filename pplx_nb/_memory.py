"""The in-memory backend's one place: conversations and what is kept with them, in this process.

As a conversation-logs folder holds a folder per conversation, a :class:`MemorySpace` holds a
dict of named parts per conversation (``conversation.json``, ``status.json``, ``job.json``,
``.answering``: the names of :mod:`pplx_nb._layout`), each the bytes the file would hold, and a
lock per conversation that the store's appends and the job side's transitions both take. The
store's part (:mod:`pplx_nb.store._memory`) and the job side's (:mod:`pplx_nb.jobs._memory`)
share one space; :func:`pplx_nb.backends.open_backends` (``memory=True``) makes it. Nothing
outlives the process: it is for tests and one-process experiments, as httpx's ``MockTransport``.
"""

from __future__ import annotations

import threading

__all__ = ["MemorySpace"]


class MemorySpace:
    """Conversations by id, each a dict of part name to bytes, and their locks.

    Attributes:
        guard: held for any read or change of :attr:`folders` itself (a part written, a
            conversation added or removed), never while waiting for a conversation lock.
        folders: each conversation's parts by name, newest conversation last.
    """

    def __init__(self) -> None:
        self.guard = threading.Lock()
        self.folders: dict[str, dict[str, bytes]] = {}
        self._locks: dict[str, threading.Lock] = {}

    def __repr__(self) -> str:
        return f"MemorySpace(conversations={len(self.folders)})"

    def lock(self, conversation_id: str) -> threading.Lock:
        """The conversation's lock (not re-entrant, as the file and Redis locks are not)."""
        with self.guard:
            return self._locks.setdefault(conversation_id, threading.Lock())

    def get(self, conversation_id: str, part: str) -> bytes | None:
        """The part's bytes, or ``None`` without it (or without the conversation)."""
        with self.guard:
            return self.folders.get(conversation_id, {}).get(part)

    def put(self, conversation_id: str, part: str, data: bytes) -> bool:
        """Store the part of an existing conversation; False if the conversation is gone."""
        with self.guard:
            folder = self.folders.get(conversation_id)
            if folder is None:
                return False
            folder[part] = data
            return True

    def remove(self, conversation_id: str, part: str) -> None:
        """Remove the part, if it is there."""
        with self.guard:
            self.folders.get(conversation_id, {}).pop(part, None)

    def drop(self, conversation_id: str) -> None:
        """Remove the conversation, every part kept with it and its lock (ids are never used
        again, so a waiter on the old lock finds the conversation gone)."""
        with self.guard:
            self.folders.pop(conversation_id, None)
            self._locks.pop(conversation_id, None)

    def present(self, conversation_id: str) -> bool:
        """Whether the conversation exists."""
        with self.guard:
            return conversation_id in self.folders

    def ids(self) -> list[str]:
        """Every conversation id, in no particular order."""
        with self.guard:
            return list(self.folders)
