"""Markdown for answers, written once for every surface that shows one.

``Answer._repr_markdown_``, :func:`pplx_nb.export.to_markdown`, the notebook display and the MCP
tools' text cite sources the same way. An answer's text is kept as the API wrote it, and its
citation markers (:data:`CITATION`) are resolved against the answer's sources when it is shown:

- ``[n]``, n from 1: the source of the search result with ``id`` n (by position, the n-th, when
  the sources carry no ids or an id names two pages: stored answers from before ids were kept);
- ``[web:N]``, N from 0: the result at position N, whose ``id`` is N + 1;
- a Markdown link ``[text](url)``: the source with that URL (already a link; left as it is).

A marker that names no source, or sits in code (a fenced block or an inline span), stays as text.
A numbered **Sources** list follows the text; when the text cites some sources and not others,
the ones it never cites are listed apart under **Also consulted**.

Everything from the web is made safe when it is rendered, never when it is stored: answer text
and reasoning keep their Markdown but lose raw HTML and links that are not http(s)
(:func:`defuse`); short web text (titles, snippets, related questions) is escaped outright
(:func:`escape`); only http(s) URLs become links, percent-encoded so they cannot end the link
(:func:`web_url`). Notes carry the user's file names and are HTML-escaped. While an answer streams,
:func:`close_markdown` closes what the text so far leaves open, so it renders as it will.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Protocol
from urllib.parse import quote, urlsplit

if TYPE_CHECKING:
    from pplx_nb._models import JobStatus, Source


class Cites(Protocol):
    """What resolving a citation marker reads of a source: its URL and search-result ids (a
    :class:`~pplx_nb._models.Source`, or a stored source read without building one)."""

    @property
    def url(self) -> str: ...

    @property
    def ids(self) -> list[int] | None: ...


__all__ = [
    "CITATION",
    "Cites",
    "cited_and_consulted",
    "cited_sources",
    "close_markdown",
    "defuse",
    "escape",
    "job_status_markdown",
    "link_citations",
    "markdown_link",
    "notes_markdown",
    "outside_code",
    "quote_block",
    "related_markdown",
    "replace_citations",
    "source_references",
    "sources_markdown",
    "web_url",
]

CITATION = re.compile(
    r"\[(?:(?P<number>\d{1,3})|web:(?P<web>\d{1,3}))\]"
    r"|\[(?P<label>(?:[^\[\]\n]|\[[^\[\]\n]*\])*)\]"
    r"\((?P<url>https?://(?:[^\s()]|\([^\s()]*\))+)\)"
)
"""A citation marker in answer text: ``[1]`` to ``[999]`` (group ``number``, counting from 1),
``[web:0]`` to ``[web:999]`` (group ``web``, counting from 0) or a Markdown link to a web page
(groups ``label`` and ``url``; one level of brackets in the label, so the markers inside
``[see [1]](url)`` belong to the link, and one level of parentheses in the URL, as Wikipedia's
have)."""

_CODE = re.compile(
    r"^[ \t>]*(?P<backticks>`{3,})[^`\n]*(?:\n.*?)??(?:\n[ \t>]*(?P=backticks)`*[ \t]*$|\Z)"
    r"|^[ \t>]*(?P<tildes>~{3,})[^\n]*(?:\n.*?)??(?:\n[ \t>]*(?P=tildes)~*[ \t]*$|\Z)"
    r"|(?<![`\\])(?P<ticks>`+)(?!`)(?:(?!\n[ \t]*\n|\n[ \t>]*(?:```|~~~)).)+?(?<!`)(?P=ticks)(?!`)",
    re.MULTILINE | re.DOTALL,
)
"""Code in Markdown: a fenced block (``` or ~~~, to its closing fence or the end of the text, as
a block still streaming in) or an inline code span (its run of backticks to the same run)."""

# Raw HTML starts with "<" and a letter, "/", "!" or "?"; an http(s) autolink is kept.
_TAG = re.compile(r"(?<!\\)((?:\\\\)*)<(?=[A-Za-z/!?])(?!https?://)", re.IGNORECASE)
# The "]" that ends a link's text, "[text](target)", or a link definition, "[name]: target".
_LINK_END = re.compile(r"(?<!\\)((?:\\\\)*)\]([(:])\s*<?([^\s<>()]*)")
_WEB = re.compile(r"https?://", re.IGNORECASE)
_SPECIAL = re.compile(r"([\\\[\]*_`<>|&])")
# Characters a URL may hold that would end a Markdown link destination or an HTML attribute.
_URL_SAFE = ":/?#@!$&'*+,;=%~[]"


