"""What the magics show besides answers: errors in a notebook's words, Markdown as HTML for
widgets, image thumbnails, tables, and the help.

Errors (:func:`notebook_message`) keep their class and stable code; only the text changes. The
store and the queue word their next steps for every surface ("start one with
`perplexity_search`"); here those steps name the magic that does the same thing. An option's
error carries its notebook wording (``--domain`` for ``search_domain_filter``, see
:mod:`pplx_nb._option_names`).

:func:`markdown_to_html` converts what answers contain for ``HTML`` widgets (which do not render
Markdown): headings, paragraphs, bullet and numbered lists, fenced code, block quotes, rules, and
inline code, bold, italic and links. Everything is HTML-escaped first; only ``http(s)`` and
``mailto`` links become anchors, so an answer cannot inject markup into the page.

Thumbnails show only http(s) images, their URLs quoted so they cannot end the Markdown link or
the HTML attribute they sit in; each links to the page it comes from. Tables: conversations and
jobs as DataFrames (pandas imported on use), settings as HTML, web results and what a cancel did
as the lines a cell shows. Help: ``%pplx_help`` and the line ``%load_ext pplx_nb`` shows.
"""

from __future__ import annotations

import html
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from pplx_nb._cancel import cancel_outcome, cancelled_now
from pplx_nb._errors import BudgetExceeded, ConversationNotFound, JobInProgress, PplxError
from pplx_nb._markdown import escape, web_url
from pplx_nb._option_names import worded
from pplx_nb.notebook._icons import icon

if TYPE_CHECKING:
    import pandas as pd

    from pplx_nb._config import Settings
    from pplx_nb._models import ConversationSummary, JobStatus
    from pplx_nb._web_results import WebResults
    from pplx_nb.notebook.display import Bundle

__all__ = [
    "CONVERSATION_COLUMNS",
    "JOB_COLUMNS",
    "MAGICS",
    "MAGIC_FOR_TOOL",
    "backend",
    "cancel_bundle",
    "conversations_frame",
    "help_bundle",
    "images_html",
    "images_markdown",
    "jobs_frame",
    "loaded_bundle",
    "markdown_to_html",
    "notebook_message",
    "web_results_bundle",
]

MAGIC_FOR_TOOL = {
    "perplexity_search": "%%pplx",
    "perplexity_deep_research": "%%pplx_research",
    "perplexity_search_followup": "%%pplx_followup",
    "perplexity_deep_research_followup": "%%pplx_followup --research",
    "get_conversation_history": "%pplx_history",
    "get_conversation_histories": "%pplx_history",
    "await_conversation_histories": "%pplx_wait",
    "list_conversations": "%pplx_conversations",
    "cancel_deep_research": "%pplx_cancel",
    "perplexity_web_search": "%%pplx_web",
}
"""Each MCP tool a message may name, and the magic that does the same in a notebook."""

_TOOL = re.compile(r"`(" + "|".join(sorted(MAGIC_FOR_TOOL, key=len, reverse=True)) + r")`")
_IN_A_NOTEBOOK = re.compile(r"\s*\(or `%%?pplx\w*` in a notebook\)")
_STATES = {"in_progress": "in progress"}


def notebook_message(error: PplxError) -> str:
    """``error``'s message with its next step worded for a notebook."""
    cid = error.details.get("conversation_id")
    if isinstance(error, ConversationNotFound) and cid:
        where = error.details.get("root")
        place = f" in {where}" if where else ""
        return (
            f"Conversation {cid} does not exist{place}. `%pplx_conversations` lists the "
            "stored ones (CONVERSATION_LOGS_DIR says where they are); `%%pplx` starts a new one."
        )
    if isinstance(error, JobInProgress) and cid and "research job" in error.message:
        state = "pending" if "pending" in error.message else "in progress"
        return (
            f"Conversation {cid} has a research job that is {state}. `%pplx_wait {cid}` "
            "waits for it to end (`%pplx_jobs` lists the jobs); then follow up."
        )
    if isinstance(error, BudgetExceeded):
        return _budget_message(error)
    message = _IN_A_NOTEBOOK.sub("", worded(error, "notebook"))
    message = _TOOL.sub(lambda m: f"`{MAGIC_FOR_TOOL[m.group(1)]}`", message)
    for state, words in _STATES.items():
        message = re.sub(rf"\b{state}\b", words, message)
    return message


