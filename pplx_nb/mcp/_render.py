"""Turning Researcher results and errors into MCP tool results: readable text + structured content.

The text keeps the seed server's headers (🔗 **Conversation Started**, 🆕 **New Conversation
Started** for queued research) so assistants that learnt those keep working; ``structuredContent``
carries the same facts as data, and a ``resource_link`` to ``pplx://conversations/{id}`` follows
the text wherever a result names a conversation, so a client can read it as a resource.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mcp_types import CallToolResult, ContentBlock, ResourceLink, TextContent

from pplx_nb._cancel import cancel_facts, cancel_outcome, cancelled_now
from pplx_nb._markdown import defuse, job_status_markdown, link_citations, source_references
from pplx_nb._references import Reference, to_csl_json_dict
from pplx_nb.mcp._resources import CONVERSATION_URI
from pplx_nb.mcp._schemas import (
    AskResult,
    CancelResult,
    ConversationList,
    HistoriesResult,
    HistoryEntry,
    HistoryResult,
    ReferencesResult,
    ResultModel,
    SourceOut,
    WebSearchResult,
)

if TYPE_CHECKING:
    from pydantic import ValidationError as PydanticValidationError

    from pplx_nb._errors import BudgetExceeded, PplxError
    from pplx_nb._models import Answer, Conversation, ConversationSummary, JobStatus
    from pplx_nb._web_results import WebResults

__all__ = [
    "answer_result",
    "budget_refusal",
    "cancel_result",
    "conversation_link",
    "error_result",
    "histories_result",
    "history_result",
    "list_result",
    "queued_result",
    "validation_message",
    "web_search_result",
]

_FOLLOW_UP = (
    "To follow up:\n"
    "• Quick search: Use `perplexity_search_followup` with this conversation ID\n"
    "• Deep dive: Use `perplexity_deep_research_followup` with this conversation ID\n"
    "• View history: Use `get_conversation_history` with this conversation ID"
)

_ID_FORMAT = 'Expected: yyyymmdd-<13-digit unix ms>, e.g. "20250124-1706102400123".'


def conversation_link(conversation_id: str) -> ResourceLink:
    """A ``resource_link`` to the conversation, for clients that read or attach resources."""
    return ResourceLink(
        type="resource_link",
        uri=CONVERSATION_URI.format(id=conversation_id),
        name=conversation_id,
        title=f"Conversation {conversation_id}",
        mime_type="text/markdown",
    )


def _result(text: str, structured: ResultModel, *conversation_ids: str | None) -> CallToolResult:
    """The text, a link to each conversation named (None: none), and the structured content."""
    content: list[ContentBlock] = [TextContent(type="text", text=text)]
    content += [conversation_link(cid) for cid in conversation_ids if cid]
    return CallToolResult(content=content, structured_content=structured.structured())


def _header(title: str, conversation_id: str, path: str) -> str:
    return f"{title}\nConversation ID: `{conversation_id}`\nLocation: `{path}`\n\n{_FOLLOW_UP}"


def answer_result(answer: Answer, *, followup: bool, show_thinking: bool) -> CallToolResult:
    """A finished search or research answer: the header, the answer, its sources."""
    conversation_id = answer.conversation_id or ""
    path = answer.conversation_path or ""
    title = "🔗 **Conversation Continued**" if followup else "🔗 **Conversation Started**"
    parts = [_header(title, conversation_id, path), "---"]
    if answer.model:
        parts.append(f"_Answered by {answer.model}_")
    if answer.reformulated_query:
        parts.append(f"_Searched as: {defuse(answer.reformulated_query)}_")
    parts.extend(f"_Note: {defuse(note)}_" for note in answer.notes)
    if show_thinking and answer.thinking:
        parts.append("**Reasoning**\n\n" + defuse(answer.thinking.strip()))
    parts.append(link_citations(answer.text, answer.sources))
    if answer.sources:
        parts.append("**Sources**\n" + source_references(answer.sources, text=answer.text))
    if answer.related_questions:
        parts.append(
            "**Related questions**\n"
            + "\n".join(f"• {defuse(q)}" for q in answer.related_questions)
        )
    structured = AskResult(
        conversationId=conversation_id,
        conversationPath=path,
        status="completed",
        answer=answer.text,
        sources=[
            SourceOut(url=s.url, title=s.title, date=s.date, snippet=s.snippet)
            for s in answer.sources
        ],
        relatedQuestions=list(answer.related_questions),
        model=answer.model,
        usage=answer.usage.to_json_dict() if answer.usage else None,
        cost=answer.cost.to_json_dict() if answer.cost else None,
        reformulatedQuery=answer.reformulated_query,
        notes=list(answer.notes),
        thinking=answer.thinking if show_thinking else None,
        cached=answer.cached,
    )
    return _result("\n\n".join(parts), structured, conversation_id)


def queued_result(status: JobStatus, path: str, *, followup: bool) -> CallToolResult:
    """Deep research queued for the background worker: how to collect the report later."""
    conversation_id = status.conversation_id
    if followup:
        title = "🔗 **Conversation Continued**"
        what = "Deep research follow-up has been queued for background processing."
    else:
        title = "🆕 **New Conversation Started**"
        what = "Deep research query has been queued for background processing."
    text = (
        f"{title}\nConversation ID: `{conversation_id}`\nLocation: `{path}`\n{what}\n\n"
        "**To check status and retrieve results:**\n"
        "Use the `get_conversation_history` tool with this conversation ID.\n"
        "The system will process your query in the background and stream results as they "
        "become available."
    )
    structured = AskResult(
        conversationId=conversation_id,
        conversationPath=path,
        status="pending",
        answer="",
    )
    return _result(text, structured, conversation_id)


def web_search_result(results: WebResults, path: str | None) -> CallToolResult:
    """Search API results: a numbered list (title, URL, date, snippet), and the saved
    conversation with how to follow up when they were saved."""
    if results:
        head = f"🔎 **{len(results)} web result(s)** for “{results.query}” (no answer generated):"
        text = f"{head}\n\n{results.to_list()}"
    else:
        text = f"🔎 No web results for “{results.query}”. Try fewer filters or other words."
    cid = results.conversation_id
    if cid:
        text = _header("🔗 **Conversation Started**", cid, path or "") + "\n\n---\n\n" + text
    structured = WebSearchResult(
        query=results.query,
        count=len(results),
        results=[
            SourceOut(url=s.url, title=s.title, date=s.date, snippet=s.snippet) for s in results
        ],
        conversationId=cid,
        conversationPath=path if cid else None,
    )
    return _result(text, structured, cid)


def cancel_result(conversation_id: str, path: str, status: JobStatus | None) -> CallToolResult:
    """What ``cancel_deep_research`` did, and how to go on with the conversation."""
    said = cancel_outcome(conversation_id, status)
    cancelled = cancelled_now(status)
    title = "🚫 **Research cancelled**" if cancelled else "ℹ️ **Nothing to cancel**"
    text = f"{title}\nConversation ID: `{conversation_id}`\nLocation: `{path}`\n\n{said}"
    if cancelled:
        text += (
            "\n\nThe conversation is open: ask again with `perplexity_deep_research_followup`, "
            "or follow up with `perplexity_search_followup`."
        )
    structured = CancelResult(
        conversationId=conversation_id,
        conversationPath=path,
        status=status.status if status else None,
        cancelled=cancelled,
        remoteId=status.remote_id if status else None,
        message=said,
        **cancel_facts(status),
    )
    return _result(text, structured, conversation_id)


def _message_text(index: int, role: str, content: str, meta: dict[str, Any]) -> str:
    details = ", ".join(
        str(value)
        for value in (meta.get("tool"), meta.get("model"), meta.get("timestamp"))
        if value
    )
    head = f"### {index}. {role}" + (f" ({details})" if details else "")
    return f"{head}\n\n{defuse(content)}"


def history_result(
    conversation: Conversation,
    path: str,
    status: JobStatus | None,
    answering_since: str | None = None,
) -> CallToolResult:
    """A conversation's turns in order, preceded by its job status when a job ever ran, and by
    a line saying so when the last question's answer is still on its way."""
    messages = [message.to_json_dict() for message in conversation.messages]
    parts = [
        f"📜 **Conversation History**\nConversation ID: `{conversation.conversation_id}`\n"
        f"Location: `{path}`\nMessages: {len(messages)} · Created: {conversation.created_at} · "
        f"Updated: {conversation.updated_at}"
    ]
    if conversation.parent_conversation_id:
        parts.append(f"Continued from conversation `{conversation.parent_conversation_id}`.")
    if status is not None:
        parts.append(job_status_markdown(status))
    if answering_since:
        parts.append(
            f"⏳ The follow-up asked at {answering_since} is still being answered; its answer "
            "will come right after the last question. Check again shortly."
        )
    parts.append("---")
    for index, (message, data) in enumerate(zip(conversation.messages, messages, strict=True), 1):
        parts.append(_message_text(index, message.role, message.answer_text, data))
    structured = HistoryResult(
        conversationId=conversation.conversation_id,
        conversationPath=path,
        createdAt=conversation.created_at,
        updatedAt=conversation.updated_at,
        messageCount=len(messages),
        messages=messages,
        parentConversationId=conversation.parent_conversation_id,
        job=status.to_json_dict() if status is not None else None,
        answeringSince=answering_since,
    )
    return _result("\n\n".join(parts), structured, conversation.conversation_id)


