"""The citation markers of an Agent answer, in each form the live API has been seen to use.

Answers are composed with ``[n]`` markers (n counting from 1, the ``id`` of a search result).
The live API also writes ``[web:N]`` with N counting from 0 (the result's position) and plain
markdown links to the cited page; :func:`cite` rewrites an answer into the chosen form.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from pplx_nb.sim._documents import Document
from pplx_nb.sim._options import CitationStyle

__all__ = ["cite"]

_MARKER = re.compile(r"\[(\d+)\]")


def _link_text(title: str) -> str:
    return title.replace("[", "(").replace("]", ")")


def cite(text: str, sources: Sequence[Document], style: CitationStyle) -> str:
    """``text`` with each in-range ``[n]`` marker written in ``style``; others stay as they are."""
    if style == "numbered":
        return text

    def marker(match: re.Match[str]) -> str:
        n = int(match.group(1))
        if not 1 <= n <= len(sources):
            return match.group(0)
        if style == "web":
            return f"[web:{n - 1}]"
        doc = sources[n - 1]
        return f"[{_link_text(doc.title)}]({doc.url})"

    return _MARKER.sub(marker, text)