def web_url(value: object) -> str | None:
    """``value`` as an http(s) URL safe inside a Markdown link or an HTML attribute (spaces,
    parentheses, quotes and angle brackets percent-encoded), or ``None`` for any other value:
    a ``javascript:`` or ``data:`` address must never become a link."""
    if not isinstance(value, str):
        return None
    url = value.strip()
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError:
        return None
    return quote(url, safe=_URL_SAFE) if scheme in ("http", "https") else None


def escape(text: str) -> str:
    """``text`` shown as written: the characters that open links, emphasis, code, HTML,
    entities or table cells backslash-escaped (for titles, snippets and questions)."""
    return _SPECIAL.sub(r"\\\1", text)


def markdown_link(label: str, url: str, title: str | None = None) -> str:
    """``[label](url "title")`` when ``url`` is an http(s) address; otherwise ``label`` alone.

    ``label`` is Markdown already (escape web text first); ``title`` is shown on hover.
    """
    target = web_url(url)
    if target is None:
        return label
    if title is None:
        return f"[{label}]({target})"
    hover = " ".join(title.split()).replace("\\", "\\\\").replace('"', "'")
    return f'[{label}]({target} "{hover}")'


def _parts(text: str) -> Iterator[tuple[str, bool]]:
    """``text`` cut into pieces, each with whether it is code (see :data:`_CODE`)."""
    if "`" not in text and "~" not in text:  # no fence or code span can start: all prose
        if text:
            yield text, False
        return
    start = 0
    for match in _CODE.finditer(text):
        if match.start() > start:
            yield text[start : match.start()], False
        yield match.group(0), True
        start = match.end()
    if start < len(text):
        yield text[start:], False


def outside_code(text: str, change: Callable[[str], str], *, sure: bool = False) -> str:
    """``text`` with ``change`` applied to its prose; fenced code and code spans stay as is.

    ``sure``: code is only what every Markdown reader takes for code (a code span within one
    line; a fenced block whose fences both start their line and whose closing fence is there),
    and the rest is prose: for a change that must reach all a reader could take for prose.
    """
    if not sure:
        return "".join(part if code else change(part) for part, code in _parts(text))
    out: list[str] = []
    start = position = 0
    while match := _CODE.search(text, position):
        if _surely_code(match, _paragraph_before(text, start, match.start())):
            out += [change(text[start : match.start()]), match.group(0)]
            start = position = match.end()
        else:  # its opening is text: code may begin after it
            position = match.start() + 1
    return "".join([*out, change(text[start:])])


_BLANK_LINE = re.compile(r"\n[ \t>]*\n")


def _paragraph_before(text: str, start: int, end: int) -> str:
    """The text from ``start`` to ``end`` since its last blank line."""
    blanks = [blank.end() for blank in _BLANK_LINE.finditer(text, start, end)]
    return text[blanks[-1] if blanks else start : end]


