"""Per-model prices (PERPLEXITY_API.md §4) and the cost estimate used when the API reports none."""

from __future__ import annotations

from typing import NamedTuple

from pplx_nb._models import Cost, Usage

__all__ = ["PRICES", "Price", "estimate_cost", "price_for"]


class Price(NamedTuple):
    """USD per million tokens in / out, per request, and the deep-research extras."""

    input_per_m: float
    output_per_m: float
    request_fee: float
    citation_per_m: float = 0.0
    reasoning_per_m: float = 0.0
    search_fee: float = 0.0


PRICES: dict[str, Price] = {
    "sonar": Price(1.0, 1.0, 0.005),
    "sonar-pro": Price(3.0, 15.0, 0.006),
    "sonar-reasoning-pro": Price(2.0, 8.0, 0.006),
    "sonar-deep-research": Price(
        2.0, 8.0, 0.0, citation_per_m=2.0, reasoning_per_m=3.0, search_fee=0.005
    ),
}
_ALIASES = {
    "perplexity/sonar": "sonar",
    "fast": "sonar",
    "fast-search": "sonar",
    "low": "sonar-pro",
    "pro-search": "sonar-pro",
    "medium": "sonar-deep-research",
    "high": "sonar-deep-research",
    "xhigh": "sonar-deep-research",
    "deep-research": "sonar-deep-research",
    "advanced-deep-research": "sonar-deep-research",
}


def price_for(model: str | None) -> Price:
    """The price of a sonar model, Agent preset or provider slug (sonar-pro's if unknown)."""
    name = (model or "sonar-pro").lower()
    name = _ALIASES.get(name, name)
    return PRICES.get(name) or PRICES.get(name.split("/")[-1]) or PRICES["sonar-pro"]


def estimate_cost(model: str | None, usage: Usage | None) -> Cost:
    """Estimate a request's cost from its token usage; the result is marked ``estimated``."""
    price = price_for(model)
    usage = usage or Usage()
    input_cost = usage.prompt_tokens * price.input_per_m / 1e6
    output_cost = usage.completion_tokens * price.output_per_m / 1e6
    extras = (
        (usage.citation_tokens or 0) * price.citation_per_m / 1e6
        + (usage.reasoning_tokens or 0) * price.reasoning_per_m / 1e6
        + (usage.num_search_queries or 0) * price.search_fee
    )
    request_cost = price.request_fee + extras
    return Cost(
        input_cost=round(input_cost, 6),
        output_cost=round(output_cost, 6),
        request_cost=round(request_cost, 6),
        total_cost=round(input_cost + output_cost + request_cost, 6),
        estimated=True,
    )
