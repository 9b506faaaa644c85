"""What a request may cost before it is sent: low, expected and high, and why. Pure.

``high`` is the worst case the ledger reserves: the tokens the request may read (its prompt and
the pages its searches bring in) and write (its ``max_tokens``, else the mode's bound) at the
model's prices, plus the tool calls the mode may make. Once :data:`HISTORY_RUNS` runs of the same
kind were settled in this store, ``high`` narrows to :data:`HISTORY_MARGIN` times the most one of
them cost (never above the prices' bound, never below ``expected``): what runs like it really
cost says more than a bound no run comes near. A run that costs more is still counted in full.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

from pplx_nb._caps import from_micros
from pplx_nb._pricing import SEARCH_API_FEE, TOOL_FEES, Price, price_for, priced_model
from pplx_nb.budget._ledger import History

__all__ = [
    "HISTORY_MARGIN",
    "HISTORY_RUNS",
    "CostEstimate",
    "RunShape",
    "estimate_run",
    "estimate_web_search",
]

HISTORY_RUNS = 3
"""Settled runs of a kind needed before their costs narrow its worst case."""
HISTORY_MARGIN = 2.0
"""The worst case, as a multiple of the most an earlier run of the same kind cost."""
_CHARS_PER_TOKEN = 3  # fewer than the usual 4: the estimate must not fall short
_PROMPT_OVERHEAD = 64


@dataclass(frozen=True, slots=True)
class CostEstimate:
    """What a request may cost, in USD: ``high`` is reserved before it is sent.

    ``basis`` says, in sentences, what the figures rest on.
    """

    low: float
    expected: float
    high: float
    basis: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class RunShape:
    """The bounds of one mode: tokens read beyond the prompt, written, and tool calls."""

    context_tokens: int
    output_tokens: int
    searches: int
    fetches: int


SEARCH_SHAPE = RunShape(context_tokens=8_000, output_tokens=4_096, searches=3, fetches=3)
RESEARCH_SHAPE = RunShape(context_tokens=64_000, output_tokens=16_384, searches=30, fetches=30)
_EXPECTED = {
    False: RunShape(context_tokens=0, output_tokens=600, searches=1, fetches=0),
    True: RunShape(context_tokens=2_000, output_tokens=2_000, searches=5, fetches=5),
}


def _cost(price: Price, prompt: int, shape: RunShape) -> float:
    tokens_in = (prompt + shape.context_tokens) * price.input_per_m / 1e6
    tokens_out = shape.output_tokens * (price.output_per_m + price.reasoning_per_m) / 1e6
    tools = shape.searches * max(TOOL_FEES["search_web"], price.search_fee)
    tools += shape.fetches * TOOL_FEES["fetch_url"]
    return tokens_in + tokens_out + tools + price.request_fee


def estimate_run(
    *,
    kind: str,
    models: tuple[str, ...],
    deep: bool,
    prompt_chars: int,
    max_tokens: int | None,
    prices: Mapping[str, Price],
    history: History | None = None,
) -> CostEstimate:
    """The estimate of an answer (a search, a deep research, a rewrite).

    Args:
        kind: the kind of run (``search:low``), for the basis.
        models: the model and the effort naming it, if any: the dearer price counts.
        deep: a deep research (longer bounds).
        prompt_chars: the characters sent (history included).
        max_tokens: the request's bound on its output, if any.
        prices: the API's prices (``GET /v1/models``), over the static table.
        history: the settled runs of ``kind`` in this store.
    """
    bound = RESEARCH_SHAPE if deep else SEARCH_SHAPE
    if max_tokens is not None:
        bound = RunShape(bound.context_tokens, max_tokens, bound.searches, bound.fetches)
    prompt = math.ceil(prompt_chars / _CHARS_PER_TOKEN) + _PROMPT_OVERHEAD
    priced = [(name, price_for(name, prices)) for name in models]
    name, price = max(priced, key=lambda pair: _cost(pair[1], prompt, bound))
    slug = priced_model(name)
    source = "/v1/models" if slug in prices else "the static price table"
    low = _cost(price, prompt, RunShape(0, 50, 1 if bound.searches else 0, 0))
    expected = _cost(price, prompt, _EXPECTED[deep])
    high = _cost(price, prompt, bound)
    basis = [
        f"prices from {source} for {name}" + (f" ({slug})" if slug != name.lower() else ""),
        f"{'deep research' if deep else 'search'}: at most {prompt + bound.context_tokens:,} "
        f"tokens read, {bound.output_tokens:,} written"
        + (" (max_tokens)" if max_tokens is not None else "")
        + f", {bound.searches} searches and {bound.fetches} pages",
    ]
    if history is not None and history.runs >= HISTORY_RUNS:
        most = from_micros(history.most)
        narrowed = min(high, max(most * HISTORY_MARGIN, expected))
        basis.append(
            f"{history.runs} earlier {kind} runs in this store cost at most ${most:.4f}; "
            f"the worst case is {HISTORY_MARGIN:g} times that"
        )
        high = narrowed
    expected = min(expected, high)
    return CostEstimate(
        low=round(min(low, expected), 6),
        expected=round(expected, 6),
        high=round(high, 6),
        basis=tuple(basis),
    )


def estimate_web_search() -> CostEstimate:
    """A Search API request: one flat fee, whatever it finds."""
    fee = SEARCH_API_FEE
    return CostEstimate(fee, fee, fee, (f"the Search API's flat fee of ${fee} per request",))