def _surely_code(match: re.Match[str], before: str) -> bool:
    """Whether code :data:`_CODE` matched, after the text ``before`` it in its paragraph, is
    code to every reader (see :func:`outside_code`)."""
    code = match.group(0)
    if match.group("ticks") is None:  # a fenced block
        if code[0] not in "`~":
            return False  # indented or quoted: a list or quote may take it for text
        fence = len(code) - len(code.lstrip(code[0]))
        head, _, last = code.rpartition("\n")
        closing = last.rstrip()
        return bool(head) and len(closing) >= fence and closing == code[0] * len(closing)
    # A code span on one line, unless a backtick before it in its paragraph could pair with
    # one of its own for another reader (an escaped backslash before it, a span over lines).
    return "\n" not in code and "`" not in before


def _defuse_prose(text: str) -> str:
    def link_end(match: re.Match[str]) -> str:
        if _WEB.match(match.group(3)):
            return match.group(0)
        slashes = match.group(1)
        return f"{slashes}\\{match.group(0)[len(slashes) :]}"

    return _LINK_END.sub(link_end, _TAG.sub(r"\1\\<", text))


def defuse(text: str) -> str:
    """Markdown from the API made safe to render, its formatting kept: raw HTML tags are
    escaped (shown as text), and a link or link definition whose target is not an http(s) URL
    (``[x](javascript:...)``) is shown as text. Code is left as it is: it renders as text."""
    return outside_code(text, _defuse_prose)


_FENCE_LINE = re.compile(r"^[ \t>]*(`{3,}|~{3,})(.*)$")
# What can open or close inline Markdown: an escape, a run of backticks, asterisks or
# underscores, a bracket, the "](" between a link's text and its target, and its ")".
_INLINE = re.compile(r"\\.|`+|\*+|_+|\[|\]\(|\]|\)", re.S)
_PUNCTUATION = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def close_markdown(text: str, cursor: str = "") -> str:
    """``text`` cut off mid-stream, with ``cursor`` at its end and what it leaves open closed,
    so that it renders as it will once complete: a fenced code block (the cursor inside it), a
    code span, emphasis; a link whose target is still coming shows its text alone, and a
    delimiter with nothing after it yet (``**``) is left out."""
    fence = _open_fence(text)
    if fence is not None:
        head, _, last = text.rpartition("\n")
        if last.strip() and not last.strip(f" \t>{fence[0]}") and _open_fence(head):
            text = head + "\n"  # its closing fence, arriving
        return f"{text}{cursor}\n{fence}"
    blank = text.rfind("\n\n")
    start = max(blank + 2 if blank >= 0 else 0, _last_fence_end(text))
    return text[:start] + _close_inline(text[start:], cursor)


def _open_fence(text: str) -> str | None:
    """The fence (```` ``` ```` or ``~~~``) of a code block the text leaves open, if any."""
    fence: str | None = None
    for line in text.split("\n"):
        match = _FENCE_LINE.match(line)
        if match is None:
            continue
        run, rest = match.groups()
        if fence is None and not (run[0] == "`" and "`" in rest):
            fence = run
        elif fence is not None and run[0] == fence[0] and len(run) >= len(fence):
            fence = None if not rest.strip() else fence
    return fence


def _last_fence_end(text: str) -> int:
    ends = [m.end() for m in _CODE.finditer(text) if m.group("ticks") is None]
    return ends[-1] if ends else 0


def _flanks(text: str, start: int, end: int) -> tuple[bool, bool]:
    """Whether the delimiter run ``text[start:end]`` can open and can close emphasis."""
    before = text[start - 1] if start else " "
    after = text[end] if end < len(text) else " "
    left = not after.isspace() and (
        after not in _PUNCTUATION or before.isspace() or before in _PUNCTUATION
    )
    right = not before.isspace() and (
        before not in _PUNCTUATION or after.isspace() or after in _PUNCTUATION
    )
    if text[start] == "_":
        return left and (not right or before in _PUNCTUATION), right and (
            not left or after in _PUNCTUATION
        )
    return left, right


