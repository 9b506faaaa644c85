"""Rendering for notebooks: answers, conversations, progress and errors as MIME bundles.

The live areas that show them while a call runs are in :mod:`._views`.

Every function here is pure (object in, ``{mime: text}`` out) so it can be tested without a kernel.
:class:`StreamView` and :class:`ProgressView` own one display handle each and update it in place;
they must be driven from the kernel's main thread (output published from other threads is fragile
in ipykernel). The outcome they end with is displayed as an output of its own, so notebooks run
by nbval record it too.
"""

from __future__ import annotations

import html
import re
import traceback
from collections.abc import Sequence
from typing import TYPE_CHECKING

from pplx_nb._errors import PplxError, redact
from pplx_nb._markdown import (
    close_markdown,
    defuse,
    link_citations,
    notes_markdown,
    outside_code,
    quote_block,
    related_markdown,
    source_references,
)
from pplx_nb._markdown import sources_markdown as sources_markdown
from pplx_nb.notebook._icons import icon
from pplx_nb.notebook._render import (
    images_html,
    images_markdown,
    markdown_to_html,
    notebook_message,
)

if TYPE_CHECKING:
    from pplx_nb._models import Answer, Conversation, JobStatus, Progress, Source

__all__ = [
    "NO_MATH",
    "Bundle",
    "answer_bundle",
    "answer_html",
    "answer_markdown",
    "answer_text",
    "conversation_bundle",
    "done_bundle",
    "error_bundle",
    "images_html",
    "images_markdown",
    "job_bundle",
    "notice_bundle",
    "progress_bundle",
    "progress_html",
    "readable_time",
    "status_line",
    "streaming_bundle",
]

Bundle = dict[str, str]

NO_MATH = "tex2jax_ignore mathjax_ignore"
"""Classes that keep MathJax (JupyterLab, the classic notebook) from reading text between two
``$`` as TeX: amounts in dollars stay amounts."""

_HEADING = re.compile(r"^(#{1,6})(\s)", re.M)
# A dunder name, perhaps dotted (object.__getattr__), not inside a URL or a word.
_DUNDER = re.compile(r"(?<![\w/#.`\\])((?:[A-Za-z_]\w*\.)*__[A-Za-z]\w*?__(?:\(\))?)(?![\w`])")
_THINK = re.compile(r"^\s*<think>(.*?)(?:</think>\s*|\Z)", re.S)
_ERROR_STYLE = (
    "border-left:4px solid #d9534f;background:rgba(217,83,79,0.08);padding:6px 10px;"
    "margin:2px 0;font-family:var(--jp-ui-font-family,sans-serif);font-size:13px"
)
_BAR_STYLE = "width:260px;height:14px;vertical-align:middle"
_DIM = "color:var(--jp-ui-font-color2,#666);font-size:12px"


# -- answers ----------------------------------------------------------------------------------


def linked_text(text: str, sources: Sequence[Source]) -> str:
    """``text`` with every citation marker that names a source turned into a titled link."""
    return link_citations(text, sources, titles=True)


def answer_text(text: str, *, demote: int = 2) -> str:
    """An answer's Markdown made safe to show inside a notebook's own text.

    Its headings go ``demote`` levels down (a report's ``##`` must not read like the notebook's
    own sections) and dunder names outside code (``__getattr__``) become code, not bold.
    """
    return outside_code(text, lambda prose: _DUNDER.sub(r"`\1`", _demoted(prose, demote)))


def _demoted(text: str, levels: int) -> str:
    if not levels:
        return text
    return _HEADING.sub(lambda m: "#" * min(6, len(m.group(1)) + levels) + m.group(2), text)


def header_markdown(
    conversation_id: str | None, *, research: bool = False, branch_of: str | None = None
) -> str:
    """The line naming the conversation (a branch says of which) and how to continue it.

    The follow-up line is one unbreakable chip: wrapped, its ``<question>`` would stand alone.
    """
    if not conversation_id:
        return ""
    mark, named, chip = _header(conversation_id, research, branch_of)
    return f"{mark} {named} · continue with {chip}"


def _header(conversation_id: str, research: bool, branch_of: str | None) -> tuple[str, str, str]:
    """The header's icon (HTML), its words (Markdown) and its follow-up chip (HTML)."""
    mode = " --research" if research else ""
    command = html.escape(f"%pplx_followup{mode} {conversation_id} <question>")
    chip = f'<code style="white-space:nowrap">{command}</code>'
    if branch_of:
        return icon("branch"), f"**Branch** `{conversation_id}` of `{branch_of}`", chip
    return icon("conversation"), f"**Conversation** `{conversation_id}`", chip


