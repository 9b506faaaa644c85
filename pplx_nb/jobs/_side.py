"""What the conversation store asks the job side, answered from the statuses and the claim index.

:class:`JobSide` implements the store's :class:`~pplx_nb.store.JobStates` seam (structurally: the
job side imports nothing of the store) over the same parts the queue uses, so a store and a queue
opened together (:func:`pplx_nb.backends.open_backends`) never need each other to be built.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

from pplx_nb._errors import ConversationCorrupted, FilesystemError, PplxError
from pplx_nb._fs import validate_conversation_id
from pplx_nb._models import JobState
from pplx_nb.jobs._backend import JobStatusBackend
from pplx_nb.jobs._index import ClaimIndex, conversation_of

__all__ = ["JobSide"]


class JobSide:
    """A conversation's job state for listings, and its marker dropped when it is deleted.

    Args:
        statuses: where the job statuses live.
        index: the claim index beside them.
    """

    def __init__(self, statuses: JobStatusBackend, index: ClaimIndex) -> None:
        self._statuses = statuses
        self._index = index

    def __repr__(self) -> str:
        return f"JobSide({self._statuses!r})"

    def job_state(self, conversation_id: str) -> JobState | None:
        """The state of the conversation's job, or ``None`` without one (or if unreadable).

        For listings: a damaged status counts as no job here; the queue's ``status`` and
        ``jobs`` report it.
        """
        try:
            return self._statuses.state(validate_conversation_id(conversation_id))
        except (ConversationCorrupted, FilesystemError):
            return None

    def job_states(self, conversation_ids: Sequence[str]) -> list[JobState | None]:
        """:meth:`job_state` of each conversation (what the store's listings ask), in one round
        trip on Redis."""
        for conversation_id in conversation_ids:
            validate_conversation_id(conversation_id)
        try:
            return self._statuses.states(conversation_ids)
        except FilesystemError:
            return [None] * len(conversation_ids)

    def forget(self, conversation_id: str) -> None:
        """Drop the index marker of the conversation's job (its conversation is being deleted).

        Call it under the conversation lock. The pending marker is a hard link to job.json, so
        without this the question would outlive the conversation in ``.jobs/``.
        """
        with contextlib.suppress(PplxError):
            status = self._statuses.read(validate_conversation_id(conversation_id))
            marker = status.queue_key if status else None
            if marker is not None and conversation_of(marker) == conversation_id:
                self._index.drop(marker)
