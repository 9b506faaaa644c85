"""Conversations written up as one report with a bibliography.

Two renderings of the same sections: Markdown whose ``[n]`` markers are pandoc citations
(``[@key]``), with ``references.bib`` and the style's ``.csl`` beside it so that
``pandoc --citeproc`` or Quarto renders it in any format; and a self-contained HTML page whose
citations and bibliography citeproc-py has already rendered in the style (no pandoc needed).
Each question is a section; thinking, questions that failed and sources only consulted stay out
unless asked for.
"""

from __future__ import annotations

import html
import re
import secrets
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import resources
from pathlib import Path
from typing import Any

from pplx_nb._citation_formats import to_bibtex_text
from pplx_nb._extras import require
from pplx_nb._fs import atomic_write_bytes, fs_errors
from pplx_nb._markdown import (
    cited_and_consulted,
    defuse,
    escape,
    outside_code,
    replace_citations,
)
from pplx_nb._models import Conversation, Message
from pplx_nb._option_names import option_error
from pplx_nb._references import (
    KeyBook,
    Reference,
    canonical_url,
    conversation_cites,
    references,
    to_csl_json_dict,
)
from pplx_nb._think import split_think

__all__ = ["STYLES", "Report", "ReportOptions", "write_report"]

STYLES = ("apa", "chicago-author-date", "ieee")
# A citation's place in a section while it is rendered; the random part keeps an answer that
# holds the same letters from being read as one of them.
_NONCE = secrets.token_hex(6)
_PLACEHOLDER = f"PPLXCITE{_NONCE}N{{}}X"
_PLACEHOLDERS = re.compile(rf"PPLXCITE{_NONCE}N(\d+)X")


@dataclass(frozen=True)
class ReportOptions:
    """What goes into a report (see :func:`pplx_nb.cite.to_report`)."""

    style: str = "apa"
    title: str | None = None
    thinking: bool = False
    failed: bool = False
    consulted: bool = False
    force: bool = False


@dataclass(frozen=True)
class Report:
    """What :func:`write_report` wrote: the Markdown, its ``.bib``, the style and the HTML."""

    markdown: Path
    bibliography: Path
    style: Path
    html: Path
    sections: int
    references: int


@dataclass
class _Section:
    heading: str
    body: str
    """Markdown with ``PPLXCITE<nonce>N<n>X`` placeholders, ``n`` indexing the section's
    citations."""
    citations: list[list[str]] = field(default_factory=list)
    """Each citation: the keys it cites (one marker, or all the answer's sources when its
    text cites none)."""


def style_path(style: str) -> Path:
    """The CSL file of ``style``: one of :data:`STYLES`, or a path to a ``.csl`` file."""
    if not isinstance(style, str):
        raise option_error(
            "{given} is not a citation style: use one of " + ", ".join(STYLES) + " or the path "
            "of a .csl file.",
            "style",
            style,
        )
    if style in STYLES:
        return Path(str(resources.files("pplx_nb.cite") / "styles" / f"{style}.csl"))
    path = Path(style).expanduser()
    if path.suffix == ".csl" and path.is_file():
        return _checked_style(path, style)
    raise option_error(
        "{given} is not a citation style: use one of " + ", ".join(STYLES) + " or the path of "
        "a .csl file.",
        "style",
        style,
    )


def _checked_style(path: Path, given: str) -> Path:
    """``path`` when it is a CSL style citeproc-py can render: XML with a citation and a
    bibliography layout."""
    from citeproc import CitationStylesStyle

    try:
        root = CitationStylesStyle(str(path), validate=False).root
    except (SyntaxError, ValueError, OSError) as exc:  # lxml's parse errors are SyntaxErrors
        problem = f"cannot be read ({exc})"
    else:
        layouts = [root.find(f"{{{_CSL}}}{name}") for name in ("citation", "bibliography")]
        if all(layout is not None for layout in layouts):
            return path
        problem = "has no citation or no bibliography in it"
    raise option_error(
        "{given} is not a CSL style citeproc-py can use: the file "
        + problem
        + ". Use one of "
        + ", ".join(STYLES)
        + " or a style from the CSL repository (styles.citationstyles.org).",
        "style",
        given,
    )


_CSL = "http://purl.org/net/xbiblio/csl"


