"""What a cancel did, in words every surface shows (the notebook and MCP add how to follow up)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pplx_nb._models import JobStatus

__all__ = ["cancel_facts", "cancel_outcome"]


def cancel_facts(status: JobStatus | None) -> dict[str, Any]:
    """``remoteCancelled`` (None when no run was asked to stop) and ``costUnknown`` of a status
    returned by ``Researcher.cancel``."""
    result = ((status.model_extra or {}).get("result") if status else None) or {}
    remote = result.get("remoteCancelled")
    return {
        "remoteCancelled": remote if isinstance(remote, bool) else None,
        "costUnknown": result.get("costUnknown") is True,
    }


def cancel_outcome(conversation_id: str, status: JobStatus | None) -> str:
    """One or two sentences: what the cancel of ``conversation_id``'s research did."""
    if status is None:
        return f"Conversation {conversation_id} has no research job: there was nothing to cancel."
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
