"""The document record every corpus is made of, and the sentence helpers answers are built from."""

from __future__ import annotations

import re
from typing import NamedTuple

__all__ = ["Document", "first_sentences", "snippet"]

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(`*\"'])")
_SPACE = re.compile(r"\s+")


class Document(NamedTuple):
    """One searchable page: its title (e.g. ``asyncio.Task.cancel``), URL, text and section."""

    title: str
    url: str
    text: str
    section: str


def _underline(line: str) -> bool:
    return bool(line) and set(line) <= set("=-*~^")


def _prose(text: str) -> str:
    # Skip a leading signature or underlined heading so the prose starts at the first sentence.
    lines = [line.strip() for line in text.strip().splitlines()]
    while len(lines) > 1 and (not lines[0] or lines[0].endswith(")") or _underline(lines[1])):
        lines = lines[2:] if _underline(lines[1]) else lines[1:]
    paragraph: list[str] = []
    for line in lines:
        if not line and paragraph:
            break
        if line:
            paragraph.append(line)
    return _SPACE.sub(" ", " ".join(paragraph)).strip()


def first_sentences(text: str, count: int = 1, limit: int = 400) -> str:
    """The first ``count`` sentences of a document's opening paragraph, at most ``limit`` chars."""
    prose = _prose(text)
    sentences = _SENTENCE_END.split(prose)
    result = " ".join(sentences[:count]).strip()
    if len(result) > limit:
        result = result[:limit].rsplit(" ", 1)[0].rstrip(",;:") + "…"
    return result


def snippet(text: str, limit: int = 300) -> str:
    """A search-result snippet: the opening prose of ``text`` cut at a word boundary."""
    prose = _prose(text)
    if len(prose) <= limit:
        return prose
    return prose[:limit].rsplit(" ", 1)[0] + "…"
