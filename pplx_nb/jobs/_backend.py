"""The seams of the job side: where job statuses live, and what it asks the conversation store.

:class:`JobStatusBackend` owns a conversation's job status and queued request (status.json and
job.json for files; ``pplx_nb:conv:<id>:status`` and ``:job`` in Redis). The queue reads
a status under the conversation's lock, applies a pure transition
(:mod:`pplx_nb.jobs._transitions`) and writes the result back, so a backend stores typed values
and decides nothing. :class:`AnswerLookup` is what the job side asks of the store: a job's stored
answer, and closing the question of a job that ended without one.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Protocol

from pplx_nb._errors import ConversationCorrupted, FilesystemError
from pplx_nb._models import JobRecord, JobState, JobStatus, Message

__all__ = ["AnswerLookup", "JobStatusBackend", "OneAtATime"]


class JobStatusBackend(Protocol):
    """Job statuses and queued requests, one of each per conversation. Ids are validated first."""

    def locked(self, conversation_id: str) -> AbstractContextManager[object]:
        """Hold the conversation's lock: the one its store's appends take, not re-entrant."""
        ...

    def present(self, conversation_id: str) -> bool:
        """Whether the conversation exists for the job side (a job can be stored with it)."""
        ...

    def conversation_ids(self) -> list[str]:
        """Every conversation that may hold a job status (in no particular order)."""
        ...

    def state(self, conversation_id: str) -> JobState | None:
        """The job's state, ``None`` if no job ever ran; CONVERSATION_CORRUPTED if unreadable.

        Checks only the state and attempt count, so a status written by another tool with
        fewer fields still answers.
        """
        ...

    def states(self, conversation_ids: Sequence[str]) -> list[JobState | None]:
        """:meth:`state` of each id, in one go when the backend can (for listings): ``None``
        without a status, or with one that cannot be read."""
        ...

    def read(self, conversation_id: str) -> JobStatus | None:
        """The whole status, ``None`` if no job ever ran; CONVERSATION_CORRUPTED if damaged."""
        ...

    def read_many(
        self, conversation_ids: Sequence[str]
    ) -> list[JobStatus | ConversationCorrupted | FilesystemError | None]:
        """:meth:`read` of each id, or the error reading it gave, in one go when possible."""
        ...

    def write(self, status: JobStatus) -> None:
        """Replace the status of ``status.conversation_id`` atomically."""
        ...

    def snapshot(self, conversation_id: str) -> bytes | None:
        """The stored status as it is, to put back with :meth:`restore` (``None``: none)."""
        ...

    def restore(self, conversation_id: str, snapshot: bytes | None) -> None:
        """Put back what :meth:`snapshot` returned; without room for it, remove the status."""
        ...

    def read_job(self, conversation_id: str) -> JobRecord | None:
        """The queued request, ``None`` if there is none; CONVERSATION_CORRUPTED if damaged."""
        ...

    def write_job(self, record: JobRecord) -> None:
        """Store the queued request of ``record.conversation_id``."""
        ...

    def remove_job(self, conversation_id: str) -> None:
        """Remove the queued request (the job ended, or was never queued in full)."""
        ...

    def has_job(self, conversation_id: str) -> bool:
        """Whether a queued request is stored (cheap: no parsing)."""
        ...

    def queued_ids(self) -> list[str]:
        """The conversations that hold a queued request (what recovery re-indexes from)."""
        ...

    def job_link(self, conversation_id: str) -> str | None:
        """A file the claim index may hard-link its marker to (files only; else ``None``)."""
        ...


class OneAtATime:
    """:meth:`JobStatusBackend.states` and :meth:`~JobStatusBackend.read_many` for a backend
    that reads one status at a time (files, memory): its ``state`` and ``read`` of each id."""

    def state(self, conversation_id: str) -> JobState | None:
        raise NotImplementedError

    def read(self, conversation_id: str) -> JobStatus | None:
        raise NotImplementedError

    def states(self, conversation_ids: Sequence[str]) -> list[JobState | None]:
        """:meth:`state` of each, one after the other; an unreadable one is ``None``."""
        found: list[JobState | None] = []
        for conversation_id in conversation_ids:
            try:
                found.append(self.state(conversation_id))
            except (ConversationCorrupted, FilesystemError):
                found.append(None)
        return found

    def read_many(
        self, conversation_ids: Sequence[str]
    ) -> list[JobStatus | ConversationCorrupted | FilesystemError | None]:
        """:meth:`read` of each, one after the other, or the error reading it gave."""
        found: list[JobStatus | ConversationCorrupted | FilesystemError | None] = []
        for conversation_id in conversation_ids:
            try:
                found.append(self.read(conversation_id))
            except (ConversationCorrupted, FilesystemError) as exc:
                found.append(exc)
        return found


class AnswerLookup(Protocol):
    """What the job side asks the conversation store (implemented by ``ConversationStore``)."""

    def job_answer(
        self, conversation_id: str, job_id: str, document: bytes | None = None
    ) -> Message | None:
        """The answer a job stored (the last message tagged ``jobId = job_id``), or ``None``.

        ``document`` is the stored document when the caller already holds it (an append's
        ``check``); otherwise the store reads it.
        """
        ...

    def close_question_locked(self, conversation_id: str, closing: Message) -> bool:
        """Append ``closing`` if the conversation ends with a question without an answer (a job
        that failed or was cancelled), so its turns keep alternating; whether it did. The
        caller holds the conversation lock."""
        ...
