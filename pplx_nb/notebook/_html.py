"""A small Markdown to HTML converter for widget values (``HTML`` widgets do not render Markdown).

It covers what answers contain: headings, paragraphs, bullet and numbered lists, fenced code, block
quotes, rules, and inline code, bold, italic and links. Everything is HTML-escaped first; only
``http(s)`` and ``mailto`` links become anchors, so an answer cannot inject markup into the page.
"""

from __future__ import annotations

import html
import re

__all__ = ["markdown_to_html"]

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