def _budget_message(error: BudgetExceeded) -> str:
    """A refusal by a ``PPLX_NB_BUDGET`` cap: the figures, when it resets, what to do."""
    from pplx_nb._budget_words import refusal_figures, usd

    figures = refusal_figures(error)
    if figures is None:
        return f"{error.message} `%pplx_budget` shows where each cap stands."
    cheaper = "ask in a cheaper mode (`%%pplx` rather than `%%pplx_research`, or `--effort low`)"
    if error.period == "request":
        todo = (
            f"{cheaper[0].upper()}{cheaper[1:]}, or raise the per-request cap above "
            f"{usd(error.estimate)} (`%env PPLX_NB_BUDGET=...`)."
        )
    else:
        todo = (
            f"Wait until then, raise the {error.period}'s cap (`%env PPLX_NB_BUDGET=...`), or "
            f"{cheaper}."
        )
    return f"This request was refused: {figures} {todo} `%pplx_budget` shows every cap."


_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_BULLET = re.compile(r"^\s*[-*+]\s+(.*)$")
_NUMBERED = re.compile(r"^\s*\d{1,9}[.)]\s+(.*)$")
_FENCE = re.compile(r"^\s*(```|~~~)")
_RULE = re.compile(r"^\s*([-*_])(\s*\1){2,}\s*$")
_QUOTE = re.compile(r"^\s*>\s?(.*)$")
_CODE_SPAN = re.compile(r"`([^`\n]+)`")
_LINK = re.compile(
    r"\[([^\]\n]*(?:\[[^\]\n]*\][^\]\n]*)*)\]"
    r"\(((?:https?://|mailto:)[^)\s]+)(?:\s+\"([^\"\n]*)\")?\)"
)
_ESCAPE = re.compile(r"\\([!-/:-@\[-`{-~])")
_BOLD = re.compile(r"\*\*(?=\S)(.+?)(?<=\S)\*\*|__(?=\S)(.+?)(?<=\S)__")
_ITALIC = re.compile(r"(?<![\w*])\*(?=\S)(.+?)(?<=\S)\*(?!\*)|(?<!\w)_(?=\S)(.+?)(?<=\S)_(?!\w)")
# Fragments already converted wait behind NUL-delimited tokens; the input has no NUL (CommonMark
# replaces it with U+FFFD), so no text can pose as a token.
_TOKEN = "\x00{}\x00"
_TOKEN_RE = re.compile("\x00(\\d+)\x00")


def markdown_to_html(text: str, *, heading_offset: int = 0) -> str:
    """Convert the Markdown in ``text`` to safe HTML; ``heading_offset`` demotes headings."""
    out: list[str] = []
    paragraph: list[str] = []
    lines = text.replace("\x00", "\ufffd").replace("\r\n", "\n").split("\n")
    index = 0

    def flush() -> None:
        if paragraph:
            out.append(f"<p>{_inline(' '.join(paragraph))}</p>")
            paragraph.clear()

    while index < len(lines):
        line = lines[index]
        fence = _FENCE.match(line)
        if fence:
            flush()
            code: list[str] = []
            index += 1
            while index < len(lines) and not lines[index].strip().startswith(fence.group(1)):
                code.append(lines[index])
                index += 1
            out.append(f"<pre><code>{html.escape(chr(10).join(code))}</code></pre>")
        elif not line.strip():
            flush()
        elif heading := _HEADING.match(line):
            flush()
            level = min(6, len(heading.group(1)) + heading_offset)
            out.append(f"<h{level}>{_inline(heading.group(2))}</h{level}>")
        elif _RULE.match(line):
            flush()
            out.append("<hr>")
        elif _BULLET.match(line) or _NUMBERED.match(line):
            flush()
            pattern, tag = (_BULLET, "ul") if _BULLET.match(line) else (_NUMBERED, "ol")
            items: list[str] = []
            while index < len(lines) and (item := pattern.match(lines[index])):
                items.append(f"<li>{_inline(item.group(1))}</li>")
                index += 1
            out.append(f"<{tag}>{''.join(items)}</{tag}>")
            continue
        elif _QUOTE.match(line):
            flush()
            quoted: list[str] = []
            while index < len(lines) and (quote := _QUOTE.match(lines[index])):
                quoted.append(quote.group(1))
                index += 1
            inner = markdown_to_html(chr(10).join(quoted), heading_offset=heading_offset)
            out.append(f"<blockquote>{inner}</blockquote>")
            continue
        else:
            paragraph.append(line.strip())
        index += 1
    flush()
    return "\n".join(out)


