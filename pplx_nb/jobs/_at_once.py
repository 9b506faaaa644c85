"""Job transitions in one checked write, where the status backend offers it (Redis).

A backend that :class:`~pplx_nb.jobs._backend.JoinsIndex` makes a transition one read and one
write that checks, on the server, what the locked way would (no other process holds the
conversation's lock, the status is the one read, the lease is alive) and moves the claim index in
the same step: queueing, a claim, a heartbeat or progress write. Anything the check refuses, and
a job that ends without an answer (its question is closed in the same step), goes the locked way
in :class:`~pplx_nb.jobs._queue.JobQueue`, which asks here first.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, cast

from pplx_nb._errors import LeaseLost
from pplx_nb._fs import CONVERSATION_ID_RE
from pplx_nb._models import JobRecord, JobStatus, now_iso
from pplx_nb.jobs import _transitions as transitions
from pplx_nb.jobs._backend import IndexMove, StatusView, Step, StepsAtOnce
from pplx_nb.jobs._index import ClaimIndex, conversation_of
from pplx_nb.jobs._job import Job

__all__ = ["GONE", "PAST_LEASE", "AtOnce", "Change", "claimed"]

Change = Callable[[JobStatus, str], JobStatus]
PAST_LEASE = "past its lease (no heartbeat reached the store in time)"
GONE = "gone (its conversation was deleted)"


class AtOnce:
    """The queue's transitions as single checked writes over ``steps``; each returns what the
    locked way would, or says the locked way must do it."""

    def __init__(self, steps: StepsAtOnce, index: ClaimIndex) -> None:
        self._steps = steps
        self._index = index

    def owner(self, job: Job) -> tuple[JobStatus | None, bool | None]:
        """The job's status and whether its claim is live (``None``: not known here), read in
        one round trip."""
        view = self._steps.view(job.conversation_id, marker=job.marker)
        return view.status, view.live

    def add(self, record: JobRecord, check_idle: Callable[[str], None]) -> JobStatus | None:
        """Queue ``record`` in one checked write where the backend offers it (see
        :class:`StepsAtOnce`); ``None`` when it must be done under the lock."""
        steps, conversation_id = self._steps, record.conversation_id
        status = transitions.new_status(record, record.enqueued_at)
        step = Step(status, cast(str, record.queue_key), record=record, idle=True, index="pending")
        outcome = steps.apply(steps.unread(conversation_id), step)
        if outcome == "busy":
            check_idle(conversation_id)  # raises, naming the state it reads now
        return status if outcome == "done" else None

    def claim_next(self) -> tuple[str, StatusView | None] | None:
        """The next marker, claimed, and its conversation read in the same round trip (see
        :meth:`StepsAtOnce.claim_next`)."""
        return self._steps.claim_next()

    def take(
        self, marker: str, worker_id: str, view: StatusView | None = None
    ) -> Job | Literal[False] | None:
        """:meth:`_take` in one read and one checked write where the backend offers it (no
        read when ``view``, read with the claim, is given): the job, ``None`` when it is not to
        be had, ``False`` when it must be taken under the lock (anything but a pending job with
        its request, or a check that failed)."""
        steps, conversation_id = self._steps, conversation_of(marker)
        if not CONVERSATION_ID_RE.match(conversation_id):
            return False
        if view is None or view.conversation_id != conversation_id:
            view = steps.view(conversation_id, record=True)
        status, record = view.status, view.record
        if (
            status is None
            or status.queue_key != marker
            or status.status != "pending"
            or record is None
            or record.job_id != status.job_id
        ):
            return False
        status = transitions.start_attempt(status, worker_id, now_iso())
        outcome = steps.apply(view, Step(status, marker, renew=True))
        if outcome == "lease":
            self._index.requeue(marker)  # held up past a whole lease: the next claim has it
            return None
        return claimed(record, status, worker_id, marker) if outcome == "done" else False

    def owned(self, job: Job, change: Change) -> JobStatus | None:
        """:meth:`_owned` in one checked write where the backend offers it, from the status
        this process last wrote (a progress write: one round trip); read afresh when that one
        is out of date. ``None`` when it must be done under the lock: a job that ends without
        an answer (its question is closed in the same step), or a lock held elsewhere."""
        steps = self._steps
        for fresh in (False, True):
            view = steps.view(job.conversation_id, fresh=fresh)
            try:
                if not view.present:
                    raise transitions.lease_lost(job, GONE)
                status = change(transitions.check_owner(view.status, job), now_iso())
            except LeaseLost:
                if fresh:
                    raise
                continue  # judged on a status remembered here: read it again
            if status.status in ("failed", "cancelled"):
                return None
            index: IndexMove = (
                "drop" if status.done else "requeue" if status.status == "pending" else ""
            )
            step = Step(status, job.marker, remove_record=status.done, renew=True, index=index)
            outcome = steps.apply(view, step)
            if outcome == "done":
                return status
            if outcome in ("lease", "gone"):
                raise transitions.lease_lost(job, PAST_LEASE if outcome == "lease" else GONE)
            if outcome == "locked":
                return None
        return None


def claimed(record: JobRecord, status: JobStatus, worker_id: str, marker: str) -> Job:
    """The job a claim hands its worker."""
    return Job(
        job_id=record.job_id,
        conversation_id=record.conversation_id,
        tool=record.tool_name,
        request=record.request.copy(),
        priority=record.priority,
        attempt=status.attempts,
        enqueued_at=record.enqueued_at,
        worker_id=worker_id,
        marker=marker,
        remote_id=status.remote_id,
        submitted_at=status.submitted_at,
        submitting=bool(status.submitting_at),
        params=(record.params or {}).copy(),
    )