def _close_inline(paragraph: str, cursor: str) -> str:
    """The last paragraph of a partial text with its open code span, emphasis and link closed."""
    openers: list[tuple[str, int]] = []
    bracket: int | None = None
    target: int | None = None
    drop: list[tuple[int, int]] = []
    position = 0
    while match := _INLINE.search(paragraph, position):
        token, start, position = match.group(0), match.start(), match.end()
        if target is not None:
            if token == ")":
                target = bracket = None
        elif token[0] == "`":
            closing = re.compile(rf"(?<!`){token}(?!`)").search(paragraph, position)
            if closing is None:
                if position == len(paragraph):
                    drop.append((start, position))
                else:
                    openers.append((token, start))
                break
            position = closing.end()
        elif token == "[":
            bracket = start
        elif token == "](" and bracket is not None:
            target = start
        elif token == "]":
            bracket = None
        elif token[0] in "*_":
            can_open, can_close = _flanks(paragraph, start, position)
            if can_close and any(kind[0] == token[0] for kind, _ in openers):
                _pop(openers, token)
            elif can_open:
                openers.append((token, start))
            elif position == len(paragraph):
                drop.append((start, position))
    if target is not None and bracket is not None:
        drop += [(bracket, bracket + 1), (target, len(paragraph))]
    kept = paragraph
    for begin, end in sorted(drop, reverse=True):
        kept = kept[:begin] + kept[end:]

    def shifted(at: int) -> int:
        return at - sum(end - begin for begin, end in drop if end <= at)

    # An opener with nothing after it yet would render as its own characters: left out.
    while openers and not kept[shifted(openers[-1][1]) + len(openers[-1][0]) :].strip():
        kept = kept[: shifted(openers.pop()[1])]
    if not openers:
        return kept + cursor
    body = kept.rstrip()
    gap = " " if body != kept else ""
    return body + "".join(kind for kind, _ in reversed(openers)) + gap + cursor


def _pop(openers: list[tuple[str, int]], closer: str) -> None:
    """Match the closing run ``closer`` against the newest openers of its character."""
    left = len(closer)
    while left and openers and openers[-1][0][0] == closer[0]:
        kind, at = openers.pop()
        if len(kind) > left:
            openers.append((kind[: len(kind) - left], at))
            return
        left -= len(kind)


def _same_page(url: str) -> str:
    return url.split("#", 1)[0].rstrip("/")


def _by_id(sources: Sequence[Cites]) -> dict[int, int] | None:
    """The position of the source each search-result id names, or ``None`` when the ids cannot
    be used: a source has none (stored before ids were kept) or one id names two pages."""
    positions: dict[int, int] = {}
    for index, source in enumerate(sources):
        if not source.ids:
            return None
        for ident in source.ids:
            if positions.setdefault(ident, index) != index:
                return None
    return positions


def _resolver(sources: Sequence[Cites]) -> Callable[[re.Match[str]], int | None]:
    """A function giving the position in ``sources`` of the source a :data:`CITATION` match
    names, if any."""
    by_id = _by_id(sources)

    def cited(match: re.Match[str]) -> int | None:
        number, web, _, url = match.groups()  # one call: a store's export resolves thousands
        if url is not None:
            same = [i for i, s in enumerate(sources) if s.url == url] or [
                i for i, s in enumerate(sources) if _same_page(s.url) == _same_page(url)
            ]
            return same[0] if same else None
        ident = int(number) if number is not None else int(web) + 1
        if by_id is not None:
            return by_id.get(ident)
        return ident - 1 if 1 <= ident <= len(sources) else None

    return cited


def cited_sources(text: str, sources: Sequence[Cites]) -> list[int]:
    """The positions in ``sources`` that ``text`` cites outside code, in order, each once."""
    cited = _resolver(sources)
    found: dict[int, None] = {}
    for part, code in _parts(text):
        if code:
            continue
        for match in CITATION.finditer(part):
            index = cited(match)
            if index is not None:
                found.setdefault(index)
    return list(found)


