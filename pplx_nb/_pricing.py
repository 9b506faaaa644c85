"""Per-model prices and the cost estimate used when the API reports none.

Pure: a static table (PERPLEXITY_API.md §11, the public pricing and model pages, late 2026) and
the arithmetic. The API layer fetches the live prices (``GET /v1/models``) and passes them in;
wherever they are missing, the static table answers. Agent API models are priced per token
plus each tool call (:data:`TOOL_FEES`); the retired Sonar models kept their own scheme, for
servers that still speak it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import NamedTuple

from pplx_nb._models import Cost, Usage

__all__ = [
    "PRICES",
    "SEARCH_API_FEE",
    "TOOL_FEES",
    "Price",
    "estimate_cost",
    "finite_cost",
    "price_for",
    "priced_model",
    "safe_estimate",
]


class Price(NamedTuple):
    """USD per million tokens in / out, per request, the deep-research extras and the cache."""

    input_per_m: float
    output_per_m: float
    request_fee: float = 0.0
    citation_per_m: float = 0.0
    reasoning_per_m: float = 0.0
    search_fee: float = 0.0
    cache_read_per_m: float | None = None
    """Cached input tokens; ``None``: priced as any input token."""


PRICES: dict[str, Price] = {
    "perplexity/sonar": Price(0.25, 2.50, cache_read_per_m=0.0625),
    "openai/gpt-5-mini": Price(0.25, 2.0, cache_read_per_m=0.025),
    "openai/gpt-5.1": Price(1.25, 10.0, cache_read_per_m=0.125),
    "openai/gpt-5.2": Price(1.75, 14.0, cache_read_per_m=0.175),
    "anthropic/claude-haiku-4-5": Price(1.0, 5.0, cache_read_per_m=0.10),
    "anthropic/claude-sonnet-4-5": Price(3.0, 15.0, cache_read_per_m=0.30),
    "anthropic/claude-opus-4-6": Price(5.0, 25.0, cache_read_per_m=0.50),
    "google/gemini-3-pro-preview": Price(2.0, 12.0, cache_read_per_m=0.20),
    "sonar": Price(1.0, 1.0, 0.005),
    "sonar-pro": Price(3.0, 15.0, 0.006),
    "sonar-reasoning-pro": Price(2.0, 8.0, 0.006),
    "sonar-deep-research": Price(
        2.0, 8.0, 0.0, citation_per_m=2.0, reasoning_per_m=3.0, search_fee=0.005
    ),
}
"""The static table, by model slug or Sonar name."""
TOOL_FEES: dict[str, float] = {
    "search_web": 0.0025,
    "fetch_url": 0.0005,
    "search_images": 0.0025,
    "search_people": 0.005,
    "search_finance": 0.005,
}
"""USD per Agent API tool call, by billing name."""
SEARCH_API_FEE = 0.005
"""USD per Search API request (``POST /search``: $5 per 1,000), whatever it returns."""
_PRESET_MODELS = {
    "fast": "perplexity/sonar",
    "fast-search": "perplexity/sonar",
    "low": "openai/gpt-5-mini",
    "pro-search": "openai/gpt-5-mini",
    "medium": "openai/gpt-5.1",
    "deep-research": "openai/gpt-5.1",
    "high": "anthropic/claude-sonnet-4-5",
    "advanced-deep-research": "anthropic/claude-sonnet-4-5",
    "xhigh": "anthropic/claude-opus-4-6",
}
"""What each preset resolved to when the table was taken: the guess when only it is known."""
_FALLBACK = "openai/gpt-5-mini"


def priced_model(model: str | None) -> str:
    """The model whose prices price ``model``: itself, or the model a preset resolved to."""
    name = (model or _FALLBACK).strip().lower()
    return _PRESET_MODELS.get(name.partition("@")[0], name)  # an effort pinned to a version too


def price_for(model: str | None, prices: Mapping[str, Price] | None = None) -> Price:
    """The price of a model slug, Sonar name or preset: from ``prices`` (the API's), else the
    static table; an unknown model is priced as the default preset's."""
    name = priced_model(model)
    for table in (prices or {}, PRICES):
        price = table.get(name)
        if price is not None:
            return price
    return (prices or {}).get(_FALLBACK) or PRICES[_FALLBACK]


def estimate_cost(
    model: str | None, usage: Usage | None, prices: Mapping[str, Price] | None = None
) -> Cost:
    """Estimate a request's cost from its usage; the result is marked ``estimated``.

    ``prices``: the API's own (``GET /v1/models``), over the static table.
    """
    price = price_for(model, prices)
    usage = usage or Usage()
    cached = usage.cache_read_input_tokens or 0
    cache_read = 0.0
    if price.cache_read_per_m is not None and 0 < cached <= usage.prompt_tokens:
        cache_read = cached * price.cache_read_per_m / 1e6
    else:
        cached = 0
    input_cost = (usage.prompt_tokens - cached) * price.input_per_m / 1e6
    output_cost = usage.completion_tokens * price.output_per_m / 1e6
    tool_costs = {
        name: round(count * TOOL_FEES.get(name, 0.0), 6)
        for name, count in (usage.tool_calls or {}).items()
    }
    searches = 0 if usage.tool_calls else (usage.num_search_queries or 0) * price.search_fee
    extras = (
        (usage.citation_tokens or 0) * price.citation_per_m / 1e6
        + (usage.reasoning_tokens or 0) * price.reasoning_per_m / 1e6
        + searches
    )
    request_cost = price.request_fee + extras + sum(tool_costs.values())
    return Cost(
        input_cost=round(input_cost, 6),
        output_cost=round(output_cost, 6),
        request_cost=round(request_cost, 6),
        total_cost=round(input_cost + cache_read + output_cost + request_cost, 6),
        estimated=True,
        cache_read_cost=round(cache_read, 6) if cached else None,
        tool_calls_cost=round(sum(tool_costs.values()), 6) if tool_costs else None,
        tool_costs=tool_costs or None,
    )


def finite_cost(cost: Cost) -> bool:
    """Whether every amount in ``cost`` is a finite number: what a conversation can store
    (JSON has no NaN or Infinity)."""
    amounts = [
        cost.input_cost,
        cost.output_cost,
        cost.request_cost,
        cost.total_cost,
        cost.cache_read_cost,
        cost.cache_creation_cost,
        cost.tool_calls_cost,
        *(cost.tool_costs or {}).values(),
    ]
    return all(amount is None or math.isfinite(amount) for amount in amounts)


def safe_estimate(
    model: str | None, usage: Usage | None, prices: Mapping[str, Price] | None = None
) -> Cost | None:
    """:func:`estimate_cost` that never fails: with ``prices``, else with the static table;
    ``None`` (the cost is unknown) when neither gives a finite cost. An answer is paid for
    whatever its estimate does, so nothing here may keep it from being stored."""
    for table in (prices, None) if prices else (None,):
        try:
            cost = estimate_cost(model, usage, table)
        except (ArithmeticError, ValueError, TypeError):
            continue
        if finite_cost(cost):
            return cost
    return None


def storable_cost(
    reported: Cost | None,
    model: str | None,
    usage: Usage | None,
    prices: Mapping[str, Price] | None = None,
) -> Cost | None:
    """The cost to keep for an answer: ``reported`` by the API when it is finite, else the
    :func:`safe_estimate` from ``usage``; ``None`` (unknown) without usage. Never raises."""
    if reported is not None and finite_cost(reported):
        return reported
    return None if usage is None else safe_estimate(model, usage, prices)
