"""Markdown for answers, written once for every surface that shows one.

``Answer._repr_markdown_``, :func:`pplx_nb.export.to_markdown`, the notebook display and the MCP
tools' text cite sources the same way: the ``[n]`` markers of an answer (:data:`CITATION`) name the
n-th source, and a numbered **Sources** list follows the text. Text that comes from the web (titles,
related questions) is escaped so it cannot break the Markdown around it; notes carry the user's file
names and are HTML-escaped.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pplx_nb._models import JobStatus, Source

__all__ = [
    "CITATION",
    "escape",
    "job_status_markdown",
    "link_citations",
    "notes_markdown",
    "quote_block",
    "related_markdown",
    "source_references",
    "sources_markdown",
]

CITATION = re.compile(r"\[(\d{1,3})\]")
"""A citation marker in answer text, ``[1]`` to ``[999]``: the 1-based number of a source."""

_SPECIAL = re.compile(r"([\[\]*_`<>])")


def escape(text: str) -> str:
    """``text`` with the characters that open links, emphasis, code or HTML backslash-escaped."""
    return _SPECIAL.sub(r"\\\1", text)


def link_citations(text: str, sources: Sequence[Source], *, titles: bool = False) -> str:
    """``text`` with every ``[n]`` that names a source turned into a link ``[[n]](url)``.

    ``titles`` adds the source's title (or domain) as the link title, shown on hover. A marker
    with no source of its number is left as it is.
    """

    def link(match: re.Match[str]) -> str:
        index = int(match.group(1)) - 1
        if not 0 <= index < len(sources):
            return match.group(0)
        source = sources[index]
        if not titles:
            return f"[[{index + 1}]]({source.url})"
        title = (source.title or source.domain).replace('"', "'")
        return f'[[{index + 1}]]({source.url} "{title}")'

    return CITATION.sub(link, text)


def sources_markdown(sources: Sequence[Source]) -> str:
    """The numbered **Sources** list: linked title, then domain and date ("" for no sources)."""
    if not sources:
        return ""
    lines = ["**Sources**", ""]
    for number, source in enumerate(sources, 1):
        title = escape(source.title or source.url)
        extra = " · ".join(x for x in (source.domain, source.date) if x)
        lines.append(f"{number}. [{title}]({source.url})" + (f" — {extra}" if extra else ""))
    return "\n".join(lines)


def source_references(sources: Sequence[Source], *, titles: bool = True) -> str:
    """The sources as plain reference lines, ``[n] title (date): url`` (``[n] url`` without
    ``titles``): what the seed MCP server sends and what a terminal shows."""
    lines = []
    for number, source in enumerate(sources, 1):
        if titles:
            date = f" ({source.date})" if source.date else ""
            lines.append(f"[{number}] {source.title or source.url}{date}: {source.url}")
        else:
            lines.append(f"[{number}] {source.url}")
    return "\n".join(lines)


def related_markdown(questions: Sequence[str]) -> str:
    """The **Related** questions as a bullet list ("" for none)."""
    if not questions:
        return ""
    return "**Related**\n\n" + "\n".join(f"- {escape(q)}" for q in questions)


def notes_markdown(notes: Sequence[str]) -> str:
    """Notes about a question (a file already in the history, ...) as one muted line.

    Notes carry user file names, so they are escaped.
    """
    return f"<sub>{html.escape(' · '.join(notes))}</sub>" if notes else ""


def quote_block(text: str) -> str:
    """``text`` as a Markdown block quote (blank lines kept inside it)."""
    return "\n".join(f"> {line}" if line.strip() else ">" for line in text.strip().splitlines())


def job_status_markdown(status: JobStatus) -> str:
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
