"""Model names across the two protocols: Agent presets and provider slugs, retired Sonar names.

The Agent API knows presets (``fast``, ``low``, ``medium``, ``high``, ``xhigh`` and their old
names) and provider slugs (``perplexity/sonar``, ``openai/gpt-5.1``, ...). The Sonar names it
retired map to the preset or slug that replaced them (PERPLEXITY_API.md §2); a Sonar server
gets the way back, so one ``PERPLEXITY_MODEL`` works for either style.
"""

from __future__ import annotations

import functools

from pplx_nb._logging import get_logger

__all__ = ["PRESETS", "SONAR_TO_AGENT", "agent_target", "sonar_name"]

logger = get_logger("pplx_nb.api")

PRESETS = frozenset(
    {
        "fast",
        "low",
        "medium",
        "high",
        "xhigh",
        "fast-search",
        "pro-search",
        "deep-research",
        "advanced-deep-research",
    }
)
"""The Agent API's presets, the current tiers and the names they had before."""
SONAR_TO_AGENT: dict[str, dict[str, str]] = {
    "sonar": {"model": "perplexity/sonar"},
    "sonar-pro": {"preset": "low"},
    "sonar-reasoning": {"preset": "low"},
    "sonar-reasoning-pro": {"preset": "low"},
    "sonar-deep-research": {"preset": "medium"},
}
"""The retired Sonar names and what the Agent API calls them now."""
_AGENT_TO_SONAR = {
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


def agent_target(model: str) -> dict[str, str]:
    """``{"model": slug}`` or ``{"preset": name}`` for a sonar name, preset or provider slug.

    A retired Sonar name is mapped (and logged once per process per name); any other name goes
    out as given, for the API to accept or reject: no slug is made up.
    """
    name = model.strip()
    if name in PRESETS:
        return {"preset": name}
    renamed = SONAR_TO_AGENT.get(name)
    if renamed is None:
        return {"model": name}
    _warn_renamed(name)
    return dict(renamed)


def sonar_name(model: str) -> str:
    """The Sonar model for an Agent preset or ``perplexity/sonar``; other names unchanged."""
    name = model.strip()
    return _AGENT_TO_SONAR.get(name, name)


@functools.cache
def _warn_renamed(name: str) -> None:
    """Say once per process per name that a retired Sonar name was mapped."""
    ((key, value),) = SONAR_TO_AGENT[name].items()
    logger.warning(
        "The model name %r is a retired Sonar name; the Agent API is asked for %s %r instead. "
        "Set PERPLEXITY_MODEL (or pass model=...) to %r, another preset (fast, low, medium, "
        "high, xhigh) or a provider model such as 'perplexity/sonar' to silence this.",
        name,
        key,
        value,
        value,
    )