def write_report(
    conversations: Sequence[Conversation],
    path: Path,
    options: ReportOptions,
    book: KeyBook,
) -> Report:
    """Write the report of ``conversations`` to ``path`` (Markdown), with ``references.bib``,
    the style's ``.csl`` and ``<name>.html`` beside it; ``book`` holds the keys."""
    require("notebook", "A report's HTML (rendered in a citation style)", ("citeproc", "mistune"))
    style = style_path(options.style)
    path = path.expanduser()
    targets = _targets(path, style)
    if not options.force:
        # A style of the user's already beside the report is the file that would be written.
        taken = [str(p) for p in targets if p.exists() and not _same_file(p, style)]
        if taken:
            raise option_error(
                "{taken} already {verb}; nothing was written. Choose another path, or "
                "overwrite with {given}.",
                "force",
                True,
                taken=", ".join(taken),
                verb="exists" if len(taken) == 1 else "exist",
            )
    cited = _cited_references(conversations, options, book)
    by_key = {r.key: r for r in cited}
    sections = list(_sections(conversations, options, {r.canonical: r.key for r in cited}))
    title = options.title or "Research report"
    markdown, bib, csl, page = targets
    texts = {
        markdown: _markdown(title, sections, bib.name, csl.name),
        bib: to_bibtex_text(cited),
        csl: style.read_text(encoding="utf-8"),
        page: _html(title, sections, by_key, style),
    }
    with fs_errors(path.parent, "write the report in"):
        path.parent.mkdir(parents=True, exist_ok=True)
        for target, text in texts.items():
            if not _same_file(target, style):
                atomic_write_bytes(target, text.encode("utf-8"))
    return Report(markdown, bib, csl, page, len(sections), len(cited))


def _targets(path: Path, style: Path) -> tuple[Path, Path, Path, Path]:
    """The report's four files; a path that names no file, or whose files would be one
    another, is a VALIDATION_ERROR."""
    if not path.name or path.suffix.lower() in (".html", ".bib", ".csl") or path.is_dir():
        raise option_error(
            "{given} cannot be a report's Markdown file: name a .md file (report.md, not a "
            "folder); the "
            ".html, references.bib and the style's .csl are written beside it.",
            "path",
            str(path),
        )
    return (
        path,
        path.with_name("references.bib"),
        path.with_name(style.name),
        path.with_suffix(".html"),
    )


def _same_file(path: Path, other: Path) -> bool:
    try:
        return path.samefile(other)
    except OSError:
        return False


def _answers(
    conversation: Conversation, options: ReportOptions
) -> Iterator[tuple[int, Message, int | None, Message | None]]:
    """Each question with its answer (or ``None`` when it has none), as positions and messages."""
    messages = conversation.messages
    for index, message in enumerate(messages):
        if message.role != "user":
            continue
        answer: tuple[int, Message] | None = None
        for later in range(index + 1, len(messages)):
            if messages[later].role == "user":
                break
            if messages[later].role == "assistant":
                answer = (later, messages[later])
                break
        failed = answer is None or answer[1].unanswered is not None
        if failed and not options.failed:
            continue
        if answer is None:
            yield index, message, None, None
        else:
            yield index, message, answer[0], answer[1]


def _cited_references(
    conversations: Sequence[Conversation], options: ReportOptions, book: KeyBook
) -> list[Reference]:
    """The references the report cites, in the order it first cites them."""
    chosen = [
        answer for conversation in conversations for answer in conversation_cites(conversation)
    ]
    return references(chosen, book, consulted=options.consulted)


def _sections(
    conversations: Sequence[Conversation], options: ReportOptions, keys: dict[str, str]
) -> Iterator[_Section]:
    for conversation in conversations:
        for _, question, _, answer in _answers(conversation, options):
            heading = " ".join(question.content.split())
            if answer is None or answer.unanswered is not None:
                why = answer.unanswered.message if answer and answer.unanswered else None
                body = f"*No answer{': ' + escape(why) if why else '.'}*"
                yield _Section(heading, body)
                continue
            yield _answer_section(heading, answer, options, keys)


