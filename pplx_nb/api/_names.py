"""Model names across the two protocols: Agent efforts and provider slugs, retired names.

The Agent API knows effort levels (``fast``, ``low``, ``medium``, ``high``, ``xhigh``, or one
pinned to a version such as ``fast@2026-10-16.0``; they were called presets, a field the API
now deprecates: "use effort instead") and provider slugs (``perplexity/sonar``,
``openai/gpt-5.1``, ...). The Sonar names and the presets' old names it retired map to the
effort or slug that replaced them (PERPLEXITY_API.md §2); a Sonar server gets the way back, so
one ``PERPLEXITY_MODEL`` works for either style.
"""

from __future__ import annotations

import functools

from pplx_nb._logging import get_logger
from pplx_nb._options import EFFORTS, effort_tier

__all__ = ["EFFORTS", "PRESETS", "SONAR_TO_AGENT", "agent_target", "effort_tier", "sonar_name"]

logger = get_logger("pplx_nb.api")

_OLD_PRESETS = {
    "fast-search": "fast",
    "pro-search": "low",
    "deep-research": "medium",
    "advanced-deep-research": "high",
}
PRESETS = frozenset(EFFORTS) | frozenset(_OLD_PRESETS)
"""Every tier name: the effort levels and the names the presets had before."""
SONAR_TO_AGENT: dict[str, dict[str, str]] = {
    "sonar": {"model": "perplexity/sonar"},
    "sonar-pro": {"effort": "low"},
    "sonar-reasoning": {"effort": "low"},
    "sonar-reasoning-pro": {"effort": "low"},
    "sonar-deep-research": {"effort": "medium"},
}
"""The retired Sonar names and what the Agent API calls them now."""
_RENAMED = SONAR_TO_AGENT | {old: {"effort": tier} for old, tier in _OLD_PRESETS.items()}
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
    """``{"model": slug}`` or ``{"effort": level}`` for a sonar name, effort or provider slug.

    An effort level goes out as given (a pinned version too); a retired Sonar name or an old
    preset name is mapped (and logged once per process per name); any other name goes out as
    given, for the API to accept or reject: no slug is made up.
    """
    name = model.strip()
    if effort_tier(name) is not None:
        return {"effort": name}
    renamed = _RENAMED.get(name)
    if renamed is None:
        return {"model": name}
    _warn_renamed(name)
    return dict(renamed)


def sonar_name(model: str) -> str:
    """The Sonar model for an Agent preset or ``perplexity/sonar``; other names unchanged."""
    name = model.strip()
    return _AGENT_TO_SONAR.get(effort_tier(name) or name, name)


@functools.cache
def _warn_renamed(name: str) -> None:
    """Say once per process per name that a retired name was mapped."""
    ((key, value),) = _RENAMED[name].items()
    kind = "Sonar name" if name in SONAR_TO_AGENT else "preset name"
    logger.warning(
        "The model name %r is a retired %s; the Agent API is asked for %s %r instead. "
        "Set PERPLEXITY_MODEL (or pass model=...) to %r, another effort (fast, low, medium, "
        "high, xhigh) or a provider model such as 'perplexity/sonar' to silence this.",
        name,
        kind,
        key,
        value,
        value,
    )