def list_result(summaries: Sequence[ConversationSummary]) -> CallToolResult:
    """Stored conversations, newest first, one line each."""
    rows = [summary.to_json_dict() for summary in summaries]
    if not summaries:
        text = (
            "No conversations found. Start one with `perplexity_search` or "
            "`perplexity_deep_research`."
        )
    else:
        lines = [f"🗂️ **{len(summaries)} conversation(s)**, newest first:"]
        for summary in summaries:
            query = (summary.first_query or "").strip().replace("\n", " ")
            if len(query) > 100:
                query = query[:99] + "…"
            job = f" · job {summary.job_status}" if summary.job_status else ""
            lines.append(
                f"• `{summary.conversation_id}` · {summary.message_count} messages · "
                f"{summary.updated_at}{job} — {query}"
            )
        lines.append("\nUse `get_conversation_history` with an ID to read one.")
        text = "\n".join(lines)
    return _result(text, ConversationList(count=len(rows), conversations=rows))


def references_result(references: Sequence[Reference], fmt: str, text: str) -> CallToolResult:
    """References: a line saying how many, then the file in ``fmt``."""
    items = [to_csl_json_dict(reference.item) for reference in references]
    if not references:
        said = "No sources to cite: the conversations chosen cite none. The bibliography is empty."
    else:
        noun = "reference" if len(references) == 1 else "references"
        said = f"{len(references)} {noun} as {fmt}:\n\n{text}"
    structured = ReferencesResult(format=fmt, count=len(items), references=items, text=text)
    return _result(said, structured)


