"""The job side's log lines: one per transition, with the ids and numbers as ``extra`` fields."""

from __future__ import annotations

from typing import Any

from pplx_nb._logging import get_logger
from pplx_nb._models import ErrorInfo

__all__ = ["log_failure", "logger", "result_meta_of"]

logger = get_logger("pplx_nb.jobs")


def log_failure(
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


def result_meta_of(answer: object) -> dict[str, Any]:
    """Tokens and cost of what a job produced (an Answer, a Message, or nothing)."""
    usage = getattr(answer, "usage", None)
    cost = getattr(answer, "cost", None)
    meta: dict[str, Any] = {}
    if usage is not None and getattr(usage, "total_tokens", None) is not None:
        meta["tokens"] = usage.total_tokens
    if cost is not None and getattr(cost, "total_cost", None) is not None:
        meta["cost"] = round(float(cost.total_cost), 6)
    return meta
