"""The job side's log lines: one per transition, with the ids and numbers as ``extra`` fields."""

from __future__ import annotations

from pplx_nb._logging import get_logger
from pplx_nb._models import ErrorInfo, JobResult, JobStatus
from pplx_nb.jobs._job import Job

__all__ = [
    "cancelled",
    "claimed",
    "completed",
    "enqueued",
    "failed",
    "logger",
    "released",
    "result_meta_of",
]

logger = get_logger("pplx_nb.jobs")


def enqueued(status: JobStatus) -> None:
    """A job was queued."""
    logger.info(
        "Job enqueued: %s (tool %s, priority %d)",
        status.conversation_id,
        status.tool_name,
        status.priority,
        extra={
            "conversationId": status.conversation_id,
            "jobId": status.job_id,
            "tool": status.tool_name,
        },
    )


def claimed(job: Job) -> None:
    """A worker claimed a job."""
    logger.info(
        "Job dequeued: %s (priority %d, attempt %d)",
        job.conversation_id,
        job.priority,
        job.attempt,
        extra={
            "conversationId": job.conversation_id,
            "jobId": job.job_id,
            "priority": job.priority,
            "workerId": job.worker_id,
        },
    )


def completed(job: Job, duration_ms: int, meta: JobResult) -> None:
    """A job completed; its tokens and cost when known."""
    logger.info(
        "Job completed: %s in %.1f s (attempt %d, tokens %s, cost %s)",
        job.conversation_id,
        duration_ms / 1000,
        job.attempt,
        meta.get("tokens", "n/a"),
        meta.get("cost", "n/a"),
        extra={
            "conversationId": job.conversation_id,
            "jobId": job.job_id,
            "durationMs": duration_ms,
            "retries": job.attempt - 1,
            **{k: v for k, v in meta.items() if k in ("tokens", "cost")},
        },
    )


def released(job: Job) -> None:
    """A stopping worker gave a job back."""
    logger.info(
        "Job released: %s (worker %s stopping)",
        job.conversation_id,
        job.worker_id,
        extra={"conversationId": job.conversation_id, "jobId": job.job_id},
    )


def cancelled(status: JobStatus) -> None:
    """A job was cancelled."""
    logger.info(
        "Job cancelled: %s",
        status.conversation_id,
        extra={"conversationId": status.conversation_id, "jobId": status.job_id},
    )


def failed(
    conversation_id: str, job_id: str | None, attempt: int, info: ErrorInfo, retry: bool
) -> None:
    """Log a failed attempt: a warning when it is retried, an error when the job ends failed."""
    extra = {
        "conversationId": conversation_id,
        "jobId": job_id,
        "attempt": attempt,
        "error": info.to_json_dict(),
        "willRetry": retry,
    }
    if retry:
        logger.warning(
            "Job failed: %s attempt %d: %s: %s (will retry)",
            conversation_id,
            attempt,
            info.code,
            info.message,
            extra=extra,
        )
    else:
        logger.error(
            "Job failed: %s permanently after %d attempt(s): %s: %s",
            conversation_id,
            attempt,
            info.code,
            info.message,
            extra=extra,
        )


def result_meta_of(answer: object) -> JobResult:
    """Tokens and cost of what a job produced (an Answer, a Message, or nothing)."""
    usage = getattr(answer, "usage", None)
    cost = getattr(answer, "cost", None)
    meta: JobResult = {}
    if usage is not None and getattr(usage, "total_tokens", None) is not None:
        meta["tokens"] = usage.total_tokens
    if cost is not None and getattr(cost, "total_cost", None) is not None:
        meta["cost"] = round(float(cost.total_cost), 6)
    return meta