def error_result(error: PplxError) -> CallToolResult:
    """An ``isError`` result whose text starts with the error code and says what to do next.

    It carries no ``structuredContent``: the spec requires structured content to conform to the
    tool's output schema, and strict clients (the TypeScript SDK, the Inspector) reject an error
    shape that does not, hiding the error itself. The code stays first in the text.
    """
    return CallToolResult(
        content=[TextContent(type="text", text=f"{error.code}: {error.message}")],
        is_error=True,
    )


def budget_refusal(tool: str, error: BudgetExceeded) -> BudgetExceeded:
    """``error`` in the tool's words: which tool was refused, the figures, when the cap resets
    and what the client can do (the caps are the server's environment, set by its user)."""
    from pplx_nb._budget_words import refusal_figures, usd

    figures = refusal_figures(error)
    if figures is None:
        return error
    cap = "per-request cap" if error.period == "request" else f"{error.period}'s cap"
    steps = [] if error.period == "request" else ["wait until then"]
    if "deep_research" in tool:
        steps.append(
            "use perplexity_search rather than deep research (or a lower reasoning_effort)"
        )
    steps.append(
        f"ask the user to raise the {cap}"
        + (f" above {usd(error.estimate)}" if error.period == "request" else "")
        + " in PPLX_NB_BUDGET (the server's environment)"
    )
    todo = ", or ".join([", ".join(steps[:-1]), steps[-1]] if len(steps) > 1 else steps)
    return type(error)(
        f"`{tool}` was refused: {figures} {todo[0].upper()}{todo[1:]}.",
        cap=error.cap,
        period=error.period,
        spent=error.spent,
        estimate=error.estimate,
        resets_at=error.resets_at,
        **error.details,
    )


