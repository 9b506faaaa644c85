"""The seams of :class:`ConversationStore`: where conversations live, and what it asks the job side.

A :class:`StoreBackend` stores JSON documents (the camelCase ``conversation.json`` shape) under
conversation ids and knows nothing about pydantic models; the façade validates what goes in and
builds models from what comes out. The file backend (:mod:`pplx_nb.store._file`), the Redis
backend (:mod:`pplx_nb.store._redis`: a hash and a list per conversation, a sorted set of ids, Lua
scripts for creates and appends) and the memory backend (:mod:`pplx_nb.store._memory`) implement
the same methods, the mark of a question being answered included (see
:mod:`pplx_nb.store._answering`). :class:`JobStates` is all the store needs from the job side
(``pplx_nb.jobs.JobSide`` implements it, and is handed in by whoever opens the backends): the
store never reads a job's files, nor imports the job side.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any, Protocol

from pplx_nb._errors import PplxError
from pplx_nb._models import JobState
from pplx_nb.store._answering import AnsweringMarker

__all__ = ["JobStates", "StoreBackend"]


class StoreBackend(Protocol):
    """What a conversation store backend implements. Every method validates the id first."""

    where: str
    """Where the conversations live, for users: the folder, the Redis URL without credentials,
    or ``memory``."""

    def create(self, messages: Sequence[Mapping[str, Any]], meta: Mapping[str, Any]) -> bytes:
        """Store a new conversation under a fresh unique id; return its document."""
        ...

    def put(self, conversation_id: str, document: Mapping[str, Any]) -> bool:
        """Store ``document`` under its own id unless that id is taken (migrating a store);
        whether it was stored."""
        ...

    def read(self, conversation_id: str) -> bytes:
        """The stored document (CONVERSATION_NOT_FOUND if there is none)."""
        ...

    def append(
        self,
        conversation_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        check: Callable[[bytes], None] | None = None,
        then: Callable[[], None] | None = None,
    ) -> bytes:
        """Append messages atomically (concurrent appends are serialised); return the document.

        ``check(document)`` may refuse before the write, ``then()`` follows it; both inside the
        same serialised section.
        """
        ...

    def append_locked(
        self,
        conversation_id: str,
        messages: Sequence[Mapping[str, Any]],
        *,
        check: Callable[[bytes], None] | None = None,
        then: Callable[[], None] | None = None,
    ) -> bytes:
        """:meth:`append` for a caller that holds the conversation's lock (:meth:`locked`)."""
        ...

    def place(
        self,
        conversation_id: str,
        message: Mapping[str, Any],
        *,
        where: Callable[[bytes], int],
        then: Callable[[], None] | None = None,
    ) -> bytes:
        """Put ``message`` at the index ``where(document)`` returns, replacing the message
        there, or after the last one when it returns the message count; ``where`` may raise to
        refuse. Serialised with appends; ``then()`` follows the write (undone if it raises)."""
        ...

    def exists(self, conversation_id: str) -> bool:
        """Whether a conversation with this id is stored."""
        ...

    def check_writable(self, conversation_id: str | None = None) -> None:
        """Raise FILESYSTEM_ERROR unless the conversation (without one: a new one) can be
        written now."""
        ...

    def delete(self, conversation_id: str, *, before: Callable[[], None] | None = None) -> None:
        """Remove the conversation and everything stored with it.

        ``before()`` runs in the same serialised section, right before the removal (what is
        kept elsewhere about the conversation goes with it).
        """
        ...

    def ids(self) -> list[str]:
        """Every stored conversation id, newest first."""
        ...

    def summary(self, conversation_id: str) -> dict[str, Any]:
        """A light summary (``ConversationSummary`` keys), read cheaply when possible."""
        ...

    def summaries(self, conversation_ids: Sequence[str]) -> list[dict[str, Any] | PplxError]:
        """:meth:`summary` of each id, or the error reading it gave, in one go when possible."""
        ...

    def read_many(self, conversation_ids: Sequence[str]) -> list[bytes | PplxError]:
        """:meth:`read` of each id, or the error reading it gave, in one go when possible."""
        ...

    def location(self, conversation_id: str) -> str:
        """Where the conversation lives, for users (a directory path, a Redis key, ...)."""
        ...

    def document_location(self, conversation_id: str) -> str:
        """Where the document itself is (for error messages: the file, the key ...)."""
        ...

    def locked(self, conversation_id: str) -> AbstractContextManager[None]:
        """Hold the conversation's lock: the one :meth:`append` and :meth:`delete` take (not
        re-entrant; CONVERSATION_NOT_FOUND without the conversation)."""
        ...

    def mark_answering(self, conversation_id: str, seconds: float) -> str:
        """Record that a question of the conversation is being answered, for at most
        ``seconds``; returns the token that ends it. The caller holds the lock."""
        ...

    def renew_answering(
        self, conversation_id: str, token: str, seconds: float, remote_id: str | None = None
    ) -> None:
        """Push the deadline of the mark ``token`` names ``seconds`` ahead, if it is still the
        conversation's, recording ``remote_id`` (the paid run answering) when given. The
        caller holds the lock."""
        ...

    def clear_answering(self, conversation_id: str, token: str) -> None:
        """End the mark ``token`` names (a newer one stays); never raises. The caller holds the
        lock."""
        ...

    def answering(self, conversation_id: str) -> AnsweringMarker | None:
        """The live mark of a question being answered, or ``None`` (none, past its deadline, or
        left by a process that is gone)."""
        ...

    def answering_run(self, conversation_id: str) -> str | None:
        """The paid run the conversation's mark names, live or not, or ``None``."""
        ...


class JobStates(Protocol):
    """What the store asks the job side about a conversation's job."""

    def job_state(self, conversation_id: str) -> JobState | None:
        """The state of the conversation's job, or ``None`` without one (or if unreadable)."""
        ...

    def job_states(self, conversation_ids: Sequence[str]) -> list[JobState | None]:
        """:meth:`job_state` of each id, in one go when the job side can (for listings)."""
        ...

    def forget(self, conversation_id: str) -> None:
        """Drop what the job side keeps about the conversation outside its storage (it is being
        deleted, under its lock)."""
        ...
