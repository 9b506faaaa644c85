"""What the magics print in IPython in a terminal, which shows no Markdown and no live output.

A bundle's Markdown is printed rendered: by ``rich`` when it is installed (the ``notebook``
extra), bold and italics as such, links as "title (address)"; else as plain text with the same
titles and addresses. The notebook's Markdown carries a little HTML (icons, small print, the
follow-up chip, a folded "Thinking" block): the tags go, their text stays. A citation shows as
its number, ``[1]``: the Sources list under the answer gives each page's title and address.
A bundle without Markdown (an error line) prints its plain text.

While a magic waits, :class:`StatusLine` shows one line ("Searching…") that the outcome then
replaces: in a terminal only, since a log or a pipe keeps every character it is given.
"""

from __future__ import annotations

import html
import re
import sys
from collections.abc import Mapping
from html.parser import HTMLParser
from typing import TextIO

from pplx_nb.notebook._render import markdown_to_html

__all__ = ["StatusLine", "plain_text", "print_bundle", "terminal_markdown"]

_CITATION_LINK = re.compile(r"\[\[(\d{1,3})\]\]\([^\s()]+(?: \"[^\"\n]*\")?\)")
_SUMMARY = re.compile(r"<details[^>]*>\s*<summary>(.*?)</summary>", re.S)
# Inline code becomes a code span (its text unescaped); any other tag goes, its text kept.
_HTML = re.compile(r"<code[^>]*>(?P<code>.*?)</code>|<br\s*/?>(?P<br>)|</?[A-Za-z][^<>]*>", re.S)


def terminal_markdown(markdown: str) -> str:
    """``markdown`` from a notebook bundle without its HTML and with citations as numbers."""
    text = _CITATION_LINK.sub(r"[\1]", markdown)
    text = _SUMMARY.sub(lambda m: f"**{m.group(1).strip()}**", text)
    return _HTML.sub(_unhtml, text)


def _unhtml(match: re.Match[str]) -> str:
    if match.group("code") is not None:
        return f"`{html.unescape(match.group('code'))}`"
    return "\n" if match.group("br") is not None else ""


class _Text(HTMLParser):
    """HTML as plain text: blocks on lines of their own, list items numbered or bulleted, a
    link as "text (address)" (its address alone when that is its text)."""

    _BLOCKS = frozenset({"p", "pre", "ul", "ol", "blockquote", "h1", "h2", "h3", "h4", "h5", "h6"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.lists: list[int] = []
        self.links: list[tuple[str, int]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in self._BLOCKS:
            self.out.append("\n\n")
        if tag in ("ul", "ol"):
            self.lists.append(0 if tag == "ol" else -1)
        elif tag == "li" and self.lists:
            number = self.lists[-1]
            if number >= 0:
                self.lists[-1] = number + 1
            self.out.append(f"\n{'  ' * (len(self.lists) - 1)}")
            self.out.append(f"{number + 1}. " if number >= 0 else "- ")
        elif tag == "a":
            self.links.append((dict(attrs).get("href") or "", len(self.out)))
        elif tag == "hr":
            self.out.append("\n\n---")

    def handle_endtag(self, tag: str) -> None:
        if tag in ("ul", "ol") and self.lists:
            self.lists.pop()
        elif tag == "a" and self.links:
            href, start = self.links.pop()
            if href and "".join(self.out[start:]) != href:
                self.out.append(f" ({href})")

    def handle_data(self, data: str) -> None:
        self.out.append(data)


def plain_text(markdown: str) -> str:
    """``markdown`` as plain text, for a terminal without ``rich``."""
    parser = _Text()
    parser.feed(markdown_to_html(terminal_markdown(markdown)))
    parser.close()
    text = "".join(parser.out)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(line.rstrip() for line in text.splitlines())).strip()


def print_bundle(bundle: Mapping[str, str], file: TextIO | None = None) -> None:
    """Print ``bundle`` for a terminal: its Markdown rendered, else its plain text."""
    out = file or sys.stdout
    markdown = bundle.get("text/markdown")
    if markdown is None:
        print(bundle.get("text/plain", ""), file=out, flush=True)
        return
    try:  # rich comes with the notebook extra
        from rich.console import Console
        from rich.markdown import Markdown
    except ImportError:
        print(plain_text(markdown), file=out, flush=True)
        return
    Console(file=out).print(Markdown(terminal_markdown(markdown), hyperlinks=False))
    out.flush()


class StatusLine:
    """One line saying what a magic waits for, replaced by what it prints next.

    Written only to a terminal, and erased with spaces rather than escape sequences, so that a
    terminal without them (``TERM=dumb``) erases it too.
    """

    def __init__(self, file: TextIO | None = None) -> None:
        self.file = file or sys.stdout
        self.shown = ""
        self.used = False

    def show(self, text: str) -> None:
        """Show the first line of ``text``, once: the first status is the one shown."""
        if self.used or not text or not self.file.isatty():
            return
        self.used = True
        self.shown = text.splitlines()[0]
        self.file.write(self.shown)
        self.file.flush()

    def clear(self) -> None:
        """Erase the line shown, if any."""
        if self.shown:
            self.file.write("\r" + " " * len(self.shown) + "\r")
            self.file.flush()
            self.shown = ""