def _inline(text: str) -> str:
    """Convert inline Markdown (code spans, links, bold, italic) in one line of text."""
    held: list[str] = []

    def hold(fragment: str) -> str:
        held.append(fragment)
        return _TOKEN.format(len(held) - 1)

    def link(match: re.Match[str]) -> str:
        href = html.escape(match.group(2), quote=True)
        title = f' title="{html.escape(match.group(3), quote=True)}"' if match.group(3) else ""
        label = _emphasis(html.escape(match.group(1), quote=False))
        return hold(f'<a href="{href}"{title} target="_blank" rel="noopener">{label}</a>')

    text = _CODE_SPAN.sub(lambda m: hold(f"<code>{html.escape(m.group(1))}</code>"), text)
    text = _ESCAPE.sub(lambda m: hold(html.escape(m.group(1))), text)
    text = _LINK.sub(link, text)
    text = _emphasis(html.escape(text, quote=False))
    while _TOKEN_RE.search(text):
        text = _TOKEN_RE.sub(lambda m: held[int(m.group(1))], text)
    return text


def _emphasis(text: str) -> str:
    text = _BOLD.sub(lambda m: f"<strong>{m.group(1) or m.group(2)}</strong>", text)
    return _ITALIC.sub(lambda m: f"<em>{m.group(1) or m.group(2)}</em>", text)


_THUMB_STYLE = "max-height:120px;max-width:200px;margin:0 6px 6px 0;vertical-align:top"


def images_markdown(images: Sequence[Mapping[str, Any]]) -> str:
    """Image thumbnails, each linking to the page it comes from: ``[![title](image)](page)``."""
    thumbs = [
        f"[![{escape(title)}]({image})]({page})" for title, image, page in _image_links(images)
    ]
    return "**Images**\n\n" + " ".join(thumbs) if thumbs else ""


def images_html(images: Sequence[Mapping[str, Any]]) -> str:
    """Image thumbnails as HTML (widget values do not render Markdown images)."""
    thumbs = [
        f'<a href="{html.escape(page)}" target="_blank" rel="noopener">'
        f'<img src="{html.escape(image)}" alt="{html.escape(title)}" '
        f'title="{html.escape(title)}" style="{_THUMB_STYLE}"></a>'
        for title, image, page in _image_links(images)
    ]
    return "<p><strong>Images</strong></p><div>" + "".join(thumbs) + "</div>" if thumbs else ""


def _image_links(images: Sequence[Mapping[str, Any]]) -> list[tuple[str, str, str]]:
    """``(title, image URL, page URL)`` for each image with a web address; others are left out.

    Takes the API's snake_case keys (``image_url``, ``origin_url``) and the stored camelCase ones.
    """
    links: list[tuple[str, str, str]] = []
    for image in images:
        url = web_url(image.get("image_url") or image.get("imageUrl"))
        if url is None:
            continue
        page = web_url(image.get("origin_url") or image.get("originUrl")) or url
        title = " ".join(str(image.get("title") or "").split())
        links.append((title or urlsplit(page).hostname or "image", url, page))
    return links


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
    head = f"{icon('search')} **{len(results)} web result(s)** · Search API, no answer generated"
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
    said = cancel_outcome(conversation_id, status)
    mark = icon("cancelled") if cancelled_now(status) else icon("info")
    return _cancel_line(said, mark, cancelled=status is not None and status.status == "cancelled")


def cancelled_wait_bundle(conversation_id: str, status: JobStatus) -> Bundle:
    """What ``%pplx_wait`` says of a job the user cancelled: how it ended, not an error."""
    when = f" at {status.completed_at}" if status.completed_at else ""
    said = f"The research of conversation {conversation_id} was cancelled{when}: no report comes."
    return _cancel_line(said, icon("info"), cancelled=True)


def _cancel_line(said: str, mark: str, *, cancelled: bool) -> Bundle:
    if cancelled:
        said += " Ask again with `%pplx_followup --research`, or follow up with `%pplx_followup`."
    rich = html.escape(said)
    for command in ("%pplx_followup --research", "%pplx_followup"):
        rich = rich.replace(f"`{command}`", f"<code>{command}</code>", 1)
    return {"text/html": f"<div>{mark} {rich}</div>", "text/plain": said.replace("`", "")}


