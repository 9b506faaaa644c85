"""Search API results: a list of :class:`~pplx_nb._models.Source` that renders itself as a table.

Shared by every layer, like :class:`~pplx_nb._models.Answer`: the API client returns it, the
Researcher may note the conversation it was saved in, notebooks and MCP show it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pplx_nb._extras import require
from pplx_nb._markdown import escape, markdown_link
from pplx_nb._models import Source

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["SEARCH_PRICE_USD", "WebResults"]

SEARCH_PRICE_USD = 0.005
"""What one Search API request costs: $5 per 1,000 requests (Perplexity's price list)."""

_SNIPPET_CHARS = 240


class WebResults(list[Source]):
    """Search API results: a list of :class:`~pplx_nb._models.Source`, best first.

    ``query`` is what was searched; ``conversation_id`` is set when the results were saved as a
    conversation. Renders as a table in Jupyter; :meth:`to_dataframe` gives a DataFrame.
    """

    def __init__(
        self,
        sources: list[Source] | None = None,
        *,
        query: str = "",
        conversation_id: str | None = None,
    ) -> None:
        super().__init__(sources or [])
        self.query = query
        self.conversation_id = conversation_id

    def __repr__(self) -> str:
        return f"WebResults(query={self.query!r}, results={len(self)})"

    def to_markdown(self) -> str:
        """A Markdown table: the title linked to its page, the date, the snippet (shortened)."""
        if not self:
            return f"No results for *{_cell(self.query)}*."
        rows = [
            f"| {n} | {markdown_link(_cell(s.title or s.url), s.url)} | {_cell(s.date or '')} | "
            f"{_cell(_short(s.snippet or ''))} |"
            for n, s in enumerate(self, 1)
        ]
        return "| # | title | date | snippet |\n|---|---|---|---|\n" + "\n".join(rows)

    def to_list(self) -> str:
        """A numbered Markdown list: the title linked to its page, the date, the full snippet
        (escaped as the table's cells are)."""
        lines = []
        for n, source in enumerate(self, 1):
            title = markdown_link(_cell(source.title or source.url), source.url)
            date = f" ({_cell(source.date)})" if source.date else ""
            lines.append(f"{n}. {title}{date}")
            if source.snippet:
                lines.append(f"   {_cell(source.snippet)}")
        return "\n".join(lines)

    def to_text(self) -> str:
        """Plain text, one result per line pair: number, title, date, then the URL."""
        if not self:
            return f"No results for {self.query!r}."
        lines = []
        for n, source in enumerate(self, 1):
            date = f" ({source.date})" if source.date else ""
            lines.append(f"{n}. {source.title or source.url}{date}\n   {source.url}")
        return "\n".join(lines)

    def to_dataframe(self) -> pd.DataFrame:
        """One row per result: rank, title, url, domain, date, last_updated, snippet."""
        require("notebook", "WebResults.to_dataframe()", ("pandas",))
        import pandas as pd

        rows = [
            {
                "rank": n,
                "title": s.title,
                "url": s.url,
                "domain": s.domain,
                "date": s.date,
                "last_updated": s.last_updated,
                "snippet": s.snippet,
            }
            for n, s in enumerate(self, 1)
        ]
        columns = ["rank", "title", "url", "domain", "date", "last_updated", "snippet"]
        return pd.DataFrame(rows, columns=columns)

    def _repr_markdown_(self) -> str:
        return self.to_markdown()


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= _SNIPPET_CHARS else text[: _SNIPPET_CHARS - 1].rstrip() + "…"


def _cell(text: str) -> str:
    """Web text on one line, shown as written: safe in a Markdown table cell or list item."""
    return escape(" ".join(text.split()))
