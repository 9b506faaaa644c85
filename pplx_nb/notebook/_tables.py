"""Tables for the magics: conversations and jobs as DataFrames, settings as HTML, web results and
what a cancel did as the lines a cell shows."""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import pandas as pd

    from pplx_nb._models import ConversationSummary, JobStatus
    from pplx_nb._web_results import WebResults
    from pplx_nb.notebook.display import Bundle

__all__ = [
    "CONVERSATION_COLUMNS",
    "JOB_COLUMNS",
    "cancel_bundle",
    "conversations_frame",
    "jobs_frame",
    "web_results_bundle",
]

CONVERSATION_COLUMNS = (
    "conversation_id",
    "created_at",
    "updated_at",
    "message_count",
    "first_query",
    "tools",
    "models",
    "parent_conversation_id",
    "job_status",
    "path",
)
JOB_COLUMNS = (
    "conversation_id",
    "status",
    "percentage",
    "step",
    "attempts",
    "started_at",
    "completed_at",
    "error",
)
"""A job table a notebook shows without scrolling sideways: times to the second, no tool name
(every job here is a deep research) and no heartbeat time."""


def conversations_frame(summaries: Sequence[ConversationSummary]) -> pd.DataFrame:
    """One row per conversation, timestamps as UTC datetimes."""
    import pandas as pd

    rows = [{column: getattr(s, column) for column in CONVERSATION_COLUMNS} for s in summaries]
    frame = pd.DataFrame(rows, columns=list(CONVERSATION_COLUMNS))
    for column in ("created_at", "updated_at"):
        frame[column] = pd.to_datetime(frame[column], utc=True, format="ISO8601")
    return frame


def jobs_frame(statuses: Sequence[JobStatus]) -> pd.DataFrame:
    """One row per research job: state, progress, attempts, times and the last error."""
    import pandas as pd

    rows = []
    for status in statuses:
        progress = status.progress
        rows.append(
            {
                "conversation_id": status.conversation_id,
                "status": status.status,
                "tool_name": status.tool_name,
                "percentage": 100
                if status.status == "completed"
                else (progress.percentage if progress else 0),
                "step": "" if status.done or progress is None else progress.message,
                "attempts": status.attempts,
                "started_at": status.started_at,
                "completed_at": status.completed_at,
                "error": f"{status.error.code}: {status.error.message}" if status.error else None,
            }
        )
    frame = pd.DataFrame(rows, columns=list(JOB_COLUMNS))
    for column in ("started_at", "completed_at"):
        frame[column] = pd.to_datetime(frame[column], utc=True, format="ISO8601").dt.floor("s")
    return frame.sort_values("started_at", ascending=False, ignore_index=True)


def settings_bundle(settings: Mapping[str, Any]) -> Bundle:
    """Redacted settings as a two-column table."""
    rows = "".join(
        f"<tr><td><code>{html.escape(str(key))}</code></td><td>{html.escape(str(value))}</td></tr>"
        for key, value in sorted(settings.items())
    )
    plain = "\n".join(f"{key} = {value}" for key, value in sorted(settings.items()))
    return {
        "text/html": f"<table><tr><th>setting</th><th>value</th></tr>{rows}</table>",
        "text/plain": plain,
    }


def web_results_bundle(results: WebResults) -> Bundle:
    """Search API results as a table (title linked, date, snippet) under a line saying what they
    are; with the conversation they were saved in and how to follow up."""
    head = f"🔎 **{len(results)} web result(s)** · Search API, no answer generated"
    plain_head = f"{len(results)} web result(s) · Search API, no answer generated"
    if results.conversation_id:
        saved = (
            f"Saved as conversation `{results.conversation_id}`: "
            "`%pplx_followup` asks about these results."
        )
        head += f"  \n<sub>{saved}</sub>"
        plain_head += "\n" + saved.replace("`", "")
    return {
        "text/markdown": f"{head}\n\n{results.to_markdown()}",
        "text/plain": f"{plain_head}\n{results.to_text()}",
    }


def cancel_bundle(conversation_id: str, status: JobStatus | None) -> Bundle:
    """One line: what ``%pplx_cancel`` did, and how to go on when the research was cancelled."""
    from pplx_nb._cancel import cancel_outcome, cancelled_now

    said = cancel_outcome(conversation_id, status)
    if status is not None and status.status == "cancelled":
        said += " Ask again with `%pplx_followup --research`, or follow up with `%pplx_followup`."
    icon = "🚫" if cancelled_now(status) else "ℹ️"
    rich = html.escape(said)
    for command in ("%pplx_followup --research", "%pplx_followup"):
        rich = rich.replace(f"`{command}`", f"<code>{command}</code>", 1)
    return {"text/html": f"<div>{icon} {rich}</div>", "text/plain": said.replace("`", "")}
