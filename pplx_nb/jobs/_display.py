"""A job status as the human-readable message shown by the MCP tools and the notebook."""

from __future__ import annotations

from pplx_nb._models import JobStatus

__all__ = ["format_status_message"]


def format_status_message(status: JobStatus) -> str:
    """Markdown text for a job status: state, progress, ``Retry Attempt: N`` and earlier errors."""
    cid = status.conversation_id
    lines: list[str]
    if status.status == "pending":
        lines = [f"⏳ **Research queued** — conversation `{cid}` is waiting for a worker."]
    elif status.status == "in_progress":
        lines = [f"🔬 **Research in progress** — conversation `{cid}`."]
        if status.progress is not None:
            p = status.progress
            lines.append(
                f"Progress: {p.percentage}% — {p.message} "
                f"(elapsed {p.elapsed_ms / 1000:.0f} s, attempt {p.attempt})"
            )
    elif status.status == "completed":
        attempts = f"{status.attempts} attempt{'s' if status.attempts != 1 else ''}"
        return f"✅ **Research completed** at {status.completed_at} ({attempts})."
    elif status.status == "failed":
        lines = [f"❌ **Research failed** after {status.attempts} attempt(s)."]
        if status.error is not None:
            lines.append(f"Error: {status.error.code}: {status.error.message}")
        lines.append("Ask again with a follow-up in research mode.")
    else:
        return f"🚫 **Research cancelled** — conversation `{cid}`."
    if status.status in ("pending", "in_progress"):
        upcoming = status.attempts + (1 if status.status == "pending" else 0)
        if upcoming > 1:
            lines.insert(1, f"Retry Attempt: {upcoming}")
        lines.append("Check again with `get_conversation_history` to see the result when it ends.")
    if status.error_history:
        lines += ["", "**Error history**"]
        lines += [
            f"- attempt {e.attempt or '?'}: {e.code}: {e.message}" for e in status.error_history
        ]
    return "\n".join(lines)
