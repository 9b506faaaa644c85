"""What the simulated Agent API sells: its models, its presets and the price of each tool call.

A snapshot of the public model page (late 2026): ``perplexity/sonar`` is the only Perplexity
model, the rest are other companies' models. A preset names a tier and resolves to one of them,
which is what ``response.model`` reports; the old preset names map to the tiers that replaced
them. Prices are USD per million tokens, tool calls USD per call.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "MODELS",
    "PRESETS",
    "SEARCH_API_PRICE",
    "TOOL_PRICES",
    "ModelPrice",
    "model_list",
]


class ModelPrice(NamedTuple):
    """Who serves a model and its token prices (USD per million)."""

    owned_by: str
    input_per_m: float
    output_per_m: float
    cache_read_per_m: float


MODELS: dict[str, ModelPrice] = {
    "perplexity/sonar": ModelPrice("perplexity", 0.25, 2.50, 0.0625),
    "anthropic/claude-haiku-4-5": ModelPrice("anthropic", 1.0, 5.0, 0.10),
    "anthropic/claude-sonnet-4-5": ModelPrice("anthropic", 3.0, 15.0, 0.30),
    "anthropic/claude-opus-4-6": ModelPrice("anthropic", 5.0, 25.0, 0.50),
    "openai/gpt-5-mini": ModelPrice("openai", 0.25, 2.0, 0.025),
    "openai/gpt-5.1": ModelPrice("openai", 1.25, 10.0, 0.125),
    "openai/gpt-5.2": ModelPrice("openai", 1.75, 14.0, 0.175),
    "google/gemini-3-pro-preview": ModelPrice("google", 2.0, 12.0, 0.20),
}
PRESETS: dict[str, str] = {
    "fast": "perplexity/sonar",
    "low": "openai/gpt-5-mini",
    "medium": "openai/gpt-5.1",
    "high": "anthropic/claude-sonnet-4-5",
    "xhigh": "anthropic/claude-opus-4-6",
    "fast-search": "perplexity/sonar",
    "pro-search": "openai/gpt-5-mini",
    "deep-research": "openai/gpt-5.1",
    "advanced-deep-research": "anthropic/claude-sonnet-4-5",
}
TOOL_PRICES: dict[str, float] = {"search_web": 0.0025, "fetch_url": 0.0005}
SEARCH_API_PRICE = 0.005


def model_list(*extra: str) -> dict[str, object]:
    """The ``GET /v1/models`` body: every sold model with its prices, then ``extra`` names."""
    data: list[dict[str, object]] = [
        {
            "id": slug,
            "object": "model",
            "created": 0,
            "owned_by": price.owned_by,
            "pricing": {
                "currency": "USD",
                "unit": "1M tokens",
                "input": price.input_per_m,
                "output": price.output_per_m,
                "cache_read": price.cache_read_per_m,
            },
        }
        for slug, price in MODELS.items()
    ]
    data += [
        {"id": name, "object": "model", "created": 0, "owned_by": "perplexity"} for name in extra
    ]
    return {"object": "list", "data": data}
