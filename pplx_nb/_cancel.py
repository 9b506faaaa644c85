"""What a cancel did, in words every surface shows (the notebook and MCP add how to follow up)."""

from __future__ import annotations

from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from pplx_nb._models import JobResult, JobStatus

__all__ = ["CancelFacts", "cancel_facts", "cancel_outcome", "cancelled_now"]


class CancelFacts(TypedDict):
    """What a cancel did to a run, under the keys MCP results give it."""

    remoteCancelled: bool | None
    """Whether the API confirmed the run stopped; ``None`` when no run was asked to stop."""
    costUnknown: bool
    """A run was started and reported no cost, so what it cost is unknown."""


def cancel_facts(status: JobStatus | None) -> CancelFacts:
    """``remoteCancelled`` (None when no run was asked to stop) and ``costUnknown`` of a status
    returned by ``Researcher.cancel``."""
    result: JobResult = _result(status) if status else {}
    remote = result.get("remoteCancelled")
    return {
        "remoteCancelled": remote if isinstance(remote, bool) else None,
        "costUnknown": result.get("costUnknown") is True,
    }


def cancelled_now(status: JobStatus | None) -> bool:
    """Whether the cancel that returned ``status`` cancelled the research (not one that had
    ended before it, a cancelled one included)."""
    return (
        status is not None
        and status.status == "cancelled"
        and not _result(status).get("alreadyEnded")
    )


def cancel_outcome(conversation_id: str, status: JobStatus | None) -> str:
    """One or two sentences: what the cancel of ``conversation_id``'s research did."""
    if status is None:
        return f"Conversation {conversation_id} has no research job: there was nothing to cancel."
    if status.status == "completed":
        cost = _result(status).get("cost")
        paid = f"${cost:.4f}" if isinstance(cost, int | float) else "its cost is unknown"
        return (
            f"The research of conversation {conversation_id} had already finished: its report "
            f"is stored ({paid}). Nothing was cancelled."
        )
    if status.status == "cancelled" and not cancelled_now(status):
        when = f" at {status.completed_at}" if status.completed_at else ""
        return (
            f"The research of conversation {conversation_id} was already cancelled{when}: "
            "nothing was sent now."
        )
    if status.status != "cancelled":
        return (
            f"The research of conversation {conversation_id} had already ended "
            f"({status.status}): nothing was cancelled."
        )
    facts = cancel_facts(status)
    said = f"The research of conversation {conversation_id} is cancelled."
    if status.remote_id and facts["remoteCancelled"] is False:
        said += (
            f" The API did not confirm that its run {status.remote_id} stopped (the worker "
            "running it asks again when it notices): check your Perplexity usage."
        )
    elif status.remote_id and facts["remoteCancelled"]:
        said += f" Its run {status.remote_id} was stopped at the API."
    elif status.remote_id:
        said += f" Its run {status.remote_id} was asked to stop at the API."
    if facts["costUnknown"]:
        said += " A cancelled run reports no usage, so what it cost is unknown."
    else:
        said += " It had not started a run: nothing was billed."
    return said


def _result(status: JobStatus) -> JobResult:
    return status.result or {}
