"""The job state machine: pure functions from one :class:`JobStatus` to the next.

No I/O and no clock: each transition takes the status it starts from and ``now`` (an ISO 8601
stamp) and returns a new status, leaving its argument untouched. The queue reads a status under
the conversation's lock, applies one transition and writes the result, so every rule about a
job's lifecycle lives here and is testable without a disk::

    (queued by the TypeScript server) ──adopt──▶ pending
    pending ──start_attempt──▶ in_progress ──complete──▶ completed
       ▲                          │  │  └──fail_or_retry (no retry left)──▶ failed
       └──fail_or_retry / release / expire_lease (retry left)
    pending | in_progress ──cancel──▶ cancelled ──finish_cancelled──▶ completed
    pending | in_progress | failed ──finish_late──▶ completed

A cancelled job whose run had already finished at the API (the cancel came too late to stop it)
ends ``completed`` after all once its report is stored: that report is paid for. So does a job
whose report an attempt that lost its lease hands over (:func:`finish_late`), and a run such an
attempt submitted without recording its id is recorded for the next attempt (:func:`hand_over_run`).

While a job is ``in_progress``, only the worker holding the attempt may write
(:func:`check_owner`); heartbeats, progress, submissions and noted errors keep it there, and each
of them moves ``updatedAt`` with ``heartbeatAt``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pplx_nb._errors import (
    LeaseLost,
    PplxError,
    RemoteRunFailed,
    RunRequiresAction,
    RunTimedOut,
    redact,
)
from pplx_nb._models import (
    ACTIVE_JOB_STATES,
    ErrorInfo,
    JobRecord,
    JobResult,
    JobState,
    JobStatus,
    Progress,
)
from pplx_nb.jobs._job import START_PROGRESS, Job

__all__ = [
    "LEASE_EXPIRED",
    "NON_RETRYABLE",
    "adopt",
    "begin_submission",
    "cancel",
    "check_owner",
    "complete",
    "end_submission",
    "error_info",
    "expire_lease",
    "fail_or_retry",
    "finish_cancelled",
    "finish_late",
    "hand_over_run",
    "heartbeat",
    "lease_lost",
    "lost_request",
    "new_status",
    "note_error",
    "record_remote_id",
    "release",
    "report",
    "retryable",
    "start_attempt",
]

NON_RETRYABLE = frozenset(
    {
        "VALIDATION_ERROR",
        "API_KEY_INVALID",
        "INVALID_INPUT",
        "CONVERSATION_NOT_FOUND",
        "CONVERSATION_CORRUPTED",
        "SUBMISSION_UNKNOWN",
        "RUN_REQUIRES_ACTION",
        "BUDGET_EXCEEDED",
    }
)
"""Error codes that fail a job at once: running it again would fail the same way (a run that
stopped to wait for an action would stop again, paid for again; a cap reached stays reached
until it resets), or (a submission whose outcome is unknown) might pay for a second run."""

LEASE_EXPIRED = LeaseLost.code


# -- the queue's side ---------------------------------------------------------------------------


def new_status(record: JobRecord, now: str) -> JobStatus:
    """The ``pending`` status of a job just queued (``request`` kept for a deliberate retry)."""
    return JobStatus(
        conversation_id=record.conversation_id,
        status="pending",
        tool_name=record.tool_name,
        started_at=now,
        updated_at=now,
        attempts=0,
        error_history=[],
        priority=record.priority,
        job_id=record.job_id,
        queue_key=record.queue_key,
        request=record.request,
    )


def adopt(
    status: JobStatus, record: JobRecord, job_id: str, marker: str, now: str
) -> tuple[JobStatus, JobRecord]:
    """A pending job the TypeScript server queued, made ours: our ids beside its fields.

    The record keeps its ``params`` and ``createdAt`` (so that server can still read it) and the
    status its history; the job then runs as any other.
    """
    record = record.model_copy(
        update={
            "job_id": job_id,
            "conversation_id": status.conversation_id,
            "tool_name": record.tool_name or status.tool_name,
            "enqueued_at": record.created_at or now,
            "queue_key": marker,
        }
    )
    status = status.model_copy(
        update={"job_id": job_id, "queue_key": marker, "priority": record.priority}
    )
    return status, record


def start_attempt(status: JobStatus, worker_id: str, now: str) -> JobStatus:
    """A pending job claimed by ``worker_id``: ``in_progress``, its next attempt counted."""
    attempt = status.attempts + 1
    return status.model_copy(
        update={
            "status": "in_progress",
            "attempts": attempt,
            "worker_id": worker_id,
            "heartbeat_at": now,
            "updated_at": now,
            "progress": Progress(
                percentage=START_PROGRESS[0],
                message=START_PROGRESS[1],
                elapsed_ms=0,
                attempt=attempt,
            ),
        }
    )


def lost_request(status: JobStatus, now: str) -> JobStatus:
    """A claimed job whose request (job.json) is gone or belongs to another job: ``failed``."""
    info = ErrorInfo(
        code="FILESYSTEM_ERROR",
        message=(
            f"job.json of conversation {status.conversation_id} is missing or belongs to "
            "another job, so the request is lost. Ask again with a follow-up."
        ),
        at=now,
        attempt=status.attempts,
    )
    return _ended(status, "failed", now, info)


def cancel(status: JobStatus, now: str) -> JobStatus:
    """The job cancelled if it is still pending or running; an ended job stays as it is.

    A job whose run was submitted records its cost as unknown (``result.costUnknown``): the API
    reports no usage for a cancelled run.
    """
    if status.status not in ACTIVE_JOB_STATES:
        return status
    cancelled = _ended(status, "cancelled", now)
    if status.remote_id or status.submitting_at:
        unknown: JobResult = {"cost": None, "costUnknown": True}
        cancelled = cancelled.model_copy(update={"result": unknown})
    return cancelled


def finish_cancelled(status: JobStatus, result: JobResult, now: str) -> JobStatus:
    """A cancelled job whose run had finished before the cancel reached it, its report now
    stored: ``completed`` with the run's ``result`` (tokens, cost) and
    ``result.finishedBeforeCancel``. Any other status stays as it is."""
    if status.status != "cancelled":
        return status
    elapsed = _elapsed_ms(status.started_at, now)
    return complete(status, elapsed, {**result, "finishedBeforeCancel": True}, now)


def finish_late(status: JobStatus, result: JobResult, now: str) -> JobStatus:
    """The job of ``status``, its report handed over by an attempt that lost its lease and now
    stored: ``completed`` with ``result`` and ``result.handedOver`` (a cancelled job as
    :func:`finish_cancelled` says). Its error, if it had failed meanwhile (another attempt found
    the submission's outcome unknown), stays in ``errorHistory`` only. A completed job stays as
    it is."""
    if status.status == "cancelled":
        return finish_cancelled(status, result, now)
    if status.status == "completed":
        return status
    elapsed = _elapsed_ms(status.started_at, now)
    completed = complete(status, elapsed, {**result, "handedOver": True}, now)
    return completed.model_copy(update={"error": None})


def hand_over_run(status: JobStatus, job_id: str, remote_id: str, now: str) -> JobStatus | None:
    """Run ``remote_id`` of job ``job_id`` recorded for the job's next attempt to follow, by an
    attempt that submitted it and lost its lease before recording it (the owner check is
    replaced by these: same job, still pending or running, and following no other run).

    ``None`` when the job cannot take it. Not a heartbeat: the job's lease is left as it is.
    """
    if (
        status.job_id != job_id
        or status.status not in ACTIVE_JOB_STATES
        or status.remote_id not in (None, remote_id)
    ):
        return None
    return status.model_copy(
        update={
            "remote_id": remote_id,
            "submitted_at": status.submitted_at or status.submitting_at or now,
            "submitting_at": None,
            "updated_at": now,
        }
    )


def expire_lease(
    status: JobStatus, age: float, lease_seconds: float, max_retries: int, now: str
) -> tuple[JobStatus, bool]:
    """A running job whose worker sent no heartbeat for ``age`` seconds (over the lease).

    The lost attempt counts as a failed one (``JOB_LEASE_EXPIRED``): back to ``pending`` while
    retries remain, else ``failed``. Returns the new status and whether the job runs again.
    """
    info = ErrorInfo(
        code=LEASE_EXPIRED,
        message=(
            f"Worker {status.worker_id} sent no heartbeat for {age:.0f} s (lease "
            f"{lease_seconds:g} s): it crashed or stalled, so the attempt was abandoned."
        ),
        at=now,
        attempt=status.attempts,
    )
    history = [*status.error_history, info]
    if status.attempts <= max_retries:
        return _requeued(status.model_copy(update={"error_history": history}), now), True
    return _ended(status.model_copy(update={"error_history": history}), "failed", now, info), False


# -- the worker's side (each also a heartbeat) --------------------------------------------------


def check_owner(status: JobStatus | None, job: Job) -> JobStatus:
    """``status`` if it says ``job``'s attempt still runs on its worker; else :class:`LeaseLost`."""
    if (
        status is not None
        and status.status == "in_progress"
        and status.job_id == job.job_id
        and status.worker_id == job.worker_id
        and status.attempts == job.attempt
    ):
        return status
    state = "gone" if status is None else status.status
    owner = " under another worker" if state == "in_progress" else ""
    raise lease_lost(job, f"{state}{owner}")


def lease_lost(job: Job, state: str) -> LeaseLost:
    """The LeaseLost a worker gets for ``job`` when it is now ``state``."""
    return LeaseLost(
        f"Job {job.job_id} of conversation {job.conversation_id} (attempt {job.attempt}) is no "
        f"longer owned by worker {job.worker_id}: it is {state}. This worker's result was "
        "discarded.",
        conversation_id=job.conversation_id,
        job_id=job.job_id,
    )


def heartbeat(status: JobStatus, now: str, elapsed_ms: int) -> JobStatus:
    """The worker is alive: ``heartbeatAt`` and ``updatedAt`` move, and the elapsed time."""
    update: dict[str, Any] = _beat(now)
    if status.progress is not None:
        update["progress"] = status.progress.model_copy(update={"elapsed_ms": elapsed_ms})
    return status.model_copy(update=update)


def report(
    status: JobStatus, percentage: int, message: str, elapsed_ms: int, now: str
) -> JobStatus:
    """Progress recorded (percentage clamped to 0–100); also a heartbeat."""
    progress = Progress(
        percentage=max(0, min(100, int(percentage))),
        message=message,
        elapsed_ms=elapsed_ms,
        attempt=status.attempts,
    )
    return status.model_copy(update={"progress": progress, **_beat(now)})


def begin_submission(status: JobStatus, now: str) -> JobStatus:
    """A paid submission is being sent; until its outcome is known a run may exist."""
    return status.model_copy(update={"submitting_at": now, **_beat(now)})


def end_submission(status: JobStatus, now: str) -> JobStatus:
    """The submission provably started no run."""
    return status.model_copy(update={"submitting_at": None, **_beat(now)})


def record_remote_id(status: JobStatus, remote_id: str, now: str) -> JobStatus:
    """The background run's id, and when it was submitted (its deadline counts from then)."""
    return status.model_copy(
        update={
            "remote_id": remote_id,
            "submitted_at": status.submitting_at or now,
            "submitting_at": None,
            **_beat(now),
        }
    )


def note_error(status: JobStatus, error: BaseException, now: str) -> JobStatus:
    """An error the runner recovered from, added to ``errorHistory``; the attempt goes on."""
    history = [*status.error_history, error_info(error, status.attempts, now)]
    return status.model_copy(update={"error_history": history, **_beat(now)})


def complete(status: JobStatus, elapsed_ms: int, result: JobResult | None, now: str) -> JobStatus:
    """The job answered: ``completed`` with its progress at 100 and ``result`` (tokens, cost)."""
    update: dict[str, Any] = {
        "status": "completed",
        "completed_at": now,
        "updated_at": now,
        "heartbeat_at": now,
        "progress": Progress(
            percentage=100,
            message="Research complete",
            elapsed_ms=elapsed_ms,
            attempt=status.attempts,
        ),
    }
    if result:
        update["result"] = result
    return status.model_copy(update=update)


def retryable(error: PplxError, attempt: int, max_retries: int) -> bool:
    """Whether an attempt that failed with ``error`` is tried again (the retry policy).

    Not when its code is in :data:`NON_RETRYABLE`, not for a run that hit its deadline (it would
    wait as long again), and not once ``max_retries`` retries followed the first attempt.
    """
    return (
        error.code not in NON_RETRYABLE
        and not isinstance(error, RunTimedOut)
        and attempt <= max_retries
    )


def fail_or_retry(
    status: JobStatus, error: PplxError, max_retries: int, now: str
) -> tuple[JobStatus, bool]:
    """A failed attempt: back to ``pending`` while :func:`retryable`, else ``failed``.

    A run that ended without an answer (:class:`RemoteRunFailed`) or hit its deadline cannot
    answer later, so its remote id is forgotten and the next attempt submits a new one. Returns
    the new status and whether the job runs again.
    """
    retry = retryable(error, status.attempts, max_retries)
    info = error_info(error, status.attempts, now)
    update: dict[str, Any] = _beat(now)
    if isinstance(error, RemoteRunFailed | RunTimedOut):
        update["submitted_at"] = None
        update["remote_id"] = None
        if status.remote_id and retry:
            info = info.model_copy(
                update={"message": info.message + " The next attempt submits a new background run."}
            )
    update["error_history"] = [*status.error_history, info]
    if isinstance(error, RunRequiresAction) and error.cost is not None:
        update["result"] = {"cost": error.cost.total_cost}  # billed, and known
    failed = status.model_copy(update=update)
    if retry:
        return _requeued(failed, now), True
    return failed.model_copy(
        update={"status": "failed", "error": info, "completed_at": now, "progress": None}
    ), False


def release(status: JobStatus, now: str) -> JobStatus:
    """The worker gives the job back unfinished (it is stopping): the attempt is not counted."""
    requeued = _requeued(status.model_copy(update={"heartbeat_at": now}), now)
    return requeued.model_copy(update={"attempts": max(0, status.attempts - 1)})


# -- shared -------------------------------------------------------------------------------------


def error_info(error: BaseException, attempt: int, now: str) -> ErrorInfo:
    """An error as status.json keeps it: code, message (secrets redacted), when, which attempt."""
    if isinstance(error, PplxError):
        code, message = error.code, error.message
    else:
        code, message = PplxError.code, f"{type(error).__name__}: {error}"
    return ErrorInfo(code=code, message=redact(message), at=now, attempt=attempt)


def _elapsed_ms(start: str, now: str) -> int:
    """Milliseconds from ``start`` to ``now`` (ISO 8601 stamps); 0 if either is unreadable."""
    try:
        delta = datetime.fromisoformat(now) - datetime.fromisoformat(start)
    except (TypeError, ValueError):
        return 0
    return max(0, int(delta.total_seconds() * 1000))


def _beat(now: str) -> dict[str, Any]:
    """A heartbeat's fields: ``updatedAt`` moves with ``heartbeatAt``, so a job that runs long
    without new progress never looks stalled to a reader that only knows ``updatedAt`` (the
    TypeScript server resets ``in_progress`` jobs not updated for ten minutes)."""
    return {"heartbeat_at": now, "updated_at": now}


def _requeued(status: JobStatus, now: str) -> JobStatus:
    return status.model_copy(
        update={"status": "pending", "updated_at": now, "worker_id": None, "progress": None}
    )


def _ended(
    status: JobStatus, state: JobState, now: str, error: ErrorInfo | None = None
) -> JobStatus:
    update: dict[str, Any] = {
        "status": state,
        "updated_at": now,
        "completed_at": now,
        "progress": None,
    }
    if error is not None:
        update["error"] = error
    return status.model_copy(update=update)