def footer_markdown(answer: Answer, elapsed: float | None = None) -> str:
    """Model, tokens, cost and timing in small print."""
    bits: list[str] = []
    if answer.model:
        bits.append(answer.model)
    if answer.usage and answer.usage.total_tokens:
        bits.append(f"{answer.usage.total_tokens:,} tokens")
    if answer.cost and answer.cost.total_cost:
        estimated = "≈" if answer.cost.estimated else ""
        bits.append(f"{estimated}${answer.cost.total_cost:.4f}")
    if elapsed is not None:
        bits.append(f"{elapsed:.1f} s")
    if answer.cached:
        bits.append("cached")
    return f"<sub>{' · '.join(html.escape(b) for b in bits)}</sub>" if bits else ""


def answer_markdown(
    answer: Answer,
    *,
    related: bool = True,
    header: bool = True,
    elapsed: float | None = None,
    research: bool = False,
    branch_of: str | None = None,
) -> str:
    """The whole answer as Markdown: header, linked text, thinking, sources, related, footer."""
    parts: list[str] = []
    if header and answer.conversation_id:
        parts.append(
            header_markdown(answer.conversation_id, research=research, branch_of=branch_of)
        )
    if answer.reformulated_query:
        parts.append(f"<sub>Searched for: {html.escape(answer.reformulated_query)}</sub>")
    if answer.thinking:
        parts.append(
            "<details><summary>Thinking</summary>\n\n"
            f"{quote_block(defuse(answer.thinking))}\n\n</details>"
        )
    parts.append(linked_text(answer_text(answer.text), answer.sources))
    parts.append(notes_markdown(answer.notes))
    if answer.sources:
        parts.append(sources_markdown(answer.sources, answer.text))
    parts.append(images_markdown(answer.images))
    if related and answer.related_questions:
        parts.append(related_markdown(answer.related_questions))
    footer = footer_markdown(answer, elapsed)
    if footer:
        parts.append(footer)
    return "\n\n".join(p for p in parts if p)


def answer_html(answer: Answer, *, header: bool = True, research: bool = False) -> str:
    """The answer as self-contained HTML, for widget values (which do not render Markdown)."""
    parts: list[str] = []
    if header and answer.conversation_id:
        # The icon and the chip are HTML, which markdown_to_html (rightly) escapes.
        mark, named, chip = _header(answer.conversation_id, research, None)
        words = markdown_to_html(f"{named} · continue with")
        parts.append(f"<p>{mark} {words.removeprefix('<p>').removesuffix('</p>')} {chip}</p>")
    if answer.thinking:
        parts.append(
            "<details><summary>Thinking</summary>"
            f"<blockquote>{markdown_to_html(answer.thinking)}</blockquote></details>"
        )
    # Widgets sit inside a cell's output: report headings one or two sizes down read better there.
    parts.append(
        markdown_to_html(
            linked_text(answer_text(answer.text, demote=0), answer.sources), heading_offset=2
        )
    )
    if answer.notes:
        parts.append(f'<div style="{_DIM}">{"<br>".join(map(html.escape, answer.notes))}</div>')
    if answer.sources:
        parts.append(markdown_to_html(sources_markdown(answer.sources, answer.text)))
    if answer.images:
        parts.append(images_html(answer.images))
    footer = footer_markdown(answer)
    if footer:
        parts.append(
            f'<div style="{_DIM}">{footer.removeprefix("<sub>").removesuffix("</sub>")}</div>'
        )
    # JupyterLab's class for rendered HTML gives links, code and headings the notebook's look.
    return '<div class="jp-RenderedHTMLCommon">' + "\n".join(parts) + "</div>"