def _answer_section(
    heading: str, answer: Message, options: ReportOptions, keys: dict[str, str]
) -> _Section:
    section = _Section(heading, "")
    sources = answer.sources or []
    text, thought = split_think(answer.content)
    thinking = answer.thinking or thought

    def citation(index: int) -> str | None:
        key = keys.get(canonical_url(sources[index].url))
        if key is None:
            return None
        section.citations.append([key])
        return _PLACEHOLDER.format(len(section.citations) - 1)

    body = _merge_runs(section, replace_citations(text.strip(), sources, citation))
    cited, rest = cited_and_consulted(sources, text)
    if not section.citations and sources:
        # An answer that names no source by number still rests on its sources: cite them all.
        listed = [keys[k] for k in (canonical_url(sources[i].url) for i in cited) if k in keys]
        if listed:
            section.citations.append(listed)
            body += f"\n\nSources: {_PLACEHOLDER.format(len(section.citations) - 1)}"
    if options.consulted and rest:
        also = [keys[k] for k in (canonical_url(sources[i].url) for i in rest) if k in keys]
        if also:
            section.citations.append(also)
            body += f"\n\nAlso consulted: {_PLACEHOLDER.format(len(section.citations) - 1)}"
    if options.thinking and thinking:
        # Thinking is the model's text as much as the answer is: its raw HTML stays text.
        quoted = "\n".join(f"> {line}" for line in defuse(thinking.strip()).splitlines())
        body = f"> **Thinking**\n>\n{quoted}\n\n{body}"
    section.body = body
    return section


_RUN = re.compile(rf"{_PLACEHOLDERS.pattern}(?:[ \t]*{_PLACEHOLDERS.pattern})*")


def _merge_runs(section: _Section, body: str) -> str:
    """Markers side by side ("[1][2]") made one citation: pandoc would read ``[@a][@b]`` as a
    link, and a style prints one citation of two sources as one ("[1], [3]", "(A; B)")."""
    merged: list[list[str]] = []

    def run(match: re.Match[str]) -> str:
        positions = _PLACEHOLDERS.findall(match.group(0))
        keys = [key for i in positions for key in section.citations[int(i)]]
        merged.append(list(dict.fromkeys(keys)))
        return _PLACEHOLDER.format(len(merged) - 1)

    body = _RUN.sub(run, body)
    section.citations = merged
    return body


def _pandoc_citation(keys: list[str]) -> str:
    return "[" + "; ".join(f"@{key}" for key in keys) + "]"


def _markdown(title: str, sections: Sequence[_Section], bib: str, csl: str) -> str:
    date = datetime.now(UTC).date().isoformat()
    front = [
        "---",
        f"title: {_yaml_string(_no_tex(_no_attributes(escape(title))))}",  # read as Markdown
        f"date: {date}",
        f"bibliography: {bib}",
        f"csl: {csl}",
        "link-citations: true",
        "---",
        "",
    ]
    parts = ["\n".join(front)]
    for section in sections:

        def pandoc(match: re.Match[str], section: _Section = section) -> str:
            return _pandoc_citation(section.citations[int(match.group(1))])

        text = f"## {escape(section.heading)}\n\n{_PLACEHOLDERS.sub(pandoc, section.body)}"
        parts.append(_for_pandoc(text))
    parts.append("## References\n\n::: {#refs}\n:::")
    return "\n\n".join(parts) + "\n"


# Pandoc reads "{...}" after a heading, a span, a link, an image or code as HTML attributes
# (``{onclick=...}``, ``{=html}`` for raw HTML), and a fence whose info holds braces as raw
# output in a format: braces outside code are escaped, such fences lose their info.
_BRACE = re.compile(r"(?<!\\)((?:\\\\)*)\{")
_BRACED_FENCE = re.compile(r"^([ \t>]*(?:`{3,}|~{3,}))[^\n`]*\{[^\n]*$", re.MULTILINE)


def _no_attributes(text: str) -> str:
    return _BRACE.sub(r"\1\\{", text)


def _for_pandoc(markdown: str) -> str:
    """A section's Markdown with nothing pandoc would read as attributes, raw output or TeX."""
    return outside_code(
        outside_code(_BRACED_FENCE.sub(r"\1", markdown), _no_attributes), _no_tex, sure=True
    )


# Pandoc's Markdown passes a backslash command (\input{...}, \def, \begin{...}) to LaTeX as
# raw TeX and $...$ as math, which LaTeX runs when the report becomes a PDF. In web text a
# backslash before anything but ASCII punctuation or a space escapes nothing (it prints), so
# it is written escaped, and so is every dollar sign: the text reads as before, and no TeX of
# an answer reaches LaTeX. Code is left alone: pandoc writes it for LaTeX as text.
_TEX = re.compile(r"\\(.?)|\$", re.DOTALL)
_ESCAPABLE = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")


def _no_tex(prose: str) -> str:
    def one(match: re.Match[str]) -> str:
        after = match.group(1)
        if after is None:
            return r"\$"
        if not after or after.isspace() or after in _ESCAPABLE:
            return match.group(0)
        return "\\\\" + after

    return _TEX.sub(one, prose)


