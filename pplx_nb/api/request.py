"""What the client is asked: one question with its history and the search options.

:class:`Request` speaks the Sonar vocabulary users know; each protocol adapter maps it to its own
wire format (see ``sonar.py`` and ``agent.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

__all__ = ["DEEP_RESEARCH_NAMES", "Request", "is_deep_research"]

DEEP_RESEARCH_NAMES = frozenset(
    {"sonar-deep-research", "medium", "high", "xhigh", "deep-research", "advanced-deep-research"}
)


def is_deep_research(model: str) -> bool:
    """Whether ``model`` (a sonar name, an Agent preset or a provider slug) runs deep research."""
    name = model.lower().partition("@")[0]
    return name in DEEP_RESEARCH_NAMES or name.rsplit("/", 1)[-1] in DEEP_RESEARCH_NAMES


@dataclass(frozen=True, slots=True, kw_only=True)
class Request:
    """One question for the API.

    ``messages`` is the chat history ending with the user's question (an optional system message
    first). ``model=None`` uses ``Settings.model``. The search options are named like the Sonar
    API fields; ``None`` leaves a field out of the request. ``disable_search`` answers from the
    model alone (Sonar's ``disable_search``; no web_search tool for the Agent API).
    ``use_cache=False`` skips the response cache; ``timeout_ms`` overrides the configured
    timeout for this request. ``effort`` (Agent API: ``fast`` ... ``xhigh``, or pinned such as
    ``fast@2026-10-16.0``) sets how much the run does, over an effort named as the model.
    ``tool_choice`` (Agent API: ``none``, ``auto``, ``required``): ``required`` makes the run
    search before it answers (a grounded question), rather than leave it to the model.
    """

    messages: list[dict[str, Any]] = field(default_factory=list)
    model: str | None = None
    effort: str | None = None
    search_domain_filter: list[str] | None = None
    search_recency_filter: str | None = None
    search_after_date_filter: str | None = None
    search_before_date_filter: str | None = None
    search_mode: str | None = None
    return_related_questions: bool = False
    return_images: bool = False
    reasoning_effort: str | None = None
    search_context_size: str | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    disable_search: bool = False
    tool_choice: str | None = None
    use_cache: bool = True
    timeout_ms: int | None = None

    def tier(self, model: str) -> str:
        """What sets this request's depth with ``model`` as its model: its effort, else the
        model (a name that may be an effort itself)."""
        return self.effort or model

    def filters(self) -> dict[str, Any]:
        """The search filters that are set, by their API names."""
        values = {
            "search_domain_filter": self.search_domain_filter,
            "search_recency_filter": self.search_recency_filter,
            "search_after_date_filter": self.search_after_date_filter,
            "search_before_date_filter": self.search_before_date_filter,
        }
        return {key: value for key, value in values.items() if value is not None}
