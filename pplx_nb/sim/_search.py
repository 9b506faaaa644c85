"""The Search API (``POST /search``): ranked pages for a query, no answer.

Filters are top-level fields, as the SDK sends them. Every result has ``url``, ``title``,
``snippet`` and a ``date`` string (never ``null``: the official MCP server rejects one).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from pplx_nb.sim._answers import Filters, count_tokens
from pplx_nb.sim._corpus import Corpus
from pplx_nb.sim._documents import snippet
from pplx_nb.sim._validate import (
    Invalid,
    check_choice,
    check_fields,
    check_filters,
    check_number,
)

__all__ = ["SearchRequest", "parse_search", "search_response"]

FIELDS = frozenset(
    {
        "query",
        "max_results",
        "max_tokens",
        "max_tokens_per_page",
        "country",
        "display_server_time",
        "search_domain_filter",
        "search_recency_filter",
        "search_after_date_filter",
        "search_before_date_filter",
        "last_updated_after_filter",
        "last_updated_before_filter",
        "search_language_filter",
        "search_mode",
        "search_context_size",
        "search_type",
    }
)
_MAX_QUERIES = 5


@dataclass(frozen=True, slots=True)
class SearchRequest:
    """A validated Search API request."""

    queries: tuple[str, ...]
    max_results: int
    max_tokens_per_page: int
    max_tokens: int | None
    filters: Filters
    server_time: bool


def _queries(value: Any) -> tuple[str, ...]:
    queries = [value] if isinstance(value, str) else value
    if (
        not isinstance(queries, list)
        or not 1 <= len(queries) <= _MAX_QUERIES
        or not all(isinstance(q, str) and q.strip() for q in queries)
    ):
        raise Invalid(
            f"query must be a non-empty string or a list of 1 to {_MAX_QUERIES} of them", "query"
        )
    return tuple(q.strip() for q in queries)


def parse_search(data: dict[str, Any]) -> SearchRequest:
    """Validate a ``POST /search`` body; an unknown field is a 400, as on the Agent API."""
    check_fields(data, FIELDS)
    queries = _queries(data.get("query"))
    check_number(data, "max_results", 1, 20, integer=True)
    check_number(data, "max_tokens_per_page", 1, 1_000_000, integer=True)
    check_number(data, "max_tokens", 1, 1_000_000, integer=True)
    check_choice(data, "search_mode", ("web", "academic", "sec"))
    check_choice(data, "search_context_size", ("low", "medium", "high"))
    check_choice(data, "search_type", ("web", "fast", "people"))
    return SearchRequest(
        queries=queries,
        max_results=data.get("max_results") or 10,
        max_tokens_per_page=data.get("max_tokens_per_page") or 1024,
        max_tokens=data.get("max_tokens"),
        filters=Filters(check_filters(data)),
        server_time=data.get("display_server_time") is True,
    )


def search_response(corpus: Corpus, request: SearchRequest, server_time: str) -> dict[str, Any]:
    """The best pages for the queries, deduplicated by URL, within the token budgets."""
    results: list[dict[str, Any]] = []
    seen: set[str] = set()
    budget = request.max_tokens
    for query in request.queries:
        wanted = request.max_results * (4 if request.filters.domains else 1)
        taken = 0
        for doc, _ in corpus.search(query, wanted):
            if taken >= request.max_results:
                break
            if doc.url in seen or not request.filters.allows(doc.url):
                continue
            text = snippet(doc.text, limit=request.max_tokens_per_page * 4)
            if budget is not None:
                if budget <= 0:
                    break
                budget -= count_tokens(text)
            seen.add(doc.url)
            taken += 1
            results.append(
                {
                    "title": doc.title,
                    "url": doc.url,
                    "snippet": text,
                    "date": corpus.date,
                    "last_updated": corpus.date,
                }
            )
    payload: dict[str, Any] = {"id": str(uuid.uuid4()), "results": results}
    if request.server_time:
        payload["server_time"] = server_time
    return payload
