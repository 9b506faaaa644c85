"""A run's report that reached no attempt owning its job: stored late, or handed on.

A job may be cancelled, or its attempt may lose its lease, while its paid run goes on. When that
run's report arrives anyway, it is paid for: :meth:`LateReports.check` says whether it may still
be stored for the job (the job is the conversation's, not completed, and not answered already),
and :meth:`LateReports.finish_locked` marks the job completed once it is. A run an attempt
submitted but could not record is handed to the job's next attempt instead
(:meth:`LateReports.hand_over_run`), so it is followed rather than paid for twice.
"""

from __future__ import annotations

from pplx_nb._errors import LeaseLost, PplxError
from pplx_nb._fs import validate_conversation_id
from pplx_nb._models import ACTIVE_JOB_STATES, JobStatus, Message, now_iso
from pplx_nb.jobs import _transitions as transitions
from pplx_nb.jobs._backend import AnswerLookup, JobStatusBackend
from pplx_nb.jobs._events import logger, result_meta_of
from pplx_nb.jobs._index import ClaimIndex
from pplx_nb.jobs._job import Job

__all__ = ["LateReports", "stored_answer"]


class LateReports:
    """The late reports of the jobs kept in ``statuses`` and ``index``; answers asked of
    ``answers`` (the conversation store)."""

    def __init__(
        self, statuses: JobStatusBackend, index: ClaimIndex, answers: AnswerLookup
    ) -> None:
        self._statuses = statuses
        self._index = index
        self._answers = answers

    def check(self, conversation_id: str, job_id: str, document: bytes) -> None:
        """Raise LeaseLost unless job ``job_id`` is the conversation's, not completed, and its
        answer is not in ``document`` (the conversation, read under its lock). Takes no lock."""
        status = self._statuses.read(validate_conversation_id(conversation_id))
        if status is None or status.status == "completed" or status.job_id != job_id:
            state = "gone" if status is None else f"{status.status} (job {status.job_id})"
            raise _late_refused(conversation_id, job_id, state)
        if self._answers.job_answer(conversation_id, job_id, document) is not None:
            raise _late_refused(conversation_id, job_id, "answered already")

    def finish_locked(self, conversation_id: str, job_id: str) -> None:
        """Mark job ``job_id`` completed by its stored late report (the conversation lock held);
        a pending or running job also loses its request and marker, so no attempt runs it
        again. LeaseLost if the job is not that one, or completed already."""
        status = self._statuses.read(validate_conversation_id(conversation_id))
        if status is None or status.status == "completed" or status.job_id != job_id:
            raise _late_refused(conversation_id, job_id, "no longer waiting for it")
        meta = result_meta_of(stored_answer(self._answers, status))
        self._statuses.write(transitions.finish_late(status, meta, now_iso()))
        if status.status in ACTIVE_JOB_STATES:
            self._statuses.remove_job(conversation_id)
            if status.queue_key:
                self._index.drop(status.queue_key)
        logger.info(
            "Job %s is completed by the report of its run that came late (%s; cost %s)",
            conversation_id,
            "after its cancel" if status.status == "cancelled" else "after its lease ran out",
            meta.get("cost", "n/a"),
            extra={"conversationId": conversation_id, "jobId": job_id, **meta},
        )

    def hand_over_run(self, job: Job, remote_id: str) -> bool:
        """Record run ``remote_id`` of ``job`` for its next attempt to follow; whether the job
        now follows it (see :func:`transitions.hand_over_run`)."""
        statuses = self._statuses
        if not statuses.present(job.conversation_id):
            return False
        with statuses.locked(job.conversation_id):
            status = statuses.read(job.conversation_id)
            handed = None
            if status is not None:
                handed = transitions.hand_over_run(status, job.job_id, remote_id, now_iso())
            if handed is not None:
                statuses.write(handed)
        return handed is not None


def stored_answer(answers: AnswerLookup, status: JobStatus) -> Message | None:
    """The answer the status's job stored, if any (None when there is none or it is unreadable)."""
    if status.job_id is None:
        return None
    try:
        return answers.job_answer(status.conversation_id, status.job_id)
    except PplxError:
        return None


def _late_refused(conversation_id: str, job_id: str, state: str) -> LeaseLost:
    """The refusal of a late report for job ``job_id``, which is now ``state``."""
    return LeaseLost(
        f"Job {job_id} of conversation {conversation_id} is {state}: the report of its run "
        "is not stored for it.",
        conversation_id=conversation_id,
        job_id=job_id,
    )