def answer_bundle(
    answer: Answer,
    *,
    related: bool = True,
    elapsed: float | None = None,
    research: bool = False,
    branch_of: str | None = None,
) -> Bundle:
    """An answer as a MIME bundle (Markdown for Jupyter, plain text for terminals and logs)."""
    plain = [answer.text]
    if answer.sources:
        plain.append(source_references(answer.sources, titles=False, text=answer.text))
    if related and answer.related_questions:
        plain.append("Related:\n" + "\n".join(f"- {q}" for q in answer.related_questions))
    if answer.conversation_id:
        mode = " --research" if research else ""
        branch = f" (a branch of {branch_of})" if branch_of else ""
        plain.append(
            f"Conversation {answer.conversation_id}{branch} · continue with "
            f"%pplx_followup{mode} {answer.conversation_id} <question>"
        )
    return {
        "text/markdown": answer_markdown(
            answer, related=related, elapsed=elapsed, research=research, branch_of=branch_of
        ),
        "text/plain": "\n\n".join(plain),
    }


def done_bundle(answer: Answer, *, elapsed: float | None = None) -> Bundle:
    """A finished job whose report a live monitor above already shows: one line, not the report.

    Shown twice, a report doubles the notebook's length for nothing.
    """
    cid = answer.conversation_id or ""
    bits = [f"{len(answer.sources)} sources"]
    if elapsed is not None:
        bits.append(f"waited {elapsed:.0f} s")
    return {
        "text/markdown": f"{icon('completed')} **Research job** `{cid}` completed · "
        f"{' · '.join(bits)} · the report is in its monitor above (`%pplx_history {cid}` shows "
        "it again)",
        "text/plain": f"Research job {cid} completed; the report is in its monitor above.",
    }


def streaming_bundle(
    text: str, *, elapsed: float | None = None, label: str = "Searching"
) -> Bundle:
    """What a cell shows while an answer streams in: the text so far and a cursor.

    The text renders as it will when complete: what it leaves open (emphasis, code, a link) is
    closed (:func:`~pplx_nb._markdown.close_markdown`), so no raw ``*`` shows meanwhile.

    A leading ``<think>`` block (reasoning models) is shown as "thinking" rather than as text.
    """
    thinking = _THINK.match(text)
    status = label
    if thinking:
        text = text[thinking.end() :]
        if not text.strip():
            status = "Thinking"
    clock = f" · {elapsed:.1f} s" if elapsed is not None else ""
    line = f"<sub>{icon('waiting')} {status}…{clock}</sub>"
    body = close_markdown(defuse(text), "▌") if text else ""
    return {
        "text/markdown": f"{line}\n\n{body}" if body else line,
        "text/plain": text or f"{status}…",
    }


# -- conversations and jobs -------------------------------------------------------------------


def conversation_bundle(conversation: Conversation) -> Bundle:
    """A stored conversation, turn by turn, with each answer's sources."""
    heading = f"{icon('conversation')} **Conversation** `{conversation.conversation_id}`"
    if conversation.parent_conversation_id:
        heading += f" (forked from `{conversation.parent_conversation_id}`)"
    shown = [m for m in conversation.messages if m.role != "system"]
    questions = sum(m.role == "user" for m in shown)
    heading += (
        f" · {questions} question{'s' if questions != 1 else ''}, {len(shown)} messages"
        f" · updated {readable_time(conversation.updated_at)}"
    )
    parts = [heading]
    plain = [f"Conversation {conversation.conversation_id}"]
    for message in conversation.messages:
        stamp = (
            f" <sub>{html.escape(readable_time(message.timestamp))}</sub>"
            if message.timestamp
            else ""
        )
        if message.role == "user":
            parts.append(
                f"{icon('question')} **Question**{stamp}\n\n{quote_block(defuse(message.content))}"
            )
        elif message.role == "assistant":
            sources = list(message.sources or [])
            model = f" <sub>{html.escape(message.model)}</sub>" if message.model else ""
            text = linked_text(answer_text(message.answer_text), sources)
            parts.append(f"{icon('answer')} **Answer**{model}{stamp}\n\n{text}")
            if sources:
                parts.append(sources_markdown(sources, message.answer_text))
            parts.append(images_markdown(getattr(message, "images", None) or []))
        else:
            parts.append(f"<sub>system: {html.escape(message.content[:200])}</sub>")
        plain.append(f"{message.role}: {message.content}")
    return {
        "text/markdown": "\n\n---\n\n".join(p for p in parts if p),
        "text/plain": "\n\n".join(plain),
    }


def readable_time(stamp: str) -> str:
    """An ISO 8601 timestamp as a reader wants it: ``2026-11-24 05:02 UTC`` (else as given)."""
    from datetime import UTC, datetime

    try:
        moment = datetime.fromisoformat(stamp.replace("Z", "+00:00"))
    except ValueError:
        return stamp
    if moment.tzinfo is None:
        return moment.strftime("%Y-%m-%d %H:%M")
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M UTC")


