"""The Search API (``POST /search``): ranked web results for a query, no answer.

A request is billed per call (not per token) and generates nothing, so it is retried like any
idempotent request. Filters are top-level fields, as the API takes them; the shared ones
(domains, recency, dates, mode) are checked by the same rules as an answer's options
(:mod:`pplx_nb._options`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any, get_args

from pydantic import BaseModel, ConfigDict

from pplx_nb._errors import ValidationError
from pplx_nb._models import Source
from pplx_nb._option_names import option_error
from pplx_nb._options import (
    ContextSizeValue,
    check_date_order,
    check_options,
    choice,
    date_option,
)
from pplx_nb.api._adapter import Call, SearchResults, encode, read_wire

__all__ = [
    "MAX_QUERIES",
    "MAX_RESULTS",
    "SEARCH_FILTERS",
    "parse_results",
    "search_call",
]

MAX_RESULTS = 20
"""The most results one query may ask for (the API's limit)."""
MAX_QUERIES = 5
"""The most queries one request may carry."""

_SHARED = frozenset(
    {
        "search_domain_filter",
        "search_recency_filter",
        "search_after_date_filter",
        "search_before_date_filter",
        "search_mode",
    }
)
_DATES = frozenset({"last_updated_after_filter", "last_updated_before_filter"})
_COUNTS = frozenset({"max_tokens", "max_tokens_per_page"})
_CONTEXT_SIZES: tuple[str, ...] = get_args(ContextSizeValue)
_LANGUAGE = re.compile(r"[A-Za-z]{2}")
SEARCH_FILTERS = frozenset(
    {*_SHARED, *_DATES, *_COUNTS, "country", "search_language_filter", "search_context_size"}
)
"""The filter names :func:`search_call` accepts besides ``query`` and ``max_results``."""


def _queries(query: object) -> str | list[str]:
    items = [query] if isinstance(query, str) else query
    if (
        not isinstance(items, list | tuple)
        or not 1 <= len(items) <= MAX_QUERIES
        or not all(isinstance(q, str) and q.strip() for q in items)
    ):
        raise ValidationError(
            f"The search query must be words, or a list of 1 to {MAX_QUERIES} queries; got "
            f"{query!r}."
        )
    stripped = [q.strip() for q in items]
    return stripped[0] if isinstance(query, str) else stripped


def _positive(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise option_error("{given} is not accepted; give a whole number above 0.", name, value)
    return value


def _country(name: str, value: object) -> str:
    if not isinstance(value, str) or len(value) != 2 or not value.isascii() or not value.isalpha():
        raise option_error(
            "{given} is not accepted; give a two-letter ISO code, e.g. 'US'.", name, value
        )
    return value.upper()


def _languages(name: str, value: object) -> list[str]:
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise option_error(
            "{option} must be a list of ISO 639-1 codes, e.g. ['en', 'fr']; got {value}.",
            name,
            value,
        )
    for code in value:
        if not isinstance(code, str) or not _LANGUAGE.fullmatch(code):
            raise option_error(
                "{given} is not a language code: give two-letter ISO 639-1 codes, e.g. 'en', 'fr'.",
                name,
                code,
                item=True,
            )
    return [code.lower() for code in value]


_RULES: dict[str, Callable[[str, Any], Any]] = {
    "last_updated_after_filter": date_option,
    "last_updated_before_filter": date_option,
    "max_tokens": _positive,
    "max_tokens_per_page": _positive,
    "country": _country,
    "search_language_filter": _languages,
    "search_context_size": choice(_CONTEXT_SIZES),
}


def _filters(filters: Mapping[str, Any]) -> dict[str, Any]:
    """The filters that are set, checked; unknown names and bad values are VALIDATION_ERROR."""
    unknown = set(filters) - SEARCH_FILTERS
    if unknown:
        raise ValidationError(
            f"Unknown search filter(s) {', '.join(sorted(unknown))}; the Search API takes "
            f"{', '.join(sorted(SEARCH_FILTERS))}."
        )
    given = {key: value for key, value in filters.items() if value is not None}
    checked: dict[str, Any] = dict(check_options({k: v for k, v in given.items() if k in _SHARED}))
    for key, value in given.items():
        if key in _RULES:
            checked[key] = _RULES[key](key, value)
    check_date_order(checked, "last_updated_after_filter", "last_updated_before_filter")
    return checked


def search_call(query: str | list[str], *, max_results: int = 10, **filters: Any) -> Call:
    """The ``POST /search`` call for ``query``, checked before anything is sent (and billed).

    ``max_results`` is 1 to :data:`MAX_RESULTS`; ``filters`` are named as the API names them
    (:data:`SEARCH_FILTERS`).
    """
    if (
        isinstance(max_results, bool)
        or not isinstance(max_results, int)
        or not 1 <= max_results <= MAX_RESULTS
    ):
        raise option_error(
            "{given} is not accepted; ask for 1 to {most} results.",
            "max_results",
            max_results,
            most=MAX_RESULTS,
        )
    body = {"query": _queries(query), "max_results": max_results, **_filters(filters)}
    return Call("POST", "/search", encode(body))


class _SearchResponse(BaseModel):
    model_config = ConfigDict(extra="ignore")

    results: SearchResults


def parse_results(raw: bytes) -> list[Source]:
    """The sources in a ``POST /search`` response, in rank order, each URL once."""
    response = read_wire(_SearchResponse, raw, "search results")
    sources: list[Source] = []
    seen: set[str] = set()
    for result in response.results:
        if result["url"] in seen:
            continue
        seen.add(result["url"])
        sources.append(Source.model_validate(result))
    return sources
