"""JobQueue: deep-research jobs kept next to their conversations, each claimed by one worker.

Each conversation may hold a queued request and a status (job.json and status.json, through a
:class:`~pplx_nb.jobs._backend.JobStatusBackend`). A sortable marker index
(:class:`~pplx_nb.jobs._index.ClaimIndex`: marker files claimed by rename, or sorted sets in
Redis, :mod:`pplx_nb.jobs._redis`) makes claiming independent of how many conversations exist. Every
read-modify-write of a status happens under the conversation's lock and applies one pure
transition (:mod:`pplx_nb.jobs._transitions`); markers are only hints, so the index heals itself
(:mod:`pplx_nb.jobs._recovery`).

Attempts count started runs: claiming increments ``attempts``. A failed attempt goes back to
``pending`` while ``attempts <= max_job_retries``, else the job is ``failed`` (default 2 retries, 3
attempts). Writes that come from a worker which no longer owns the job (its lease expired and
another worker claimed it, or the job was cancelled) are refused with :class:`LeaseLost`.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Unpack, cast

from pplx_nb._errors import (
    ConversationCorrupted,
    ConversationNotFound,
    FilesystemError,
    JobInProgress,
    PplxError,
    ValidationError,
)
from pplx_nb._fs import CONVERSATION_ID_RE, validate_conversation_id
from pplx_nb._models import (
    ACTIVE_JOB_STATES,
    Cost,
    JobParams,
    JobRecord,
    JobRequest,
    JobResult,
    JobState,
    JobStatus,
    closing_turn,
    now_iso,
)
from pplx_nb.jobs import _events as events
from pplx_nb.jobs import _transitions as transitions
from pplx_nb.jobs._at_once import GONE, PAST_LEASE, AtOnce, Change, claimed
from pplx_nb.jobs._backend import AnswerLookup, JobStatusBackend, JoinsIndex, StatusView
from pplx_nb.jobs._events import logger, result_meta_of
from pplx_nb.jobs._index import PRIORITY_MAX, ClaimIndex, conversation_of, marker_name
from pplx_nb.jobs._job import Job
from pplx_nb.jobs._late import LateReports, stored_answer
from pplx_nb.jobs._recovery import Recovery
from pplx_nb.jobs._side import JobSide
from pplx_nb.jobs._transitions import NON_RETRYABLE

__all__ = ["NON_RETRYABLE", "JobQueue"]


class JobQueue:
    """The job queue over the parts :func:`pplx_nb.backends.open_backends` opens (a folder, a
    Redis database, or memory); safe across threads, processes and (on Redis) machines.

    Args:
        statuses: where statuses and queued requests live.
        index: the claim index beside them.
        answers: the conversation store to ask for the answer a job stored (to log a completed
            job's tokens and cost and to refuse a second answer) and to close the question of a
            job that ended without one.
        max_job_retries: retries after the first attempt (PERPLEXITY_MAX_JOB_RETRIES).
        lease_seconds: an in_progress job whose heartbeat this queue has seen unchanged for this
            long is requeued (PPLX_NB_JOB_LEASE_SECONDS; judged by this process's own clock,
            see :mod:`pplx_nb.jobs._lease`).
        clock: seconds from a monotonic clock, by which this process judges leases it watches
            (default ``time.monotonic``; tests pass one they advance). The Redis index judges
            its leases by the server's clock instead.
    """

    def __init__(
        self,
        statuses: JobStatusBackend,
        index: ClaimIndex,
        *,
        answers: AnswerLookup,
        max_job_retries: int = 2,
        lease_seconds: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_job_retries < 0 or lease_seconds <= 0:
            raise ValidationError(
                "max_job_retries must be >= 0 and lease_seconds > 0 "
                "(PERPLEXITY_MAX_JOB_RETRIES, PPLX_NB_JOB_LEASE_SECONDS)."
            )
        self.max_job_retries = max_job_retries
        self.lease_seconds = lease_seconds
        self._statuses = statuses
        self._answers = answers
        self._index = index
        self._side = JobSide(statuses, index)
        self._late = LateReports(statuses, index, answers)
        steps = statuses.joined(index) if isinstance(statuses, JoinsIndex) else None
        self._at_once = AtOnce(steps, index) if steps is not None else None
        self._recovery = Recovery(
            statuses,
            index,
            lease_seconds=lease_seconds,
            max_job_retries=max_job_retries,
            ended=self._close_question,
            clock=clock,
        )

    @property
    def location(self) -> str:
        """Where the queue lives, for users: its folder, or the Redis URL (no credentials)."""
        return self._index.location

    def __repr__(self) -> str:
        return (
            f"JobQueue(location={self.location!r}, max_job_retries={self.max_job_retries}, "
            f"lease_seconds={self.lease_seconds})"
        )

    # -- submitting ----------------------------------------------------------------------------

    def enqueue(
        self,
        conversation_id: str,
        tool: str,
        request: JobRequest,
        priority: int = 0,
        *,
        params: JobParams | None = None,
    ) -> JobStatus:
        """Queue a job for an existing conversation: writes job.json and a ``pending`` status.json.

        Takes the conversation lock; :meth:`enqueue_locked` is the same step for a caller that
        holds it already. ``params`` (``query``, ``reasoning_effort``) lets the TypeScript
        perplexity-mcp-server's worker run the job too: job.json then carries that server's
        fields beside ours.

        Raises:
            ValidationError: bad id, priority outside ±9999, or a request that is not JSON.
            ConversationNotFound: the conversation directory does not exist.
            JobInProgress: the conversation already has a pending or in_progress job.
            ConversationCorrupted: its status.json is damaged (deleting it resets the job state).
        """
        _check_request(conversation_id, request, priority)
        record = self._new_record(conversation_id, tool, request, priority, params)
        status = self._at_once.add(record, self.check_idle) if self._at_once else None
        if status is None:
            self._must_exist(conversation_id)
            with self._statuses.locked(conversation_id):
                status = self._add(record)
        events.enqueued(status)
        return status

    def enqueue_locked(
        self,
        conversation_id: str,
        tool: str,
        request: JobRequest,
        priority: int = 0,
        *,
        params: JobParams | None = None,
    ) -> JobStatus:
        """:meth:`enqueue` for a caller that holds the conversation lock.

        For a step that spans the store and the queue (a store append's ``then``, or inside
        ``ConversationStore.locked``), so that a question and its job land together. Raises as
        :meth:`enqueue` does.
        """
        _check_request(conversation_id, request, priority)
        record = self._new_record(conversation_id, tool, request, priority, params)
        status = self._at_once.add(record, self.check_idle) if self._at_once else None
        if status is None:
            self._must_exist(conversation_id)
            status = self._add(record)
        events.enqueued(status)
        return status

    def _new_record(
        self,
        conversation_id: str,
        tool: str,
        request: JobRequest,
        priority: int,
        params: JobParams | None,
    ) -> JobRecord:
        """The queued request of a checked request, with its marker, enqueued now."""
        now = now_iso()
        return JobRecord(
            job_id=uuid.uuid4().hex,
            conversation_id=conversation_id,
            tool_name=tool,
            request=request,
            priority=priority,
            enqueued_at=now,
            queue_key=marker_name(priority, time.time_ns() // 1000, conversation_id),
            params=params,
            created_at=now if params else None,
            max_attempts=self.max_job_retries + 1,
        )

    def _add(self, record: JobRecord) -> JobStatus:
        """Write the job of a checked request (lock held): job.json, status.json, its marker."""
        statuses, conversation_id = self._statuses, record.conversation_id
        marker = cast(str, record.queue_key)
        self.check_idle(conversation_id)
        status = transitions.new_status(record, record.enqueued_at)
        previous = statuses.snapshot(conversation_id)
        try:
            statuses.write_job(record)
            statuses.write(status)
            self._index.add_pending(marker, statuses.job_link(conversation_id))
        except BaseException:
            # A job half-queued (a full disk, no inodes left) must not run later and bill.
            with contextlib.suppress(OSError, PplxError):
                self._index.drop(marker)
            with contextlib.suppress(OSError, PplxError):
                statuses.remove_job(conversation_id)
            statuses.restore(conversation_id, previous)
            raise
        return status

    def forget(self, conversation_id: str) -> None:
        """Drop the index marker of the conversation's job (see :meth:`JobSide.forget`)."""
        self._side.forget(conversation_id)

    def job_state(self, conversation_id: str) -> JobState | None:
        """The state of the conversation's job, or ``None`` without one (or if unreadable)."""
        return self._side.job_state(conversation_id)

    def job_states(self, conversation_ids: Sequence[str]) -> list[JobState | None]:
        """:meth:`job_state` of each conversation, in one round trip on Redis."""
        return self._side.job_states(conversation_ids)

    def check_idle(self, conversation_id: str) -> None:
        """Raise JobInProgress if the conversation has a pending or in_progress job.

        Takes no lock: call it under the conversation lock (a store append's ``check``) to make
        the answer hold until the lock is released.
        """
        self._refuse_active(
            conversation_id, self._statuses.state(validate_conversation_id(conversation_id))
        )

    def _refuse_active(self, conversation_id: str, state: JobState | None) -> None:
        """JobInProgress if ``state`` (the conversation's job's) is pending or in_progress."""
        if state in ACTIVE_JOB_STATES:
            raise JobInProgress(
                f"Conversation {conversation_id} has a research job that is {state}. "
                "Wait for it to complete (`get_conversation_history` or `%pplx_wait` shows "
                "when), then follow up.",
                conversation_id=conversation_id,
            )

    def check_owner(self, job: Job, document: bytes | None = None) -> None:
        """Raise LeaseLost unless status.json says ``job``'s attempt still runs on its worker.

        With ``document`` (the stored conversation), also when it already holds an answer
        tagged with the job's ``jobId``. Takes no lock: call it under the conversation lock (a
        store append's ``check``) to fence a write by a worker whose lease may have expired.
        """
        if self._at_once is not None:
            status, live = self._at_once.owner(job)
        else:
            status, live = self._statuses.read(job.conversation_id), None
        transitions.check_owner(status, job)
        if not (live if live is not None else self._index.held(job.marker)):
            raise transitions.lease_lost(job, PAST_LEASE)
        if document is not None:
            answer = self._answers.job_answer(job.conversation_id, job.job_id, document)
            if answer is not None:
                raise transitions.lease_lost(job, "already answered")

    # -- claiming ------------------------------------------------------------------------------

    def claim(self, worker_id: str) -> Job | None:
        """Claim the highest-priority, oldest pending job for ``worker_id``; None if there is none.

        The index decides between racing claimants; the winner then re-reads the status
        under the conversation lock and flips it from ``pending`` to ``in_progress``.
        """
        while (popped := self._claim_next()) is not None:
            marker, view = popped
            try:
                job = self._take(marker, worker_id, view)
            except PplxError as exc:
                # The marker stays claimed, so recover_stale keeps reporting the damaged job.
                logger.error("Job %s cannot be claimed: %s", conversation_of(marker), exc)
                continue
            if job is not None:
                events.claimed(job)
                return job
        return None

    def _claim_next(self) -> tuple[str, StatusView | None] | None:
        """The next marker claimed from the index, with its status when read in the same step."""
        if self._at_once is not None:
            return self._at_once.claim_next()
        marker = self._index.claim_next()
        return None if marker is None else (marker, None)

    def _take(self, marker: str, worker_id: str, view: StatusView | None = None) -> Job | None:
        taken = self._at_once.take(marker, worker_id, view) if self._at_once else False
        if taken is not False:
            return taken
        conversation_id = conversation_of(marker)
        statuses = self._statuses
        if not CONVERSATION_ID_RE.match(conversation_id) or not statuses.present(conversation_id):
            self._index.drop(marker)
            return None
        with statuses.locked(conversation_id):
            status = statuses.read(conversation_id)
            if status is None or status.queue_key != marker:
                self._index.drop(marker)
                return None
            if status.status != "pending":
                if status.status != "in_progress":
                    self._index.drop(marker)
                return None
            record = statuses.read_job(conversation_id)
            now = now_iso()
            if record is None or record.job_id != status.job_id:
                self._end(transitions.lost_request(status, now), marker)
                return None
            if not self._index.renew(marker, now):
                # Claimed, then held up past a whole lease: let the next claim have it.
                self._index.requeue(marker)
                return None
            status = transitions.start_attempt(status, worker_id, now)
            statuses.write(status)
        return claimed(record, status, worker_id, marker)

    # -- while a job runs ----------------------------------------------------------------------

    def heartbeat(self, job: Job) -> None:
        """Tell the queue the worker is alive and still on ``job``.

        Raises:
            LeaseLost: the job is no longer this worker's.
        """
        elapsed = job.elapsed_ms
        self._owned(job, lambda status, now: transitions.heartbeat(status, now, elapsed))

    def progress(self, job: Job, percentage: int, message: str) -> None:
        """Record progress (percentage, message, elapsedMs, attempt); counts as a heartbeat."""
        elapsed = job.elapsed_ms
        self._owned(
            job, lambda status, now: transitions.report(status, percentage, message, elapsed, now)
        )

    def set_remote_id(self, job: Job, remote_id: str) -> None:
        """Persist the API's id for a background run of ``job`` (``remoteId`` in status.json).

        Also records when the run was submitted (``submittedAt``, where its deadline counts
        from) and ends the submission :meth:`begin_submission` began.
        """
        self._owned(job, lambda status, now: transitions.record_remote_id(status, remote_id, now))

    def begin_submission(self, job: Job) -> None:
        """Record that a paid submission of ``job`` is being sent (``submittingAt``).

        A worker that dies before :meth:`set_remote_id` leaves it, so the next attempt knows a
        run may exist and does not pay for a second one blindly.
        """
        self._owned(job, transitions.begin_submission)

    def end_submission(self, job: Job) -> None:
        """Forget :meth:`begin_submission`: the submission provably started no run."""
        self._owned(job, transitions.end_submission)

    def note_error(self, job: Job, error: BaseException) -> None:
        """Add an error the runner recovered from to ``errorHistory`` without ending the attempt."""
        self._owned(job, lambda status, now: transitions.note_error(status, error, now))

    # -- ending --------------------------------------------------------------------------------

    def complete(self, job: Job, **result_meta: Unpack[JobResult]) -> JobStatus:
        """Mark ``job`` completed, remove job.json and its marker; log duration, tokens and cost.

        ``result_meta`` (e.g. ``tokens=``, ``cost=``) is logged and kept under ``result``; without
        it, tokens and cost are read from the answer the runner stored (tagged with ``jobId``).
        """
        duration_ms = job.elapsed_ms
        meta = result_meta or self._answer_meta(job)
        status = self._owned(
            job, lambda status, now: transitions.complete(status, duration_ms, meta, now)
        )
        events.completed(job, duration_ms, meta)
        return status

    def fail(self, job: Job, error: PplxError) -> JobStatus:
        """Record a failed attempt: back to ``pending`` while retries remain, else ``failed``.

        Errors whose code is in :data:`NON_RETRYABLE` fail the job at once. A
        :class:`RemoteRunFailed` also forgets ``remoteId``: the ended run cannot answer, so the
        next attempt submits a new one.
        """
        retries = self.max_job_retries
        status = self._owned(
            job, lambda status, now: transitions.fail_or_retry(status, error, retries, now)[0]
        )
        retry = status.status == "pending"
        events.failed(job.conversation_id, job.job_id, job.attempt, status.error_history[-1], retry)
        return status

    def release(self, job: Job) -> JobStatus:
        """Give ``job`` back unfinished (worker shutting down): ``pending``, attempt not counted."""
        status = self._owned(job, transitions.release)
        events.released(job)
        return status

    def cancel(self, conversation_id: str) -> JobStatus | None:
        """Cancel the conversation's pending or in_progress job; None if it never had one.

        CONVERSATION_NOT_FOUND if the conversation does not exist.

        A running worker notices at its next heartbeat and stops; an ended job is left as it is.
        """
        self._must_exist(validate_conversation_id(conversation_id))
        with self._statuses.locked(conversation_id):
            status = self._statuses.read(conversation_id)
            if status is None or status.done:
                return status
            answer = stored_answer(self._answers, status)
            if answer is not None:
                # Its worker stored the report and was about to say so: it is done, not
                # cancelled (the report is paid for and there is no run left to stop).
                elapsed = status.progress.elapsed_ms if status.progress else 0
                status = transitions.complete(status, elapsed, result_meta_of(answer), now_iso())
                self._end(status, status.queue_key or "")
                return status
            status = transitions.cancel(status, now_iso())
            self._end(status, status.queue_key or "")
        events.cancelled(status)
        return status

    def check_late_report(self, conversation_id: str, job_id: str, document: bytes) -> None:
        """Raise LeaseLost unless the report of job ``job_id``'s run, which reached no attempt
        owning the job (it was cancelled, or the attempt lost its lease), may be stored in
        ``document`` (the conversation, read under its lock). Takes no lock."""
        self._late.check(conversation_id, job_id, document)

    def finish_late_locked(self, conversation_id: str, job_id: str) -> None:
        """Mark job ``job_id`` completed: the late report of its run is stored (the caller holds
        the conversation lock). LeaseLost if the job is not that one, or completed already."""
        self._late.finish_locked(conversation_id, job_id)

    def hand_over_run(self, job: Job, remote_id: str) -> bool:
        """Record run ``remote_id`` of ``job``, submitted by its attempt, for the job's next
        attempt to follow instead of submitting, after that attempt lost its lease (or is
        stopping) before it could record the run. Returns whether the job now follows it."""
        return self._late.hand_over_run(job, remote_id)

    # -- recovery ------------------------------------------------------------------------------

    def recover_stale(self) -> int:
        """Requeue in_progress jobs whose heartbeat has not changed for a lease; heal the index.

        "Not changed" is judged by this process's monotonic clock since it first saw the
        heartbeat (or wrote it), never by comparing timestamps of other machines' clocks, so a
        job whose worker died before this process started is requeued one lease after its
        first call.

        A lost attempt counts as a failed one (its error is ``JOB_LEASE_EXPIRED``), so a job that
        keeps killing its workers ends ``failed`` after the configured attempts. Markers missing
        for pending or in_progress jobs (a crash between writes) are re-created. Returns the
        number of jobs recovered.
        """
        return self._recovery.run()

    # -- reading -------------------------------------------------------------------------------

    def status(self, conversation_id: str) -> JobStatus | None:
        """The conversation's status.json, or None if no job ever ran for it."""
        return self._statuses.read(validate_conversation_id(conversation_id))

    def pending_count(self) -> int:
        """How many jobs wait to be claimed (from the marker index)."""
        return len(self._index.pending())

    def jobs(self, states: tuple[JobState, ...] | None = None) -> list[JobStatus]:
        """Every conversation's job status (newest first), optionally only in ``states``.

        A damaged or unreadable status.json is skipped with a warning, so it never hides the
        others.
        """
        found = []
        ids = self._statuses.conversation_ids()
        for conversation_id, status in zip(ids, self._statuses.read_many(ids), strict=True):
            if isinstance(status, (ConversationCorrupted, FilesystemError)):
                logger.warning("Skipping the job status of %s: %s", conversation_id, status)
            elif status is not None and (states is None or status.status in states):
                found.append(status)
        found.sort(key=lambda s: s.started_at, reverse=True)
        return found

    # -- helpers -------------------------------------------------------------------------------

    def _must_exist(self, conversation_id: str) -> None:
        if not self._statuses.present(conversation_id):
            raise ConversationNotFound(
                f"Conversation {conversation_id} does not exist. Start a new conversation with "
                "`perplexity_deep_research` first.",
                conversation_id=conversation_id,
            )

    def _owned(self, job: Job, change: Change) -> JobStatus:
        """Apply ``change`` to ``job``'s status if this worker still owns it; LeaseLost if not.

        Under the conversation lock: read, check the owner, write; then the index follows the
        new state: an ended job loses its request and marker, a requeued one goes back to
        pending. Only after the write: removing job.json before the status says completed
        would lose the job on a crash.
        """
        done = self._at_once.owned(job, change) if self._at_once else None
        if done is not None:
            return done
        statuses = self._statuses
        if not statuses.present(job.conversation_id):
            raise transitions.lease_lost(job, GONE)
        with statuses.locked(job.conversation_id):
            status = transitions.check_owner(statuses.read(job.conversation_id), job)
            status = change(status, now_iso())
            if not self._index.renew(job.marker, status.heartbeat_at):
                raise transitions.lease_lost(job, PAST_LEASE)
            statuses.write(status)
            if status.done:
                self._close_question(status)
                self._clean_up(job.conversation_id, job.marker)
            elif status.status == "pending":
                self._index.requeue(job.marker)
        return status

    def _end(self, status: JobStatus, marker: str) -> None:
        """Write an ended status, then remove its request and marker (lock held)."""
        self._statuses.write(status)
        self._close_question(status)
        self._clean_up(status.conversation_id, marker)

    def _close_question(self, status: JobStatus) -> None:
        """Close the question of a job that ended without an answer (lock held)."""
        _close_unanswered(self._answers, status)

    def _clean_up(self, conversation_id: str, marker: str) -> None:
        self._statuses.remove_job(conversation_id)
        if marker:
            self._index.drop(marker)

    def _answer_meta(self, job: Job) -> JobResult:
        try:
            answer = self._answers.job_answer(job.conversation_id, job.job_id)
        except PplxError:
            return {}
        return result_meta_of(answer)


def _close_unanswered(answers: AnswerLookup, status: JobStatus) -> None:
    """After a job ended without an answer, close its question with an assistant turn saying why
    (the conversation's lock held), so the turns keep alternating for every program that replays
    them. A store that cannot be written is logged, never a reason to keep the job open."""
    if status.status not in ("failed", "cancelled"):
        return
    error = status.error
    result = status.result or {}
    spent = result.get("cost")
    closing = closing_turn(
        "failed" if status.status == "failed" else "cancelled",
        error.code if error else None,
        error.message if error else None,
        cost_unknown=result.get("costUnknown") is True,
        job_id=status.job_id,
        # A failed job keeps its run's id only while that run may still answer: retry reads it.
        remote_id=status.remote_id if status.status == "failed" else None,
        cost=None if spent is None else Cost(total_cost=spent),
    )
    try:
        answers.close_question_locked(status.conversation_id, closing)
    except PplxError as exc:
        logger.warning(
            "Could not close the unanswered question of %s: %s", status.conversation_id, exc
        )


def _check_request(conversation_id: str, request: JobRequest, priority: int) -> None:
    """VALIDATION_ERROR for a request no job could hold, before anything is written."""
    validate_conversation_id(conversation_id)
    if not isinstance(priority, int) or not -PRIORITY_MAX <= priority <= PRIORITY_MAX:
        raise ValidationError(
            f"Job priority must be an integer between {-PRIORITY_MAX} and {PRIORITY_MAX}, "
            f"got {priority!r}."
        )
    try:
        json.dumps(request, allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValidationError(
            f"The job request must be JSON-serialisable: {exc}. Pass plain dicts, lists, "
            "strings and numbers."
        ) from exc