def job_bundle(status: JobStatus) -> Bundle:
    """A queued or finished job in one block: state, progress, and how to wait for it."""
    cid = status.conversation_id
    lines = [
        f"{icon('job')} **Research job** `{cid}` · {status_line(status)}",
        f"<sub>It runs in the background. `%pplx_wait {cid}` blocks until it ends; "
        f"`%pplx_history {cid}` shows the report when it is done.</sub>",
    ]
    return {
        "text/markdown": "\n\n".join(lines),
        "text/plain": f"Research job {cid}: {status_line(status)}",
    }


def status_line(status: JobStatus, *, percentage: bool = True) -> str:
    """A job's state in a few words: status, progress step, attempt, error.

    ``percentage=False`` leaves the percentage out, for views whose bar already shows it.
    """
    parts = [status.status.replace("_", " ")]
    if status.progress is not None and not status.done:
        share = f"{status.progress.percentage}% " if percentage else ""
        parts.append(f"{share}{status.progress.message}".strip())
    if status.attempts > 1:
        parts.append(f"attempt {status.attempts}")
    if status.error is not None and status.status == "failed":
        parts.append(f"{status.error.code}: {redact(status.error.message)}")
    return " · ".join(parts)


def progress_html(
    percentage: int, message: str, elapsed: float, attempt: int = 1, label: str = ""
) -> str:
    """A native ``<progress>`` bar with the step, elapsed time and attempt."""
    attempt_text = f" · attempt {attempt}" if attempt > 1 else ""
    prefix = f"<b>{html.escape(label)}</b> " if label else ""
    return (
        f'<div>{prefix}<progress value="{percentage}" max="100" style="{_BAR_STYLE}"></progress> '
        f"<b>{percentage}%</b> {html.escape(message)} "
        f'<span style="{_DIM}">{elapsed:.0f} s{attempt_text}</span></div>'
    )


def progress_bundle(progress: Progress | None, elapsed: float, label: str = "") -> Bundle:
    """A progress bar bundle from a job's :class:`Progress` (``None``: waiting to start)."""
    percentage = progress.percentage if progress else 0
    message = progress.message if progress else "Waiting for the worker..."
    attempt = progress.attempt if progress else 1
    filled = percentage // 5
    return {
        "text/html": progress_html(percentage, message, elapsed, attempt, label),
        "text/plain": f"[{'#' * filled}{'.' * (20 - filled)}] {percentage}% {message} "
        f"({elapsed:.0f} s)",
    }


# -- errors -----------------------------------------------------------------------------------


def error_bundle(error: BaseException, *, debug: bool = False) -> Bundle:
    """One short styled line: the error code and the message, which says what to do next.

    The message names magics, not MCP tools (see :func:`._render.notebook_message`).
    With ``debug`` the traceback follows in a collapsed block. Errors that are not a
    :class:`PplxError` are bugs; the line says so and how to see the details.
    """
    if isinstance(error, PplxError):
        code, message = error.code, notebook_message(error)
    elif isinstance(error, KeyboardInterrupt):
        code, message = "INTERRUPTED", "Stopped. Run the cell again to retry."
    else:
        code = type(error).__name__
        message = f"{error} — a bug in pplx_nb: rerun with --debug and report the traceback."
    bundle = notice_bundle(code, message)
    if debug:
        trace = redact("".join(traceback.format_exception(error)))
        bundle["text/html"] += (
            "<details open><summary>Traceback</summary>"
            f'<pre style="font-size:11px">{html.escape(trace)}</pre></details>'
        )
        bundle["text/plain"] += "\n" + trace
    return bundle


def notice_bundle(code: str, message: str) -> Bundle:
    """One styled line: a code in bold and a message that says what to do next."""
    message = redact(message)
    # `x` marks a command or a name: code in HTML, bare in plain text.
    spans = re.split(r"`([^`\n]+)`", message)
    rich = "".join(
        f"<code>{html.escape(part)}</code>" if index % 2 else html.escape(part)
        for index, part in enumerate(spans)
    )
    return {
        "text/html": f'<div class="{NO_MATH}" style="{_ERROR_STYLE}">{icon("warning")} '
        f"<b>{html.escape(code)}</b> {rich}</div>",
        "text/plain": f"{code}: {''.join(spans)}",
    }