MAGICS: tuple[tuple[str, str, str], ...] = (
    ("%%pplx", "ask with web search; starts a new conversation", "%%pplx --related"),
    (
        "%%pplx_research",
        "deep research, queued in the background with a live monitor",
        "%%pplx_research -o job",
    ),
    (
        "%pplx_followup",
        "continue the last (or a given) conversation; --fork branches, --research digs deeper",
        "%pplx_followup how do I wait for it?",
    ),
    (
        "%%pplx_web",
        "ranked web results as a table, no answer (Search API); -o VAR for a DataFrame",
        "%pplx_web -n 5 asyncio TaskGroup",
    ),
    ("%pplx_wait", "block until a research job ends and show its report", "%pplx_wait"),
    (
        "%pplx_cancel",
        "cancel a queued or running research job, and its run at the API",
        "%pplx_cancel",
    ),
    (
        "%pplx_retry",
        "ask an unanswered research question again (a new, paid run)",
        "%pplx_retry",
    ),
    ("%pplx_jobs", "the research jobs as a table; --watch adds live monitors", "%pplx_jobs"),
    ("%pplx_history", "a stored conversation, turn by turn", "%pplx_history"),
    ("%pplx_conversations", "every stored conversation as a DataFrame", "%pplx_conversations"),
    (
        "%pplx_export",
        "messages, conversations or sources as a DataFrame",
        "%pplx_export --all --level sources -o df",
    ),
    (
        "%pplx_cite",
        "the sources as references: BibTeX, CSL-JSON or RIS; --file to save them",
        "%pplx_cite --all --file references.bib",
    ),
    (
        "%pplx_report",
        "conversations as a report with a bibliography (Markdown for pandoc, and HTML)",
        "%pplx_report --style ieee --file report.md",
    ),
    (
        "%pplx_costs",
        "what the stored answers cost: a table and a plot; --by day, model or mode",
        "%pplx_costs --by day --since 7d",
    ),
    ("%pplx_budget", "what each PPLX_NB_BUDGET cap has left, and when it resets", "%pplx_budget"),
    ("%pplx_config", "the settings in use; --offline / --online switch", "%pplx_config"),
    ("%pplx_help", "this list", "%pplx_help"),
)
"""Each magic, what it does, and an example line."""


def backend(settings: Settings) -> str:
    """Who answers, in a few words: the simulator (and why) or the API at its address."""
    if settings.is_offline:
        why = "no PERPLEXITY_API_KEY set" if settings.offline is None else "PPLX_NB_OFFLINE=1"
        return f"the offline simulator ({why})"
    if settings.base_url.rstrip("/") == "https://api.perplexity.ai":
        return "the Perplexity API"

    return f"the API at {urlsplit(settings.base_url).hostname}"


def loaded_bundle() -> Bundle:
    """One line for ``%load_ext pplx_nb``: who answers and how to see the magics."""
    from pplx_nb._config import Settings

    who = backend(Settings.from_env())
    return {
        "text/markdown": f"<sub>pplx_nb loaded · answers come from {html.escape(who)} · "
        "`%pplx_help` lists the magics</sub>",
        "text/plain": f"pplx_nb loaded · answers come from {who} · %pplx_help lists the magics",
    }


def help_bundle(settings: Settings) -> Bundle:
    """Every magic with what it does and an example; ``%magic?`` for its options."""
    rows = "\n".join(f"| `{name}` | {what} | `{example}` |" for name, what, example in MAGICS)
    markdown = (
        "**pplx_nb magics** · answers come from "
        f"{html.escape(backend(settings))}\n\n"
        f"| magic | does | example |\n|---|---|---|\n{rows}\n\n"
        "A cell magic takes the question in the cell below it; `{name}` in a question is "
        "replaced by the variable's value. `%%pplx?` (any magic with `?`) lists its options; "
        "`-o VAR` stores a result, `--debug` shows an error's traceback."
    )
    width = max(len(name) for name, _, _ in MAGICS)
    plain = "\n".join(
        [f"pplx_nb magics · answers come from {backend(settings)}", ""]
        + [f"{name:<{width}}  {what}\n{'':<{width}}  e.g. {ex}" for name, what, ex in MAGICS]
        + ["", "%%pplx? (any magic with ?) lists its options."]
    )
    return {"text/markdown": markdown, "text/plain": plain}