_STATE_LINES = {
    "pending": "🕒 Pending",
    "in_progress": "⏳ In progress",
    "completed": "✅ Completed",
    "failed": "❌ Failed",
    "cancelled": "🚫 Cancelled",
    "answered": "💬 Answered (no research job)",
    "error": "❌ Error",
}


def _entry_text(conversation_id: str, entry: HistoryEntry) -> str:
    line = f"**{conversation_id}** · {_STATE_LINES[entry.status]}"
    if entry.progress and entry.status == "in_progress":
        line += f" ({entry.progress.get('percentage', 0)}% — {entry.progress.get('message', '')})"
    if entry.conversation:
        line += f" · {entry.conversation.get('messageCount', 0)} messages"
    if entry.error:
        line += f"\n{entry.error['code']}: {entry.error['message']}"
    job_error = (entry.job or {}).get("error")
    if entry.status == "failed" and job_error:
        line += f"\nError: {job_error.get('code')}: {job_error.get('message')}"
    if entry.report:
        line += "\n\n" + defuse(entry.report)
    return line


def _finished_head(result: HistoriesResult) -> str:
    """The heading once no job runs: all finished, or how many could not be read at all."""
    waited = f"({result.waitedSeconds:.0f} s)"
    unread = sum(entry.status == "error" for entry in result.conversations.values())
    if not unread:
        return f"✅ **All {result.count} conversation(s) have finished** {waited}"
    read = result.count - unread
    rest = f"; the other {read} have finished" if read else ""
    return (
        f"⚠️ **{unread} of {result.count} conversation(s) could not be read**{rest} {waited}: "
        "the error is under each."
    )


def histories_result(result: HistoriesResult, *, awaited: bool) -> CallToolResult:
    """Several conversations: each one's state and, when there is one, its latest report."""
    count = result.count
    if not awaited:
        head = f"📚 **{count} conversation(s)**"
    elif result.timedOut:
        head = (
            f"⏳ **Still waiting after {result.waitedSeconds:.0f} s** — "
            f"{len(result.pending)} of {count} job(s) still running: "
            + ", ".join(f"`{cid}`" for cid in result.pending)
            + ". They go on in the background: call `await_conversation_histories` again to "
            "keep waiting, or `get_conversation_histories` to look without waiting."
        )
    else:
        head = _finished_head(result)
    parts = [head, "---"]
    parts += [_entry_text(cid, entry) for cid, entry in result.conversations.items()]
    parts.append("Use `get_conversation_history` with an ID for a conversation's every turn.")
    read = [cid for cid, entry in result.conversations.items() if entry.status != "error"]
    return _result("\n\n".join(parts), result, *read)


def validation_message(tool: str, exc: PydanticValidationError) -> str:
    """Rejected arguments, described field by field with the fix for each."""
    problems = []
    for error in exc.errors():
        field = ".".join(str(part) for part in error["loc"]) or "arguments"
        if field == "conversationId" and error["type"] == "string_pattern_mismatch":
            problems.append(f"conversationId: Invalid conversation ID format. {_ID_FORMAT}")
        else:
            problems.append(f"{field}: {error['msg']}")
    listed = "; ".join(problem.rstrip(".") for problem in problems)
    return f"Invalid arguments for `{tool}`: {listed}. Fix them and call again."
