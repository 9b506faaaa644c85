"""The seams of the job side: where job statuses live, and what it asks the conversation store.

:class:`JobStatusBackend` owns a conversation's job status and queued request (status.json and
job.json for files; ``pplx_nb:conv:<id>:status`` and ``:job`` in Redis). The queue reads
a status under the conversation's lock, applies a pure transition
(:mod:`pplx_nb.jobs._transitions`) and writes the result back, so a backend stores typed values
and decides nothing. :class:`AnswerLookup` is what the job side asks of the store: a job's stored
answer, and closing the question of a job that ended without one.

A backend that keeps the claim index in the same database may also offer :class:`StepsAtOnce`
(:meth:`JoinsIndex.joined`): a transition read in one round trip and written, with its index
moves, in one more, checked against what was read instead of under a lock taken for it. Redis
offers it (each lock and read there crosses the network); the queue takes the lock only when
that check fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

from pplx_nb._errors import ConversationCorrupted, FilesystemError
from pplx_nb._models import JobRecord, JobState, JobStatus, Message
from pplx_nb.jobs._codec import parse_status

if TYPE_CHECKING:
    from pplx_nb.jobs._index import ClaimIndex

__all__ = [
    "AnswerLookup",
    "IndexMove",
    "JobStatusBackend",
    "JoinsIndex",
    "OneAtATime",
    "Outcome",
    "StatusView",
    "Step",
    "StepsAtOnce",
]

IndexMove = Literal["", "pending", "requeue", "drop"]
"""What a :class:`Step` does to its marker after the write (``""``: nothing more)."""

Outcome = Literal["done", "locked", "changed", "gone", "lease", "busy"]
"""How :meth:`StepsAtOnce.apply` went: written; nothing written because another process holds
the conversation's lock, the status is no longer the one read (or cannot be read), the
conversation is gone, the marker's lease has passed, or (:attr:`Step.idle`) a job is active."""


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


@dataclass(frozen=True)
class StatusView:
    """A conversation's job status as read at one moment, for a step that checks it is unchanged.

    ``raw`` is the stored status (``None``: none), ``record`` the queued request when asked for,
    ``live`` whether the marker asked about is claimed with its lease not yet passed.
    """

    conversation_id: str
    where: str
    present: bool
    raw: bytes | None
    record: JobRecord | None = None
    live: bool = False

    @property
    def status(self) -> JobStatus | None:
        """The whole status (CONVERSATION_CORRUPTED if damaged)."""
        return None if self.raw is None else parse_status(self.raw, self.where)


@dataclass(frozen=True)
class Step:
    """What one transition writes: the new status, the queued request, and the index's move.

    Attributes:
        status: the status to store.
        record: the queued request to store with it, or ``None`` to leave it.
        remove_record: remove the queued request (the job ended).
        marker: the job's marker.
        renew: the marker's lease must not have passed; it is pushed a lease ahead.
        idle: instead of the status being the one read, any status will do but that of a
            pending or in_progress job (queueing a job needs no read first).
        index: then ``"pending"`` queues the marker, ``"requeue"`` moves it back from claimed,
            ``"drop"`` removes it.
    """

    status: JobStatus
    marker: str
    record: JobRecord | None = None
    remove_record: bool = False
    renew: bool = False
    idle: bool = False
    index: IndexMove = ""


class StepsAtOnce(Protocol):
    """Transitions over statuses and the claim index of one database, each written at once."""

    def view(
        self,
        conversation_id: str,
        *,
        fresh: bool = True,
        record: bool = False,
        marker: str | None = None,
    ) -> StatusView:
        """The conversation's status now; with ``fresh=False``, the one this process last wrote
        or read if it has one (no round trip: :meth:`apply` finds out if it changed)."""
        ...

    def apply(self, view: StatusView, step: Step) -> Outcome:
        """Write ``step`` if nobody else holds the conversation's lock (this thread may), it
        still exists and its status is still ``view``'s; else write nothing."""
        ...

    def unread(self, conversation_id: str) -> StatusView:
        """A view of the conversation that reads nothing, for a step that checks all it needs
        (:attr:`Step.idle`)."""
        ...

    def claim_next(self) -> tuple[str, StatusView | None] | None:
        """:meth:`ClaimIndex.claim_next`, with a view of the marker's conversation read in the
        same step (its request too) when it could be; ``None`` when nothing is pending."""
        ...


@runtime_checkable
class JoinsIndex(Protocol):
    """A status backend that can apply transitions together with ``index`` (see
    :class:`StepsAtOnce`)."""

    def joined(self, index: ClaimIndex) -> StepsAtOnce | None:
        """Transitions over this backend and ``index``, or ``None`` if ``index`` lives
        elsewhere."""
        ...