def _yaml_string(text: str) -> str:
    return '"' + " ".join(text.split()).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _html(
    title: str, sections: Sequence[_Section], by_key: dict[str, Reference], style: Path
) -> str:
    import mistune
    from citeproc import (  # imported when a report is written: lxml and the style parser
        Citation,
        CitationItem,
        CitationStylesBibliography,
        CitationStylesStyle,
        formatter,
    )
    from citeproc.source.json import CiteProcJSON

    # citeproc-py copies strings into its HTML unescaped: web titles are escaped before it.
    items = [_escaped(to_csl_json_dict(r.item)) for r in by_key.values()]
    bibliography = CitationStylesBibliography(
        CitationStylesStyle(str(style), validate=False), CiteProcJSON(items), formatter.html
    )
    rendered: list[list[Any]] = []
    for section in sections:
        citations = [Citation([CitationItem(k) for k in keys]) for keys in section.citations]
        for citation in citations:
            bibliography.register(citation)
        rendered.append(citations)
    body = []
    to_html = mistune.create_markdown(escape=True, plugins=["strikethrough", "table"])
    for section, citations in zip(sections, rendered, strict=True):
        inner = str(to_html(section.body))

        def cite(match: re.Match[str], citations: list[Any] = citations) -> str:
            shown = "".join(
                str(p) for p in _flatten(bibliography.cite(citations[int(match.group(1))], _ignore))
            )
            return f'<span class="citation">{shown}</span>'

        inner = _PLACEHOLDERS.sub(cite, inner)
        body.append(f"<section>\n<h2>{html.escape(section.heading)}</h2>\n{inner}\n</section>")
    entries = []
    # Keys are lower-case ASCII letters, digits and a hyphen (page_key), as citeproc-py keeps them.
    for entry, key in zip(bibliography.bibliography(), bibliography.keys, strict=True):
        reference = by_key[key]
        shown = _linked("".join(str(p) for p in _flatten(entry)), reference)
        entries.append(
            f'<div class="csl-entry" id="ref-{html.escape(reference.key)}">{shown}</div>'
        )
    references = "\n".join(entries)
    return _PAGE.format(
        title=html.escape(title),
        body="\n".join(body),
        references=references,
        style=html.escape(style.stem),
    )


def _ignore(_: object) -> None:
    """citeproc-py's callback for a citation key it does not know (every key is known here)."""


def _flatten(value: Any) -> Iterator[Any]:
    """citeproc-py returns a string or (for some citations) a nested list of strings."""
    if isinstance(value, list):
        for part in value:
            yield from _flatten(part)
    else:
        yield value


def _escaped(value: Any) -> Any:
    if isinstance(value, str):
        return html.escape(value, quote=False)
    if isinstance(value, dict):
        return {k: (v if k == "id" else _escaped(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [_escaped(v) for v in value]
    return value


def _linked(entry: str, reference: Reference) -> str:
    """``entry`` with its URL (and DOI link) as links."""
    targets = [reference.item["URL"]]
    if "DOI" in reference.item:
        targets.append(f"https://doi.org/{reference.item['DOI']}")
    for url in targets:
        shown = html.escape(url, quote=False)
        if shown in entry:
            anchor = f'<a href="{html.escape(url)}">{shown}</a>'
            entry = entry.replace(shown, anchor, 1)
    return entry


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="pplx_nb">
<title>{title}</title>
<style>
body {{ max-width: 46rem; margin: 2rem auto; padding: 0 1rem; font: 16px/1.55 Georgia, serif;
  color: #1d1d1f; }}
h1, h2 {{ font-family: system-ui, sans-serif; line-height: 1.25; }}
h2 {{ margin-top: 2.2rem; font-size: 1.25rem; }}
code, pre {{ font-family: ui-monospace, monospace; font-size: 0.9em; }}
pre {{ background: #f5f5f7; padding: 0.75rem; overflow-x: auto; }}
.csl-entry {{ margin: 0 0 0.6rem 2rem; text-indent: -2rem; }}
.references {{ border-top: 1px solid #d2d2d7; margin-top: 2.5rem; }}
a {{ color: #0b57d0; word-break: break-word; }}
</style>
</head>
<body>
<h1>{title}</h1>
{body}
<section class="references" data-style="{style}">
<h2>References</h2>
{references}
</section>
</body>
</html>
"""
