"""JobQueue: deep-research jobs kept next to their conversations, claimed by atomic rename.

Each conversation directory may hold ``job.json`` (the queued request, removed when the job ends)
and ``status.json`` (its lifecycle, kept). A sortable marker index (:mod:`pplx_nb.jobs._index`)
makes claiming independent of how many conversations exist. Every read-modify-write of a status
happens under the conversation's lock; markers are only hints, so the index heals itself:
:meth:`JobQueue.recover_stale` re-creates missing markers and drops stale ones.

Attempts count started runs: claiming increments ``attempts``. A failed attempt goes back to
``pending`` while ``attempts <= max_job_retries``, else the job is ``failed`` (default 2 retries, 3
attempts). Writes that come from a worker which no longer owns the job (its lease expired and
another worker claimed it, or the job was cancelled) are refused with :class:`LeaseLost`.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pplx_nb._errors import (
    ConversationCorrupted,
    ConversationNotFound,
    FilesystemError,
    JobInProgress,
    PplxError,
    RemoteRunFailed,
    RunTimedOut,
    ValidationError,
    redact,
)
from pplx_nb._fs import (
    CONVERSATION_ID_RE,
    atomic_write_bytes,
    fs_errors,
    locked,
    read_bytes,
    real_directory,
    validate_conversation_id,
)
from pplx_nb._logging import get_logger
from pplx_nb._models import JobState, JobStatus, now_iso
from pplx_nb.jobs import _answering as answering
from pplx_nb.jobs._index import PRIORITY_MAX, JobIndex, conversation_of, marker_name
from pplx_nb.jobs._job import START_PROGRESS, Job, LeaseLost
from pplx_nb.jobs._lease import LeaseClock

if TYPE_CHECKING:
    from pplx_nb._config import Settings

__all__ = ["NON_RETRYABLE", "JobQueue"]

logger = get_logger("pplx_nb.jobs")

STATUS_FILE = "status.json"
JOB_FILE = "job.json"
NON_RETRYABLE = frozenset(
    {
        "VALIDATION_ERROR",
        "API_KEY_INVALID",
        "INVALID_INPUT",
        "CONVERSATION_NOT_FOUND",
        "CONVERSATION_CORRUPTED",
        "SUBMISSION_UNKNOWN",
    }
)
"""Error codes that fail a job at once: running it again would fail the same way, or (a
submission whose outcome is unknown) might pay for a second run."""

_ACTIVE = ("pending", "in_progress")
_DONE = ("completed", "failed", "cancelled")


class JobQueue:
    """The job queue over one conversation-logs directory; safe across threads and processes.

    Args:
        root: the conversation-logs directory (conversations are ``root/<conversationId>/``).
        max_job_retries: retries after the first attempt (PERPLEXITY_MAX_JOB_RETRIES).
        lease_seconds: an in_progress job whose heartbeat this queue has seen unchanged for this
            long is requeued (PPLX_NB_JOB_LEASE_SECONDS; judged by this process's own clock,
            see :mod:`pplx_nb.jobs._lease`).
    """

    def __init__(
        self, root: Path, *, max_job_retries: int = 2, lease_seconds: float = 60.0
    ) -> None:
        if max_job_retries < 0 or lease_seconds <= 0:
            raise ValidationError(
                "max_job_retries must be >= 0 and lease_seconds > 0 "
                "(PERPLEXITY_MAX_JOB_RETRIES, PPLX_NB_JOB_LEASE_SECONDS)."
            )
        self.root = Path(root)
        self.max_job_retries = max_job_retries
        self.lease_seconds = lease_seconds
        self._index = JobIndex(self.root)
        self._leases = LeaseClock()

    @classmethod
    def from_settings(cls, settings: Settings) -> JobQueue:
        """The queue over ``settings.logs_dir()`` with the configured retries and lease."""
        return cls(
            settings.logs_dir(),
            max_job_retries=settings.max_job_retries,
            lease_seconds=settings.job_lease_seconds,
        )

    def __repr__(self) -> str:
        return (
            f"JobQueue(root={str(self.root)!r}, max_job_retries={self.max_job_retries}, "
            f"lease_seconds={self.lease_seconds})"
        )

    # -- submitting ----------------------------------------------------------------------------

    def enqueue(
        self,
        conversation_id: str,
        tool: str,
        request: dict[str, Any],
        priority: int = 0,
        *,
        lock_held: bool = False,
    ) -> JobStatus:
        """Queue a job for an existing conversation: writes job.json and a ``pending`` status.json.

        ``lock_held`` says the caller already holds the conversation lock (a store append's
        ``then``), so the question and its job land in one locked step.

        Raises:
            ValidationError: bad id, priority outside ±9999, or a request that is not JSON.
            ConversationNotFound: the conversation directory does not exist.
            JobInProgress: the conversation already has a pending or in_progress job.
            ConversationCorrupted: its status.json is damaged (deleting it resets the job state).
        """
        directory = self._dir(conversation_id)
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
        _must_exist(directory)
        with contextlib.nullcontext() if lock_held else locked(directory):
            self.check_idle(conversation_id)
            enqueued_us = time.time_ns() // 1000
            marker = marker_name(priority, enqueued_us, conversation_id)
            job_id = uuid.uuid4().hex
            now = now_iso()
            job = {
                "jobId": job_id,
                "conversationId": conversation_id,
                "toolName": tool,
                "request": request,
                "priority": priority,
                "enqueuedAt": now,
                "queueKey": marker,
            }
            status: dict[str, Any] = {
                "conversationId": conversation_id,
                "status": "pending",
                "toolName": tool,
                "startedAt": now,
                "updatedAt": now,
                "attempts": 0,
                "errorHistory": [],
                "priority": priority,
                "jobId": job_id,
                "queueKey": marker,
            }
            status["request"] = request
            previous = _read_bytes_or_none(directory / STATUS_FILE)
            try:
                _write(directory / JOB_FILE, job)
                _write(directory / STATUS_FILE, status)
                with fs_errors(self._index.pending_path(marker), "create the job marker"):
                    self._index.add_pending(marker, directory / JOB_FILE)
            except BaseException:
                # A job half-queued (a full disk, no inodes left) must not run later and bill.
                self._undo_enqueue(directory, marker, previous)
                raise
        logger.info(
            "Job enqueued: %s (tool %s, priority %d)",
            conversation_id,
            tool,
            priority,
            extra={"conversationId": conversation_id, "jobId": job_id, "tool": tool},
        )
        return JobStatus.model_validate(status)

    def _undo_enqueue(self, directory: Path, marker: str, previous: bytes | None) -> None:
        """Take back a failed enqueue: no marker, no job.json, the status as it was."""
        with contextlib.suppress(OSError):
            self._index.drop(marker)
        with contextlib.suppress(OSError):
            (directory / JOB_FILE).unlink(missing_ok=True)
        status_path = directory / STATUS_FILE
        try:
            if previous is None:
                status_path.unlink(missing_ok=True)
            else:
                atomic_write_bytes(status_path, previous)
        except (OSError, PplxError):
            # Restoring needs a new inode; without one, no status beats a pending one that
            # would refuse every follow-up.
            with contextlib.suppress(OSError):
                status_path.unlink(missing_ok=True)

    def forget(self, conversation_id: str) -> None:
        """Drop the index marker of the conversation's job (its conversation is being deleted).

        Call it under the conversation lock. The pending marker is a hard link to job.json, so
        without this the question would outlive the conversation in ``.jobs/``.
        """
        directory = self._dir(conversation_id)
        with contextlib.suppress(PplxError):
            status = _read(directory / STATUS_FILE)
            marker = status.get("queueKey") if status else None
            if isinstance(marker, str) and conversation_of(marker) == conversation_id:
                self._index.drop(marker)

    def check_idle(self, conversation_id: str) -> None:
        """Raise JobInProgress if the conversation has a pending or in_progress job, or a
        follow-up whose answer is still on its way (see :meth:`mark_answering`).

        Takes no lock: call it under the conversation lock (a store append's ``check``) to make
        the answer hold until the lock is released.
        """
        directory = self._dir(conversation_id)
        status = _read_status(directory / STATUS_FILE)
        if status is not None and status.get("status") in _ACTIVE:
            raise JobInProgress(
                f"Conversation {conversation_id} has a research job that is {status['status']}. "
                "Wait for it to complete (`get_conversation_history` or `%pplx_wait` shows "
                "when), then follow up.",
                conversation_id=conversation_id,
            )
        marker = answering.live(directory)
        if marker is not None:
            raise JobInProgress(
                f"Conversation {conversation_id} is still answering the follow-up asked at "
                f"{marker.get('startedAt', 'an earlier moment')}. Wait for that answer, then "
                "follow up: asked now, the two questions and answers would interleave.",
                conversation_id=conversation_id,
            )

    def mark_answering(
        self, conversation_id: str, seconds: float, *, lock_held: bool = True
    ) -> str:
        """Say a follow-up of this conversation is being answered now, for at most ``seconds``.

        Call it under the conversation lock, in the step that stores the question (a store
        append's ``then``); :meth:`clear_answering` with the returned token ends it. Until then
        :meth:`check_idle` refuses other follow-ups, so each answer lands right after its
        question. ``lock_held=False`` takes the lock and checks the conversation is idle first
        (a question already stored, asked again).
        """
        directory = self._dir(conversation_id)
        if lock_held:
            return answering.mark(directory, seconds)
        _must_exist(directory)
        with locked(directory):
            self.check_idle(conversation_id)
            return answering.mark(directory, seconds)

    def renew_answering(self, conversation_id: str, token: str, seconds: float) -> None:
        """Keep :meth:`mark_answering`'s marker live ``seconds`` more (a long answer streaming)."""
        directory = self._dir(conversation_id)
        with locked(directory):
            answering.renew(directory, token, seconds)

    def clear_answering(self, conversation_id: str, token: str, *, lock_held: bool = False) -> None:
        """End what :meth:`mark_answering` began (the answer is stored, or the question failed)."""
        directory = self._dir(conversation_id)
        with contextlib.nullcontext() if lock_held else locked(directory):
            answering.clear(directory, token)

    def check_owner(self, job: Job, document: bytes | None = None) -> None:
        """Raise LeaseLost unless status.json says ``job``'s attempt still runs on its worker.

        With ``document`` (conversation.json bytes), also when it already holds an answer tagged
        with the job's ``jobId``. Takes no lock: call it under the conversation lock (a store
        append's ``check``) to fence a write by a worker whose lease may have expired.
        """
        _check_owner(_read_status(self.root / job.conversation_id / STATUS_FILE), job)
        if document is not None and _tagged(_messages(document), job.job_id) is not None:
            raise _lease_lost(job, "already answered")

    # -- claiming ------------------------------------------------------------------------------

    def claim(self, worker_id: str) -> Job | None:
        """Claim the highest-priority, oldest pending job for ``worker_id``; None if there is none.

        The marker rename decides between racing claimants; the winner then re-reads status.json
        under the conversation lock and flips it from ``pending`` to ``in_progress``.
        """
        for marker in self._index.candidates():
            if not self._index.claim(marker):
                continue
            try:
                job = self._take(marker, worker_id)
            except PplxError as exc:
                # The marker stays claimed, so recover_stale keeps reporting the damaged job.
                logger.error("Job %s cannot be claimed: %s", conversation_of(marker), exc)
                continue
            if job is not None:
                logger.info(
                    "Job dequeued: %s (priority %d, attempt %d)",
                    job.conversation_id,
                    job.priority,
                    job.attempt,
                    extra={
                        "conversationId": job.conversation_id,
                        "jobId": job.job_id,
                        "priority": job.priority,
                        "workerId": worker_id,
                    },
                )
                return job
        return None

    def _take(self, marker: str, worker_id: str) -> Job | None:
        conversation_id = conversation_of(marker)
        directory = self.root / conversation_id
        if not CONVERSATION_ID_RE.match(conversation_id) or not _present(directory):
            self._index.drop(marker)
            return None
        with locked(directory):
            status = _read_status(directory / STATUS_FILE)
            if status is None or status.get("queueKey") != marker:
                self._index.drop(marker)
                return None
            if status.get("status") != "pending":
                if status.get("status") != "in_progress":
                    self._index.drop(marker)
                return None
            job = _read(directory / JOB_FILE)
            if job is None or job.get("jobId") != status.get("jobId"):
                self._finish(directory, status, marker, "failed", _lost_job_error(status))
                return None
            attempt = int(status.get("attempts", 0)) + 1
            now = now_iso()
            status.update(
                status="in_progress",
                attempts=attempt,
                workerId=worker_id,
                heartbeatAt=now,
                updatedAt=now,
                progress=_progress(*START_PROGRESS, 0, attempt),
            )
            _write(directory / STATUS_FILE, status)
            self._leases.saw(marker, now)
        return Job(
            job_id=str(job["jobId"]),
            conversation_id=conversation_id,
            tool=str(job.get("toolName", "")),
            request=dict(job.get("request") or {}),
            priority=int(job.get("priority", 0)),
            attempt=attempt,
            enqueued_at=str(job.get("enqueuedAt", "")),
            worker_id=worker_id,
            marker=marker,
            remote_id=status.get("remoteId"),
            submitted_at=status.get("submittedAt"),
            submitting=bool(status.get("submittingAt")),
        )

    # -- while a job runs ----------------------------------------------------------------------

    def heartbeat(self, job: Job) -> None:
        """Tell the queue the worker is alive and still on ``job``.

        Raises:
            LeaseLost: the job is no longer this worker's.
        """
        with self._owned(job) as owned:
            if owned.status.get("progress"):
                owned.status["progress"]["elapsedMs"] = job.elapsed_ms

    def progress(self, job: Job, percentage: int, message: str) -> None:
        """Record progress (percentage, message, elapsedMs, attempt); counts as a heartbeat."""
        percentage = max(0, min(100, int(percentage)))
        with self._owned(job) as owned:
            owned.status["progress"] = _progress(percentage, message, job.elapsed_ms, job.attempt)
            owned.status["updatedAt"] = owned.status["heartbeatAt"]

    def set_remote_id(self, job: Job, remote_id: str) -> None:
        """Persist the API's id for a background run of ``job`` (``remoteId`` in status.json).

        Also records when the run was submitted (``submittedAt``, where its deadline counts
        from) and ends the submission :meth:`begin_submission` began.
        """
        with self._owned(job) as owned:
            began = owned.status.pop("submittingAt", None)
            owned.status["remoteId"] = remote_id
            owned.status["submittedAt"] = began or owned.status["heartbeatAt"]

    def begin_submission(self, job: Job) -> None:
        """Record that a paid submission of ``job`` is being sent (``submittingAt``).

        A worker that dies before :meth:`set_remote_id` leaves it, so the next attempt knows a
        run may exist and does not pay for a second one blindly.
        """
        with self._owned(job) as owned:
            owned.status["submittingAt"] = owned.status["heartbeatAt"]

    def end_submission(self, job: Job) -> None:
        """Forget :meth:`begin_submission`: the submission provably started no run."""
        with self._owned(job) as owned:
            owned.status.pop("submittingAt", None)

    def note_error(self, job: Job, error: BaseException) -> None:
        """Add an error the runner recovered from to ``errorHistory`` without ending the attempt."""
        with self._owned(job) as owned:
            owned.status.setdefault("errorHistory", []).append(_error_info(error, job.attempt))

    # -- ending --------------------------------------------------------------------------------

    def complete(self, job: Job, **result_meta: Any) -> JobStatus:
        """Mark ``job`` completed, remove job.json and its marker; log duration, tokens and cost.

        ``result_meta`` (e.g. ``tokens=``, ``cost=``) is logged and kept under ``result``; without
        it, tokens and cost are read from the answer the runner stored (tagged with ``jobId``).
        """
        duration_ms = job.elapsed_ms
        if not result_meta:
            result_meta = _answer_meta(self.root / job.conversation_id, job.job_id)
        with self._owned(job) as owned:
            directory, status = owned.directory, owned.status
            now = status["heartbeatAt"]
            status.update(
                status="completed",
                completedAt=now,
                updatedAt=now,
                progress=_progress(100, "Research complete", duration_ms, job.attempt),
            )
            if result_meta:
                status["result"] = result_meta
            owned.then(lambda: self._cleanup(directory, job.marker))
        logger.info(
            "Job completed: %s in %.1f s (attempt %d, tokens %s, cost %s)",
            job.conversation_id,
            duration_ms / 1000,
            job.attempt,
            result_meta.get("tokens", "n/a"),
            result_meta.get("cost", "n/a"),
            extra={
                "conversationId": job.conversation_id,
                "jobId": job.job_id,
                "durationMs": duration_ms,
                "retries": job.attempt - 1,
                **{k: v for k, v in result_meta.items() if k in ("tokens", "cost")},
            },
        )
        return JobStatus.model_validate(status)

    def fail(self, job: Job, error: PplxError) -> JobStatus:
        """Record a failed attempt: back to ``pending`` while retries remain, else ``failed``.

        Errors whose code is in :data:`NON_RETRYABLE` fail the job at once. A
        :class:`RemoteRunFailed` also forgets ``remoteId``: the ended run cannot answer, so the
        next attempt submits a new one.
        """
        with self._owned(job) as owned:
            directory, status = owned.directory, owned.status
            info = _error_info(error, job.attempt)
            retry = (
                error.code not in NON_RETRYABLE
                and not isinstance(error, RunTimedOut)
                and job.attempt <= self.max_job_retries
            )
            if isinstance(error, RemoteRunFailed | RunTimedOut):
                status.pop("submittedAt", None)
                if status.pop("remoteId", None) and retry:
                    info["message"] += " The next attempt submits a new background run."
            status.setdefault("errorHistory", []).append(info)
            if retry:
                _requeue_status(status)
                owned.then(lambda: self._index.requeue(job.marker))
            else:
                status.update(status="failed", error=info, completedAt=status["heartbeatAt"])
                status.pop("progress", None)
                owned.then(lambda: self._cleanup(directory, job.marker))
        _log_failure(job.conversation_id, job.job_id, job.attempt, info, retry)
        return JobStatus.model_validate(status)

    def release(self, job: Job) -> JobStatus:
        """Give ``job`` back unfinished (worker shutting down): ``pending``, attempt not counted."""
        with self._owned(job) as owned:
            status = owned.status
            _requeue_status(status)
            status["attempts"] = max(0, job.attempt - 1)
            owned.then(lambda: self._index.requeue(job.marker))
        logger.info(
            "Job released: %s (worker %s stopping)",
            job.conversation_id,
            job.worker_id,
            extra={"conversationId": job.conversation_id, "jobId": job.job_id},
        )
        return JobStatus.model_validate(status)

    def cancel(self, conversation_id: str) -> JobStatus | None:
        """Cancel the conversation's pending or in_progress job; None if it never had one.

        CONVERSATION_NOT_FOUND if the conversation does not exist.

        A running worker notices at its next heartbeat and stops; an ended job is left as it is.
        """
        directory = self._dir(conversation_id)
        _must_exist(directory)
        with locked(directory):
            status = _read_status(directory / STATUS_FILE)
            if status is None:
                return None
            if status.get("status") in _ACTIVE:
                self._finish(directory, status, str(status.get("queueKey", "")), "cancelled")
                logger.info(
                    "Job cancelled: %s",
                    conversation_id,
                    extra={"conversationId": conversation_id, "jobId": status.get("jobId")},
                )
        return JobStatus.model_validate(status)

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
        claimed = self._index.claimed()
        self._leases.keep_only(claimed)
        recovered = 0
        for marker in claimed:
            try:
                recovered += self._recover(marker)
            except PplxError as exc:
                logger.error("Job %s cannot be recovered: %s", conversation_of(marker), exc)
        return recovered + self._rebuild_index(set(claimed))

    def _recover(self, marker: str) -> int:
        conversation_id = conversation_of(marker)
        directory = self.root / conversation_id
        if not CONVERSATION_ID_RE.match(conversation_id) or not _present(directory):
            self._index.drop(marker)
            return 0
        with locked(directory):
            status = _read_status(directory / STATUS_FILE)
            if status is None or status.get("queueKey") != marker or status["status"] in _DONE:
                self._index.drop(marker)
                return 0
            if status["status"] == "pending":
                # A claimant died between renaming the marker and taking the job.
                if self._leases.saw(marker, status.get("updatedAt")) <= self.lease_seconds:
                    return 0
                self._index.requeue(marker)
                return 1
            age = self._leases.saw(marker, status.get("heartbeatAt") or status.get("updatedAt"))
            if age <= self.lease_seconds:
                return 0
            attempt = int(status.get("attempts", 1))
            info = {
                "code": "JOB_LEASE_EXPIRED",
                "message": (
                    f"Worker {status.get('workerId')} sent no heartbeat for {age:.0f} s "
                    f"(lease {self.lease_seconds:g} s): it crashed or stalled, so the attempt "
                    "was abandoned."
                ),
                "at": now_iso(),
                "attempt": attempt,
            }
            status.setdefault("errorHistory", []).append(info)
            retry = attempt <= self.max_job_retries
            if retry:
                _requeue_status(status)
                _write(directory / STATUS_FILE, status)
                self._index.requeue(marker)
            else:
                self._finish(directory, status, marker, "failed", info)
        _log_failure(conversation_id, str(status.get("jobId")), attempt, info, retry)
        return 1

    def _rebuild_index(self, claimed: set[str]) -> int:
        known = set(self._index.pending()) | claimed
        rebuilt = 0
        for directory in self._conversation_dirs():
            if not (directory / JOB_FILE).exists():
                continue
            try:
                rebuilt += self._rebuild_marker(directory, known)
            except PplxError as exc:
                logger.error("Job %s cannot be indexed: %s", directory.name, exc)
        if rebuilt:
            logger.warning("Job index: re-created %d missing marker(s)", rebuilt)
        return rebuilt

    def _rebuild_marker(self, directory: Path, known: set[str]) -> int:
        status = _read_status(directory / STATUS_FILE)
        marker = status.get("queueKey") if status else None
        if not status or not isinstance(marker, str) or marker in known:
            return 0
        with locked(directory):
            status = _read_status(directory / STATUS_FILE)
            if status is None or status.get("queueKey") != marker:
                return 0
            if self._index.pending_path(marker).exists():
                return 0
            if self._index.claimed_path(marker).exists():
                return 0
            if status["status"] == "pending":
                self._index.add_pending(marker, directory / JOB_FILE)
            elif status["status"] == "in_progress":
                self._index.add_claimed(marker)
            else:
                return 0
        return 1

    # -- reading -------------------------------------------------------------------------------

    def status(self, conversation_id: str) -> JobStatus | None:
        """The conversation's status.json, or None if no job ever ran for it."""
        directory = self._dir(conversation_id)
        data = _read_status(directory / STATUS_FILE)
        return None if data is None else _status_model(data, directory)

    def answering_since(self, conversation_id: str) -> str | None:
        """When the follow-up still being answered was asked (ISO 8601), or None if none is."""
        marker = answering.live(self._dir(conversation_id))
        return None if marker is None else str(marker.get("startedAt") or "") or None

    def pending_count(self) -> int:
        """How many jobs wait to be claimed (from the marker index)."""
        return len(self._index.pending())

    def jobs(self, states: tuple[JobState, ...] | None = None) -> list[JobStatus]:
        """Every conversation's job status (newest first), optionally only in ``states``.

        A damaged or unreadable status.json is skipped with a warning, so it never hides the
        others.
        """
        found = []
        for directory in self._conversation_dirs():
            try:
                real_directory(directory)  # a planted link is reported, never read through
                data = _read_status(directory / STATUS_FILE)
                if data is None or (states is not None and data.get("status") not in states):
                    continue
                found.append(_status_model(data, directory))
            except (ConversationCorrupted, FilesystemError) as exc:
                logger.warning("Skipping the job status of %s: %s", directory.name, exc)
        found.sort(key=lambda s: s.started_at, reverse=True)
        return found

    # -- helpers -------------------------------------------------------------------------------

    def _dir(self, conversation_id: str) -> Path:
        return self.root / validate_conversation_id(conversation_id)

    def _conversation_dirs(self) -> list[Path]:
        try:
            names = os.listdir(self.root)
        except FileNotFoundError:
            return []
        return [self.root / name for name in names if CONVERSATION_ID_RE.match(name)]

    def _owned(self, job: Job) -> _Owned:
        return _Owned(self.root / job.conversation_id, job, self._leases)

    def _finish(
        self,
        directory: Path,
        status: dict[str, Any],
        marker: str,
        state: JobState,
        error: dict[str, Any] | None = None,
    ) -> None:
        now = now_iso()
        status.update(status=state, updatedAt=now, completedAt=now)
        status.pop("progress", None)
        if error is not None:
            status["error"] = error
        _write(directory / STATUS_FILE, status)
        self._cleanup(directory, marker)

    def _cleanup(self, directory: Path, marker: str) -> None:
        _unlink(directory / JOB_FILE)
        if marker:
            self._index.drop(marker)


class _Owned:
    """``with`` block: lock, read status.json, check the worker still owns the job, write it back.

    Actions registered with :meth:`then` run after the status is written, still under the lock
    (removing job.json before the status says completed would lose the job on a crash).
    """

    def __init__(self, directory: Path, job: Job, leases: LeaseClock) -> None:
        self.directory = directory
        self.status: dict[str, Any] = {}
        self._job = job
        self._leases = leases
        self._lock = locked(directory)
        self._after: list[Callable[[], None]] = []

    def then(self, action: Callable[[], None]) -> None:
        """Run ``action`` once the status is written."""
        self._after.append(action)

    def __enter__(self) -> _Owned:
        job = self._job
        if not _present(self.directory):
            raise _lease_lost(job, "gone (its conversation was deleted)")
        self._lock.__enter__()
        try:
            status = _check_owner(_read_status(self.directory / STATUS_FILE), job)
        except BaseException:
            self._lock.__exit__(None, None, None)
            raise
        status["heartbeatAt"] = now_iso()
        self.status = status
        return self

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        try:
            if exc_type is None:
                _write(self.directory / STATUS_FILE, self.status)
                self._leases.saw(self._job.marker, self.status["heartbeatAt"])
                for action in self._after:
                    action()
        finally:
            self._lock.__exit__(None, None, None)


def _check_owner(status: dict[str, Any] | None, job: Job) -> dict[str, Any]:
    """``status`` if it says ``job``'s attempt runs on its worker; else LeaseLost."""
    if status is None or not (
        status.get("status") == "in_progress"
        and status.get("jobId") == job.job_id
        and status.get("workerId") == job.worker_id
        and status.get("attempts") == job.attempt
    ):
        state = "gone" if status is None else status.get("status")
        owner = " under another worker" if state == "in_progress" else ""
        raise _lease_lost(job, f"{state}{owner}")
    return status


def _lease_lost(job: Job, state: str) -> LeaseLost:
    return LeaseLost(
        f"Job {job.job_id} of conversation {job.conversation_id} (attempt {job.attempt}) is no "
        f"longer owned by worker {job.worker_id}: it is {state}. This worker's result was "
        "discarded.",
        conversation_id=job.conversation_id,
        job_id=job.job_id,
    )


def _present(directory: Path) -> bool:
    """Whether ``directory`` is a real folder (a symbolic link planted there is not)."""
    return os.path.isdir(directory) and not os.path.islink(directory)


def _must_exist(directory: Path) -> None:
    if not _present(directory):
        raise ConversationNotFound(
            f"Conversation {directory.name} does not exist. Start a new conversation with "
            "`perplexity_deep_research` first.",
            conversation_id=directory.name,
        )


def _read(path: Path) -> dict[str, Any] | None:
    try:
        raw = read_bytes(path)
    except FileNotFoundError:
        return None
    try:
        data = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ConversationCorrupted(
            f"{path} is not valid JSON ({exc}). Restore it from a backup or delete it to reset "
            "the job state.",
            path=str(path),
        ) from exc
    if not isinstance(data, dict):
        raise ConversationCorrupted(
            f"{path} does not hold a JSON object. Delete it to reset the job state.",
            path=str(path),
        )
    return data


def _read_bytes_or_none(path: Path) -> bytes | None:
    try:
        return read_bytes(path)
    except FileNotFoundError:
        return None


def _read_status(path: Path) -> dict[str, Any] | None:
    """status.json, checked for the fields the queue acts on; ``None`` if no job ever ran."""
    status = _read(path)
    if status is None:
        return None
    state, attempts = status.get("status"), status.get("attempts", 0)
    if state not in _ACTIVE + _DONE or not isinstance(attempts, int):
        raise ConversationCorrupted(
            f"{path} holds no valid job state (status {state!r}, attempts {attempts!r}). "
            "Delete it to reset the job state.",
            path=str(path),
        )
    return status


def _status_model(data: dict[str, Any], directory: Path) -> JobStatus:
    try:
        return JobStatus.model_validate(data)
    except ValueError as exc:
        raise ConversationCorrupted(
            f"{directory / STATUS_FILE} does not match the status schema: {exc}. Delete it to "
            "reset the job state.",
            path=str(directory / STATUS_FILE),
        ) from exc


def _write(path: Path, data: dict[str, Any]) -> None:
    # Compact JSON: json.dumps with indent falls back to the pure-Python encoder (≈3× slower).
    atomic_write_bytes(path, json.dumps(data, ensure_ascii=False).encode("utf-8"))


def _unlink(path: Path) -> None:
    with fs_errors(path, "remove"):
        path.unlink(missing_ok=True)


def _answer_meta(directory: Path, job_id: str) -> dict[str, Any]:
    try:
        conversation = _read(directory / "conversation.json")
    except PplxError:
        return {}
    message = _tagged((conversation or {}).get("messages") or [], job_id)
    if message is None:
        return {}
    meta: dict[str, Any] = {}
    tokens = (message.get("usage") or {}).get("totalTokens")
    cost = (message.get("cost") or {}).get("totalCost")
    if tokens is not None:
        meta["tokens"] = tokens
    if cost is not None:
        meta["cost"] = cost
    return meta


def _messages(document: bytes) -> list[Any]:
    try:
        messages = json.loads(document).get("messages")
    except (ValueError, RecursionError, AttributeError):
        return []
    return messages if isinstance(messages, list) else []


def _tagged(messages: list[Any], job_id: str) -> dict[str, Any] | None:
    """The last message carrying ``jobId = job_id`` (the job's stored answer), if any."""
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("jobId") == job_id:
            return message
    return None


def _progress(percentage: int, message: str, elapsed_ms: int, attempt: int) -> dict[str, Any]:
    return {
        "percentage": percentage,
        "message": message,
        "elapsedMs": elapsed_ms,
        "attempt": attempt,
    }


def _requeue_status(status: dict[str, Any]) -> None:
    status.update(status="pending", updatedAt=now_iso())
    for key in ("workerId", "progress"):
        status.pop(key, None)


def _error_info(error: BaseException, attempt: int) -> dict[str, Any]:
    if isinstance(error, PplxError):
        code, message = error.code, error.message
    else:
        code, message = PplxError.code, f"{type(error).__name__}: {error}"
    return {"code": code, "message": redact(message), "at": now_iso(), "attempt": attempt}


def _lost_job_error(status: dict[str, Any]) -> dict[str, Any]:
    return {
        "code": "FILESYSTEM_ERROR",
        "message": (
            f"job.json of conversation {status.get('conversationId')} is missing or belongs to "
            "another job, so the request is lost. Ask again with a follow-up."
        ),
        "at": now_iso(),
        "attempt": status.get("attempts", 0),
    }


def _log_failure(
    conversation_id: str, job_id: str, attempt: int, info: dict[str, Any], retry: bool
) -> None:
    extra = {
        "conversationId": conversation_id,
        "jobId": job_id,
        "attempt": attempt,
        "error": info,
        "willRetry": retry,
    }
    if retry:
        logger.warning(
            "Job failed: %s attempt %d: %s: %s (will retry)",
            conversation_id,
            attempt,
            info["code"],
            info["message"],
            extra=extra,
        )
    else:
        logger.error(
            "Job failed: %s permanently after %d attempt(s): %s: %s",
            conversation_id,
            attempt,
            info["code"],
            info["message"],
            extra=extra,
        )