def replace_citations(
    text: str, sources: Sequence[Source], render: Callable[[int], str | None]
) -> str:
    """An answer's text as safe Markdown (:func:`defuse`) with every ``[n]`` or ``[web:N]``
    that names a source replaced by ``render(position in sources)`` (kept when it gives
    ``None``). A marker that names no source, one in code, a Markdown link and the markers
    inside its text are left as they are."""
    cited = _resolver(sources)

    def replace(match: re.Match[str]) -> str:
        index = None if match.group("url") is not None else cited(match)
        shown = None if index is None else render(index)
        return match.group(0) if shown is None else shown

    return outside_code(text, lambda prose: _defuse_prose(CITATION.sub(replace, prose)))


def link_citations(text: str, sources: Sequence[Source], *, titles: bool = False) -> str:
    """An answer's text as safe Markdown (:func:`defuse`) with every ``[n]`` or ``[web:N]``
    that names a source turned into a link ``[[n]](url)``, numbered as the **Sources** list
    numbers it (``[web:0]`` shows as ``[1]``).

    ``titles`` adds the source's title (or domain) as the link title, shown on hover. A marker
    that names no source, one in code, a Markdown link (already one) and the markers inside
    its text are left as they are; so is a marker whose source is not an http(s) page.
    """

    def link(index: int) -> str:
        source = sources[index]
        title = (source.title or source.domain) if titles else None
        return markdown_link(f"[{index + 1}]", source.url, title)

    return replace_citations(text, sources, link)


def cited_and_consulted(sources: Sequence[Cites], text: str | None) -> tuple[list[int], list[int]]:
    """(cited, never cited) positions; all count as cited when the text cites none of them."""
    everything = list(range(len(sources)))
    cited = set(cited_sources(text, sources)) if text is not None else set()
    if not cited:
        return everything, []
    return [i for i in everything if i in cited], [i for i in everything if i not in cited]


def _source_line(source: Source) -> str:
    title = escape(source.title or source.url)
    extra = " · ".join(escape(x) for x in (source.domain, source.date) if x)
    return markdown_link(title, source.url) + (f" — {extra}" if extra else "")


def sources_markdown(sources: Sequence[Source], text: str | None = None) -> str:
    """The numbered **Sources** list: linked title, then domain and date ("" for no sources).

    Given the answer's ``text``, sources it never cites are listed apart under **Also
    consulted**, each list keeping the numbers the citations use.
    """
    if not sources:
        return ""
    cited, rest = cited_and_consulted(sources, text)
    if not rest:
        lines = ["**Sources**", ""]
        lines += [f"{n}. {_source_line(source)}" for n, source in enumerate(sources, 1)]
        return "\n".join(lines)
    # A Markdown list renumbers its items from the first one: numbers with gaps are written out.
    lines = ["**Sources**", ""]
    lines += [f"- **{i + 1}.** {_source_line(sources[i])}" for i in cited]
    lines += ["", "**Also consulted**", ""]
    lines += [f"- **{i + 1}.** {_source_line(sources[i])}" for i in rest]
    return "\n".join(lines)


def source_references(
    sources: Sequence[Source], *, titles: bool = True, text: str | None = None
) -> str:
    """The sources as plain reference lines, ``[n] title (date): url`` (``[n] url`` without
    ``titles``): what the seed MCP server sends and what a terminal shows.

    Given the answer's ``text``, sources it never cites follow under **Also consulted**. The
    lines are read as Markdown too (MCP clients render it), so what they quote is defused.
    """
    cited, rest = cited_and_consulted(sources, text)

    def line(index: int) -> str:
        source = sources[index]
        url = defuse(source.url)
        if not titles:
            return f"[{index + 1}] {url}"
        date = f" ({defuse(source.date)})" if source.date else ""
        return f"[{index + 1}] {defuse(source.title or source.url)}{date}: {url}"

    lines = [line(i) for i in cited]
    if rest:
        lines += ["", "**Also consulted**", *(line(i) for i in rest)]
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
